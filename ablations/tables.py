"""A sweep's table at one scale, from run records only: `ablate table SWEEP --scale S`.

Nothing is trained and no clock is read. The runs a table needs come from `expand(sweep, scale)`; each is
found by its run id under `<runs>/<sweep>/<scale>/` or among the records already published under
`<out>/records/<sweep>_<scale>/`. A finished (done, diverged or failed) run's small record (config.yaml,
metrics.json, dev.hyp, test.hyp and its curves as `curves-<attempt>.csv`; never checkpoints) is copied there,
and so are the dev references (`dev.ref`), so that `<out>` alone rebuilds the same table. The table is
written as `<out>/<sweep>_<scale>.md`, `.csv` and `.tex`, with its plots under `<out>/plots/` (plots.py),
Table 2 as `<out>/table2_<scale>.*` when the sweep has base and big rows (cost.py), the table as data in
`<out>/<sweep>_<scale>.json`, and the offline dashboard `<out>/index.html` over every table there
(dashboard.py); the same records give the same bytes.

Provenance comes from the records: `device` and, where a run recorded them, `cpu_model` and `commit`
(in metrics.json or in config.yaml's meta).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import math
import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from lightning_modules.config import SECTIONS, DataConfig, RunConfig

from .records import CONFIG_FILE, METRICS_FILE, read_metrics, write_atomic, write_renderings
from .sweep import Row, RunSpec, Scale, Sweep, expand, load_sweep, paper_units, read_yaml, scales_for

PUBLISHED = ("done", "diverged", "failed")  # statuses that no longer change; only `done` runs enter the means
RECORD_FILES = (CONFIG_FILE, METRICS_FILE, "dev.hyp", "test.hyp")
REFERENCES_FILE = "dev.ref"
BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacreBLEU's default; it treats 0 as "unseeded"
CORPUS_FIELDS = ("dataset", "path", "src_lang", "tgt_lang", "dev_split", "generated_pairs", "generated_seed", "cache_dir")


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

    @property
    def done(self) -> bool:
        return self.status == "done"


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


def collect(sweep: Sweep, scale: Scale, runs: str | Path, out: str | Path) -> list[RunRecord]:
    """Every expected run of the sweep at the scale; finished ones (done, diverged, failed) published."""
    published = records_dir(out, sweep, scale)
    roots = (Path(runs) / sweep.name / scale.name, published)
    records = []
    for spec in expand(sweep, scale):
        record = read_record(spec, find_folder(spec.run_id, roots))
        if record.status in PUBLISHED:
            record = publish(record, published / record.folder.name)
        records.append(record)
    return records


# --------------------------------------------------------------------------------------------------------------
# Dev references and the paired bootstrap
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class References:
    lines: Optional[list[str]]
    problem: str = ""  # why `lines` is None


def load_references(data: DataConfig, copy: Path) -> References:
    """The dev references of the run's corpus (copied to `copy`), else the copy made earlier."""
    from lightning_modules.data import CorpusError, dataset_directory, default_split_names, read_lines, resolve_splits

    try:
        train, dev, test = default_split_names(data)
        directory = dataset_directory(data, download=False)
        path = resolve_splits(directory, data.src_lang, data.tgt_lang, train=train, dev=dev, test=test).dev.tgt
    except CorpusError as error:
        if copy.is_file():
            return References(read_lines(copy))
        return References(None, f"the dev references are not available ({error})")
    copy_if_changed(path, copy)
    return References(read_lines(path))


def read_hypotheses(folder: Path) -> Optional[list[str]]:
    path = folder / "dev.hyp"
    if not path.is_file():
        return None
    return path.read_bytes().decode("utf-8").removesuffix("\n").split("\n")


