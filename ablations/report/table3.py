"""A sweep's table at one scale (Table 3 and its like), from run records only: the model, header, notes, cells.

Nothing is trained and no clock is read. `build_table` collects the sweep's records and publishes the finished
ones (collect.py), summarises every row (mean ± std over done seeds) and tests it against base (the paired
bootstrap). The table is written as `<out>/<sweep>_<scale>.md`, `.csv` and `.tex`; `ablate table` (the
package's top) adds its plots, Table 2, the table as data and the dashboard. The same records give the same
bytes.

Provenance comes from the records: `device` and, where a run recorded them, `cpu_model` and `commit`
(in metrics.json or in config.yaml's meta).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from lightning_modules.config import SECTIONS, DataConfig, RunConfig

from ..records import write_renderings
from ..sweep import Scale, Sweep, paper_units
from .collect import SELECTION, RunRecord, collect_and_publish
from .contrasts import ContrastResult, markdown_lines, measure_contrasts, sentences
from .contrasts import note as contrast_note_line
from .convergence import earlier_line, not_learned, not_learned_line, plateau_line
from .render import (
    csv_number,
    csv_text,
    escape_markdown,
    escape_tex,
    fixed,
    interval,
    markdown_table,
    signed,
    tex_row,
    tex_table,
)
from .rows import MEASURES, RowResult, Stat, per_seed, summarize
from .stats import LARGE_BLEU, LARGE_PPL, MARGIN_BLEU, MARGIN_PPL_RELATIVE, PairedDelta
from .verdicts import difference, seed_plan_line, seeds_to_resolve, verdict_summary, with_verdicts, within_margin_line

# --------------------------------------------------------------------------------------------------------------
# The table as data
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    sweep: Sweep
    scale: Scale
    extra_columns: tuple[str, ...]  # dotted config fields beyond the paper's that vary across rows
    base: RowResult
    rows: tuple[RowResult, ...]  # base among them
    header: tuple[tuple[str, str], ...]  # (label, value)
    notes: tuple[str, ...]
    # The `--set`/`--data` overrides its runs were trained with, (key, value as shown): part of its title and name.
    overrides: tuple[tuple[str, str], ...] = ()
    contrasts: tuple[ContrastResult, ...] = ()  # the sweep's `contrasts:` whose rows both have runs

    @property
    def stem(self) -> str:
        """The file name of the table and of everything built from it: `<sweep>_<scale>`, then the overrides for runs
        trained with some, so that such a table never replaces the preset's own."""
        return with_overrides(f"{self.sweep.name}_{self.scale.name}", self.overrides)


def with_overrides(stem: str, overrides: Sequence[tuple[str, str]]) -> str:
    """`stem`, then each override as a file-name part: train.precision=32-true -> "_train-precision-32-true" (no dot:
    the writers add the suffixes)."""
    return stem + "".join(
        "_" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{key}-{value}").strip("-") for key, value in overrides
    )


def with_overrides_title(title: str, overrides: Sequence[tuple[str, str]]) -> str:
    """`title`, then " with key=value, ..." for runs trained with overrides."""
    shown = ", ".join(f"{key}={value}" for key, value in overrides)
    return title + (f" with {shown}" if shown else "")


def shown_overrides(sets: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A selection's overrides as a table names them, sorted: a corpus directory by its last component."""
    return tuple(
        (key, Path(str(value)).name if key.endswith(".path") else plain(value)) for key, value in sorted(sets.items())
    )


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
PAPER_FIELDS = {
    "model.N",
    "model.d_model",
    "model.d_ff",
    "model.h",
    "model.d_k",
    "model.d_v",
    "model.P_drop",
    "train.eps_ls",
    "model.positional",
    "train.max_steps",
}


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
        "N": str(model.N),
        "d_model": str(model.d_model),
        "d_ff": str(model.d_ff),
        "h": str(model.h),
        "d_k": str(model.head_dim_k),
        "d_v": str(model.head_dim_v),
        "P_drop": plain(model.P_drop),
        "eps_ls": plain(config.train.eps_ls),
        "positional": model.positional,
        "train_steps": steps_label(config.train.max_steps),
    }
    values = flat(config)
    cells.update({key: plain(values[key]) for key in extra})
    return cells


