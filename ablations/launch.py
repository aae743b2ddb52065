"""`ablate sweep`: run a sweep's runs on this machine, K at a time, each in a process of its own.

A sweep expands (purely) into runs; each run has a folder named by its config hash (records.run_folder).
The launcher reads each folder's status and:

* skips `done` runs, and `failed` / `diverged` ones unless asked to retry them;
* resumes a `running` run whose process is gone (train_run continues from `checkpoints/last.ckpt`);
* takes an exclusive, non-blocking `flock` on `<run>/.lock` before starting a run, and hands that lock to the
  training process (an inherited descriptor), so the lock is held as long as either of them lives. Two sweep
  processes on the same output folder therefore never train the same run at once; a run whose lock is held
  elsewhere is skipped and reported as running elsewhere. `ablate train` takes the same lock.
* starts `python -m ablations.cli train --config <run>/config.yaml --run-dir <run>` (an argv list), with
  `OMP_NUM_THREADS` / `MKL_NUM_THREADS` = cores // K, its own share of the cores (`ABLATE_CPUS`, applied by
  `ablate train` with `os.sched_setaffinity`), and one GPU per slot when CUDA is there; output appends to
  `<run>/train.log`;
* records a run whose process exits without a `done` / `diverged` record as `failed`, with the reason and
  the tail of its log, and carries on with the others;
* on Ctrl-C or SIGTERM stops its training processes (SIGTERM, then SIGKILL after a grace period); they are
  left `running` with no process, i.e. stale, and resume the next time the sweep is launched.

`--gpus-per-run G` (G > 1): each slot gets G GPUs (CUDA_VISIBLE_DEVICES "0,1") and the run trains with Lightning
DDP over them (`ablate train --devices G`); without CUDA, G CPU processes over gloo.

`--launcher slurm` (`submit_sweep`): the same selection (`select` / `claim`: skip finished runs and runs locked or
queued elsewhere, reset failed ones on --retry-failed) but the runs are submitted as one submitit job array, one
task per run, each running `TrainJob` (train_run in-process, taking the run's lock itself when it starts); the
launcher prints the job ids and returns, or with --wait waits and reports as above.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .records import (CONFIG_FILE, FINISHED, LOCKED_ENV, LOG_TAIL_LINES, METRICS_FILE, RunLock, folder_status, lock_holder, read_metrics,
                      run_folder, update_metrics, write_config, write_json)
from .sweep import RunSpec, expand, load_sweep, scale_named

LOG_FILE = "train.log"
GRACE_SECONDS = 30.0  # how long stopped training processes get to exit before SIGKILL
POLL_SECONDS = 0.2
CPUS_ENV = "ABLATE_CPUS"  # e.g. "0,1": the cores `ablate train` pins itself to
REQUEUE_ENV = "ABLATE_REQUEUE"  # "submitit": train_run leaves requeueing to submitit (no Lightning auto-requeue)


def pin_cpus_from_env() -> None:
    """`ablate train` under the launcher: keep to the cores named in ABLATE_CPUS (Linux only)."""
    spec = os.environ.get(CPUS_ENV, "").strip()
    if not spec or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, {int(c) for c in spec.split(",") if c.strip()})
    except (ValueError, OSError) as error:
        print(f"ablate train: warning: cannot pin to cores {spec!r} ({error}); using all", file=sys.stderr)


# --------------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------------


@dataclass
class Run:
    spec: RunSpec
    dir: Path
    meta: dict[str, Any]
    state: str = "pending"  # pending | running | done | failed | diverged | elsewhere | stopped
    note: str = ""
    started: Optional[float] = None
    ended: Optional[float] = None
    slot: Optional["Slot"] = None
    process: Optional[subprocess.Popen] = None
    lock: Optional[RunLock] = None

    @property
    def label(self) -> str:
        return f"{self.spec.row}-s{self.spec.seed}"

    @property
    def elapsed(self) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started


def plan(sweep_path: str | Path, scale: str, rows: Optional[Sequence[str]] = None, seeds: Optional[Sequence[int]] = None,
         sets: Optional[dict[str, Any]] = None, out: str | Path = "runs") -> list[Run]:
    """The sweep's runs (row order, then seed order) with their folders; touches no file."""
    sweep = load_sweep(sweep_path)
    runs = []
    for spec in expand(sweep, scale_named(sweep_path, scale), seeds=seeds, rows=rows, sets=sets or {}):
        meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
        runs.append(Run(spec, run_folder(Path(out), meta, spec.config).absolute(), meta))
    return runs


