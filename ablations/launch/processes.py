"""The training processes of runs and trials: slots of cores and GPUs, each process's command, environment, log
tail and stop. Shared by the local launcher (`ablate sweep`) and the search workers (`ablate search`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..records import LOG_TAIL_LINES

LOG_FILE = "train.log"  # <run>/train.log: the training process's stdout and stderr, appended attempt by attempt
# How long a stopped training process gets to exit before SIGKILL, in `ablate sweep` and `ablate search` alike.
# One that exits at once is not kept waiting, so a long bound costs nothing; it lets a trainer finish writing a
# checkpoint (a big model's, on a slow or network file system) rather than lose it.
GRACE_SECONDS = 30.0
CPUS_ENV = "ABLATE_CPUS"  # e.g. "0,1" or "0-3": the cores `ablate train` pins itself to


def emulated_bf16_warning(precisions: Sequence[str], on_gpu: Optional[bool] = None) -> Optional[str]:
    """The warning for runs that ask for bf16 on a CPU that only emulates it; None where none would. `on_gpu`: where
    the runs train (default: on GPUs when this process sees any).

    Emulated bf16 gives the same results slowly (README, "bf16 on a CPU without it"), so the runs still train: the
    warning says so before they start, and how to train in fp32 instead (other run ids, so no record is mixed)."""
    from lightning_modules.cpuinfo import native_bf16

    asking = sum(precision == "bf16-mixed" for precision in precisions)
    if on_gpu is None:
        on_gpu = bool(visible_gpus())
    if on_gpu or not asking or native_bf16():
        return None
    from ..provenance import cpu_model

    return (
        f"warning: {asking} run(s) train with train.precision=bf16-mixed on a CPU without native bf16 "
        f"({cpu_model()}: no avx512_bf16 or amx_bf16). PyTorch emulates it there, many times slower than fp32 "
        '(README, "bf16 on a CPU without it"). --set train.precision=32-true trains them in fp32, under other run '
        "ids: no record made in bf16 is reused or paired with them."
    )


def thread_count(value: str) -> Optional[int]:
    """An OMP_NUM_THREADS value as a positive thread count; None when unset or not one (PyTorch then uses every
    core)."""
    value = value.strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def core_list(spec: str) -> frozenset[int]:
    """A Linux CPU list such as /proc's Cpus_allowed_list ("0-3,6") as its cores."""
    cores: set[int] = set()
    for part in spec.strip().split(","):
        if part.strip():
            first, _, last = part.partition("-")
            cores.update(range(int(first), int(last or first) + 1))
    return frozenset(cores)


@dataclass(frozen=True)
class TrainingProcess:
    """An `ablate train` process found running on this host: its threads and the cores it may run on."""

    threads: int
    cores: frozenset[int]


def training_processes(proc: Path = Path("/proc")) -> dict[int, TrainingProcess]:
    """The `ablate train` processes already running on this host that this user may inspect, by pid: their
    threads (OMP_NUM_THREADS, else every core: PyTorch's default) and cores (Cpus_allowed_list, else every core);
    {} where there is no /proc (not Linux)."""
    every_core = frozenset(range(os.cpu_count() or 1))
    found = {}
    for entry in proc.glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not (b"train" in argv[1:4] and any(arg.endswith((b"ablations.cli", b"ablate")) for arg in argv[:3])):
                continue
            environ = dict(
                item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item
            )
        except (OSError, IndexError):  # gone meanwhile, or another user's
            continue
        cores = every_core
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    cores = core_list(line.split(":", 1)[1]) or every_core
                    break
        except (OSError, ValueError):  # gone meanwhile, or a kernel without the field
            pass
        threads = thread_count(environ.get(b"OMP_NUM_THREADS", b"").decode(errors="replace"))
        found[int(entry.name)] = TrainingProcess(threads or len(every_core), cores)
    return found


