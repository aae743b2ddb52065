"""The runs of a sweep, and which of them to train: shared by the local launcher and the SLURM one.

`plan` expands a sweep into runs with their folders (touching no file); `select` keeps those to train;
`claim` locks one and re-checks it under the lock; `reuse_finished_twins` gives a never-started run the record of
a done run with the same id; `report` prints the outcome from the run folders.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..records import (
    CONFIG_FILE,
    FINISHED,
    METRICS_FILE,
    RunLock,
    folder_status,
    lock_holder,
    read_metrics,
    run_folder,
    update_metrics,
    write_config,
    write_json,
)
from ..sweep import RunSpec, expand, load_sweep, scale_named
from .processes import LOG_FILE, Slot


@dataclass
class Run:
    """One run of a sweep in the launcher: its spec and folder, and what the launcher knows of its training."""

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


def plan(
    sweep_path: str | Path,
    scale: str,
    rows: Optional[Sequence[str]] = None,
    seeds: Optional[Sequence[int]] = None,
    sets: Optional[dict[str, Any]] = None,
    out: str | Path = "runs",
) -> list[Run]:
    """The sweep's runs (row order, then seed order) with their folders; touches no file."""
    sweep = load_sweep(sweep_path)
    runs = []
    for spec in expand(sweep, scale_named(sweep_path, scale), seeds=seeds, rows=rows, sets=sets or {}):
        meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
        runs.append(Run(spec, run_folder(Path(out), meta, spec.config).absolute(), meta))
    return runs


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


REUSED_RECORD = ("metrics.json", "dev.hyp", "test.hyp", "dev.parse", "test.parse", "logs")  # never its checkpoints


def finished_twin(run: Run, out: Path) -> Optional[Path]:
    """A done run with this run's id in another folder under `out`: the same resolved config, trained already."""
    for folder in sorted(out.glob(f"*/*/*-{run.spec.run_id}")):
        if folder.resolve() != run.dir.resolve() and (read_metrics(folder) or {}).get("status") == "done":
            return folder
    return None


def take_published(runs: list[Run], published: Path) -> list[Run]:
    """Runs not started whose own record is published (`published`/records/<sweep>_<scale>/<folder>, done): their
    folder becomes that record, so they count as done and nothing is copied or written (a sweep continued on a
    fresh clone trains only what is missing, and the committed records stay as they are)."""
    taken = []
    for run in runs:
        record = published / "records" / f"{run.spec.sweep}_{run.spec.scale}" / run.dir.name
        if folder_status(run.dir) == "pending" and (read_metrics(record) or {}).get("status") == "done":
            run.dir, run.state, run.note = record.absolute(), "done", "published"
            taken.append(run)
    return taken


def published_twin(run: Run, published: Path) -> Optional[Path]:
    """A done record with this run's id published under `published`/records/ (committed results): a sweep continued
    on a fresh clone trains only what is missing."""
    for folder in sorted(published.glob(f"records/*/*-{run.spec.run_id}")):
        if (read_metrics(folder) or {}).get("status") == "done":
            return folder
    return None


def twin_of(run: Run, out: Path, published: Optional[Path]) -> Optional[Path]:
    return finished_twin(run, out) or (published_twin(run, published) if published is not None else None)


def reuse_finished_twins(runs: list[Run], out: Path, published: Optional[Path] = None) -> list[tuple[Run, Path]]:
    """Give each never-started run the record of a done run with the same id (another sweep's row, same config).

    Run identity is the hash of the resolved config, so positional_norm's `sin-pre` at tiny *is* table3's base
    there; training it again would spend the time to reproduce the same record. The record is copied (its
    config.yaml says which sweep and row this folder is, and `reused_from` where the results come from). A record
    published under `published`/records/ counts too; its curves go back to logs/<attempt>/metrics.csv.
    """
    reused = []
    for run in runs:
        if folder_status(run.dir) != "pending" or (twin := twin_of(run, out, published)) is None:
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
            for curves in sorted(twin.glob("curves-*.csv")):  # a published record's logs/<attempt>/metrics.csv
                attempt = run.dir / "logs" / curves.stem.removeprefix("curves-")
                attempt.mkdir(parents=True, exist_ok=True)
                shutil.copy2(curves, attempt / "metrics.csv")
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
        print(
            f"skipping {len(skipped)} finished run(s): "
            + ", ".join(
                f"{s} {sum(r.state == s for r in skipped)}" for s in FINISHED if any(r.state == s for r in skipped)
            )
            + ("" if retry_failed else " (--retry-failed reruns failed/diverged)"),
            flush=True,
        )


def report(runs: list[Run], name: str, launched: int, where: str = "here") -> int:
    """Print the sweep's outcome from the run folders; 0 when every run is done, else 1."""
    final = {run.label: folder_status(run.dir) for run in runs}
    counts: dict[str, int] = {}
    for status in final.values():
        counts[status] = counts.get(status, 0) + 1
    print(
        f"sweep {name}: {len(runs)} runs, {launched} launched {where}; "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        flush=True,
    )
    for run in runs:
        status = final[run.label]
        if status in ("failed", "diverged"):
            reason = (read_metrics(run.dir) or {}).get("reason") or ""
            print(f"  {status}: {run.label} ({run.spec.run_id}) {reason} — log: {run.dir / LOG_FILE}", flush=True)
        elif status in ("running", "stale", "pending") and run.state == "elsewhere":
            print(f"  running elsewhere: {run.label} ({run.spec.run_id}) {run.note}", flush=True)
    return 0 if all(s == "done" for s in final.values()) else 1