@dataclass(frozen=True)
class Slot:
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


def make_slots(workers: int, cores: Optional[Sequence[int]] = None, gpus: Optional[Sequence[str]] = None,
               gpus_per_run: int = 1) -> list[Slot]:
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
    groups = [",".join(gpus[g * gpus_per_run:(g + 1) * gpus_per_run]) for g in range(len(gpus) // gpus_per_run)]
    share = max(1, len(cores) // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "").strip()
    threads = min(share, int(cap)) if cap.isdigit() and int(cap) > 0 else share
    if not groups:  # G CPU processes share the slot's cores
        threads = max(1, threads // gpus_per_run)
    slots = []
    for i in range(workers):
        own = cores[i * share:(i + 1) * share] if workers <= len(cores) else [cores[i % len(cores)]]
        slots.append(Slot(i, tuple(own), threads, groups[i % len(groups)] if groups else None, gpus_per_run))
    return slots


def default_workers(gpus_per_run: int = 1) -> int:
    return max(1, len(visible_gpus()) // gpus_per_run)


def train_command(config_path: Path, run_dir: Path) -> list[str]:
    """The training process of one run (an argv list: no shell)."""
    return [sys.executable, "-m", "ablations.cli", "train", "--config", str(config_path), "--run-dir", str(run_dir)]


def slot_command(slot: Slot, config_path: Path, run_dir: Path) -> list[str]:
    """train_command, asking for the slot's G devices (Lightning DDP inside the run) when G > 1."""
    argv = train_command(config_path, run_dir)
    if slot.devices > 1:
        argv += ["--devices", str(slot.devices)] + ([] if slot.gpu is not None else ["--accelerator", "cpu"])
    return argv


def child_env(slot: Slot, run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(slot.threads)
    if sys.platform.startswith("linux"):
        env[CPUS_ENV] = ",".join(str(c) for c in slot.cores)
    if slot.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpu
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    env[LOCKED_ENV] = str(run_dir)
    return env


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
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
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# --------------------------------------------------------------------------------------------------
# Dry run
# --------------------------------------------------------------------------------------------------


def human(value: float, unit: str = "") -> str:
    for factor, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}{unit}"
    return f"{value:.3g}{unit}"


def estimates(run: Run, cache: dict) -> tuple[int, int, float]:
    """(parameters, training tokens per side, approximate training FLOPs = 6 x parameters x tokens)."""
    from .params import model_parameters

    model = run.spec.config.model
    if model not in cache:
        cache[model] = model_parameters(model)
    params = cache[model]
    train = run.spec.config.train
    tokens = train.max_steps * run.spec.config.data.batch_tokens * train.accumulate_grad_batches
    return params, tokens, 6.0 * params * tokens


def print_plan(runs: list[Run], out: Path, slots: list[Slot]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=160)
    first = runs[0].spec if runs else None
    title = f"{first.sweep} at scale {first.scale}: {len(runs)} runs under {out}" if first else "no runs"
    table = Table(title=title)
    for column in ("row", "seed", "run id", "status", "params", "tokens", "FLOPs"):
        table.add_column(column, justify="left" if column in ("row", "run id", "status") else "right", no_wrap=True)
    cache: dict = {}
    todo_flops = total_flops = 0.0
    counts: dict[str, int] = {}
    for run in runs:
        status = folder_status(run.dir)
        counts[status] = counts.get(status, 0) + 1
        params, tokens, flops = estimates(run, cache)
        total_flops += flops
        if status != "done":
            todo_flops += flops
        table.add_row(run.spec.row, str(run.spec.seed), run.spec.run_id, status, human(params), human(tokens), f"{flops:.2e}")
    console.print(table)
    console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) +
                  f"; training FLOPs ≈ {total_flops:.2e} in all, {todo_flops:.2e} still to run (6 × params × tokens)")
    if slots:
        slot = slots[0]
        gpus = sorted({s.gpu for s in slots if s.gpu is not None})
        console.print(f"{len(slots)} worker(s), {slot.threads} thread(s) and {len(slot.cores)} core(s) each"
                      + (f", GPUs {','.join(gpus)}" if gpus else ", no GPU"))


# --------------------------------------------------------------------------------------------------
# Status view
# --------------------------------------------------------------------------------------------------


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


class View:
    """A live rich table on a terminal; one line per state change otherwise (logs, CI, pipes)."""

    def __init__(self, launcher: "Launcher", live: Optional[bool] = None, console: Any = None) -> None:
        self.launcher = launcher
        self.live_mode = sys.stdout.isatty() if live is None else live
        self.console = console
        self.live = None

    def __enter__(self) -> "View":
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self.console = self.console or Console()
            self.live = Live(self.render(), console=self.console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(*exc)
            self.live = None

    def summary(self) -> str:
        counts = self.launcher.counts()
        text = " · ".join(f"{counts[s]} {s}" for s in ("done", "running", "failed", "diverged", "pending", "elsewhere", "stopped") if counts.get(s))
        eta = self.launcher.eta()
        return f"{text} · ETA {duration(eta)}" if eta is not None else text

    def render(self):
        from rich.table import Table

        launcher = self.launcher
        table = Table(title=f"ablate sweep {launcher.name}: {self.summary()}", title_justify="left")
        for column in ("run", "run id", "state", "elapsed", "slot", "note"):
            table.add_column(column, no_wrap=column != "note")
        shown = [r for r in launcher.runs if r.state == "running"]
        shown += [r for r in launcher.runs if r.state in ("failed", "diverged", "elsewhere", "stopped")]
        shown += [r for r in launcher.runs if r.state == "done" and r.started is not None][-5:]
        for run in shown:
            slot = "" if run.slot is None else f"{run.slot.index}" + (f" gpu {run.slot.gpu}" if run.slot.gpu is not None else "")
            table.add_row(run.label, run.spec.run_id, run.state, duration(run.elapsed), slot, run.note)
        return table

    def event(self, run: Run, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        line = f"[{stamp}] {run.label} ({run.spec.run_id}) {text}"
        if self.live is not None:
            self.console.print(line, markup=False, highlight=False)
            self.live.update(self.render())
        else:
            print(f"{line} | {self.summary()}", flush=True)

    def refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.render())


# --------------------------------------------------------------------------------------------------
# Run selection, shared by the local launcher and the SLURM one
# --------------------------------------------------------------------------------------------------


def wants(status: str, retry_failed: bool = False) -> bool:
    """Whether a run with this folder status is to be trained."""
    return status in ("pending", "stale", "running") or (retry_failed and status in ("failed", "diverged"))


def select(runs: list[Run], retry_failed: bool = False) -> list[Run]:
    """The runs to train, in order, each with config.yaml and a record; the others get their folder status as state."""
    todo = []
    for run in runs:
        status = folder_status(run.dir)
        if wants(status, retry_failed):
            todo.append(run)
        else:
            run.state = status
    for run in todo:
        prepare(run)
    return todo


REUSED_RECORD = ("metrics.json", "dev.hyp", "test.hyp", "logs")  # a run's results; never its checkpoints


def finished_twin(run: Run, out: Path) -> Optional[Path]:
    """A done run with this run's id in another folder under `out`: the same resolved config, trained already."""
    for folder in sorted(out.glob(f"*/*/*-{run.spec.run_id}")):
        if folder.resolve() != run.dir.resolve() and (read_metrics(folder) or {}).get("status") == "done":
            return folder
    return None


def reuse_finished_twins(runs: list[Run], out: Path) -> list[tuple[Run, Path]]:
    """Give each never-started run the record of a done run with the same id (another sweep's row, same config).

    Run identity is the hash of the resolved config, so positional_norm's `sin-pre` at tiny *is* table3's base
    there; training it again would spend the time to reproduce the same record. The record is copied (its
    config.yaml says which sweep and row this folder is, and `reused_from` where the results come from).
    """
    reused = []
    for run in runs:
        if folder_status(run.dir) != "pending" or (twin := finished_twin(run, out)) is None:
            continue
        with RunLock(run.dir) as lock:
            if not lock.acquire(tries=1) or (read_metrics(run.dir) or {}).get("status", "pending") != "pending":
                continue  # someone else started it meanwhile (folder_status would see our own lock as a run)
            for name in REUSED_RECORD:
                source, target = twin / name, run.dir / name
                if source.is_dir():
                    shutil.copytree(source, target, dirs_exist_ok=True)
                elif source.exists() and name != METRICS_FILE:
                    shutil.copy2(source, target)
            write_config(run.dir, run.spec.config, run.meta)
            record = read_metrics(twin)
            # Written last: the folder counts as done only once its record is complete. A chain names the original.
            write_json(run.dir / METRICS_FILE, {**record, "reused_from": record.get("reused_from") or str(twin)})
        reused.append((run, twin))
    return reused


def prepare(run: Run) -> None:
    """Write config.yaml and a `pending` record for a run that has none, under its lock."""
    if (run.dir / CONFIG_FILE).exists() and read_metrics(run.dir) is not None:
        return
    with RunLock(run.dir) as lock:
        if lock.acquire(tries=1):
            if not (run.dir / CONFIG_FILE).exists():
                write_config(run.dir, run.spec.config, run.meta)
            if read_metrics(run.dir) is None:
                update_metrics(run.dir, status="pending", run_id=run.spec.run_id, seed=run.spec.seed)


def claim(run: Run, retry_failed: bool = False, **record: Any) -> Optional[RunLock]:
    """Lock a run, re-check it under the lock and reset it for a fresh attempt; the held lock, or None.

    None when the lock is held elsewhere (state `elsewhere`) or the run finished meanwhile (its status as state);
    `run.note` then says why. On success `run.note` is "resumed" / "retry" / "", and the record is `pending`
    with an earlier failure's reason cleared (train_run then records `running`), plus `record`.
    """
    lock = RunLock(run.dir)
    if not lock.acquire():
        run.state, run.note = "elsewhere", f"lock held: {lock_holder(run.dir) or 'another process'}"
        return None
    # Re-read under the lock: another sweep may have finished it meanwhile. We hold the lock, so a run
    # recorded `running` has no process: stale.
    previous = read_metrics(run.dir) or {}
    status = previous.get("status", "pending")
    status = "stale" if status == "running" else status
    if not wants(status, retry_failed):
        lock.release()
        run.state = status
        run.note = "finished elsewhere" if status == "done" else previous.get("reason") or ""
        return None
    write_config(run.dir, run.spec.config, run.meta)
    cleared = {key: None for key in ("reason", "log_tail", "exit") if previous.get(key) is not None}
    update_metrics(run.dir, status="pending", run_id=run.spec.run_id, seed=run.spec.seed, **cleared, **record)
    run.note = "resumed" if status == "stale" else ("retry" if status in ("failed", "diverged") else "")
    return lock


def print_skipped(runs: list[Run], retry_failed: bool) -> None:
    skipped = [r for r in runs if r.state in FINISHED]
    if skipped:
        print(f"skipping {len(skipped)} finished run(s): "
              + ", ".join(f"{s} {sum(r.state == s for r in skipped)}" for s in FINISHED if any(r.state == s for r in skipped))
              + ("" if retry_failed else " (--retry-failed reruns failed/diverged)"), flush=True)


def report(runs: list[Run], name: str, launched: int, where: str = "here") -> int:
    """Print the sweep's outcome from the run folders; 0 when every run is done, else 1."""
    final = {run.label: folder_status(run.dir) for run in runs}
    counts: dict[str, int] = {}
    for status in final.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"sweep {name}: {len(runs)} runs, {launched} launched {where}; "
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), flush=True)
    for run in runs:
        status = final[run.label]
        if status in ("failed", "diverged"):
            reason = (read_metrics(run.dir) or {}).get("reason") or ""
            print(f"  {status}: {run.label} ({run.spec.run_id}) {reason} — log: {run.dir / LOG_FILE}", flush=True)
        elif status in ("running", "stale", "pending") and run.state == "elsewhere":
            print(f"  running elsewhere: {run.label} ({run.spec.run_id}) {run.note}", flush=True)
    return 0 if all(s == "done" for s in final.values()) else 1


# --------------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------------


class Launcher:
    def __init__(self, runs: list[Run], slots: list[Slot], retry_failed: bool = False, live: Optional[bool] = None,
                 grace: float = GRACE_SECONDS) -> None:
        self.runs = runs
        self.slots = slots
        self.retry_failed = retry_failed
        self.grace = grace
        self.name = f"{runs[0].spec.sweep} at {runs[0].spec.scale}" if runs else ""
        self.view = View(self, live)
        self.signals: list[int] = []
        self.launched = 0
        cache: dict = {}
        self.flops = {id(run): estimates(run, cache)[2] for run in runs}  # the cost model behind order and ETA
        self.finished_flops = self.finished_seconds = 0.0

    # -- bookkeeping -------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.state] = counts.get(run.state, 0) + 1
        return counts

    def eta(self) -> Optional[float]:
        """Seconds per FLOP of the runs finished here x FLOPs left (running runs: less what they have done) / workers.

        Runs differ in cost by more than 10x (the big row against N=2), so a mean duration per run misleads.
        """
        if not self.finished_flops:
            return None
        rate = self.finished_seconds / self.finished_flops
        left = 0.0
        for run in self.runs:
            if run.state == "pending":
                left += self.flops[id(run)] * rate
            elif run.state == "running":
                left += max(self.flops[id(run)] * rate - (run.elapsed or 0.0), 0.0)
        return left / len(self.slots)

    def longest_first(self, runs: list[Run]) -> list[Run]:
        """The costliest runs start first, so that no long run starts last while the other workers sit idle."""
        return sorted(runs, key=lambda run: -self.flops[id(run)])

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    # -- one run -----------------------------------------------------------------------------------

    def _start(self, run: Run, slot: Slot) -> bool:
        """Lock, re-check and start a run; False (and a reported state) when it is not to be trained."""
        lock = claim(run, self.retry_failed)
        if lock is None:
            self.view.event(run, f"skipped: running elsewhere ({run.note})" if run.state == "elsewhere" else f"skipped: {run.state}")
            return False
        argv = slot_command(slot, run.dir / CONFIG_FILE, run.dir)
        with open(run.dir / LOG_FILE, "ab") as log:
            log.write(f"\n=== ablate sweep {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} slot {slot.index} "
                      f"cores {','.join(map(str, slot.cores))} gpu {slot.gpu}: {shlex.join(argv)}\n".encode())
            log.flush()
            try:
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=child_env(slot, run.dir),
                    start_new_session=True, pass_fds=(lock.fd,),
                )
            except OSError as error:
                lock.release()
                self._record_failure(run, f"could not start: {error}", None)
                self.view.event(run, f"failed: {run.note}")
                return False
        lock.note(f"ablate sweep pid {os.getpid()}, train pid {process.pid} on {socket.gethostname()}\n")
        run.process, run.lock, run.slot = process, lock, slot
        run.started, run.ended, run.state = time.time(), None, "running"
        self.launched += 1
        self.view.event(run, f"started on slot {slot.index} (cores {','.join(map(str, slot.cores))}"
                             + (f", gpu {slot.gpu})" if slot.gpu is not None else ")") + (f" [{run.note}]" if run.note else ""))
        return True

    def _record_failure(self, run: Run, reason: str, code: Optional[int]) -> None:
        record = read_metrics(run.dir) or {}
        values: dict[str, Any] = {"status": "failed", "exit": reason, "failed_at": time.time()}
        if record.get("status") == "failed" and record.get("reason"):
            values["reason"] = f"{record['reason']} ({reason})"  # the exception train_run recorded
        else:
            values["reason"] = reason
        if not (record.get("status") == "failed" and record.get("log_tail")):
            values["log_tail"] = log_tail(run.dir / LOG_FILE)
        update_metrics(run.dir, **values)
        run.state, run.note = "failed", values["reason"]

    def _finish(self, run: Run, code: int) -> None:
        run.ended = time.time()
        record = read_metrics(run.dir) or {}
        status = record.get("status")
        if status in ("done", "diverged"):
            run.state = status
            run.note = "" if status == "done" else record.get("reason") or "loss not finite"
            self.finished_seconds += run.ended - run.started
            self.finished_flops += self.flops[id(run)]
        else:
            self._record_failure(run, describe_exit(code) if code else f"exit code 0 with status {status!r}", code)
        if run.lock is not None:
            run.lock.release()
        self.view.event(run, f"{run.state} after {duration(run.elapsed)}" + (f": {run.note}" if run.state == "failed" else ""))

    def _stop(self) -> None:
        """Stop every training process (SIGTERM to its process group, SIGKILL after the grace period)."""
        active = [r for r in self.runs if r.state == "running" and r.process is not None]
        first = len(self.signals)
        for run in active:
            _signal_group(run.process, signal.SIGTERM)
        deadline = time.time() + self.grace
        while any(r.process.poll() is None for r in active):
            if time.time() > deadline or len(self.signals) > first:  # out of time, or a second Ctrl-C
                for run in active:
                    if run.process.poll() is None:
                        _signal_group(run.process, signal.SIGKILL)
                break
            time.sleep(0.1)
        for run in active:
            run.process.wait()
            run.ended = time.time()
            run.state, run.note = "stopped", "resumes next time"
            if run.lock is not None:
                run.lock.release()
            self.view.event(run, "stopped; it resumes from its last checkpoint next time")

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        queue: deque[Run] = deque(self.longest_first(select(self.runs, self.retry_failed)))
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, self._on_signal)
        free = list(self.slots)
        try:
            with self.view:
                print_skipped(self.runs, self.retry_failed)
                while (queue or len(free) < len(self.slots)) and not self.signals:
                    while queue and free and not self.signals:
                        if self._start(queue[0], free[0]):
                            free.pop(0)
                        queue.popleft()
                    for run in self.runs:
                        if run.state == "running" and run.process is not None:
                            code = run.process.poll()
                            if code is not None:
                                self._finish(run, code)
                                free.append(run.slot)
                                free.sort(key=lambda s: s.index)
                    self.view.refresh()
                    time.sleep(POLL_SECONDS)
                if self.signals:
                    self._stop()
        except BaseException:  # the launcher itself broke: do not leave training processes behind unwatched
            self._stop()
            raise
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            for run in self.runs:
                if run.lock is not None:
                    run.lock.release()
        return self._report()

    def _report(self) -> int:
        code = report(self.runs, self.name, self.launched)
        return 128 + self.signals[0] if self.signals else code


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # the run's process group: the trainer and anything it started
    except (ProcessLookupError, PermissionError):
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------------------------------
# SLURM (through submitit): one job array, one task per run
# --------------------------------------------------------------------------------------------------