def oversubscription_warning(
    slots: Sequence[Slot],
    cores: Optional[Sequence[int]] = None,
    running: Optional[Mapping[int, TrainingProcess]] = None,
) -> Optional[str]:
    """The warning for a sweep whose runs, beside the training processes already running on its cores (`running`,
    default training_processes()), would ask for more threads than the cores it may use (`cores`, default this
    process's); None where they fit. Two sweeps on one machine each pin their runs to the same cores, so every run
    slows and the minutes their records price include the contention; sweeps pinned to disjoint cores (`taskset`)
    do not meet."""
    cores = list(available_cores() if cores is None else cores)
    running = training_processes() if running is None else running
    ours_cores = frozenset(cores)
    # A process counts with at most as many threads as it has of our cores.
    sharing = {pid: min(p.threads, shared) for pid, p in running.items() if (shared := len(p.cores & ours_cores))}
    if not sharing or not slots:
        return None
    theirs, ours = sum(sharing.values()), sum(slot.threads * slot.devices for slot in slots if slot.gpu is None)
    if theirs + ours <= len(cores):
        return None
    pids = ", ".join(str(pid) for pid in sorted(sharing)[:8]) + (", ..." if len(sharing) > 8 else "")
    return (
        f"warning: {len(sharing)} training process(es) already run on this sweep's cores (pid {pids}; {theirs} "
        f"thread(s) in all); with this sweep's {ours} thread(s) that is {theirs + ours} on {len(cores)} core(s). "
        "Every run slows and the minutes its record prices include the contention: wait for them, or run one "
        "sweep with more --workers instead of several side by side."
    )


def pin_cpus_from_env() -> None:
    """`ablate train` under the launcher: keep to the cores named in ABLATE_CPUS (Linux only)."""
    spec = os.environ.get(CPUS_ENV, "").strip()
    if not spec or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, core_list(spec))
    except (ValueError, OSError) as error:
        print(f"ablate train: warning: cannot pin to cores {spec!r} ({error}); using all", file=sys.stderr)