def measured_delta(result: RowResult, base: RowResult, key: str) -> Optional[float]:
    """The mean seed-paired difference (the centre of the table's interval: base's extra seeds do not shift it),
    else, when the row shares no seed with base, the difference of their means."""
    evidence = result.evidence and {"dev_bleu": result.evidence.bleu, "dev_ppl": result.evidence.ppl}[key]
    if evidence is not None and evidence.mean is not None:
        return evidence.mean
    return difference(result.mean(key), base.mean(key))


def deltas(result: RowResult, base: RowResult) -> dict[str, Optional[float]]:
    """Row minus base, measured and in the paper; nothing for base itself."""
    if result is base:
        return dict.fromkeys(("delta_ppl", "delta_bleu", "paper_delta_ppl", "paper_delta_bleu"))
    return {
        "delta_ppl": measured_delta(result, base, "dev_ppl"),
        "delta_bleu": measured_delta(result, base, "dev_bleu"),
        "paper_delta_ppl": difference(result.row.paper.ppl, base.row.paper.ppl),
        "paper_delta_bleu": difference(result.row.paper.bleu, base.row.paper.bleu),
    }


def build_table(
    sweep_path: str | Path, scale_name: str, runs: str | Path = "runs", out: str | Path = "results"
) -> Table:
    """Collect and publish the records, then summarise every row and test it against base."""
    sweep, scale, records = collect_and_publish(sweep_path, scale_name, runs, out)
    # The cells show each row as its runs trained: a `--set` that changes a hyperparameter changes its column.
    as_trained = {row.id: paper_units(sweep, row, scale, SELECTION.get().sets) for row in sweep.rows}
    extra = varying_fields(list(as_trained.values()))
    summaries = {}
    for row in sweep.rows:
        runs_of_row = [run for run in records if run.spec.row == row.id]
        summaries[row.id] = summarize(row, runs_of_row, paper_unit_cells(as_trained[row.id], extra))
    base = summaries[sweep.reference_row().id]
    results = with_verdicts(tuple(summaries.values()), base)
    base = next(result for result in results if result.row.id == base.row.id)
    present = [c for c in sweep.contrasts if summaries[c.row].runs and summaries[c.against].runs]
    contrasts = measure_contrasts(
        present, lambda row, key: per_seed(summaries[row], key), lambda row: summaries[row].mean("dev_ppl")
    )
    absent = [c for c in sweep.contrasts if c not in present]
    contrast_note = contrast_note_line(contrasts, absent)
    table_notes = notes(sweep, scale, base, results) + ((contrast_note,) if contrast_note else ())
    return Table(
        sweep, scale, extra, base, results, header_lines(sweep, scale, records), table_notes, contrasts=contrasts
    )


# --------------------------------------------------------------------------------------------------------------
# Header and notes
# --------------------------------------------------------------------------------------------------------------


def distinct(values: Sequence[Any], missing: str) -> str:
    found = sorted({str(v) for v in values if v not in (None, "")})
    return ", ".join(found) if found else missing


def describe_data(data: DataConfig) -> str:
    if data.dataset == "generated":
        from lightning_modules.data import generated_corpus_dir

        name = Path(data.path).name if data.path else generated_corpus_dir(data).name
        return f"generated ({name}, {data.generated_pairs} train pairs), vocabulary {data.vocab_size}"
    name = Path(data.path).name if data.path else data.dataset
    return f"{data.dataset} ({name}), vocabulary {data.vocab_size}"


