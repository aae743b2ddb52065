"""`ablate sweep` on this machine: the launcher that trains K runs at a time, its dry run and its live view."""

from __future__ import annotations

import json
import os
import shlex
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

from lightning_modules.config import BatchPlan, batch_plan

from ..records import CONFIG_FILE, LOCKED_ENV, folder_status, read_config, read_metrics, run_seconds, update_metrics
from .cost import WallGuess, fit_wall_guess
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
    signal_group,
    slot_command,
)
from .slurm import SlurmOptions, submit_sweep

POLL_SECONDS = 0.2


# --------------------------------------------------------------------------------------------------
# Dry run
# --------------------------------------------------------------------------------------------------


def human(value: float, unit: str = "") -> str:
    for factor, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}{unit}"
    return f"{value:.3g}{unit}"


@dataclass(frozen=True)
class Estimate:
    """A run's plan on `plan.devices` devices: parameters, its step cut over the devices, and the whole run's
    planned tokens per side (max_steps x tokens per step, padding included: the budget's bound) and FLOPs (as
    lightning_modules.flops counts them: every device's work together)."""

    params: int
    plan: BatchPlan
    tokens: int
    flops: float


def estimates(run: Run, cache: dict, devices: int = 1) -> Estimate:
    """The run's Estimate on `devices` devices (all nodes'); ValueError when its batch cannot be cut that finely."""
    from lightning_modules.flops import parameter_count, training_flops

    config = run.spec.config
    step = batch_plan(config.data, devices)
    tokens = config.train.max_steps * step.tokens_per_step
    key = (config.model, config.data.vocab_size, tokens)
    if key not in cache:
        cache[key] = (
            parameter_count(config.model, config.data.vocab_size),
            training_flops(config.model, config.data.vocab_size, float(tokens)),
        )
    params, flops = cache[key]
    return Estimate(params, step, tokens, flops)


RECORDS = Path(__file__).resolve().parents[2] / "results" / "records"  # results/records/<sweep>_<scale>/<run>