SUBMITIT_FOLDER = ".submitit"
ALIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")


@dataclass(frozen=True)
class SlurmOptions:
    partition: Optional[str] = None
    time_min: int = 24 * 60
    gpus_per_run: int = 1  # GPUs (and DDP ranks: SLURM tasks) per run; 0 for a CPU-only job with one rank
    cpus_per_task: Optional[int] = None
    array_parallelism: Optional[int] = None
    signal_delay_s: int = 120  # the warning signal (USR2) before the time limit: time to stop and requeue
    cluster: Optional[str] = None  # submitit's cluster: None = slurm; "local" runs the jobs on this machine (tests)


class TrainJob:
    """What each array task runs: `train_run` of one run folder, in-process, with `devices` DDP ranks.

    With G > 1 the job has G SLURM tasks, each calling this; Lightning's SLURMEnvironment gives each its rank and
    only rank 0 takes the run's lock and writes records. The task re-checks the run under its lock, as the local
    launcher does, since the run may have been trained or started elsewhere while the job was queued.

    Requeue: submitit sends USR2 `signal_delay_s` before the time limit (and on preemption); it then calls
    `checkpoint`, whose resubmission trains the same folder again, which resumes from `checkpoints/last.ckpt`.
    Lightning's own SIGUSR1 auto-requeue is switched off in these jobs (ABLATE_REQUEUE=submitit) so that a job is
    never requeued twice.
    """

    def __init__(self, devices: int = 1, accelerator: str = "auto") -> None:
        self.devices = devices
        self.accelerator = accelerator

    def __call__(self, run_dir: str) -> str:
        from .records import read_config
        from .train import is_rank_zero, train_run

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ[REQUEUE_ENV] = "submitit"
        run_dir = Path(run_dir)
        config, meta = read_config(run_dir / CONFIG_FILE)
        if not is_rank_zero():
            train_run(config, run_dir, meta, progress=False, devices=self.devices, accelerator=self.accelerator)
            return "rank > 0"
        lock = RunLock(run_dir)
        if not lock.acquire(tries=50):  # patient: the submitter may be recording the job id under the lock
            return f"skipped: being trained elsewhere ({lock_holder(run_dir) or 'another process'})"
        with lock:
            job = job_environment()
            lock.note(f"submitit job {job.get('submitit_job', '?')} pid {os.getpid()} on {socket.gethostname()}\n")
            status = (read_metrics(run_dir) or {}).get("status")
            if status in ("done", "diverged"):
                return f"skipped: {status} meanwhile"
            update_metrics(run_dir, status=status or "pending", **job)
            return train_run(config, run_dir, meta, progress=False, devices=self.devices, accelerator=self.accelerator)["status"]

    def checkpoint(self, run_dir: str):
        import submitit

        return submitit.helpers.DelayedSubmission(self, run_dir)


