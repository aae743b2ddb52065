"""Table 4 at one scale: constituency parsing F1 from run records, beside the rows the paper prints.

A parsing sweep (sweeps/table4.yaml: its runs' `data.task` is `parsing`) is tabled here instead of in Table 3's
layout: per sweep row, test F1 (EVALB labelled brackets, COLLINS.prm) as mean ± std over the done seeds with the
95 % t-interval of the mean and every seed's value, dev F1, test precision and recall, complete matches, and how
many outputs were invalid and how they were repaired; then the paper's printed Table 4, none of it run here. The
table reuses Table 3's model (table3.Table and RowResult: the records collected and published by collect.py) so
that `ablate table`'s selection, the curves and the dashboard's per-run sections work unchanged; it is written as
`<out>/<sweep>_<scale>.{md,csv,tex}` and, for the dashboard, `.json`. Nothing is trained and no clock is read: the
same records give the same bytes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from lightning_modules.config import DataConfig

from ..records import run_seconds, write_atomic, write_renderings
from ..sweep import Scale, Sweep, expand
from .collect import RunRecord, collect_and_publish
from .dashboard import DATA_KIND, run_data
from .render import csv_number, csv_text, escape_markdown, escape_tex, fixed, markdown_table, tex_row, tex_table
from .rows import RowResult, stat
from .stats import PairedDelta, seed_interval
from .table3 import Table, describe_commits, describe_hardware_mix, distinct, plain, seeds_cell, stat_cell
from .table3 import title as sweep_title

# The paper's Table 4 as printed: (parser, training, WSJ section 23 F1). Only the Transformer's WSJ-only row has a
# counterpart in the sweep; the semi-supervised one trained on ~17M sentences this framework does not have.
PAPER_TABLE4 = (
    ("Vinyals & Kaiser et al. (2014)", "WSJ only, discriminative", 88.3),
    ("Petrov et al. (2006)", "WSJ only, discriminative", 90.4),
    ("Zhu et al. (2013)", "WSJ only, discriminative", 90.4),
    ("Dyer et al. (2016)", "WSJ only, discriminative", 91.7),
    ("Transformer (4 layers)", "WSJ only, discriminative", 91.3),
    ("Zhu et al. (2013)", "semi-supervised", 91.3),
    ("Huang & Harper (2009)", "semi-supervised", 91.3),
    ("McClosky et al. (2006)", "semi-supervised", 92.1),
    ("Vinyals & Kaiser et al. (2014)", "semi-supervised", 92.1),
    ("Transformer (4 layers)", "semi-supervised", 92.7),
    ("Luong et al. (2015)", "multi-task", 93.0),
    ("Dyer et al. (2016)", "generative", 93.3),
)
NOT_RUN = {("Transformer (4 layers)", "semi-supervised"): "not runnable here: ~17M sentences, 32K vocabulary"}

# A run's measured values, in display units.
MEASURES = ("test_f1", "dev_f1", "test_precision", "test_recall", "test_exact", "test_invalid", "steps", "wall_min")
DIGITS = {"test_f1": 1, "dev_f1": 1, "test_precision": 1, "test_recall": 1, "test_exact": 1, "test_invalid": 1}
DIGITS.update({"steps": 0, "wall_min": 1})
SPREAD = ("test_f1", "dev_f1")  # shown as mean ± std; the others as means


def is_parsing(sweep: Sweep, scale: Scale) -> bool:
    """Whether the sweep's runs at this scale parse (its first run's `data.task`): then this is its table."""
    return expand(sweep, scale, seeds=sweep.seeds[:1], rows=[sweep.rows[0].id])[0].config.data.task == "parsing"


def measures(metrics: Mapping[str, Any]) -> dict[str, Optional[float]]:
    wall = run_seconds(metrics)
    values = {key: metrics.get(key) for key in MEASURES if key != "wall_min"}
    return {**values, "wall_min": None if wall is None else wall / 60}


def summarize(row, runs: Sequence[RunRecord]) -> RowResult:
    done = [run for run in runs if run.done]
    stats = {key: stat([measures(run.metrics)[key] for run in done]) for key in MEASURES}
    return RowResult(row, {}, tuple(runs), stats)


def per_seed(result: RowResult, key: str) -> dict[int, float]:
    values = {run.spec.seed: run.metrics.get(key) for run in result.done}
    return {seed: float(v) for seed, v in values.items() if v is not None and math.isfinite(v)}


def interval(result: RowResult) -> PairedDelta:
    return seed_interval(per_seed(result, "test_f1"))


def repairs(result: RowResult) -> dict[str, int]:
    """Each repair kind summed over the row's done seeds' test outputs (metrics.json's `test_repairs`)."""
    totals: dict[str, int] = {}
    for run in result.done:
        for kind, count in (run.metrics.get("test_repairs") or {}).items():
            totals[kind] = totals.get(kind, 0) + int(count)
    return totals


def build_table(
    sweep_path: str | Path, scale_name: str, runs: str | Path = "runs", out: str | Path = "results"
) -> Table:
    """Collect and publish the records, then summarise every row: Table 3's model in Table 4's terms."""
    sweep, scale, records = collect_and_publish(sweep_path, scale_name, runs, out)
    results = tuple(summarize(row, [run for run in records if run.spec.row == row.id]) for row in sweep.rows)
    reference = sweep.reference_row().id
    base = next(result for result in results if result.row.id == reference)
    return Table(sweep, scale, (), base, results, header_lines(sweep, scale, records), notes(scale, results))


# --------------------------------------------------------------------------------------------------------------
# Header and notes
# --------------------------------------------------------------------------------------------------------------


def describe_data(data: DataConfig) -> str:
    if data.dataset == "treebank":
        from lightning_modules.data.treebank import BUILTIN_DEV_TREES, BUILTIN_TEST_TREES, builtin_treebank_dir

        return (
            f"built-in treebank ({builtin_treebank_dir(data).name}: {data.generated_pairs:,} train, "
            f"{BUILTIN_DEV_TREES:,} dev, {BUILTIN_TEST_TREES:,} test trees), shared vocabulary {data.vocab_size:,}"
        )
    return f"{data.dataset} ({Path(data.path).name}), shared vocabulary {data.vocab_size:,}"


def describe_protocol(run: RunRecord) -> str:
    config = run.spec.config
    ev, cap = config.eval, config.model.max_positions - 1
    sentences = run.metrics.get("test_sentences")
    scored = f"the test split's {sentences:,} sentences" if sentences is not None else "the test split"
    return (
        f"beam {ev.beam_size}, α {ev.length_penalty:g}, maximum output length = input + {ev.max_len_offset} word "
        f"pieces (at most {cap}: max_positions − 1), checkpoints averaged: {ev.average_last or 'none'}; F1 over "
        f"{scored}, every output scored (invalid ones after repair)"
    )


def header_lines(sweep: Sweep, scale: Scale, records: Sequence[RunRecord]) -> tuple[tuple[str, str], ...]:
    done = [run for run in records if run.done]
    counts = {status: sum(run.status == status for run in records) for status in sorted({r.status for r in records})}
    return (
        (
            "Sweep",
            f"{sweep.name} ({sweep.path.name}): {sweep.description or 'no description'}; "
            f"{len(sweep.rows)} rows, seeds {', '.join(map(str, sweep.seeds))}",
        ),
        (
            "Scale",
            f"{scale.name}: {scale.description or 'no description'}; widths ÷ {scale.width_divisor}, "
            f"{scale.describe_steps()}",
        ),
        ("Scale settings", ", ".join(f"{k}={plain(v)}" for k, v in sorted(scale.settings.items())) or "none"),
        ("Data", distinct([describe_data(run.spec.config.data) for run in records], "none")),
        ("Protocol", distinct([describe_protocol(run) for run in done], "no finished run")),
        ("Scoring", distinct([run.metrics.get("parse_signature") for run in done], "not recorded")),
        ("Hardware", describe_hardware_mix(done)),
        ("Code commit", describe_commits(done)),
        ("Runs", ", ".join(f"{count} {status}" for status, count in counts.items())),
    )


def describe_repairs(totals: Mapping[str, int]) -> str:
    parts = [f"{kind.replace('_', ' ')} {count}" for kind, count in totals.items() if count]
    return ", ".join(parts) or "none"


def notes(scale: Scale, results: Sequence[RowResult]) -> tuple[str, ...]:
    lines = [
        "The paper's F1 is on WSJ section 23; the measured F1 is on the Data line's test split, so the two stand side "
        "by side and are not compared unless the data is the WSJ.",
        "F1, precision (P) and recall (R): labelled brackets as EVALB counts them with COLLINS.prm (punctuation "
        "deleted, ADVP = PRT, TOP and part-of-speech tags not scored), over the whole split (micro); exact: sentences "
        "whose brackets all match, of the test split.",
        "Cells are means over the done seeds (F1: mean ± sample std, from two seeds on); test F1 95 % CI: the "
        "t-interval of the mean over seeds (one seed gives none); per seed: each seed's test F1.",
        "Invalid: test outputs that were not one well-formed tree over their sentence (unbalanced or mislabelled "
        "brackets, too many or too few leaves, several top constituents), repaired into one by "
        "lightning_modules.parsing.trees.from_target and scored, never dropped; mean count per seed.",
        f"At scale {scale.name}, widths are divided by {scale.width_divisor} and train steps multiplied by "
        f"{scale.steps_scale:g}" + ("." if scale.max_steps is None else f", at most {scale.max_steps:,}."),
        "Rows marked 'paper only' are the paper's Table 4 as printed, with no run here.",
    ]
    for result in results:
        if result.done:
            lines.append(
                f"{result.row.id}: repairs of the test outputs, summed over {len(result.done)} seeds: "
                f"{describe_repairs(repairs(result))}."
            )
    return tuple(lines)


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------

COLUMNS = (  # key, Markdown label, TeX label, alignment
    ("parser", "parser", "parser", "l"),
    ("training", "training", "training", "l"),
    ("paper_f1", "paper F1 (WSJ 23)", "paper F1 (WSJ 23)", "r"),
    ("row", "row", "row", "l"),
    ("test_f1", "test F1", "test F1", "r"),
    ("test_f1_ci", "test F1 95 % CI", r"test F1 95\,\% CI", "r"),
    ("per_seed", "per seed", "per seed", "l"),
    ("dev_f1", "dev F1", "dev F1", "r"),
    ("test_precision", "test P", "test P", "r"),
    ("test_recall", "test R", "test R", "r"),
    ("test_exact", "exact", "exact", "r"),
    ("test_invalid", "invalid", "invalid", "r"),
    ("seeds", "seeds", "seeds", "l"),
    ("steps", "steps", "steps", "r"),
    ("wall_min", "wall (min)", "wall (min)", "r"),
)


def training_cell(result: RowResult) -> str:
    if not result.runs:
        return ""
    data = result.runs[0].spec.config.data
    if data.dataset == "treebank":
        return f"built-in treebank, {data.generated_pairs:,} trees"
    return f"{data.dataset} {Path(data.path).name}"


def measured_cells(result: RowResult) -> dict[str, str]:
    ci = interval(result).ci
    cells = {
        "parser": "Transformer (4 layers), measured",
        "training": training_cell(result),
        "paper_f1": fixed(result.row.paper.f1, 1),
        "row": result.row.id,
        "test_f1_ci": "" if ci is None else f"[{ci[0]:.1f}, {ci[1]:.1f}]",
        "per_seed": ", ".join(f"s{seed} {value:.1f}" for seed, value in sorted(per_seed(result, "test_f1").items())),
        "seeds": seeds_cell(result),
    }
    for key, digits in DIGITS.items():
        if key in SPREAD:
            cells[key] = stat_cell(result.stats[key], digits) if result.done else result.status
        else:
            cells[key] = fixed(result.mean(key), digits)
    return cells


def paper_cells(parser: str, training: str, f1: float) -> dict[str, str]:
    cells = {key: "" for key, *_ in COLUMNS}
    cells.update({"parser": parser, "training": training, "paper_f1": f"{f1:.1f}", "row": "paper only"})
    if (parser, training) in NOT_RUN:
        cells["seeds"] = NOT_RUN[parser, training]
    return cells


def display_rows(table: Table) -> list[dict[str, str]]:
    rows = [measured_cells(result) for result in table.rows]
    return rows + [paper_cells(*printed) for printed in PAPER_TABLE4]


def title(table: Table) -> str:
    return f"{sweep_title(table)}: constituency parsing (Table 4)"


def render_markdown(table: Table) -> str:
    lines = [f"# {title(table)}", ""]
    lines += [f"- **{label}**: {escape_markdown(value)}" for label, value in table.header]
    lines += [""] + markdown_table(
        [label for _, label, _, _ in COLUMNS],
        [align for *_, align in COLUMNS],
        ([escape_markdown(cells[key]) for key, *_ in COLUMNS] for cells in display_rows(table)),
    )
    lines += ["", "Notes:", ""] + [f"- {escape_markdown(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def render_tex(table: Table) -> str:
    body = []
    for i, cells in enumerate(display_rows(table)):
        if i == len(table.rows):
            body.append(r"\midrule")
        body.append(tex_row(escape_tex(cells[key]) for key, *_ in COLUMNS))
    footnotes = [f"{label}: {value}." for label, value in table.header] + list(table.notes)
    aligns = "".join(align for *_, align in COLUMNS)
    return tex_table(title(table), aligns, [tex for _, _, tex, _ in COLUMNS], body, footnotes, resize=True)


def render_csv(table: Table) -> str:
    """Every number in full: means and stds apart, the interval's ends, per-seed values, repairs by kind."""
    header = ["parser", "training", "paper_f1", "row", "status", "seeds_done", "seeds_expected"]
    header += [name for key in MEASURES for name in (key, f"{key}_std")]
    header += ["test_f1_ci_lo", "test_f1_ci_hi", "test_f1_per_seed", "test_repairs"]
    rows = []
    for result in table.rows:
        cells, ci = measured_cells(result), interval(result).ci
        line = [cells["parser"], cells["training"], csv_number(result.row.paper.f1), result.row.id, result.status]
        line += [str(len(result.done)), str(len(result.runs))]
        for key in MEASURES:
            value = result.stats[key]
            line += ["", ""] if value is None else [csv_number(value.mean), csv_number(value.std)]
        seeds = per_seed(result, "test_f1")
        line += ["", ""] if ci is None else [csv_number(ci[0]), csv_number(ci[1])]
        line += [" ".join(f"s{s}:{csv_number(v)}" for s, v in sorted(seeds.items()))]
        line += [" ".join(f"{kind}:{count}" for kind, count in repairs(result).items())]
        rows.append(line)
    for parser, training, f1 in PAPER_TABLE4:
        status = NOT_RUN.get((parser, training), "paper only")
        rows.append([parser, training, csv_number(f1), "", status] + [""] * (len(header) - 5))
    return csv_text(header, rows)


def write_table(table: Table, out: str | Path) -> list[Path]:
    renderers = ((".md", render_markdown), (".csv", render_csv), (".tex", render_tex))
    return write_renderings(Path(out) / table.stem, table, renderers)


def table_data(table: Table, curves: Mapping[str, Mapping[str, list]], out: str | Path) -> dict[str, Any]:
    """The table in the dashboard's format (dashboard.table_data's keys), without plots: it draws none."""
    name = table.stem
    statistics = []
    for result in table.rows:
        delta = interval(result)
        statistics.append(
            {
                "row": result.row.id,
                "test_f1": delta.mean,
                "test_f1_ci": None if delta.ci is None else list(delta.ci),
                "seeds": list(delta.seeds),
                "test_repairs": repairs(result),
            }
        )
    return {
        "kind": DATA_KIND,
        "id": name,
        "title": title(table),
        "base_row": table.base.row.id,
        "header": [list(pair) for pair in table.header],
        "notes": list(table.notes),
        "columns": [{"key": key, "label": label, "align": align} for key, label, _, align in COLUMNS],
        "rows": [[cells[key] for key, *_ in COLUMNS] for cells in display_rows(table)],
        "statistics": statistics,
        "files": [f"{name}{suffix}" for suffix in (".md", ".csv", ".tex")],
        "plots": [],
        "runs": [run_data(run, table, curves, Path(out)) for result in table.rows for run in result.runs],
    }


def write_table_data(table: Table, curves: Mapping[str, Mapping[str, list]], out: str | Path) -> Path:
    path = Path(out) / f"{table.stem}.json"
    write_atomic(path, json.dumps(table_data(table, curves, out), sort_keys=True, ensure_ascii=False) + "\n")
    return path
