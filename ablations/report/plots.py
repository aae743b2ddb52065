"""A sweep's plots, from the same records as its table: `ablate table` writes them beside it.

Three figures per sweep and scale, each as PNG and SVG under `<out>/plots/`:

* `<sweep>_<scale>_delta_bleu`: dev BLEU minus base's per row (mean over done seeds, each seed a dot, the 95 %
  t-interval over seed-paired differences a line), beside the paper's Δ in a panel of its own (the scales differ by
  an order of magnitude at small budgets), each row's verdict against the paper at the right;
* `<sweep>_<scale>_dev_ppl`: dev perplexity against training steps, one panel per row group (base's own group
  too, for its other rows), base in grey; a run shorter than one validation is its final dev PPL at its steps;
* `<sweep>_<scale>_params_bleu`: parameters against dev BLEU per row, ours beside the paper's.

A row without a done run is drawn as a labelled gap ("missing", "failed", ...), never as a zero. The bytes
depend only on the records: matplotlib's dates, software versions and random SVG ids are switched off.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..records import write_atomic_bytes
from .collect import PUBLISHED, RunRecord, read_curves
from .table3 import Table, deltas, verdict_cell, with_overrides_title

PLOT_KINDS = ("delta_bleu", "dev_ppl", "params_bleu")
FORMATS = ("png", "svg")
# Each backend stamps its own metadata; None removes the entry so that a rebuild gives the same bytes.
METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
HASH_SALT = "attention-ablations"  # SVG element ids derive from this salt instead of a random one
DPI = 100


# --------------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------------


def plot_title(table: Table, what: str) -> str:
    """A plot's title names the runs as its table does, overrides included: a variant's plot must not read as the
    preset's."""
    return with_overrides_title(f"{table.sweep.name} at {table.scale.name}", table.overrides) + f": {what}"


def pyplot():
    """matplotlib, imported only when plots are drawn, with a file-only backend and deterministic output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": HASH_SALT, "svg.fonttype": "path", "font.size": 9, "axes.titlesize": 10})
    return plt


def plot_stem(table: Table, kind: str) -> str:
    return f"{table.stem}_{kind}"


def draw_delta_bleu(plt, table: Table):
    rows = [result for result in table.rows if result is not table.base]
    labels = [result.row.id for result in rows]
    positions = list(range(len(rows)))[::-1]  # first row on top, as in the table
    figure, (ours, paper) = plt.subplots(1, 2, figsize=(9, 0.32 * len(rows) + 1.6), sharey=True, layout="constrained")
    for axis in (ours, paper):
        axis.axvline(0, color="black", linewidth=0.8)
        axis.grid(axis="x", linewidth=0.3)
    intervals: list[tuple[float, tuple[float, float]]] = []
    for y, result in zip(positions, rows):
        delta = deltas(result, table.base)
        if delta["delta_bleu"] is None:
            why = result.status if table.base.done else f"base {table.base.status}"
            ours.text(0, y, f" {why}", va="center", ha="left", fontsize=7, color="0.4", style="italic")
        else:
            ours.barh(y, delta["delta_bleu"], color="tab:blue", height=0.6)
            if result.evidence is not None:
                spread = result.evidence.bleu.differences
                ours.plot(spread, [y] * len(spread), "o", color="black", markersize=2.5)
                if result.evidence.bleu.ci is not None:
                    intervals.append((y, result.evidence.bleu.ci))
        if delta["paper_delta_bleu"] is None:
            paper.text(0, y, " not in the paper", va="center", ha="left", fontsize=7, color="0.4", style="italic")
        else:
            paper.barh(y, delta["paper_delta_bleu"], color="tab:orange", height=0.6)
    draw_intervals(ours, intervals)
    ours.set_yticks(positions, labels)
    verdicts = paper.twinx()  # each row's verdict against the paper, beside the paper's bar
    verdicts.set_ylim(paper.get_ylim())
    verdicts.set_yticks(positions, [verdict_cell(result) for result in rows], fontsize=8)
    verdicts.tick_params(axis="y", length=0)
    ours.set_title(f"measured at scale {table.scale.name} (dev, sacreBLEU)")
    paper.set_title("paper (newstest2013)")
    ours.set_xlabel(f"Δ BLEU vs {table.base.row.id} (bar: mean, dots: seeds, line: 95 % t-interval over seeds)")
    paper.set_xlabel(f"Δ BLEU vs {table.base.row.id}")
    figure.suptitle(plot_title(table, "Δ BLEU per row"))
    return figure


def draw_intervals(axis, intervals: Sequence[tuple[float, tuple[float, float]]]) -> None:
    """Each row's interval as a line through its bar. The axis widens for an interval by at most a quarter of the
    span of the bars and seeds on each side; a wider interval (two seeds give t = 12.7) is cut at the edge and marked
    there with an arrowhead, so that one row's width does not squeeze every other row to a point."""
    left, right = axis.get_xlim()
    span = (right - left) / 4
    low_limit = min([left] + [max(low, left - span) for _, (low, _) in intervals])
    high_limit = max([right] + [min(high, right + span) for _, (_, high) in intervals])
    for y, (low, high) in intervals:
        axis.plot([max(low, low_limit), min(high, high_limit)], [y, y], color="black", linewidth=1.0)
        if low < low_limit:
            axis.plot([low_limit], [y], marker="<", color="black", markersize=4, clip_on=False)
        if high > high_limit:
            axis.plot([high_limit], [y], marker=">", color="black", markersize=4, clip_on=False)
    axis.set_xlim(low_limit, high_limit)


