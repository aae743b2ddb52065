"""A sweep's run records, read and published: what every table, plot and the dashboard are built from.

The runs a table needs come from `expand(sweep, scale)` with the selection's rows, seeds and sets (the same as
`ablate sweep`'s); each is found by its run id under `<runs>/<sweep>/<scale>/` or, only when the selection says
`published`, among the records already published under `<out>/records/<sweep>_<scale>/`. A
finished (done, diverged or failed) run's small record (config.yaml, metrics.json, dev.hyp, test.hyp and its
curves as `curves-<attempt>.csv`; never checkpoints) is copied there, and so are the dev references
(`dev.ref`), so that `<out>` alone rebuilds the same table. Also here: the paired bootstrap of a row's dev BLEU
against base's, and a record's curves.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from ..records import CONFIG_FILE, METRICS_FILE, read_metrics, write_atomic
from ..sweep import RunSpec, Scale, Sweep, expand, load_sweep, read_yaml, scale_named

PUBLISHED = ("done", "diverged", "failed")  # statuses that no longer change; only `done` runs enter the means
RECORD_FILES = (CONFIG_FILE, METRICS_FILE, "dev.hyp", "test.hyp", "dev.parse", "test.parse")  # .parse: parsing runs
CURVE_KEYS = ("dev/ppl", "dev/bleu", "dev/f1", "train/loss")


# --------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    spec: RunSpec
    status: str  # a metrics.json status, `pending` without one, `missing` without a folder
    metrics: Mapping[str, Any]
    meta: Mapping[str, Any]
    folder: Optional[Path]
    from_published: bool = False  # found among `<out>/records/`, not under `<runs>`

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def commits(self) -> tuple[str, ...]:
        """The commits of the code that trained the run: each attempt's where the record lists several ("a, b"),
        else the one it names; empty where it names none."""
        named = self.metrics.get("commit") or self.meta.get("commit") or ""
        return tuple(commit for commit in str(named).split(", ") if commit)


@dataclass(frozen=True)
class Selection:
    """Which runs a table is of: `ablate sweep`'s rows, seeds and sets (None: all), and whether published records
    count. Base is always among the rows."""

    rows: Optional[tuple[str, ...]] = None
    seeds: Optional[tuple[int, ...]] = None
    sets: Mapping[str, Any] = field(default_factory=dict)
    published: bool = True

    def row_ids(self, sweep: Sweep) -> Optional[list[str]]:
        if self.rows is None:
            return None
        base = sweep.reference_row().id
        return [row.id for row in sweep.rows if row.id in self.rows or row.id == base]


SELECTION: contextvars.ContextVar[Selection] = contextvars.ContextVar("SELECTION", default=Selection())


@contextlib.contextmanager
def selecting(selection: Selection) -> Iterator[Selection]:
    """`collect` (and so `build_table`) sees only the selection's runs inside the block."""
    token = SELECTION.set(selection)
    try:
        yield selection
    finally:
        SELECTION.reset(token)


def records_dir(out: str | Path, sweep: Sweep, scale: Scale) -> Path:
    return Path(out) / "records" / f"{sweep.name}_{scale.name}"


def find_folder(run_id: str, roots: Sequence[Path]) -> Optional[Path]:
    """The first folder named `*-<run_id>` in the first root that has one."""
    for root in roots:
        matches = sorted(path for path in root.glob(f"*-{run_id}") if path.is_dir())
        if matches:
            return matches[0]
    return None


def read_record(spec: RunSpec, folder: Optional[Path]) -> RunRecord:
    if folder is None:
        return RunRecord(spec, "missing", {}, {}, None)
    metrics = read_metrics(folder) or {}
    config_file = folder / CONFIG_FILE
    document = read_yaml(config_file) if config_file.is_file() else {}
    return RunRecord(spec, metrics.get("status", "pending"), metrics, dict(document.get("meta") or {}), folder)


def copy_if_changed(source: Path, destination: Path) -> None:
    """Copy a text file through a temporary file, leaving an identical destination untouched."""
    data = source.read_bytes()
    if destination.is_file() and destination.read_bytes() == data:
        return
    write_atomic(destination, data.decode("utf-8"))


def record_files(folder: Path) -> list[tuple[str, Path]]:
    """(name in the published record, source file): the small files, never checkpoints."""
    files = [(name, folder / name) for name in RECORD_FILES if (folder / name).is_file()]
    files += [(f"curves-{path.parent.name}.csv", path) for path in sorted(folder.glob("logs/*/metrics.csv"))]
    return files