def job_environment() -> dict[str, Any]:
    """This submitit job's id and log, as recorded in metrics.json ({} outside a submitit job)."""
    import submitit

    try:
        env = submitit.JobEnvironment()
        return {"submitit_job": env.job_id, "submitit_cluster": env.cluster, "submitit_log": str(env.paths.stdout)}
    except (RuntimeError, KeyError):  # not inside a submitit job
        return {}


def job_alive(record: dict[str, Any]) -> bool:
    """Whether the job a run was submitted to (recorded in metrics.json) is still queued or running."""
    job, cluster = record.get("submitit_job"), record.get("submitit_cluster")
    if not job:
        return False
    if cluster == "local":  # submitit's local jobs are processes: the job id is the controller's pid
        try:
            os.kill(int(job), 0)
        except (ValueError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        return True
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False  # cannot tell: resubmit; the job re-checks the run under its lock anyway
    return any(state.strip() in ALIVE_STATES for state in out.stdout.splitlines())


def make_executor(folder: Path, options: SlurmOptions, name: str):
    import submitit

    try:  # never fall back silently to submitit's local executor: that would train every run here at once
        executor = submitit.AutoExecutor(folder=folder, cluster=options.cluster or "slurm")
    except RuntimeError as error:  # no srun here
        raise ValueError(f"--launcher slurm: no SLURM found on this machine ({error}); use --launcher local") from None
    gpus = options.gpus_per_run
    params: dict[str, Any] = dict(
        name=name, timeout_min=options.time_min, gpus_per_node=gpus, tasks_per_node=max(1, gpus), nodes=1,
        cpus_per_task=options.cpus_per_task, slurm_partition=options.partition,
        slurm_array_parallelism=options.array_parallelism, slurm_signal_delay_s=options.signal_delay_s,
    )
    if executor.cluster == "local":
        params["tasks_per_node"] = 1  # the local executor does not set ranks up the way SLURM does
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


def submit_sweep(runs: list[Run], options: SlurmOptions, out: Path, retry_failed: bool = False, wait: bool = False) -> int:
    """Submit one job array for the runs still to train; with `wait`, wait for it and report like the local launcher."""
    todo = []
    for run in select(runs, retry_failed):
        record = read_metrics(run.dir) or {}
        if job_alive(record):
            run.state, run.note = "elsewhere", f"queued as job {record['submitit_job']}"
            print(f"{run.label} ({run.spec.run_id}) skipped: already {run.note}", flush=True)
            continue
        lock = claim(run, retry_failed)
        if lock is None:
            print(f"{run.label} ({run.spec.run_id}) skipped: " + (f"running elsewhere ({run.note})" if run.state == "elsewhere" else run.state), flush=True)
            continue
        lock.release()  # the job takes it when it starts
        todo.append(run)
    print_skipped(runs, retry_failed)
    name = f"{runs[0].spec.sweep} at {runs[0].spec.scale}" if runs else ""
    if not todo:
        print(f"sweep {name}: nothing to submit", flush=True)
        return report(runs, name, 0, "by this submission") if wait else 0
    executor = make_executor(Path(out) / SUBMITIT_FOLDER, options, f"ablate-{runs[0].spec.sweep}-{runs[0].spec.scale}")
    devices = max(1, options.gpus_per_run)
    accelerator = "auto" if options.gpus_per_run else "cpu"
    jobs = executor.map_array(TrainJob(devices, accelerator), [str(run.dir) for run in todo])
    wait = wait or executor.cluster == "local"  # submitit's local jobs are cancelled when this process lets go of them
    for run, job in zip(todo, jobs):
        run.state = "pending"
        with RunLock(run.dir) as lock:  # a job that has started already holds it (and records `running` itself)
            if lock.acquire(tries=1):
                update_metrics(run.dir, submitit_job=job.job_id, submitit_cluster=executor.cluster, submitted_at=time.time(),
                               submitit_log=str(job.paths.stdout))
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    print(f"submitted {len(jobs)} run(s) of {name} to {executor.cluster} as job(s) {', '.join(arrays)}"
          + f" (logs: {Path(out) / SUBMITIT_FOLDER})", flush=True)
    for run, job in zip(todo, jobs):
        print(f"  {job.job_id}: {run.label} ({run.spec.run_id}) -> {run.dir}", flush=True)
    if not wait:
        return 0
    for run, job in zip(todo, jobs):
        try:
            result = job.result()
            print(f"[{time.strftime('%H:%M:%S')}] {run.label} ({run.spec.run_id}) job {job.job_id}: {result}", flush=True)
        except Exception as error:  # the job failed: make sure the folder says so, as the local launcher does
            reason = f"job {job.job_id} failed: {str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}"
            record = read_metrics(run.dir) or {}
            if record.get("status") not in ("done", "diverged", "failed"):
                update_metrics(run.dir, status="failed", reason=reason, exit=reason, failed_at=time.time(),
                               log_tail=log_tail(Path(job.paths.stderr)))
            print(f"[{time.strftime('%H:%M:%S')}] {run.label} ({run.spec.run_id}) {reason}", flush=True)
    return report(runs, name, len(todo), "by this submission")


def run_sweep(sweep_path: str | Path, scale: str, rows: Optional[Sequence[str]] = None, seeds: Optional[Sequence[int]] = None,
              workers: Optional[int] = None, out: str | Path = "runs", sets: Optional[dict[str, Any]] = None,
              dry_run: bool = False, retry_failed: bool = False, live: Optional[bool] = None,
              grace: float = GRACE_SECONDS, gpus_per_run: int = 1, slurm: Optional[SlurmOptions] = None,
              wait: bool = False, reuse: bool = True) -> int:
    """`ablate sweep`: 0 when every run of the selection ends `done`; 1 otherwise; 128 + signal when stopped.

    With `reuse`, a run never started takes the record of a done run with the same id elsewhere under `out`.

    With `slurm` the runs still to train are submitted as one job array instead; 0 once submitted (unless `wait`).
    """
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: expected a positive integer")
    runs = plan(sweep_path, scale, rows=rows, seeds=seeds, sets=sets, out=out)
    if reuse and not dry_run:
        for run, twin in reuse_finished_twins(runs, Path(out)):
            print(f"{run.label} ({run.spec.run_id}) reuses the finished run {twin} (same resolved config)", flush=True)
    if slurm is not None:
        if dry_run:
            print_plan(runs, Path(out), [])
            return 0
        return submit_sweep(runs, slurm, Path(out), retry_failed=retry_failed, wait=wait)
    slots = make_slots(workers or default_workers(gpus_per_run), gpus_per_run=gpus_per_run)
    if dry_run:
        print_plan(runs, Path(out), slots)
        return 0
    return Launcher(runs, slots, retry_failed=retry_failed, live=live, grace=grace).run()