def groups_in_order(table: Table) -> list[str]:
    return list(dict.fromkeys(result.row.group for result in table.rows))


def ppl_points(run: RunRecord, curves: Mapping[str, Mapping[str, list]]) -> list[tuple[int, float]]:
    """The run's dev PPL curve; a run too short for one validation shows its final dev PPL at its trained steps."""
    points = list(curves.get(run.spec.run_id, {}).get("dev/ppl") or [])
    final, steps = run.metrics.get("dev_ppl"), run.metrics.get("steps")
    if not points and run.spec.run_id in curves and isinstance(final, (int, float)) and isinstance(steps, (int, float)):
        points = [(int(steps), float(final))]
    return points


def draw_dev_ppl(plt, table: Table, curves: Mapping[str, Mapping[str, list]]):
    from matplotlib.ticker import FormatStrFormatter, LogLocator

    base = table.base
    # Every group with a row besides base, base's own included; base alone only when it is the only row.
    groups = [
        group
        for group in groups_in_order(table)
        if any(result.row.group == group and result is not base for result in table.rows)
    ] or [base.row.group]
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(3.4 * columns, 2.6 * rows + 0.6), squeeze=False, layout="constrained"
    )
    for axis in axes.flat[len(groups) :]:
        axis.set_visible(False)
    base_curves = [points for run in base.runs if (points := ppl_points(run, curves))]
    for axis, group in zip(axes.flat, groups):
        members = [result for result in table.rows if result.row.group == group and result is not base] or [base]
        if members != [base]:
            for index, points in enumerate(base_curves):
                draw_curve(axis, points, base.row.id if index == 0 else None, color="0.6", linestyle="--")
        absent = []
        for index, result in enumerate(members):
            drawn = [points for run in result.runs if (points := ppl_points(run, curves))]
            for number, points in enumerate(drawn):
                draw_curve(axis, points, result.row.id if number == 0 else None, color=f"C{index}")
            if not drawn:
                absent.append(f"{result.row.id}: {result.status}")
        if absent:
            axis.text(
                0.98,
                0.98,
                "no curve\n" + "\n".join(absent),
                transform=axis.transAxes,
                ha="right",
                va="top",
                fontsize=7,
                color="0.4",
                style="italic",
            )
        axis.set_title(f"group {group}")
        axis.set_xlabel("step")
        axis.set_ylabel("dev PPL")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        axis.yaxis.set_minor_locator(LogLocator(subs=(2, 3, 5)))  # labelled minor ticks, not crowded ones
        axis.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        axis.grid(linewidth=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7, loc="lower left")
    figure.suptitle(plot_title(table, "dev perplexity per word piece against steps"))
    return figure