def publish(record: RunRecord, destination: Path) -> RunRecord:
    if record.folder != destination:
        for name, source in record_files(record.folder):
            copy_if_changed(source, destination / name)
    return replace(record, folder=destination)


def selected_specs(sweep: Sweep, scale: Scale, selection: Selection) -> list[RunSpec]:
    seeds = None if selection.seeds is None else list(selection.seeds)
    return expand(sweep, scale, seeds=seeds, rows=selection.row_ids(sweep), sets=selection.sets)


def collect(sweep: Sweep, scale: Scale, runs: str | Path, out: str | Path) -> list[RunRecord]:
    """Every selected run of the sweep at the scale (`SELECTION`), read from `runs` or, when the selection allows
    it, from what `out` has published."""
    selection = SELECTION.get()
    own, published = Path(runs) / sweep.name / scale.name, records_dir(out, sweep, scale)
    records = []
    for spec in selected_specs(sweep, scale, selection):
        folder = find_folder(spec.run_id, [own])
        if folder is None and selection.published and (folder := find_folder(spec.run_id, [published])) is not None:
            records.append(replace(read_record(spec, folder), from_published=True))
        else:
            records.append(read_record(spec, folder))
    return records


def unfinished(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs a table lacks: missing, pending or still running."""
    return [record for record in records if record.status not in PUBLISHED]


def published_for(records: Sequence[RunRecord], sweep: Sweep, scale: Scale, out: str | Path) -> list[RunRecord]:
    """Those of `records` that `<out>/records/` has a finished record of."""
    root = records_dir(out, sweep, scale)
    found = [(record, find_folder(record.spec.run_id, [root])) for record in records]
    return [
        record
        for record, folder in found
        if folder is not None and read_record(record.spec, folder).status in PUBLISHED
    ]


def publish_finished(records: Sequence[RunRecord], sweep: Sweep, scale: Scale, out: str | Path) -> list[RunRecord]:
    """The records, every finished one (done, diverged, failed) published under `<out>/records/` first."""
    published = records_dir(out, sweep, scale)
    return [
        publish(record, published / record.folder.name) if record.status in PUBLISHED else record for record in records
    ]


def collect_and_publish(
    sweep_path: str | Path, scale_name: str, runs: str | Path, out: str | Path
) -> tuple[Sweep, Scale, list[RunRecord]]:
    """A table's first step: the sweep, its scale (an error naming the known ones when there is none) and every
    run's record, the finished ones published under `<out>/records/`."""
    sweep = load_sweep(sweep_path)
    scale = scale_named(sweep_path, scale_name)
    return sweep, scale, publish_finished(collect(sweep, scale, runs, out), sweep, scale, out)


# --------------------------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------------------------


def curve_files(folder: Path) -> list[tuple[str, Path]]:
    """(name, file) of a record's curves, attempts in order: a published record's `curves-<attempt>.csv`, or a run
    folder's `logs/<attempt>/metrics.csv` under the name publishing gives it."""
    files = [(path.name, path) for path in Path(folder).glob("curves-*.csv")]
    files = files or [(name, path) for name, path in record_files(Path(folder)) if name.startswith("curves-")]
    return sorted(files, key=lambda named: attempt_order(Path(named[0])))


def read_curves(folder: Optional[Path]) -> dict[str, list[tuple[int, float]]]:
    """(step, value) series of a record's curves (`curve_files`), attempts in order, by step.

    The `-final` files hold the separate final evaluation (logged at step 0), not points of the curve.
    """
    curves: dict[str, dict[int, float]] = {key: {} for key in CURVE_KEYS}
    if folder is None:
        return {key: [] for key in CURVE_KEYS}
    for name, path in curve_files(folder):
        if Path(name).stem.endswith("-final"):
            continue
        with path.open(encoding="utf-8", newline="") as handle:
            for line in csv.DictReader(handle):
                step = line.get("step")
                for key in CURVE_KEYS:
                    value = line.get(key)
                    if step and value:
                        curves[key][int(float(step))] = float(value)  # a resumed attempt overwrites repeated steps
    return {key: sorted(points.items()) for key, points in curves.items()}


def attempt_order(path: Path) -> tuple[int, str]:
    """curves-attempt-10.csv after curves-attempt-9.csv."""
    number = path.stem.removeprefix("curves-attempt-").split("-")[0]
    return (int(number) if number.isdigit() else 0, path.name)