def describe_recorded_worker(worker: dict[str, Any]) -> str:
    """A worker's device, its CPU model and, on a CPU, its torch threads: wall minutes and tokens/s depend on all
    three."""
    device, cpu, threads = (worker.get(key) for key in ("device", "cpu_model", "torch_threads"))
    if device is None:
        return ""
    what = cpu or "CPU model not recorded"
    if device == "cpu" and isinstance(threads, int):
        what += f", {threads} thread" + ("" if threads == 1 else "s")
    return f"{device} ({what})"


def describe_hardware(run: RunRecord) -> str:
    """The worker the run trained on; a run resumed on other kinds of worker names each, in order ("a then b"),
    since its minutes are theirs together."""
    workers = list(
        dict.fromkeys(describe_recorded_worker(worker) for worker in run.metrics.get("attempt_workers") or [])
    )
    return " then ".join(workers) if len(workers) > 1 else describe_recorded_worker(run.metrics)


def describe_hardware_mix(done: Sequence[RunRecord]) -> str:
    """Each machine the finished runs trained on and how many runs each trained, so that a table mixing machines or
    thread counts says how much (its scores pair by seed; its minutes and tokens/s are per machine)."""
    counts = Counter(describe_hardware(run) for run in done)
    counts.pop("", None)
    if not counts:
        return "not recorded"
    return ", ".join(f"{name}: {count} run{'' if count == 1 else 's'}" for name, count in sorted(counts.items()))


def describe_commits(done: Sequence[RunRecord]) -> str:
    """The commits of the code that trained the finished runs, each attempt's; "unknown" for a run that names none."""
    return distinct([commit for run in done for commit in run.commits or ("unknown",)], "unknown")


def header_lines(sweep: Sweep, scale: Scale, records: Sequence[RunRecord]) -> tuple[tuple[str, str], ...]:
    done = [run for run in records if run.done]
    counts = {
        status: sum(run.status == status for run in records) for status in sorted({run.status for run in records})
    }
    return (
        (
            "Sweep",
            f"{sweep.name} ({sweep.path.name}): {sweep.description or 'no description'}; "
            f"{len(sweep.rows)} rows, {scale.describe_seeds(sweep)}",
        ),
        (
            "Scale",
            f"{scale.name}: {scale.description or 'no description'}; widths ÷ {scale.width_divisor}, "
            f"{scale.describe_steps()}",
        ),
        (
            "Scale settings",
            ", ".join(f"{key}={plain(value)}" for key, value in sorted(scale.settings.items())) or "none",
        ),
        ("Data", distinct([describe_data(run.spec.config.data) for run in records], "none")),
        ("Hardware", describe_hardware_mix(done)),
        ("Code commit", describe_commits(done)),
        ("sacreBLEU", distinct([run.metrics.get("sacrebleu_signature") for run in done], "not recorded")),
        ("Tokenized BLEU", distinct([run.metrics.get("bleu_tok_signature") for run in done], "not recorded")),
        ("Averaged checkpoints", distinct([run.metrics.get("averaged_checkpoints") for run in done], "not recorded")),
        ("Runs", ", ".join(f"{count} {status}" for status, count in counts.items())),
    )


def narrow_heads(results: Sequence[RowResult]) -> Optional[str]:
    """Rows whose heads this scale makes narrower than 4 dimensions: they test tiny heads, not the paper's knob."""
    narrow = []
    for result in results:
        if not result.runs:
            continue
        model = result.runs[0].spec.config.model
        if min(model.head_dim_k, model.head_dim_v) < 4:
            narrow.append(f"{result.row.id} (d_k {model.head_dim_k}, d_v {model.head_dim_v})")
    if not narrow:
        return None
    return f"Degenerate at this scale, heads narrower than 4 dimensions: {', '.join(narrow)}."