def draw_curve(axis, points: Sequence[tuple[int, float]], label: Optional[str], **style: Any) -> None:
    if points:
        steps, values = zip(*points)
        axis.plot(steps, values, marker="o", markersize=3, linewidth=1, label=label, **style)


def draw_params_bleu(plt, table: Table):
    figure, (ours, paper) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
    missing = []
    for result in table.rows:
        params, bleu = result.mean("params_m"), result.mean("dev_bleu")
        if params is None or bleu is None:
            missing.append(f"{result.row.id} ({result.status})")
            continue
        ours.plot([params], [bleu], "o", color="tab:blue")
        ours.annotate(result.row.id, (params, bleu), textcoords="offset points", xytext=(3, 3), fontsize=7)
    base_params, drawn = table.base.row.paper.params_m, 0
    for result in table.rows:
        # The paper leaves the count blank where it equals base's: draw those rows at base's count.
        params = result.row.paper.params_m if result.row.paper.params_m is not None else base_params
        if params is None or result.row.paper.bleu is None:
            continue
        drawn += 1
        paper.plot([params], [result.row.paper.bleu], "o", color="tab:orange")
        paper.annotate(
            result.row.id, (params, result.row.paper.bleu), textcoords="offset points", xytext=(3, 3), fontsize=7
        )
    if not drawn:
        paper.text(
            0.5,
            0.5,
            f"{table.sweep.path.name} states no paper figures",
            transform=paper.transAxes,
            ha="center",
            fontsize=8,
            color="0.4",
            style="italic",
        )
    if missing:
        lines = [", ".join(missing[i : i + 4]) for i in range(0, len(missing), 4)]
        ours.text(
            0.02,
            0.02,
            "no done run:\n" + "\n".join(lines),
            transform=ours.transAxes,
            fontsize=6,
            color="0.4",
            style="italic",
            va="bottom",
        )
    ours.set_title(f"measured at scale {table.scale.name}")
    ours.set_xlabel("parameters (millions)")
    ours.set_ylabel("dev BLEU (sacreBLEU)")
    paper.set_title("paper")
    paper.set_xlabel("parameters (millions)")
    paper.set_ylabel("dev BLEU")
    for axis in (ours, paper):
        axis.grid(linewidth=0.3)
    figure.suptitle(plot_title(table, "parameters against BLEU"))
    return figure


def table_curves(table: Table) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """run id -> curves, for published runs only: a running run's curves still grow."""
    return {
        run.spec.run_id: read_curves(run.folder)
        for result in table.rows
        for run in result.runs
        if run.status in PUBLISHED and run.folder is not None
    }


def save(plt, figure, stem: Path) -> list[Path]:
    paths = []
    for fmt in FORMATS:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, dpi=DPI, metadata=METADATA[fmt], bbox_inches="tight")
        path = stem.with_suffix(f".{fmt}")
        data = buffer.getvalue()
        if not (path.is_file() and path.read_bytes() == data):  # an unchanged plot keeps its file
            write_atomic_bytes(path, data)
        paths.append(path)
    plt.close(figure)
    return paths


def write_plots(table: Table, out: str | Path, curves: Optional[Mapping[str, Mapping[str, list]]] = None) -> list[Path]:
    """The sweep's three figures as PNG and SVG under `<out>/plots/`; returns the files written."""
    plt = pyplot()
    curves = table_curves(table) if curves is None else curves
    directory = Path(out) / "plots"
    figures = {
        "delta_bleu": lambda: draw_delta_bleu(plt, table),
        "dev_ppl": lambda: draw_dev_ppl(plt, table, curves),
        "params_bleu": lambda: draw_params_bleu(plt, table),
    }
    paths = []
    for kind in PLOT_KINDS:
        paths += save(plt, figures[kind](), directory / plot_stem(table, kind))
    return paths