@contextlib.contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def paired_bootstrap_p(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                       samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> float:
    """p-value of sacreBLEU's paired bootstrap test of `system` against `baseline` (BLEU, 13a, one reference).

    sacreBLEU counts only resampled differences strictly above the observed one, so an observed difference of
    zero would come out as p = 1/(samples + 1); no difference is reported as p = 1.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    with environment("SACREBLEU_SEED", str(seed)):  # PairedTest takes its seed from here when built
        test = PairedTest([("baseline", list(baseline)), ("system", list(system))], {"BLEU": BLEU()},
                          [list(references)], test_type="bs", n_samples=samples)
    _, scores = test()
    base_result, system_result = scores["BLEU"]
    return 1.0 if system_result.score == base_result.score else float(system_result.p_value)


@dataclass(frozen=True)
class Significance:
    p_value: Optional[float] = None
    seed: Optional[int] = None
    problem: str = ""  # why p_value is None


def corpus_key(data: DataConfig) -> tuple:
    return tuple(getattr(data, name) for name in CORPUS_FIELDS)


def first_common_seed(base: Sequence[RunRecord], row: Sequence[RunRecord]) -> Optional[tuple[RunRecord, RunRecord]]:
    done = {run.spec.seed: run for run in base if run.done}
    return next(((done[run.spec.seed], run) for run in row if run.done and run.spec.seed in done), None)


def compare_to_base(base: Sequence[RunRecord], row: Sequence[RunRecord], references: References) -> Significance:
    """The row's dev BLEU against base's, on the hypotheses of the first seed both finished."""
    pair = first_common_seed(base, row)
    if pair is None:
        return Significance(problem="no seed finished for both the row and base")
    if references.lines is None:
        return Significance(problem=references.problem)
    base_run, row_run = pair
    if corpus_key(row_run.spec.config.data) != corpus_key(base_run.spec.config.data):
        return Significance(problem="the row's dev set is not base's")
    base_hyps, row_hyps = read_hypotheses(base_run.folder), read_hypotheses(row_run.folder)
    if base_hyps is None or row_hyps is None:
        return Significance(problem="a run has no dev.hyp")
    if not len(base_hyps) == len(row_hyps) == len(references.lines):
        return Significance(problem=f"dev.hyp has {len(row_hyps)} lines, base's {len(base_hyps)}, "
                                    f"the references {len(references.lines)}")
    return Significance(paired_bootstrap_p(base_hyps, row_hyps, references.lines), row_run.spec.seed)


# --------------------------------------------------------------------------------------------------------------
# The table as data
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    mean: float
    std: Optional[float]  # sample standard deviation, from two values on
    n: int


def stat(values: Sequence[Optional[float]]) -> Optional[Stat]:
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    return Stat(statistics.fmean(values), statistics.stdev(values) if len(values) >= 2 else None, len(values))


def scaled(value: Optional[float], factor: float) -> Optional[float]:
    return None if value is None else value * factor


def measures(metrics: Mapping[str, Any]) -> dict[str, Optional[float]]:
    """The measured columns of one run, in display units."""
    return {
        "dev_ppl": metrics.get("dev_ppl"),
        "dev_bleu": metrics.get("dev_bleu"),
        "dev_bleu_tok": metrics.get("dev_bleu_tok"),
        "params_m": scaled(metrics.get("params"), 1e-6),
        "steps": metrics.get("steps"),
        "tokens_per_s": metrics.get("train_tokens_per_second"),
        "wall_min": scaled(metrics.get("wall_seconds"), 1 / 60),
    }


MEASURES = tuple(measures({}))


@dataclass(frozen=True)
class RowResult:
    row: Row
    paper_units: Mapping[str, str]  # column key -> the row's value, formatted
    runs: tuple[RunRecord, ...]
    stats: Mapping[str, Optional[Stat]]
    significance: Significance = Significance()

    @property
    def done(self) -> list[RunRecord]:
        return [run for run in self.runs if run.done]

    @property
    def status(self) -> str:
        """`done` if any seed is done, else the seeds' statuses: `missing`, `failed/running`, ..."""
        return "done" if self.done else "/".join(sorted({run.status for run in self.runs}))

    def mean(self, key: str) -> Optional[float]:
        return None if self.stats[key] is None else self.stats[key].mean


@dataclass(frozen=True)
class Table:
    sweep: Sweep
    scale: Scale
    extra_columns: tuple[str, ...]  # dotted config fields beyond the paper's that vary across rows
    base: RowResult
    rows: tuple[RowResult, ...]  # base among them
    header: tuple[tuple[str, str], ...]  # (label, value)
    notes: tuple[str, ...]


# The paper's hyperparameter columns: key, Markdown label, TeX label.
PAPER_COLUMNS = (
    ("N", "N", "$N$"),
    ("d_model", "d_model", r"$d_{\mathrm{model}}$"),
    ("d_ff", "d_ff", r"$d_{\mathrm{ff}}$"),
    ("h", "h", "$h$"),
    ("d_k", "d_k", "$d_k$"),
    ("d_v", "d_v", "$d_v$"),
    ("P_drop", "P_drop", r"$P_{\mathrm{drop}}$"),
    ("eps_ls", "ε_ls", r"$\epsilon_{ls}$"),
    ("positional", "positional", "positional"),
    ("train_steps", "train steps", "train steps"),
)
# The config fields those columns show; any other field that varies across rows gets a column of its own.
PAPER_FIELDS = {"model.N", "model.d_model", "model.d_ff", "model.h", "model.d_k", "model.d_v", "model.P_drop",
                "train.eps_ls", "model.positional", "train.max_steps"}


def plain(value: Any) -> str:
    if value is None:
        return "—"
    return str(value).lower() if isinstance(value, bool) else str(value)


def steps_label(steps: int) -> str:
    return f"{steps // 1000}K" if steps % 1000 == 0 else str(steps)


def flat(config: RunConfig) -> dict[str, Any]:
    values = config.to_dict()
    return {f"{section}.{name}": value for section in SECTIONS for name, value in values[section].items()}


def varying_fields(configs: Sequence[RunConfig]) -> tuple[str, ...]:
    flats = [flat(config) for config in configs]
    return tuple(key for key in flats[0] if key not in PAPER_FIELDS and len({repr(f[key]) for f in flats}) > 1)


def paper_unit_cells(config: RunConfig, extra: Sequence[str]) -> dict[str, str]:
    model = config.model
    cells = {
        "N": str(model.N), "d_model": str(model.d_model), "d_ff": str(model.d_ff), "h": str(model.h),
        "d_k": str(model.head_dim_k), "d_v": str(model.head_dim_v), "P_drop": plain(model.P_drop),
        "eps_ls": plain(config.train.eps_ls), "positional": model.positional, "train_steps": steps_label(config.train.max_steps),
    }
    values = flat(config)
    cells.update({key: plain(values[key]) for key in extra})
    return cells


def difference(value: Optional[float], base: Optional[float]) -> Optional[float]:
    return None if value is None or base is None else value - base


def deltas(result: RowResult, base: RowResult) -> dict[str, Optional[float]]:
    """Row minus base, measured (means) and in the paper; nothing for base itself."""
    if result is base:
        return dict.fromkeys(("delta_ppl", "delta_bleu", "paper_delta_ppl", "paper_delta_bleu"))
    return {
        "delta_ppl": difference(result.mean("dev_ppl"), base.mean("dev_ppl")),
        "delta_bleu": difference(result.mean("dev_bleu"), base.mean("dev_bleu")),
        "paper_delta_ppl": difference(result.row.paper.ppl, base.row.paper.ppl),
        "paper_delta_bleu": difference(result.row.paper.bleu, base.row.paper.bleu),
    }


def base_row(sweep: Sweep) -> Row:
    return next((row for row in sweep.rows if row.group == "base"), sweep.rows[0])


def summarize(row: Row, runs: Sequence[RunRecord], cells: Mapping[str, str]) -> RowResult:
    stats = {key: stat([measures(run.metrics)[key] for run in runs if run.done]) for key in MEASURES}
    return RowResult(row, dict(cells), tuple(runs), stats)


def build_table(sweep_path: str | Path, scale_name: str, runs: str | Path = "runs", out: str | Path = "results") -> Table:
    """Collect and publish the records, then summarise every row and test it against base."""
    sweep = load_sweep(sweep_path)
    scales = scales_for(sweep_path)
    if scale_name not in scales:
        raise ValueError(f"--scale {scale_name!r}: unknown; scales: {', '.join(scales)}")
    scale = scales[scale_name]
    records = collect(sweep, scale, runs, out)
    extra = varying_fields([paper_units(sweep, row) for row in sweep.rows])
    summaries = {}
    for row in sweep.rows:
        runs_of_row = [run for run in records if run.spec.row == row.id]
        summaries[row.id] = summarize(row, runs_of_row, paper_unit_cells(paper_units(sweep, row), extra))
    base = summaries[base_row(sweep).id]
    references = References(None)
    if base.done:
        references = load_references(base.done[0].spec.config.data, records_dir(out, sweep, scale) / REFERENCES_FILE)
    results = tuple(
        result if result is base else replace(result, significance=compare_to_base(base.runs, result.runs, references))
        for result in summaries.values()
    )
    return Table(sweep, scale, extra, base, results, header_lines(sweep, scale, records), notes(sweep, scale, base, results))


# --------------------------------------------------------------------------------------------------------------
# Header and notes
# --------------------------------------------------------------------------------------------------------------


def distinct(values: Sequence[Any], missing: str) -> str:
    found = sorted({str(v) for v in values if v not in (None, "")})
    return ", ".join(found) if found else missing


def describe_data(data: DataConfig) -> str:
    if data.dataset == "generated":
        name = Path(data.path).name if data.path else f"generated-{data.generated_pairs}-{data.generated_seed}"
        return f"generated ({name}, {data.generated_pairs} train pairs), vocabulary {data.vocab_size}"
    name = Path(data.path).name if data.path else data.dataset
    return f"{data.dataset} ({name}), vocabulary {data.vocab_size}"


def describe_hardware(run: RunRecord) -> str:
    device, cpu = run.metrics.get("device"), run.metrics.get("cpu_model")
    if device is None:
        return ""
    return f"{device} ({cpu})" if cpu else f"{device} (CPU model not recorded)"


def header_lines(sweep: Sweep, scale: Scale, records: Sequence[RunRecord]) -> tuple[tuple[str, str], ...]:
    done = [run for run in records if run.done]
    counts = {status: sum(run.status == status for run in records) for status in sorted({run.status for run in records})}
    return (
        ("Sweep", f"{sweep.name} ({sweep.path.name}): {sweep.description or 'no description'}; "
                  f"{len(sweep.rows)} rows, seeds {', '.join(map(str, sweep.seeds))}"),
        ("Scale", f"{scale.name}: {scale.description or 'no description'}; widths ÷ {scale.width_divisor}, "
                  f"{scale.describe_steps()}"),
        ("Scale settings", ", ".join(f"{key}={plain(value)}" for key, value in sorted(scale.settings.items())) or "none"),
        ("Data", distinct([describe_data(run.spec.config.data) for run in records], "none")),
        ("Hardware", distinct([describe_hardware(run) for run in done], "not recorded")),
        ("Code commit", distinct([run.metrics.get("commit") or run.meta.get("commit") or "unknown" for run in done], "unknown")),
        ("sacreBLEU", distinct([run.metrics.get("sacrebleu_signature") for run in done], "not recorded")),
        ("Tokenized BLEU", distinct([run.metrics.get("bleu_tok_signature") for run in done], "not recorded")),
        ("Averaged checkpoints", distinct([run.metrics.get("averaged_checkpoints") for run in done], "not recorded")),
        ("Runs", ", ".join(f"{count} {status}" for status, count in counts.items())),
    )


def sign_agreement(base: RowResult, results: Sequence[RowResult]) -> Optional[str]:
    """Which rows move dev BLEU the way the paper's did: the question a small scale can answer."""
    verdicts: dict[str, list[str]] = {"agrees": [], "disagrees": []}
    for result in results:
        delta = deltas(result, base)
        measured, paper = delta["delta_bleu"], delta["paper_delta_bleu"]
        if result is base or measured is None or not paper:
            continue
        p_value = result.significance.p_value
        label = result.row.id + (" (p ≥ 0.05)" if p_value is not None and p_value >= 0.05 else "")
        verdicts["agrees" if measured * paper > 0 else "disagrees"].append(label)
    judged = sum(map(len, verdicts.values()))
    if not judged:
        return None
    return (f"Sign of Δ BLEU against the paper's Δ (rows where both exist and the paper's is not 0): agrees for "
            f"{len(verdicts['agrees'])} of {judged} ({', '.join(verdicts['agrees']) or 'none'}); disagrees for "
            f"{', '.join(verdicts['disagrees']) or 'none'}.")


def notes(sweep: Sweep, scale: Scale, base: RowResult, results: Sequence[RowResult]) -> tuple[str, ...]:
    agreement = sign_agreement(base, results)
    base = base.row
    lines = [
        f"Hyperparameters are in the paper's units; a blank cell is {base.id}'s value. At scale {scale.name}, "
        f"widths are divided by {scale.width_divisor} and train steps multiplied by {scale.steps_scale:g}"
        + ("." if scale.max_steps is None else f", at most {scale.max_steps:,}."),
        "Measured on the dev set: PPL per word piece; BLEU is sacreBLEU, BLEU tok the paper's tokenized BLEU. "
        "Cells are mean ± sample std over the done seeds (std from two seeds on); seeds = done/expected, and "
        "runs not done are named and left out of the means.",
        f"Δ = row − {base.id}: measured means, and the paper's figures from {sweep.path.name} (blank where it prints none).",
        f"p: sacreBLEU paired bootstrap ({BOOTSTRAP_SAMPLES} resamples, seed {BOOTSTRAP_SEED}) of the row's dev BLEU "
        f"against {base.id}'s, on the dev hypotheses of the seed in brackets; equal BLEU gives p = 1.",
    ]
    problems: dict[str, list[str]] = {}
    for result in results:
        if result.significance.problem:
            problems.setdefault(result.significance.problem, []).append(result.row.id)
    lines += [f"p is blank for {', '.join(rows)}: {problem}." for problem, rows in problems.items()]
    return tuple(lines + ([agreement] if agreement else []))


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    key: str
    label: str  # Markdown
    tex: str  # TeX, used as is
    align: str = "r"


MEASURED_COLUMNS = (
    Column("dev_ppl", "PPL (dev)", "PPL (dev)"),
    Column("dev_bleu", "BLEU (dev)", "BLEU (dev)"),
    Column("dev_bleu_tok", "BLEU tok (dev)", "BLEU tok (dev)"),
    Column("params_m", "params (M)", r"params ($10^6$)"),
    Column("paper_ppl", "paper PPL", "paper PPL"),
    Column("paper_bleu", "paper BLEU", "paper BLEU"),
    Column("paper_params_m", "paper params (M)", r"paper params ($10^6$)"),
    Column("delta_ppl", "Δ PPL", r"$\Delta$ PPL"),
    Column("paper_delta_ppl", "paper Δ PPL", r"paper $\Delta$ PPL"),
    Column("delta_bleu", "Δ BLEU", r"$\Delta$ BLEU"),
    Column("paper_delta_bleu", "paper Δ BLEU", r"paper $\Delta$ BLEU"),
    Column("p_value", "p vs base", r"$p$ vs base"),
    Column("seeds", "seeds", "seeds", "l"),
    Column("steps", "steps", "steps"),
    Column("tokens_per_s", "tokens/s", "tokens/s"),
    Column("wall_min", "wall (min)", "wall (min)"),
)
SPREAD = ("dev_ppl", "dev_bleu", "dev_bleu_tok")  # shown as mean ± std; the other measures as means
DIGITS = {"dev_ppl": 2, "dev_bleu": 1, "dev_bleu_tok": 1, "params_m": 1, "steps": 0, "tokens_per_s": 0, "wall_min": 1}


def columns(table: Table) -> tuple[Column, ...]:
    leading = (Column("group", "", "", "l"), Column("row", "row", "row", "l"))
    paper = tuple(Column(key, label, tex, "l" if key == "positional" else "r") for key, label, tex in PAPER_COLUMNS)
    labels = [key.removeprefix("model.") for key in table.extra_columns]
    extra = tuple(Column(key, label, escape_tex(label), "l") for key, label in zip(table.extra_columns, labels))
    return leading + paper + extra + MEASURED_COLUMNS


def signed(value: Optional[float], digits: int) -> str:
    if value is None:
        return ""
    return f"{round(value, digits) + 0.0:+.{digits}f}"  # + 0.0: no "-0.0"


def fixed(value: Optional[float], digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def stat_cell(value: Optional[Stat], digits: int) -> str:
    if value is None:
        return "n/a"
    text = f"{value.mean:.{digits}f}"
    return text if value.std is None else f"{text} ± {value.std:.{digits}f}"


def seeds_cell(result: RowResult) -> str:
    others = [f"s{run.spec.seed} {run.status}" for run in result.runs if not run.done]
    text = f"{len(result.done)}/{len(result.runs)}"
    return f"{text} ({', '.join(others)})" if others else text


def p_cell(significance: Significance) -> str:
    if significance.p_value is None:
        return ""
    return f"{significance.p_value:.3f} (s{significance.seed})"


def display_cells(result: RowResult, base: RowResult, show_group: bool) -> dict[str, str]:
    """One row as the paper lays it out: hyperparameters equal to base's left blank."""
    cells = {"group": result.row.group if show_group else "", "row": result.row.id}
    for key, value in result.paper_units.items():
        cells[key] = value if result is base or value != base.paper_units[key] else ""
    for key, digits in DIGITS.items():
        if key in SPREAD:
            cells[key] = stat_cell(result.stats[key], digits) if result.done else result.status
        else:
            cells[key] = fixed(result.mean(key), digits)
    paper, delta = result.row.paper, deltas(result, base)
    cells.update({
        "paper_ppl": fixed(paper.ppl, 2), "paper_bleu": fixed(paper.bleu, 1),
        "paper_params_m": "" if paper.params_m is None else f"{paper.params_m:g}",
        "delta_ppl": signed(delta["delta_ppl"], 2), "paper_delta_ppl": signed(delta["paper_delta_ppl"], 2),
        "delta_bleu": signed(delta["delta_bleu"], 1), "paper_delta_bleu": signed(delta["paper_delta_bleu"], 1),
        "p_value": p_cell(result.significance), "seeds": seeds_cell(result),
    })
    return cells


def display_rows(table: Table) -> list[dict[str, str]]:
    groups = [result.row.group for result in table.rows]
    return [display_cells(result, table.base, i == 0 or groups[i] != groups[i - 1]) for i, result in enumerate(table.rows)]


def title(table: Table) -> str:
    return f"{table.sweep.name} at scale {table.scale.name}"


def escape_markdown(text: str) -> str:
    return text.replace("|", r"\|")


def render_markdown(table: Table) -> str:
    cols = columns(table)
    lines = [f"# {title(table)}", ""]
    lines += [f"- **{label}**: {escape_markdown(value)}" for label, value in table.header]
    lines += ["", "| " + " | ".join(c.label for c in cols) + " |",
              "|" + "|".join(":---" if c.align == "l" else "---:" for c in cols) + "|"]
    lines += ["| " + " | ".join(escape_markdown(cells[c.key]) for c in cols) + " |" for cells in display_rows(table)]
    lines += ["", "Notes:", ""] + [f"- {escape_markdown(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


TEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "±": r"$\pm$", "Δ": r"$\Delta$", "ε": r"$\epsilon$", "×": r"$\times$", "÷": r"$\div$", "−": r"$-$", "—": "---",
}


def escape_tex(text: str) -> str:
    return "".join(TEX_SPECIALS.get(char, char) for char in text)


def render_tex(table: Table) -> str:
    cols = columns(table)
    lines = [
        "% Generated by `ablate table` from run records; needs \\usepackage{booktabs} and \\usepackage{graphicx}.",
        r"\begin{table}[t]", r"\centering",
        r"\caption{" + escape_tex(title(table)) + "}",
        r"\resizebox{\textwidth}{!}{%",
        r"\begin{tabular}{" + "".join(c.align for c in cols) + "}",
        r"\toprule",
        " & ".join(c.tex for c in cols) + r" \\",
    ]
    for cells in display_rows(table):
        if cells["group"]:
            lines.append(r"\midrule")
        lines.append(" & ".join(escape_tex(cells[c.key]) for c in cols) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\par\smallskip\footnotesize"]
    lines += [escape_tex(f"{label}: {value}.") + r"\par" for label, value in table.header]
    lines += [escape_tex(note) + r"\par" for note in table.notes]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def csv_number(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4f}"


def csv_rows(table: Table) -> tuple[list[str], list[list[str]]]:
    """Every value in full (no blanks for base's values), means and stds apart, numbers with 4 decimals."""
    paper = [key for key, _, _ in PAPER_COLUMNS] + list(table.extra_columns)
    header = ["group", "row", *paper, "status", "seeds_done", "seeds_expected"]
    header += [name for key in MEASURES for name in (key, f"{key}_std")]
    header += ["delta_ppl", "delta_bleu", "p_value", "p_seed", "paper_ppl", "paper_bleu", "paper_params_m",
               "paper_delta_ppl", "paper_delta_bleu"]
    rows = []
    for result in table.rows:
        line = [result.row.group, result.row.id, *(result.paper_units[key] for key in paper),
                result.status, str(len(result.done)), str(len(result.runs))]
        for key in MEASURES:
            value = result.stats[key]
            line += ["", ""] if value is None else [csv_number(value.mean), csv_number(value.std)]
        significance, figures, delta = result.significance, result.row.paper, deltas(result, table.base)
        line += [csv_number(delta["delta_ppl"]), csv_number(delta["delta_bleu"]), csv_number(significance.p_value),
                 "" if significance.seed is None else str(significance.seed),
                 csv_number(figures.ppl), csv_number(figures.bleu), csv_number(figures.params_m),
                 csv_number(delta["paper_delta_ppl"]), csv_number(delta["paper_delta_bleu"])]
        rows.append(line)
    return header, rows


def render_csv(table: Table) -> str:
    header, rows = csv_rows(table)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_table(table: Table, out: str | Path) -> list[Path]:
    renderers = ((".md", render_markdown), (".csv", render_csv), (".tex", render_tex))
    return write_renderings(Path(out) / f"{table.sweep.name}_{table.scale.name}", table, renderers)


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def write_outputs(table: Table, out: str | Path) -> list[Path]:
    """The table, its plots, Table 2 when the sweep has base and big rows, the table as data, and the dashboard."""
    from .cost import build_cost_table, write_cost_table
    from .dashboard import write_dashboard, write_table_data
    from .plots import table_curves, write_plots

    paths = write_table(table, out)
    curves = table_curves(table)
    paths += write_plots(table, out, curves)
    cost = build_cost_table(table, out)
    if cost is not None:
        paths += write_cost_table(cost, out)
    paths.append(write_table_data(table, curves, out))
    paths.append(write_dashboard(out))  # every table under `out`, not only this one
    return paths


def cmd_table(args: argparse.Namespace) -> int:
    table = build_table(args.sweep, args.scale, runs=args.runs, out=args.out)
    for path in write_outputs(table, args.out):
        print(path)
    print(dict(table.header)["Runs"])
    return 0


def add_table_parser(sub: Any) -> None:
    parser = sub.add_parser("table", help="a sweep's table at one scale, from run records (Markdown, CSV, LaTeX), its plots, Table 2 and results/index.html")
    parser.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    parser.add_argument("--scale", required=True, help="scale preset: tiny, small or paper (sweeps/scales.yaml)")
    parser.add_argument("--runs", default="runs", help="root of run folders (default: runs/)")
    parser.add_argument("--out", default="results", help="where tables and published records go (default: results/)")
    parser.set_defaults(handler=cmd_table)