def notes(sweep: Sweep, scale: Scale, base: RowResult, results: Sequence[RowResult]) -> tuple[str, ...]:
    verdict_lines = verdict_summary(base, results)
    base_result, base = base, base.row
    lines = [
        f"Hyperparameters are in the paper's units; a blank cell is {base.id}'s value. At scale {scale.name}, "
        f"widths are divided by {scale.width_divisor} and train steps multiplied by {scale.steps_scale:g}"
        + ("." if scale.max_steps is None else f", at most {scale.max_steps:,}."),
        "Measured on the dev set: PPL per word piece (a row's PPL cells to the decimals that show its finest spread, "
        "its std over seeds or its Δ interval's half-width, or base's on one seed, to one significant digit, from 2 "
        "to 4); BLEU is sacreBLEU, BLEU tok the paper's tokenized BLEU. "
        "Cells are mean ± sample std over the done seeds (std from two seeds on); seeds = done/expected, and "
        "runs not done are named and left out of the means.",
        f"Δ = row − {base.id}: measured, the mean over the seeds both have of the per-seed differences (the centre of "
        f"the interval: {base.id}'s extra seeds do not shift it; the difference of the means where they share no "
        f"seed), and the paper's figures from {sweep.path.name} (blank where it prints none).",
        f"Δ BLEU / Δ PPL 95 % CI: a t-interval over the seed-paired differences row − {base.id} (seeds are common "
        "random numbers: the same data order and draws in every row); one seed gives no interval.",
        f"Verdict against the paper: its large effects (|Δ BLEU| ≥ {LARGE_BLEU:g} or |Δ PPL| ≥ {LARGE_PPL:g}) are judged "
        "on PPL where its PPL effect is large, else on BLEU: agrees / disagrees when the paired t-test, Holm-corrected "
        "over all those rows in the table (familywise 5 %; a row with fewer than 2 seeds counts at p = 1, so a row's "
        "verdict stands as other rows' runs land), rejects no difference with the mean on the paper's side / the other side; "
        f"its small effects are equivalent when TOST at 5 % passes for BLEU (±{MARGIN_BLEU:g}) and PPL "
        f"(±{100 * MARGIN_PPL_RELATIVE:g} % of {base.id}'s), differs when either interval excludes 0; else unresolved.",
    ]
    lines += verdict_lines
    within = within_margin_line(results, base_result)
    plan = seed_plan_line(results)
    lines += [line for line in (within, plan) if line]
    plateau = plateau_line(base_result)
    earlier = earlier_line(base_result, results)
    heads = narrow_heads(results)
    stalled = not_learned_line(results)
    return tuple(lines + [line for line in (plateau, earlier, heads, stalled) if line])


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
    Column("delta_bleu_ci", "Δ BLEU 95 % CI", r"$\Delta$ BLEU 95\,\% CI"),
    Column("delta_ppl_ci", "Δ PPL 95 % CI", r"$\Delta$ PPL 95\,\% CI"),
    Column("verdict", "verdict", "verdict", "l"),
    Column("seeds", "seeds", "seeds", "l"),
    Column("steps", "steps", "steps"),
    Column("tokens_per_s", "tokens/s", "tokens/s"),
    Column("wall_min", "wall (min)", "wall (min)"),
)
SPREAD = ("dev_ppl", "dev_bleu", "dev_bleu_tok")  # shown as mean ± std; the other measures as means
# Decimals per measured cell; dev PPL's are the row's own (RowResult.ppl_digits).
DIGITS = {"dev_bleu": 1, "dev_bleu_tok": 1, "params_m": 1, "steps": 0, "tokens_per_s": 0, "wall_min": 1}


def columns(table: Table) -> tuple[Column, ...]:
    leading = (Column("group", "", "", "l"), Column("row", "row", "row", "l"))
    paper = tuple(Column(key, label, tex, "l" if key == "positional" else "r") for key, label, tex in PAPER_COLUMNS)
    labels = [key.removeprefix("model.") for key in table.extra_columns]
    extra = tuple(Column(key, label, escape_tex(label), "l") for key, label in zip(table.extra_columns, labels))
    return leading + paper + extra + MEASURED_COLUMNS


def stat_cell(value: Optional[Stat], digits: int) -> str:
    if value is None:
        return "n/a"
    text = f"{value.mean:.{digits}f}"
    return text if value.std is None else f"{text} ± {value.std:.{digits}f}"


