"""`ablate sweep --dry-run`: what a sweep would train, its FLOPs and GPU-hours, and the wall time expected from the
measured seconds of finished runs (the run's own, else its row's finished twin's) on this machine's workers."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from lightning_modules.config import BatchPlan, batch_plan

from ..records import CONFIG_FILE, folder_status, read_config, read_metrics, run_seconds
from .cost import WallGuess, fit_wall_guess
from .plan import Run
from .processes import Slot


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
    keyed by (run id, worker) (seconds) and by (sweep, scale, row, precision, worker) ({steps trained: seconds}, the
    latest seen for each step count, so a row's 600-step timing probe and its full runs price runs of their own
    length). Precision is part of a row's key because it changes the work: emulated bf16 ran 9.5× slower than fp32 on
    a CPU without it, so a bf16 twin says nothing about an fp32 run's cost. The worker (`recorded_worker`) is too:
    a CPU run on two threads took about half the minutes of its single-thread twins (converged_4x C5), so it prices
    neither them nor a GPU run, and a run resumed on another kind of worker (`attempt_workers`) prices none. Runs
    of the out folder are read after the records, so one's own machine counts first."""
    costs: dict[Any, Any] = {}
    for root, nested in ((records, False), (out, True)):
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*/*/*/metrics.json" if nested else "*/*/metrics.json")):
            record = read_metrics(path.parent) or {}
            seconds = run_seconds(record)
            if record.get("status") != "done" or seconds is None:
                continue
            if len({recorded_worker(worker) for worker in record.get("attempt_workers") or []}) > 1:
                continue  # resumed on another kind of worker: its seconds are no one worker's cost
            folder = path.parent
            precision, meta = recorded_config(folder)
            if nested:
                sweep, scale = folder.parent.parent.name, folder.parent.name
            else:  # `<sweep>_<scale>` cannot be split where both may hold "_" (table3_converged_4x): the meta names them
                sweep, _, scale = folder.parent.name.rpartition("_")
            sweep, scale = meta.get("sweep") or sweep, meta.get("scale") or scale
            row = meta.get("row") or (folder.name.rsplit("-s", 1)[0] if "-s" in folder.name else folder.name)
            steps = record.get("steps")
            worker = recorded_worker(record)
            key = (sweep, scale, row, precision, worker)
            costs.setdefault(key, {})[steps if isinstance(steps, int) and steps > 0 else None] = float(seconds)
            if record.get("run_id"):
                costs[(record["run_id"], worker)] = float(seconds)
    return costs


Worker = Optional[tuple[str, Optional[int]]]  # ("cpu", torch threads) or (GPU device, None); None: not recorded


def recorded_worker(record: dict[str, Any]) -> Worker:
    """What a finished run trained on, as its cost depends on it: the device and, on a CPU, its torch threads."""
    device, threads = record.get("device"), record.get("torch_threads")
    if not isinstance(device, str):
        return None
    return (device, threads if device == "cpu" and isinstance(threads, int) else None)


def planned_worker(slots: Sequence[Slot]) -> Worker:
    """What the sweep's runs will train on, in recorded_worker's terms (None without slots: a SLURM plan). A GPU is
    named as ablations.provenance records it, so that only runs on the same GPU model price these."""
    if not slots:
        return None
    if slots[0].gpu is None:
        return ("cpu", slots[0].threads)
    import torch

    return (torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda", None)


def describe_worker(worker: Worker) -> str:
    if worker is None:
        return "any worker"
    device, threads = worker
    return f"{device}, {threads} thread{'' if threads == 1 else 's'}" if threads else device


def recorded_config(run_dir: Path) -> tuple[Optional[str], dict[str, Any]]:
    """The precision a finished run trained in and its meta (sweep, scale, row), from its config.yaml (None and {}
    where the file is missing or unreadable)."""
    try:
        config, meta = read_config(run_dir / CONFIG_FILE)
    except (OSError, ValueError):
        return None, {}
    return config.train.precision, meta


def measured_on(costs: dict[Any, Any], key: tuple[Any, ...], worker: Worker) -> Any:
    """What measured_costs holds under `key` for runs on `worker`, else for runs whose worker is not recorded."""
    return costs.get((*key, worker), costs.get((*key, None)))


def own_cost(run: Run, costs: dict[Any, Any], worker: Worker = None) -> Optional[float]:
    """The measured seconds of this very run (its run id) on `worker`."""
    return measured_on(costs, (run.spec.run_id,), worker)


def run_cost(run: Run, costs: dict[Any, Any], worker: Worker = None) -> Optional[float]:
    """A run's measured wall seconds on `worker`: its own run id's, else its row's at the same sweep, scale and
    precision: a finished twin of the same step count as is, else the longest one times the ratio of steps (this
    run's train.max_steps over the steps it trained, e.g. under another --set), whose fixed costs weigh least; None
    when none has finished on such a worker anywhere the dry run looks. A record that names no worker (older than
    the field) prices a run on any worker when none of the worker's own does."""
    spec = run.spec
    own = own_cost(run, costs, worker)
    if own is not None:
        return own
    twins = measured_on(costs, (spec.sweep, spec.scale, spec.row, spec.config.train.precision), worker)
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


def wall_guess(
    runs: Sequence[Run], costs: dict[Any, Any], flops_of: Callable[[Run], float], worker: Worker = None
) -> Optional[WallGuess]:
    """The wall-time guess fitted to the costs measured on `worker` (None if there are none): each run that
    finished itself, and once per row the cost of a row known only through its finished twin (another step count,
    scaled by it); counting that twin for each of the row's seeds would weigh one measurement several times."""
    measured, rows_seen = [], set()
    own = {run.spec.run_id: own_cost(run, costs, worker) for run in runs}
    unique = {run.spec.run_id: run for run in runs}.values()
    for run in sorted(unique, key=lambda run: own[run.spec.run_id] is None):  # own measurements first
        row = (run.spec.sweep, run.spec.scale, run.spec.row)
        cost = own[run.spec.run_id]
        if cost is None and row not in rows_seen:
            cost = run_cost(run, costs, worker)
        if cost is not None:
            measured.append((flops_of(run), float(layer_steps(run)), cost))
            rows_seen.add(row)
    return fit_wall_guess(measured)


ORDERS = ("longest", "cheapest")  # `ablate sweep --order`: which runs start first


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"--order {order!r}: expected {' or '.join(ORDERS)}")
    return order


def expected_wall(seconds: list[float], workers: int, order: str = "longest") -> float:
    """The makespan of runs of these costs, in `order`, each to the worker free first (what the launcher does)."""
    free = [0.0] * max(1, workers)
    for cost in sorted(seconds, reverse=check_order(order) == "longest"):
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
    order: str = "longest",
    fit_runs: Sequence[Run] = (),
) -> None:
    """The dry run's table and totals for runs of `devices` devices each (all nodes'); with `costs`, the expected
    wall time of the runs left to train (not those `taken`: pending runs that will take a done twin's record
    instead), runs never measured guessed by a fit over the measured ones among `runs` and `fit_runs` (the whole
    sweep at this scale, so that `--rows big` is priced from the rows that finished). With `as_json`, one JSON
    object instead: {"runs": [...], "total": {...}, "basis": [...]}."""
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
    total["wall_hours_to_run"] = expected_wall([row["wall_hours"] for row in todo], workers, order)
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
        f"worker(s) of {devices} GPU(s) ≈ {total['wall_hours_to_run']:.3g} h wall (training only, {order} first, "
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
        worker = planned_worker(slots)
        todo_costs = [(run, run_cost(run, costs, worker)) for run in todo_runs]
        known = [cost for _, cost in todo_costs if cost is not None]
        unknown = len(todo_runs) - len(known)
        flops_of = {row["run_id"]: row["flops"] for row in rows}
        if not todo_runs:
            console.print("expected wall time: 0s (nothing to train: every run is done or takes a done twin's record)")
        elif not known:
            console.print(
                f"expected wall time: no measured cost (none of the {len(todo_runs)} runs to train has finished "
                f"before on a worker like these: {describe_worker(worker)})"
            )
        else:
            console.print(
                f"expected wall time ≈ {duration(expected_wall(known, workers, order))} on {workers} "
                f"worker(s), from the measured seconds of finished runs on workers like these ({describe_worker(worker)}; "
                "same run id, or same row at this scale; a resumed run's whole work, not its last attempt)"
                + (f"; no measured cost for {unknown} more run(s), not counted" if unknown else "")
            )
        cache: dict = {}
        guess = (
            wall_guess([*runs, *fit_runs], costs, lambda run: estimates(run, cache, devices).flops, worker)
            if unknown
            else None
        )
        if guess is not None:
            guessed = [
                guess.seconds(flops_of[run.spec.run_id], layer_steps(run)) if cost is None else cost
                for run, cost in todo_costs
            ]
            console.print(
                f"with the {unknown} unmeasured run(s) guessed from their FLOPs and layer-steps by {guess.basis}: "
                f"≈ {duration(expected_wall(guessed, workers, order))} on {workers} worker(s), {duration(sum(guessed))} of "
                "worker time (a guess until each row has a finished run)",
                markup=False,
            )


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")
