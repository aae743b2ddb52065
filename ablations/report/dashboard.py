"""The offline dashboard, `<out>/index.html`: one static page that opens from disk, with no server and no network.

`ablate table` writes each sweep's table as data, `<out>/<sweep>_<scale>.json` (the displayed table, its plots,
and per run: status, metrics, config difference from base, curves, wandb link), then rebuilds the page from
every such file under `<out>`, so the page covers every sweep and scale that has a table, whichever was
built last. Tables 1 and 2 are shown from their CSV files when present. CSS and JavaScript (dashboard.css and
dashboard.js beside this file) are inlined; plots are referenced relatively (`plots/*.svg`); the per-run sections
are built in the browser from JSON embedded in the page. The page is a function of those files only: the same
records give the same bytes.

A run links to wandb only when its metrics.json carries `wandb_url`: `ablate sync` records the URL that
`wandb sync` prints once it has uploaded the offline run, so a run not yet synced has no link.
"""

from __future__ import annotations

import csv
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional

from ..records import write_atomic
from .collect import RunRecord
from .contrasts import ALIGNS as CONTRAST_ALIGNS
from .contrasts import HEADER as CONTRAST_HEADER
from .contrasts import as_data as contrasts_data
from .contrasts import cells as contrast_cells
from .plots import PLOT_KINDS, plot_stem
from .table3 import Table, columns, display_rows, flat, plain, row_statistics, title

DATA_KIND = "ablate-sweep-table"  # marks a `<sweep>_<scale>.json` as a table's data, not some other JSON
INDEX_FILE = "index.html"
RUN_METRICS = (
    "dev_ppl",
    "dev_bleu",
    "dev_bleu_tok",
    "test_bleu",
    "test_bleu_tok",
    "dev_f1",
    "test_f1",
    "test_invalid",
    "params",
    "steps",
    "train_tokens",
    "train_seconds",
    "wall_seconds",
    "error",
)


# --------------------------------------------------------------------------------------------------------------
# A table as data
# --------------------------------------------------------------------------------------------------------------


def config_difference(run: RunRecord, base: RunRecord) -> list[list[str]]:
    """[field, base's value, the run's value] for every resolved config field that differs (the seed aside)."""
    ours, theirs = flat(run.spec.config), flat(base.spec.config)
    return [[key, plain(theirs[key]), plain(ours[key])] for key in ours if repr(ours[key]) != repr(theirs[key])]


def base_run_for(run: RunRecord, table: Table) -> RunRecord:
    """Base's run with the same seed, else base's first: the comparison a reader expects."""
    return next((other for other in table.base.runs if other.spec.seed == run.spec.seed), table.base.runs[0])


def relative(path: Optional[Path], out: Path) -> Optional[str]:
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None  # an unpublished folder outside <out>: not part of the static page


def run_data(run: RunRecord, table: Table, curves: Mapping[str, Mapping[str, list]], out: Path) -> dict[str, Any]:
    url = run.metrics.get("wandb_url")
    return {
        "row": run.spec.row,
        "group": run.spec.group,
        "seed": run.spec.seed,
        "run_id": run.spec.run_id,
        "status": run.status,
        "record": relative(run.folder, out),
        "metrics": {key: run.metrics[key] for key in RUN_METRICS if run.metrics.get(key) is not None},
        "config_diff": config_difference(run, base_run_for(run, table)),
        "curves": {
            key: [list(point) for point in points] for key, points in curves.get(run.spec.run_id, {}).items() if points
        },
        "wandb_url": url if isinstance(url, str) and url.startswith(("https://", "http://")) else None,
    }


def table_data(table: Table, curves: Mapping[str, Mapping[str, list]], out: str | Path) -> dict[str, Any]:
    out = Path(out)
    cols = columns(table)
    return {
        "kind": DATA_KIND,
        "id": table.stem,
        "title": title(table),
        "base_row": table.base.row.id,
        "header": [list(pair) for pair in table.header],
        "notes": list(table.notes),
        "columns": [{"key": c.key, "label": c.label, "align": c.align} for c in cols],
        "rows": [[cells[c.key] for c in cols] for cells in display_rows(table)],
        "statistics": row_statistics(table),
        "contrasts": contrasts_data(table.contrasts),
        "contrast_rows": [contrast_cells(result) for result in table.contrasts],
        "files": [f"{table.stem}{suffix}" for suffix in (".md", ".csv", ".tex")],
        "plots": [
            {"kind": kind, "svg": f"plots/{plot_stem(table, kind)}.svg", "png": f"plots/{plot_stem(table, kind)}.png"}
            for kind in PLOT_KINDS
        ],
        "runs": [run_data(run, table, curves, out) for result in table.rows for run in result.runs],
    }


def write_table_data(table: Table, curves: Mapping[str, Mapping[str, list]], out: str | Path) -> Path:
    path = Path(out) / f"{table.stem}.json"
    write_atomic(path, json.dumps(table_data(table, curves, out), sort_keys=True, ensure_ascii=False) + "\n")
    return path