def seeds_cell(result: RowResult) -> str:
    others = [f"s{run.spec.seed} {run.status}" for run in result.runs if not run.done]
    text = f"{len(result.done)}/{len(result.runs)}"
    return f"{text} ({', '.join(others)})" if others else text


def interval_cell(delta: Optional[PairedDelta], digits: int) -> str:
    return interval(None if delta is None else delta.ci, digits)


def verdict_cell(result: RowResult) -> str:
    if result.judgement is None:
        return ""
    on = result.judgement.judged_on
    text = result.judgement.verdict + (f" ({'PPL' if on == 'ppl' else 'BLEU'})" if on else "")
    return f"{text}, interim" if result.interim else text


def display_cells(result: RowResult, base: RowResult, show_group: bool) -> dict[str, str]:
    """One row as the paper lays it out: hyperparameters equal to base's left blank."""
    cells = {"group": result.row.group if show_group else "", "row": result.row.id}
    for key, value in result.paper_units.items():
        cells[key] = value if result is base or value != base.paper_units[key] else ""
    ppl_digits = result.ppl_digits(base)
    for key, digits in {"dev_ppl": ppl_digits, **DIGITS}.items():
        if key in SPREAD:
            cells[key] = stat_cell(result.stats[key], digits) if result.done else result.status
        else:
            cells[key] = fixed(result.mean(key), digits)
    paper, delta = result.row.paper, deltas(result, base)
    cells.update(
        {
            "paper_ppl": fixed(paper.ppl, 2),
            "paper_bleu": fixed(paper.bleu, 1),
            "paper_params_m": "" if paper.params_m is None else f"{paper.params_m:g}",
            "delta_ppl": signed(delta["delta_ppl"], ppl_digits),
            "paper_delta_ppl": signed(delta["paper_delta_ppl"], 2),
            "delta_bleu": signed(delta["delta_bleu"], 1),
            "paper_delta_bleu": signed(delta["paper_delta_bleu"], 1),
            "delta_bleu_ci": interval_cell(result.evidence and result.evidence.bleu, 1),
            "delta_ppl_ci": interval_cell(result.evidence and result.evidence.ppl, ppl_digits),
            "verdict": verdict_cell(result),
            "seeds": seeds_cell(result),
        }
    )
    return cells


def display_rows(table: Table) -> list[dict[str, str]]:
    groups = [result.row.group for result in table.rows]
    return [
        display_cells(result, table.base, i == 0 or groups[i] != groups[i - 1]) for i, result in enumerate(table.rows)
    ]


def title(table: Table) -> str:
    """The sweep and scale, and the overrides its runs were trained with."""
    return with_overrides_title(f"{table.sweep.name} at scale {table.scale.name}", table.overrides)