def measured_costs(out: Path, records: Path = RECORDS) -> dict[Any, Any]:
    """Measured seconds (`run_seconds`: a resumed run's whole work, not its last attempt's) of finished (done) runs
    under `out` (`<sweep>/<scale>/<row>-s<seed>-<id>`) and under results/records (`<sweep>_<scale>/<row>-s<seed>-<id>`),
    keyed by run id (seconds) and by (sweep, scale, row, precision) ({steps trained: seconds}, the latest seen for
    each step count, so a row's 600-step timing probe and its full runs price runs of their own length).
    Precision is part of a row's key because it changes the work: emulated bf16 ran 9.5× slower than fp32 on a CPU
    without it, so a bf16 twin says nothing about an fp32 run's cost. Runs of the out folder are read after the
    records, so one's own machine counts first."""
    costs: dict[Any, Any] = {}
    for root, nested in ((records, False), (out, True)):
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*/*/*/metrics.json" if nested else "*/*/metrics.json")):
            record = read_metrics(path.parent) or {}
            seconds = run_seconds(record)
            if record.get("status") != "done" or seconds is None:
                continue
            folder = path.parent
            if nested:
                sweep, scale = folder.parent.parent.name, folder.parent.name
            else:
                sweep, _, scale = folder.parent.name.rpartition("_")
            row = folder.name.rsplit("-s", 1)[0] if "-s" in folder.name else folder.name
            steps = record.get("steps")
            key = (sweep, scale, row, recorded_precision(folder))
            costs.setdefault(key, {})[steps if isinstance(steps, int) and steps > 0 else None] = float(seconds)
            if record.get("run_id"):
                costs[record["run_id"]] = float(seconds)
    return costs


def recorded_precision(run_dir: Path) -> Optional[str]:
    """The precision a finished run trained in, from its config.yaml (None where the file is missing or unreadable)."""
    try:
        config, _ = read_config(run_dir / CONFIG_FILE)
    except (OSError, ValueError):
        return None
    return config.train.precision


def run_cost(run: Run, costs: dict[Any, Any]) -> Optional[float]:
    """A run's measured wall seconds: its own run id's, else its row's at the same sweep, scale and precision: a
    finished twin of the same step count as is, else the longest one times the ratio of steps (this run's
    train.max_steps over the steps it trained, e.g. under another --set), whose fixed costs weigh least; None when
    none has finished anywhere the dry run looks."""
    spec = run.spec
    if spec.run_id in costs:
        return costs[spec.run_id]
    twins = costs.get((spec.sweep, spec.scale, spec.row, spec.config.train.precision))
    if not twins:
        return None
    wanted = spec.config.train.max_steps
    if wanted in twins:
        return twins[wanted]
    steps = max(twins, key=lambda count: count or 0)
    return twins[steps] * wanted / steps if steps else twins[steps]


def layer_steps(run: Run) -> int:
    """N × steps: what a run's per-layer step cost scales with (the second term of a WallGuess)."""
    return run.spec.config.model.N * run.spec.config.train.max_steps


def wall_guess(runs: list[Run], costs: dict[Any, Any], flops_of: dict[str, float]) -> Optional[WallGuess]:
    """The wall-time guess fitted to the measured costs (None if there are none): each run that finished itself,
    and once per row the cost of a row known only through its finished twin (another step count, scaled by it);
    counting that twin for each of the row's seeds would weigh one measurement several times."""
    measured, rows_seen = [], set()
    for run in sorted(runs, key=lambda run: run.spec.run_id not in costs):  # own measurements first
        row = (run.spec.sweep, run.spec.scale, run.spec.row)
        cost = costs.get(run.spec.run_id)
        if cost is None and row not in rows_seen:
            cost = run_cost(run, costs)
        if cost is not None:
            measured.append((flops_of.get(run.spec.run_id, 0.0), float(layer_steps(run)), cost))
            rows_seen.add(row)
    return fit_wall_guess(measured)


def expected_wall(seconds: list[float], workers: int) -> float:
    """The makespan of runs of these costs, longest first, each to the worker free first (what the launcher does)."""
    free = [0.0] * max(1, workers)
    for cost in sorted(seconds, reverse=True):
        free[free.index(min(free))] += cost
    return max(free)


def plan_rows(runs: list[Run], devices: int, measurements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per run, as the dry run prints it (and `--json` writes it): its status, parameters, devices, the
    step's cut over them, the whole run's planned tokens per side and FLOPs, and GPU-hours at a measured or assumed
    rate (`basis` says which)."""
    from .cost import gpu_hours, throughput_for

    cache: dict = {}
    rows = []
    for run in runs:
        estimate = estimates(run, cache, devices)
        throughput = throughput_for(estimate.params, estimate.plan.device_tokens, measurements)
        hours = gpu_hours(estimate.flops, throughput)
        rows.append(
            {
                "row": run.spec.row,
                "seed": run.spec.seed,
                "run_id": run.spec.run_id,
                "status": folder_status(run.dir),
                "params": estimate.params,
                **estimate.plan.to_dict(),
                "max_steps": run.spec.config.train.max_steps,
                "train_tokens": estimate.tokens,
                "flops": estimate.flops,
                "gpu_hours": hours,
                "wall_hours": hours / devices,
                "basis": throughput.basis,
                "_throughput": throughput,
            }
        )
    return rows


def print_plan(
    runs: list[Run],
    out: Path,
    slots: list[Slot],
    costs: Optional[dict[Any, Any]] = None,
    taken: Sequence[Run] = (),
    devices: int = 1,
    as_json: bool = False,
    results: Optional[Path] = None,
) -> None:
    """The dry run's table and totals for runs of `devices` devices each (all nodes'); with `costs`, the expected
    wall time of the runs left to train (not those `taken`: pending runs that will take a done twin's record
    instead). With `as_json`, one JSON object instead: {"runs": [...], "total": {...}, "basis": [...]}."""
    from rich.console import Console
    from rich.table import Table

    from .cost import RESULTS, basis_lines, read_measurements

    rows = plan_rows(runs, devices, read_measurements(RESULTS if results is None else results))
    bases = basis_lines([row.pop("_throughput") for row in rows])
    todo = [row for row in rows if row["status"] != "done"]
    total = {
        "runs": len(rows),
        "devices_per_run": devices,
        "flops": sum(row["flops"] for row in rows),
        "flops_to_run": sum(row["flops"] for row in todo),
        "gpu_hours": sum(row["gpu_hours"] for row in rows),
        "gpu_hours_to_run": sum(row["gpu_hours"] for row in todo),
    }
    workers = max(1, len(slots))
    total["wall_hours_to_run"] = expected_wall([row["wall_hours"] for row in todo], workers)
    if as_json:
        print(json.dumps({"runs": rows, "total": total, "workers": workers, "basis": bases}, indent=2))
        return
    console = Console() if sys.stdout.isatty() else Console(width=180)
    first = runs[0].spec if runs else None
    title = f"{first.sweep} at scale {first.scale}: {len(runs)} runs under {out}" if first else "no runs"
    table = Table(title=title)
    columns = ("row", "seed", "run id", "status", "params", "devices", "tokens/step", "accum", "tokens", "FLOPs")
    for column in (*columns, "GPU-h"):
        table.add_column(column, justify="left" if column in ("row", "run id", "status") else "right", no_wrap=True)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        table.add_row(
            row["row"],
            str(row["seed"]),
            row["run_id"],
            row["status"],
            human(row["params"]),
            str(row["devices"]),
            f"{row['tokens_per_step']:,} ({row['device_batch_tokens']:,}/device)",
            str(row["accumulate_grad_batches"]),
            human(row["train_tokens"]),
            f"{row['flops']:.2e}",
            f"{row['gpu_hours']:.3g}",
        )
    console.print(table)
    console.print(
        ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f"; training FLOPs ≈ {total['flops']:.2e} in all, {total['flops_to_run']:.2e} still to run (counted: 3 × "
        "forward, tokens per side = steps × the step's token budget, padding included)"
    )
    gpu_hours_line = (
        f"GPU-hours ≈ {total['gpu_hours']:.3g} in all, {total['gpu_hours_to_run']:.3g} still to run; on {workers} "
        f"worker(s) of {devices} GPU(s) ≈ {total['wall_hours_to_run']:.3g} h wall (training only, longest first, "
        "perfect scaling over a run's devices"
    )
    if slots and all(slot.gpu is None for slot in slots):
        # Planning GPU runs from a CPU machine: these figures are not this machine's (its guess is printed below).
        gpu_hours_line = "On GPUs, not these CPU workers: " + gpu_hours_line
    console.print(
        gpu_hours_line + "; validation decoding not counted). Rate: " + "; ".join(bases),
        markup=False,
    )
    if slots:
        slot = slots[0]
        gpus = sorted({s.gpu for s in slots if s.gpu is not None})
        console.print(
            f"{len(slots)} worker(s), {slot.threads} thread(s) and {len(slot.cores)} core(s) each"
            + (f", GPUs {','.join(gpus)}" if gpus else ", no GPU")
        )
    if costs is not None:
        skip = {id(run) for run in taken}
        todo_runs = [run for run in runs if folder_status(run.dir) != "done" and id(run) not in skip]
        todo_costs = [(run, run_cost(run, costs)) for run in todo_runs]
        known = [cost for _, cost in todo_costs if cost is not None]
        unknown = len(todo_runs) - len(known)
        flops_of = {row["run_id"]: row["flops"] for row in rows}
        if not todo_runs:
            console.print("expected wall time: 0s (nothing to train: every run is done or takes a done twin's record)")
        elif not known:
            console.print(
                f"expected wall time: no measured cost (none of the {len(todo_runs)} runs to train has finished before)"
            )
        else:
            console.print(
                f"expected wall time ≈ {duration(expected_wall(known, workers))} on {workers} "
                f"worker(s), from the measured seconds of finished runs (same run id, or same row at this scale; a resumed "
                "run's whole work, not its last attempt)"
                + (f"; no measured cost for {unknown} more run(s), not counted" if unknown else "")
            )
        guess = wall_guess(runs, costs, flops_of) if unknown else None
        if guess is not None:
            guessed = [
                guess.seconds(flops_of[run.spec.run_id], layer_steps(run)) if cost is None else cost
                for run, cost in todo_costs
            ]
            console.print(
                f"with the {unknown} unmeasured run(s) guessed from their FLOPs and layer-steps by {guess.basis}: "
                f"≈ {duration(expected_wall(guessed, workers))} on {workers} worker(s), {duration(sum(guessed))} of "
                "worker time (a guess until each row has a finished run)",
                markup=False,
            )


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
    ) -> None:
        self.runs = runs
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
    if dry_run:
        print_plan(
            runs,
            Path(out),
            slots,
            measured_costs(Path(out)),
            taken=twins,
            devices=gpus_per_run * nodes,
            as_json=as_json,
        )
        return 0
    return Launcher(runs, slots, retry_failed=retry_failed, live=live, grace=grace).run()
