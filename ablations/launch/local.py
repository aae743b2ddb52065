"""`ablate sweep` on this machine: the launcher that trains K runs at a time and its live view (the dry run is
dry_run.py)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional, Sequence

from ..records import CONFIG_FILE, LOCKED_ENV, folder_status, read_metrics, update_metrics
from .dry_run import check_order, duration, estimates, measured_costs, print_plan
from .plan import Run, claim, plan, print_skipped, report, reuse_finished_twins, select, take_published, twin_of
from .processes import (
    GRACE_SECONDS,
    LOG_FILE,
    Slot,
    auto_workers,
    child_env,
    default_workers,
    describe_exit,
    emulated_bf16_warning,
    log_tail,
    make_slots,
    oversubscription_warning,
    signal_group,
    slot_command,
)
from .slurm import SlurmOptions, submit_sweep

POLL_SECONDS = 0.2


# --------------------------------------------------------------------------------------------------
# Status view
# --------------------------------------------------------------------------------------------------


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
        text = " · ".join(
            f"{counts[s]} {s}"
            for s in ("done", "running", "failed", "diverged", "pending", "elsewhere", "stopped")
            if counts.get(s)
        )
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
            slot = (
                ""
                if run.slot is None
                else f"{run.slot.index}" + (f" gpu {run.slot.gpu}" if run.slot.gpu is not None else "")
            )
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
# Launcher
# --------------------------------------------------------------------------------------------------


class Launcher:
    def __init__(
        self,
        runs: list[Run],
        slots: list[Slot],
        retry_failed: bool = False,
        live: Optional[bool] = None,
        grace: float = GRACE_SECONDS,
        order: str = "longest",
    ) -> None:
        self.runs = runs
        self.order = check_order(order)
        self.slots = slots
        self.retry_failed = retry_failed
        self.grace = grace
        self.name = f"{runs[0].spec.sweep} at {runs[0].spec.scale}" if runs else ""
        self.view = View(self, live)
        self.signals: list[int] = []
        self.launched = 0
        cache: dict = {}
        self.flops = {
            id(run): estimates(run, cache, slots[0].devices if slots else 1).flops for run in runs
        }  # the cost model behind order and ETA
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

    def ordered(self, runs: list[Run]) -> list[Run]:
        """By FLOPs, the costliest first (`longest`: no long run starts last while the other workers sit idle) or
        the cheapest (`cheapest`: the most finished runs soonest, on a machine held for a limited time)."""
        return sorted(runs, key=lambda run: self.flops[id(run)], reverse=self.order == "longest")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    # -- one run -----------------------------------------------------------------------------------

    def _start(self, run: Run, slot: Slot) -> bool:
        """Lock, re-check and start a run; False (and a reported state) when it is not to be trained."""
        lock = claim(run, self.retry_failed)
        if lock is None:
            self.view.event(
                run, f"skipped: running elsewhere ({run.note})" if run.state == "elsewhere" else f"skipped: {run.state}"
            )
            return False
        argv = slot_command(slot, run.dir / CONFIG_FILE, run.dir)
        with open(run.dir / LOG_FILE, "ab") as log:
            log.write(
                f"\n=== ablate sweep {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} slot {slot.index} "
                f"cores {','.join(map(str, slot.cores))} gpu {slot.gpu}: {shlex.join(argv)}\n".encode()
            )
            log.flush()
            try:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env(slot, {LOCKED_ENV: str(run.dir)}),
                    start_new_session=True,
                    pass_fds=(lock.fd,),
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
        self.view.event(
            run,
            f"started on slot {slot.index} (cores {','.join(map(str, slot.cores))}"
            + (f", gpu {slot.gpu})" if slot.gpu is not None else ")")
            + (f" [{run.note}]" if run.note else ""),
        )
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
        self.view.event(
            run, f"{run.state} after {duration(run.elapsed)}" + (f": {run.note}" if run.state == "failed" else "")
        )

    def _stop(self) -> None:
        """Stop every training process (SIGTERM to its process group, SIGKILL after the grace period)."""
        active = [r for r in self.runs if r.state == "running" and r.process is not None]
        first = len(self.signals)
        for run in active:
            signal_group(run.process, signal.SIGTERM)
        deadline = time.time() + self.grace
        while any(r.process.poll() is None for r in active):
            if time.time() > deadline or len(self.signals) > first:  # out of time, or a second Ctrl-C
                for run in active:
                    if run.process.poll() is None:
                        signal_group(run.process, signal.SIGKILL)
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
        queue: deque[Run] = deque(self.ordered(select(self.runs, self.retry_failed)))
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


def run_sweep(
    sweep_path: str | Path,
    scale: str,
    rows: Optional[Sequence[str]] = None,
    seeds: Optional[Sequence[int]] = None,
    workers: Optional[int | str] = None,
    out: str | Path = "runs",
    sets: Optional[dict[str, Any]] = None,
    dry_run: bool = False,
    retry_failed: bool = False,
    live: Optional[bool] = None,
    grace: float = GRACE_SECONDS,
    gpus_per_run: int = 1,
    slurm: Optional[SlurmOptions] = None,
    wait: bool = False,
    reuse: bool = True,
    published: Optional[str | Path] = "results",
    nodes: int = 1,
    as_json: bool = False,
    order: str = "longest",
) -> int:
    """`ablate sweep`: 0 when every run of the selection ends `done`; 1 otherwise; 128 + signal when stopped.

    With `reuse`, a run never started takes the record of a done run with the same id elsewhere under `out`, or of
    one published under `published`/records/ (the committed records: a fresh clone continues instead of retraining).

    With `slurm` the runs still to train are submitted as one job array instead; 0 once submitted (unless `wait`);
    only there may a run span `nodes` > 1 nodes of `gpus_per_run` GPUs each. `as_json` (with `dry_run`): the plan as
    one JSON object on stdout, notes on stderr.
    """
    if nodes < 1:
        raise ValueError(f"--nodes {nodes}: expected a positive integer")
    if check_order(order) != "longest" and slurm is not None:
        raise ValueError(f"--order {order}: only the local launcher orders runs (SLURM schedules its job array)")
    if slurm is not None and slurm.nodes != nodes:
        raise ValueError(f"nodes = {nodes} and the SLURM options' nodes = {slurm.nodes} disagree")
    if nodes > 1 and slurm is None and not dry_run:
        raise ValueError(f"--nodes {nodes}: a run over several nodes needs --launcher slurm (or --dry-run to plan it)")
    if as_json and not dry_run:
        raise ValueError("--json: only with --dry-run (it prints the plan)")
    notes = sys.stderr if as_json else sys.stdout
    if workers is not None and workers != "auto" and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"--workers {workers}: expected a positive integer or auto")
    runs = plan(sweep_path, scale, rows=rows, seeds=seeds, sets=sets, out=out)
    published = Path(published) if published is not None else None
    twins: list[Run] = []
    if reuse and published is not None:
        taken = take_published(runs, published)
        if taken:
            print(
                f"{len(taken)} run(s) are published under {published}/records/ (done there, not retrained; "
                "--no-reuse trains them; `ablate reproduce RECORD` checks that this code and machine train one "
                "as recorded)",
                file=notes,
                flush=True,
            )
    if reuse and dry_run:
        twins = [run for run in runs if folder_status(run.dir) == "pending" and twin_of(run, Path(out), published)]
        if twins:
            print(
                f"{len(twins)} pending run(s) will take the record of a done run with the same id (under {out} or "
                f"{published}/records/) instead of training: {', '.join(run.label for run in twins)}",
                file=notes,
                flush=True,
            )
    elif reuse:
        for run, twin in reuse_finished_twins(runs, Path(out), published):
            print(f"{run.label} ({run.spec.run_id}) reuses the finished run {twin} (same resolved config)", flush=True)
    if slurm is None:  # a SLURM job's nodes are other machines: their CPUs are not this one's
        to_train = [run for run in runs if folder_status(run.dir) != "done" and run not in twins]
        warning = emulated_bf16_warning([run.spec.config.train.precision for run in to_train])
        if warning:
            print(warning, file=sys.stderr, flush=True)
    if slurm is not None:
        if dry_run:
            print_plan(runs, Path(out), [], devices=max(1, slurm.gpus_per_run) * slurm.nodes, as_json=as_json)
            return 0
        return submit_sweep(runs, slurm, Path(out), retry_failed=retry_failed, wait=wait)
    if workers == "auto":
        cache: dict = {}
        workers = auto_workers(max((estimates(run, cache).params for run in runs), default=None), gpus_per_run)
    slots = make_slots(workers or default_workers(gpus_per_run), gpus_per_run=gpus_per_run)
    warning = oversubscription_warning(slots[: len(to_train)])  # the slots that will hold a run
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if dry_run:
        print_plan(
            runs,
            Path(out),
            slots,
            measured_costs(Path(out)),
            taken=twins,
            devices=gpus_per_run * nodes,
            as_json=as_json,
            order=order,
            fit_runs=plan(sweep_path, scale, sets=sets, out=out) if rows or seeds else (),
        )
        return 0
    return Launcher(runs, slots, retry_failed=retry_failed, live=live, grace=grace, order=order).run()
