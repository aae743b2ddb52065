import socket
import threading
from collections import Counter
from contextlib import contextmanager

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny matrices: extra intra-op threads only add overhead (and spin when other processes load the CPUs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def silent_server():
    """The port of a local server (127.0.0.1) that accepts every connection and never answers: a wandb server that
    hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted, stop = [], threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()
        for conn in accepted:
            conn.close()


@pytest.fixture
def native_kernels():
    """lightning_modules.native, whose kernels must build wherever a C++ compiler exists (CI has one): only a machine
    without any, or with them turned off, may skip."""
    from lightning_modules import native

    if not native.enabled:
        pytest.skip("ATTENTION_NATIVE_KERNELS=0: the native kernels are turned off")
    if native.library() is None:
        if native.compiler() is not None:
            pytest.fail("a C++ compiler is present but the native kernels did not build (see the warning)")
        pytest.skip("no C++ compiler: the native kernels cannot be built here")
    return native


# --------------------------------------------------------------------------------------------------
# The reliability suite's counts (tests/test_reliability.py, `pytest -m reliability`)
# --------------------------------------------------------------------------------------------------


class ReliabilityTally:
    """What the fault-injection suite did, printed at the end of the session when any of it ran.

    A fault counts as survived, and an input as rejected cleanly, only once the test's checks on it passed; a
    test that fails leaves its fault injected but not survived.
    """

    def __init__(self) -> None:
        self.injected: Counter[str] = Counter()
        self.survived: Counter[str] = Counter()
        self.fuzzed: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self.unclean: Counter[str] = Counter()
        self.records_expected = 0
        self.records_lost = 0
        self.notes: list[str] = []  # measured figures worth printing (e.g. how long a wandb fallback took)

    @contextmanager
    def fault(self, kind: str):
        """Count one injected fault of `kind`; survived if the block (the injection and its checks) completes."""
        self.injected[kind] += 1
        yield
        self.survived[kind] += 1

    def fuzz(self, kind: str, check):
        """Run `check()` on one fuzzed input: True = accepted as valid, False = rejected with a clear message.

        Anything else it raises is an unclean ending (a traceback a user would see): counted, then re-raised.
        """
        self.fuzzed[kind] += 1
        try:
            accepted = check()
        except BaseException:
            self.unclean[kind] += 1
            raise
        (self.accepted if accepted else self.rejected)[kind] += 1
        return accepted

    def records(self, expected: int, found: int) -> int:
        """Count records that should exist after a fault; returns how many are lost."""
        self.records_expected += expected
        self.records_lost += max(0, expected - found)
        return max(0, expected - found)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def ran(self) -> bool:
        return bool(self.injected or self.fuzzed or self.records_expected)

    def lines(self) -> list[str]:
        def detail(counter: Counter, other: Counter, what: str = "") -> str:
            text = ", ".join(f"{kind} {other[kind]}/{counter[kind]}" for kind in sorted(counter))
            return f"  ({text}{what})" if text else ""

        return [
            f"faults injected: {sum(self.injected.values())}, survived: {sum(self.survived.values())}"
            + detail(self.injected, self.survived),
            f"inputs fuzzed: {sum(self.fuzzed.values())}, rejected cleanly: {sum(self.rejected.values())}, "
            f"accepted as valid: {sum(self.accepted.values())}, ended in a traceback: {sum(self.unclean.values())}"
            + detail(self.fuzzed, self.rejected, " rejected"),
            f"records checked: {self.records_expected}, records lost: {self.records_lost}",
            *self.notes,
        ]


RELIABILITY = ReliabilityTally()


@pytest.fixture
def reliability() -> ReliabilityTally:
    return RELIABILITY


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if RELIABILITY.ran():
        terminalreporter.section("reliability")
        for line in RELIABILITY.lines():
            terminalreporter.write_line(line)