def read_table_data(out: Path) -> list[dict[str, Any]]:
    tables = []
    for path in sorted(out.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("kind") == DATA_KIND:
            tables.append(data)
    return tables


# --------------------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------------------


def asset(name: str) -> str:
    """dashboard.css or dashboard.js, package data inlined into the page (it must open without a server)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def html_table(
    header: list[str], rows: list[list[str]], aligns: Optional[list[str]] = None, cls: str = "results"
) -> str:
    aligns = aligns or ["l"] * len(header)
    lines = [
        f'<div class="scroll"><table class="{cls}">',
        "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>",
    ]
    lines += ["<tr>" + "".join(f'<td class="{a}">{esc(c)}</td>' for a, c in zip(aligns, row)) + "</tr>" for row in rows]
    return "\n".join(lines + ["</table></div>"])


def sweep_section(data: Mapping[str, Any]) -> str:
    cols = data["columns"]
    parts = [
        f'<section class="sweep" id="sweep-{esc(data["id"])}">',
        f"<h2>{esc(data['title'])}</h2>",
        "<p>" + " · ".join(f'<a href="{esc(name)}">{esc(name)}</a>' for name in data["files"]) + "</p>",
        '<ul class="header">' + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in data["header"]) + "</ul>",
        html_table([c["label"] for c in cols], data["rows"], [c["align"] for c in cols]),
    ]
    if data.get("contrast_rows"):
        parts += [
            "<h3>Contrasts (seed-paired, row − against)</h3>",
            html_table(list(CONTRAST_HEADER), data["contrast_rows"], list(CONTRAST_ALIGNS)),
        ]
    parts += [
        '<ul class="notes">' + "".join(f"<li>{esc(note)}</li>" for note in data["notes"]) + "</ul>",
        '<div class="plots">',
    ]
    for plot in data["plots"]:
        parts.append(
            f'<figure><img src="{esc(plot["svg"])}" alt="{esc(data["id"])} {esc(plot["kind"])}">'
            f'<figcaption>{esc(plot["kind"])} (<a href="{esc(plot["png"])}">PNG</a>)</figcaption></figure>'
        )
    parts += [
        "</div>",
        f"<h3>Runs ({len(data['runs'])})</h3>",
        f'<div class="runs" id="runs-{esc(data["id"])}"></div>',
        "</section>",
    ]
    return "\n".join(parts)


def csv_section(path: Path, section_id: str, heading: str) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return ""
    markdown = path.with_suffix(".md")
    link = f'<p><a href="{esc(markdown.name)}">{esc(markdown.name)}</a> · <a href="{esc(path.name)}">{esc(path.name)}</a></p>'
    aligns = [
        "l" if not any(is_number(row[i]) for row in rows[1:] if i < len(row)) else "r" for i in range(len(rows[0]))
    ]
    return "\n".join(
        [
            f'<section class="extra" id="{esc(section_id)}">',
            f"<h2>{esc(heading)}</h2>",
            link,
            html_table(rows[0], rows[1:], aligns),
            "</section>",
        ]
    )


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def extra_tables(out: Path) -> list[tuple[str, str, Path]]:
    """(section id, heading, CSV) of Tables 2 and 1, when `ablate table` / `ablate complexity` wrote them."""
    found = [
        (
            f"table2-{path.stem.removeprefix('table2_')}",
            f"Table 2 at scale {path.stem.removeprefix('table2_')}: test BLEU and training cost",
            path,
        )
        for path in sorted(out.glob("table2_*.csv"))
    ]
    table1 = out / "table1.csv"
    if table1.is_file():
        found.append(("table1", "Table 1: per-layer cost, measured", table1))
    return found


def render_dashboard(out: str | Path) -> str:
    out = Path(out)
    tables = read_table_data(out)
    extras = extra_tables(out)
    nav = [f'<a href="#sweep-{esc(t["id"])}">{esc(t["title"])}</a>' for t in tables]
    nav += [f'<a href="#{esc(section)}">{esc(heading.split(":")[0])}</a>' for section, heading, _ in extras]
    payload = json.dumps(
        [{"id": t["id"], "base_row": t["base_row"], "runs": t["runs"]} for t in tables],
        sort_keys=True,
        ensure_ascii=False,
    ).replace("</", "<\\/")  # no early </script>
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>attention-ablations: results</title>",
        f"<style>\n{asset('dashboard.css')}</style>",
        "</head>",
        "<body>",
        "<h1>attention-ablations: results</h1>",
        "<p>Built by <code>ablate table</code> from the run records under <code>records/</code>; "
        "opens from disk, no server or network needed.</p>",
        "<nav>" + "".join(nav) + "</nav>",
        '<p id="render-status" class="muted">per-run sections need JavaScript</p>',
        "<noscript><p>JavaScript is off: tables and plots are shown, per-run sections are not.</p></noscript>",
    ]
    parts += [sweep_section(t) for t in tables]
    parts += [csv_section(path, section, heading) for section, heading, path in extras]
    parts += [
        f'<script type="application/json" id="dashboard-data">{payload}</script>',
        f"<script>\n{asset('dashboard.js')}</script>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write_dashboard(out: str | Path) -> Path:
    path = Path(out) / INDEX_FILE
    write_atomic(path, render_dashboard(out))
    return path