def render_markdown(table: Table) -> str:
    cols = columns(table)
    lines = [f"# {title(table)}", ""]
    lines += [f"- **{label}**: {escape_markdown(value)}" for label, value in table.header]
    lines += [""] + markdown_table(
        [c.label for c in cols],
        [c.align for c in cols],
        ([escape_markdown(cells[c.key]) for c in cols] for cells in display_rows(table)),
    )
    lines += markdown_lines(table.contrasts)
    lines += ["", "Notes:", ""] + [f"- {escape_markdown(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def render_tex(table: Table) -> str:
    cols = columns(table)
    body = []
    for cells in display_rows(table):
        if cells["group"]:
            body.append(r"\midrule")
        body.append(tex_row(escape_tex(cells[c.key]) for c in cols))
    footnotes = [f"{label}: {value}." for label, value in table.header] + list(table.notes)
    footnotes += sentences(table.contrasts)
    return tex_table(title(table), "".join(c.align for c in cols), [c.tex for c in cols], body, footnotes, resize=True)


def csv_rows(table: Table) -> tuple[list[str], list[list[str]]]:
    """Every value in full (no blanks for base's values), means and stds apart, numbers with 4 decimals."""
    paper = [key for key, _, _ in PAPER_COLUMNS] + list(table.extra_columns)
    header = ["group", "row", *paper, "status", "seeds_done", "seeds_expected"]
    header += [name for key in MEASURES for name in (key, f"{key}_std")]
    header += [
        "delta_ppl",
        "delta_bleu",
        "delta_bleu_ci_lo",
        "delta_bleu_ci_hi",
        "delta_ppl_ci_lo",
        "delta_ppl_ci_hi",
        "paired_seeds",
        "verdict",
        "judged_on",
        "interim",
        "paper_ppl",
        "paper_bleu",
        "paper_params_m",
        "paper_delta_ppl",
        "paper_delta_bleu",
    ]
    rows = []
    for result in table.rows:
        line = [
            result.row.group,
            result.row.id,
            *(result.paper_units[key] for key in paper),
            result.status,
            str(len(result.done)),
            str(len(result.runs)),
        ]
        for key in MEASURES:
            value = result.stats[key]
            line += ["", ""] if value is None else [csv_number(value.mean), csv_number(value.std)]
        figures, delta, evidence = result.row.paper, deltas(result, table.base), result.evidence
        line += [
            csv_number(delta["delta_ppl"]),
            csv_number(delta["delta_bleu"]),
            *interval_numbers(evidence and evidence.bleu),
            *interval_numbers(evidence and evidence.ppl),
            "" if evidence is None else " ".join(map(str, evidence.bleu.seeds)),
            "" if result.judgement is None else result.judgement.verdict,
            "" if result.judgement is None or result.judgement.judged_on is None else result.judgement.judged_on,
            "" if result.judgement is None else str(result.interim).lower(),
            csv_number(figures.ppl),
            csv_number(figures.bleu),
            csv_number(figures.params_m),
            csv_number(delta["paper_delta_ppl"]),
            csv_number(delta["paper_delta_bleu"]),
        ]
        rows.append(line)
    return header, rows


def interval_numbers(delta: Optional[PairedDelta]) -> list[str]:
    if delta is None or delta.ci is None:
        return ["", ""]
    return [csv_number(delta.ci[0]), csv_number(delta.ci[1])]


def row_statistics(table: Table) -> list[dict[str, Any]]:
    """Per row, the evidence behind its verdict: what results/<sweep>_<scale>.json carries as `statistics`."""
    out = []
    for result in table.rows:
        if result.evidence is None:
            continue
        judgement = result.judgement
        out.append(
            {
                "row": result.row.id,
                "verdict": None if judgement is None else judgement.verdict,
                "judged_on": None if judgement is None else judgement.judged_on,
                "interim": result.interim,
                "p_holm": None if judgement is None else judgement.p_holm,
                "p_equivalence": None if judgement is None else judgement.p_equivalence,
                "delta_bleu": result.evidence.bleu.mean,
                "delta_ppl": result.evidence.ppl.mean,
                "delta_bleu_ci": None if result.evidence.bleu.ci is None else list(result.evidence.bleu.ci),
                "delta_ppl_ci": None if result.evidence.ppl.ci is None else list(result.evidence.ppl.ci),
                "delta_bleu_per_seed": result.evidence.bleu.by_seed(),
                "delta_ppl_per_seed": result.evidence.ppl.by_seed(),
                "seeds": list(result.evidence.bleu.seeds),
                "seeds_expected": len(result.runs),
                "seeds_not_learned": sorted(run.spec.seed for run in not_learned(result)),
                "seeds_to_resolve": seeds_to_resolve(result),
                "differs_within_margin": None if judgement is None else judgement.within_margin,
            }
        )
    return out


def render_csv(table: Table) -> str:
    return csv_text(*csv_rows(table))


def write_table(table: Table, out: str | Path) -> list[Path]:
    renderers = ((".md", render_markdown), (".csv", render_csv), (".tex", render_tex))
    return write_renderings(Path(out) / table.stem, table, renderers)
