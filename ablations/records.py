"""Run folders: their records, written only through a temporary file renamed into place, and their locks.

A run folder holds `config.yaml` (the resolved config and where the run comes from) and `metrics.json`
(status and metrics). A reader sees either the old or the new file, never half of one. `<run>/.lock` says who
trains the run now (`RunLock`); `<run>/.metrics.lock` serialises updates of its record.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

import yaml

from lightning_modules.atomic import write_atomic, write_atomic_bytes  # noqa: F401 (also imported from here)
from lightning_modules.config import RunConfig

STATUSES = ("pending", "running", "done", "failed", "diverged")
FINISHED = ("done", "failed", "diverged")  # statuses a run keeps until it is retried
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
METRICS_LOCK = ".metrics.lock"
LOCK_FILE = ".lock"
LOCKED_ENV = "ABLATE_RUN_LOCKED"  # set by the launcher: the training process already holds its run's lock
LOG_TAIL_LINES = 40  # lines of log (or traceback) that a failed run's record keeps as `log_tail`


def write_renderings(stem: Path, value: Any, renderers: Any) -> list[Path]:
    """`<stem>.md`, `.csv`, `.tex`, ...: each (suffix, render) pair's rendering of one value, written atomically."""
    paths = []
    for suffix, render in renderers:
        path = Path(stem).with_suffix(suffix)
        write_atomic(path, render(value))
        paths.append(path)
    return paths


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Optional[dict[str, Any]]:
    """The JSON document at path; None if there is none; a ValueError naming the file if it is unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON record ({error}); move it away to start the run afresh") from None


def write_config(run_dir: Path, config: RunConfig, meta: dict[str, Any]) -> None:
    document = {"run_id": config.run_id(), "meta": meta, "config": config.to_dict()}
    write_atomic(Path(run_dir) / CONFIG_FILE, yaml.safe_dump(document, sort_keys=False))


def read_config(path: Path) -> tuple[RunConfig, dict[str, Any]]:
    """A resolved config file: either a run folder's config.yaml or a bare RunConfig mapping."""
    from .sweep import read_yaml

    document = read_yaml(Path(path))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a mapping")
    if "config" in document:
        return _config_from(document["config"], path), dict(document.get("meta") or {})
    return _config_from(document, path), {}


def _config_from(values: Any, path: Path) -> RunConfig:
    try:
        return RunConfig.from_dict(values)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def read_metrics(run_dir: Path) -> Optional[dict[str, Any]]:
    return read_json(Path(run_dir) / METRICS_FILE)


def run_seconds(metrics: Mapping[str, Any]) -> Optional[float]:
    """What a run's kept work took, in seconds: `wall_seconds` is its last attempt's alone, so a run resumed from a
    checkpoint counts at least its `train_seconds`, which the checkpoint carries over (the work an attempt lost
    after its last checkpoint is in neither). None where the record has neither."""
    values = [metrics.get(key) for key in ("wall_seconds", "train_seconds")]
    values = [float(value) for value in values if isinstance(value, (int, float)) and value > 0]
    return max(values) if values else None


def _open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


@contextmanager
def blocking_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path`, waited for, held for the `with` block: serialises a short read-modify-write
    across processes (a run's metrics.json; the trial count and ask of `ablate search`).

    Hand-written beside RunLock rather than filelock.FileLock, which polls a non-blocking flock; this one waits in
    the kernel.
    """
    fd = _open_lock_file(Path(path))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update_metrics(run_dir: Path, **values: Any) -> dict[str, Any]:
    """Merge values into the run's metrics.json (atomically, and without losing a concurrent writer's fields).

    Atomic renames alone keep every version whole, but two writers that read the same version would each drop the
    other's fields: `<run>/.metrics.lock` (launcher, trainer, job wrapper), held for the few milliseconds of an update.
    """
    with blocking_lock(Path(run_dir) / METRICS_LOCK):
        record = read_metrics(run_dir) or {}
        record.update(values)
        if record.get("status") not in STATUSES:
            raise ValueError(f"status {record.get('status')!r}: expected one of {', '.join(STATUSES)}")
        write_json(Path(run_dir) / METRICS_FILE, record)
    return record


def run_folder(root: str | Path, meta: dict[str, Any], config: RunConfig) -> Path:
    """`<root>/<sweep>/<scale>/<row>-s<seed>-<run id>`: readable, and unique by the config hash."""
    return (
        Path(root)
        / meta.get("sweep", "adhoc")
        / meta.get("scale", "custom")
        / f"{meta.get('row', 'run')}-s{config.seed}-{config.run_id()}"
    )


# --------------------------------------------------------------------------------------------------
# The run lock: who trains the run now
# --------------------------------------------------------------------------------------------------


class RunLock:
    """An exclusive, non-blocking `flock` on `<run>/.lock`.

    The lock belongs to the open file description: a child given the descriptor (`pass_fds`) keeps it held
    after the launcher closes its copy or dies, and the kernel drops it when the last holder exits. That hand-over
    is why it is written here by hand (filelock.FileLock keeps its descriptor to itself).
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: Optional[int] = None

    def acquire(self, tries: int = 3, wait: float = 0.1) -> bool:
        """Try a few times (a `--dry-run` may be probing the lock at this instant); False if held elsewhere."""
        fd = _open_lock_file(self.path)
        for attempt in range(tries):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if attempt + 1 < tries:
                    time.sleep(wait)
                continue
            self.fd = fd
            return True
        os.close(fd)
        return False

    def note(self, text: str) -> None:
        """Say who holds the lock (read by whoever finds it held)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text.encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def lock_holder(run_dir: Path) -> Optional[str]:
    """None if nobody holds the run's lock; else what the holder wrote into it (may be empty)."""
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 200, 0).decode(errors="replace").strip()
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def folder_status(run_dir: Path) -> str:
    """pending | running | stale (recorded running, no process) | done | failed | diverged."""
    record = read_metrics(run_dir) or {}
    status = record.get("status", "pending")
    if status in FINISHED:
        return status
    if lock_holder(run_dir) is not None:
        return "running"
    return "stale" if status == "running" else "pending"


def train_lock(run_dir: Path) -> RunLock:
    """The lock `ablate train` holds on its run folder; already held when the launcher started it."""
    lock = RunLock(run_dir)
    if os.environ.get(LOCKED_ENV) == str(Path(run_dir).absolute()):
        return lock  # inherited from the launcher; nothing to take
    if not lock.acquire():
        holder = lock_holder(run_dir) or "another process"
        raise ValueError(f"{run_dir} is being trained elsewhere ({holder}); its lock {lock.path} is held")
    lock.note(f"ablate train pid {os.getpid()} on {socket.gethostname()}\n")
    return lock