@dataclass(frozen=True)
class Slot:
    """One place for a training process to run: its cores and threads, its GPUs, and its DDP ranks."""

    index: int
    cores: tuple[int, ...]
    threads: int
    gpu: Optional[str]  # CUDA_VISIBLE_DEVICES of the slot's run: "0", or "0,1" with --gpus-per-run 2
    devices: int = 1  # processes (DDP ranks) per run: --gpus-per-run


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries; [] without CUDA."""
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install must not stop CPU sweeps
        count = 0
    if not count:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


def make_slots(
    workers: int, cores: Optional[Sequence[int]] = None, gpus: Optional[Sequence[str]] = None, gpus_per_run: int = 1
) -> list[Slot]:
    """K slots, each with cores // K cores of its own (at least one; shared when K > cores) and G GPUs.

    With G > 1 (`--gpus-per-run`) a slot's GPUs are a group of G (`"0,1"`), groups dealt round-robin; without CUDA
    the run uses G CPU processes (DDP over gloo) and each gets the slot's threads // G. An OMP_NUM_THREADS set in
    the launcher's environment caps the threads per run.
    """
    if gpus_per_run < 1:
        raise ValueError(f"--gpus-per-run {gpus_per_run}: expected a positive integer")
    cores = list(available_cores() if cores is None else cores)
    gpus = list(visible_gpus() if gpus is None else gpus)
    if gpus and len(gpus) < gpus_per_run:
        raise ValueError(f"--gpus-per-run {gpus_per_run}: only {len(gpus)} GPU(s) visible ({','.join(gpus)})")
    groups = [",".join(gpus[g * gpus_per_run : (g + 1) * gpus_per_run]) for g in range(len(gpus) // gpus_per_run)]
    share = max(1, len(cores) // workers)
    cap = thread_count(os.environ.get("OMP_NUM_THREADS", ""))
    threads = min(share, cap) if cap else share
    if not groups:  # G CPU processes share the slot's cores
        threads = max(1, threads // gpus_per_run)
    slots = []
    for i in range(workers):
        own = cores[i * share : (i + 1) * share] if workers <= len(cores) else [cores[i % len(cores)]]
        slots.append(Slot(i, tuple(own), threads, groups[i % len(groups)] if groups else None, gpus_per_run))
    return slots


def default_workers(gpus_per_run: int = 1) -> int:
    """Runs at a time without --workers: one per GPU group; on CPU one single-thread run per core (as `auto`),
    since a run's small matmuls gain less from a second thread than a second run gains from a core."""
    gpus = len(visible_gpus())
    return max(1, gpus // gpus_per_run) if gpus else max(1, len(available_cores()))


# `--workers auto` on a GPU: runs per GPU (group) by the parameters of the largest run. A model this small leaves
# most of a GPU's memory and compute idle (weights, gradients and Adam's two moments are 16 bytes a parameter:
# 160 MB at 10M parameters), so several share one; the count is a stated rule, not a measurement.
RUNS_PER_GPU = ((10_000_000, 4), (100_000_000, 2))  # (fewer parameters than, runs per GPU); else 1


def runs_per_gpu(params: Optional[int]) -> int:
    """Runs sharing one GPU (group) under `--workers auto`: 4 under 10M parameters, 2 under 100M, else 1."""
    if params is None:
        return 1
    for limit, runs in RUNS_PER_GPU:
        if params < limit:
            return runs
    return 1


def auto_workers(params: Optional[int] = None, gpus_per_run: int = 1) -> int:
    """`--workers auto`: on CPU one single-thread run per core this process may use (os.sched_getaffinity); with
    GPUs, runs_per_gpu(params) runs per GPU group, at most one per core."""
    cores = len(available_cores())
    groups = len(visible_gpus()) // gpus_per_run
    if not groups:
        return max(1, cores // gpus_per_run)
    return max(1, min(groups * runs_per_gpu(params), cores))


def parse_workers(text: str) -> int | str:
    """The value of `--workers`: a positive integer or `auto`."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--workers {text!r}: expected a positive integer or auto") from None
    if value < 1:
        raise ValueError(f"--workers {text}: expected a positive integer or auto")
    return value


def train_command(config_path: Path, run_dir: Path) -> list[str]:
    """The training process of one run (an argv list: no shell)."""
    return [sys.executable, "-m", "ablations.cli", "train", "--config", str(config_path), "--run-dir", str(run_dir)]


def slot_command(slot: Slot, config_path: Path, run_dir: Path) -> list[str]:
    """train_command, asking for the slot's G devices (Lightning DDP inside the run) when G > 1."""
    argv = train_command(config_path, run_dir)
    if slot.devices > 1:
        argv += ["--devices", str(slot.devices)] + ([] if slot.gpu is not None else ["--accelerator", "cpu"])
    return argv


def child_env(slot: Slot, extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of a training process in `slot`: its threads, its cores (ABLATE_CPUS, applied by `ablate
    train`) and GPUs, wandb offline unless set, unbuffered output; then `extra`."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(slot.threads)
    if sys.platform.startswith("linux") and slot.cores:
        env[CPUS_ENV] = ",".join(str(c) for c in slot.cores)
    if slot.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpu
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last non-empty lines of a log (read from its last 64 KiB), for a failed run's record."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    rows = [row.rstrip() for row in text.replace("\r", "\n").split("\n")]
    return [row for row in rows if row.strip()][-lines:]


def describe_exit(code: int) -> str:
    """A process's exit status in words: "exit code 3", "killed by signal SIGKILL"."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def signal_group(process: subprocess.Popen, signum: int) -> None:
    """Signal the process group a training process leads (started with start_new_session), else the process."""
    try:
        os.killpg(process.pid, signum)  # the run's process group: the trainer and anything it started
    except (ProcessLookupError, PermissionError):
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass


def stop_group(process: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """Stop one training process: SIGTERM to its process group, SIGKILL if it is still there after `grace` s."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        signal_group(process, signum)
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def pid_alive(pid: int) -> bool:
    """Whether a process of this id exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
