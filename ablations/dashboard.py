"""The offline dashboard, `<out>/index.html`: one static page that opens from disk, with no server and no network.

`ablate table` writes each sweep's table as data, `<out>/<sweep>_<scale>.json` (the displayed table, its plots,
and per run: status, metrics, config difference from base, curves, wandb link), then rebuilds the page from
every such file under `<out>`, so the page covers every sweep and scale that has a table, whichever was
built last. Tables 1 and 2 are shown from their CSV files when present. CSS and JavaScript are inline; plots are
referenced relatively (`plots/*.svg`); the per-run sections are built in the browser from JSON embedded in the
page. The page is a function of those files only: the same records give the same bytes.

A run links to wandb only when its metrics.json carries `wandb_url` (set once the offline run is synced);
`ablate sync` uploads runs but records no URL today, so until it does there is no link.
"""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from .records import write_atomic

if TYPE_CHECKING:
    from .tables import RunRecord, Table

DATA_KIND = "ablate-sweep-table"  # marks a `<sweep>_<scale>.json` as a table's data, not some other JSON
INDEX_FILE = "index.html"
RUN_METRICS = ("dev_ppl", "dev_bleu", "dev_bleu_tok", "test_bleu", "test_bleu_tok", "params", "steps", "train_tokens",
               "train_seconds", "wall_seconds", "error")


# --------------------------------------------------------------------------------------------------------------
# A table as data
# --------------------------------------------------------------------------------------------------------------


def config_difference(run: "RunRecord", base: "RunRecord") -> list[list[str]]:
    """[field, base's value, the run's value] for every resolved config field that differs (the seed aside)."""
    from .tables import flat, plain

    ours, theirs = flat(run.spec.config), flat(base.spec.config)
    return [[key, plain(theirs[key]), plain(ours[key])] for key in ours if repr(ours[key]) != repr(theirs[key])]


def base_run_for(run: "RunRecord", table: "Table") -> "RunRecord":
    """Base's run with the same seed, else base's first: the comparison a reader expects."""
    return next((other for other in table.base.runs if other.spec.seed == run.spec.seed), table.base.runs[0])


def relative(path: Optional[Path], out: Path) -> Optional[str]:
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None  # an unpublished folder outside <out>: not part of the static page


def run_data(run: "RunRecord", table: "Table", curves: Mapping[str, Mapping[str, list]], out: Path) -> dict[str, Any]:
    url = run.metrics.get("wandb_url")
    return {
        "row": run.spec.row, "group": run.spec.group, "seed": run.spec.seed, "run_id": run.spec.run_id,
        "status": run.status, "record": relative(run.folder, out),
        "metrics": {key: run.metrics[key] for key in RUN_METRICS if run.metrics.get(key) is not None},
        "config_diff": config_difference(run, base_run_for(run, table)),
        "curves": {key: [list(point) for point in points] for key, points in curves.get(run.spec.run_id, {}).items() if points},
        "wandb_url": url if isinstance(url, str) and url.startswith(("https://", "http://")) else None,
    }


def table_data(table: "Table", curves: Mapping[str, Mapping[str, list]], out: str | Path) -> dict[str, Any]:
    from .plots import PLOT_KINDS, plot_stem
    from .tables import columns, display_rows, title

    out = Path(out)
    cols = columns(table)
    return {
        "kind": DATA_KIND,
        "id": f"{table.sweep.name}_{table.scale.name}",
        "title": title(table),
        "base_row": table.base.row.id,
        "header": [list(pair) for pair in table.header],
        "notes": list(table.notes),
        "columns": [{"key": c.key, "label": c.label, "align": c.align} for c in cols],
        "rows": [[cells[c.key] for c in cols] for cells in display_rows(table)],
        "files": [f"{table.sweep.name}_{table.scale.name}{suffix}" for suffix in (".md", ".csv", ".tex")],
        "plots": [{"kind": kind, "svg": f"plots/{plot_stem(table, kind)}.svg", "png": f"plots/{plot_stem(table, kind)}.png"}
                  for kind in PLOT_KINDS],
        "runs": [run_data(run, table, curves, out) for result in table.rows for run in result.runs],
    }


def write_table_data(table: "Table", curves: Mapping[str, Mapping[str, list]], out: str | Path) -> Path:
    path = Path(out) / f"{table.sweep.name}_{table.scale.name}.json"
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

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav a{margin-right:1em}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}
th,td{border-bottom:1px solid #ddd;padding:2px 6px;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}
td.r{text-align:right}td.l{text-align:left}
.scroll{overflow-x:auto}
ul.header li,ul.notes li{font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:1em}
.plots figure{margin:0;max-width:100%}.plots img{max-width:100%;border:1px solid #eee}
figcaption{font-size:12px;color:#555}
details.run{border:1px solid #ddd;border-radius:4px;margin:.3em 0;padding:.2em .6em}
details.run summary{cursor:pointer}
.status-done{color:#1a7f37}.status-failed,.status-diverged{color:#c62828}
.status-missing,.status-pending,.status-running{color:#8a6d00}
.charts{display:flex;flex-wrap:wrap;gap:1em}
svg.chart{border:1px solid #eee;background:#fff}
.muted{color:#777;font-style:italic}
"""

SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById('dashboard-data').textContent);
  var SVG = 'http://www.w3.org/2000/svg';
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function fmt(v) { return typeof v === 'number' ? (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(Math.round(v)) : v.toPrecision(4)) : String(v); }
  function chart(name, points) {
    var W = 280, H = 140, L = 44, R = 8, T = 18, B = 22;
    var svg = svgEl('svg', {'class': 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-series': name});
    svg.appendChild(svgEl('text', {x: L, y: 12, 'font-size': 11}, name));
    var xs = points.map(function (p) { return p[0]; }), ys = points.map(function (p) { return p[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; } if (y1 === y0) { y1 = y0 + 1; }
    function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function py(y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); }
    svg.appendChild(svgEl('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#ccc'}));
    svg.appendChild(svgEl('text', {x: L - 3, y: T + 8, 'font-size': 9, 'text-anchor': 'end'}, fmt(y1)));
    svg.appendChild(svgEl('text', {x: L - 3, y: H - B, 'font-size': 9, 'text-anchor': 'end'}, fmt(y0)));
    svg.appendChild(svgEl('text', {x: L, y: H - 6, 'font-size': 9}, 'step ' + fmt(x0)));
    svg.appendChild(svgEl('text', {x: W - R, y: H - 6, 'font-size': 9, 'text-anchor': 'end'}, fmt(x1)));
    svg.appendChild(svgEl('polyline', {fill: 'none', stroke: '#1f77b4', 'stroke-width': 1.5,
      points: points.map(function (p) { return px(p[0]).toFixed(1) + ',' + py(p[1]).toFixed(1); }).join(' ')}));
    points.forEach(function (p) { svg.appendChild(svgEl('circle', {cx: px(p[0]).toFixed(1), cy: py(p[1]).toFixed(1), r: 2, fill: '#1f77b4'})); });
    return svg;
  }
  function runSection(table, run) {
    var box = el('details', {'class': 'run', id: 'run-' + table.id + '-' + run.row + '-s' + run.seed, 'data-status': run.status});
    var summary = el('summary');
    summary.appendChild(el('strong', {}, run.row + ' s' + run.seed));
    summary.appendChild(document.createTextNode(' '));
    summary.appendChild(el('span', {'class': 'status-' + run.status}, run.status));
    var m = run.metrics;
    if (m.dev_bleu !== undefined) summary.appendChild(document.createTextNode(' \\u00b7 dev BLEU ' + fmt(m.dev_bleu) + ', PPL ' + fmt(m.dev_ppl)));
    summary.appendChild(el('span', {'class': 'muted'}, ' ' + run.run_id));
    box.appendChild(summary);
    var links = el('p');
    if (run.record) { links.appendChild(el('a', {href: run.record + '/metrics.json'}, 'record')); links.appendChild(document.createTextNode(' ')); }
    else { links.appendChild(el('span', {'class': 'muted'}, 'no published record (' + run.status + ')')); }
    if (run.wandb_url) { links.appendChild(el('a', {href: run.wandb_url, 'class': 'wandb'}, 'wandb run')); }
    else { links.appendChild(el('span', {'class': 'muted'}, ' \\u00b7 no wandb link (not synced)')); }
    box.appendChild(links);
    var keys = Object.keys(m);
    if (keys.length) {
      var mt = el('table', {'class': 'metrics'});
      keys.forEach(function (k) { var tr = el('tr'); tr.appendChild(el('th', {}, k)); tr.appendChild(el('td', {'class': 'r'}, fmt(m[k]))); mt.appendChild(tr); });
      box.appendChild(mt);
    }
    if (run.config_diff.length) {
      var dt = el('table', {'class': 'config-diff'});
      var head = el('tr'); ['field', table.base_row + ' (same seed)', run.row].forEach(function (h) { head.appendChild(el('th', {}, h)); });
      dt.appendChild(head);
      run.config_diff.forEach(function (d) { var tr = el('tr'); d.forEach(function (c) { tr.appendChild(el('td', {'class': 'l'}, c)); }); dt.appendChild(tr); });
      box.appendChild(el('p', {}, 'Resolved config, differences from ' + table.base_row + ':'));
      box.appendChild(dt);
    } else {
      box.appendChild(el('p', {'class': 'muted config-diff-none'}, 'Resolved config equal to ' + table.base_row + '\\'s (seed aside).'));
    }
    var charts = el('div', {'class': 'charts'});
    Object.keys(run.curves).sort().forEach(function (k) { charts.appendChild(chart(k, run.curves[k])); });
    if (!charts.childNodes.length) charts.appendChild(el('span', {'class': 'muted'}, 'no curves recorded'));
    box.appendChild(charts);
    return box;
  }
  var count = 0;
  data.forEach(function (table) {
    var holder = document.getElementById('runs-' + table.id);
    table.runs.forEach(function (run) { holder.appendChild(runSection(table, run)); count += 1; });
  });
  function report() {
    var images = Array.prototype.slice.call(document.querySelectorAll('.plots img'));
    var loaded = images.filter(function (img) { return img.complete && img.naturalWidth > 0; }).length;
    var status = document.getElementById('render-status');
    status.textContent = 'rendered ' + count + ' runs; plots loaded ' + loaded + '/' + images.length;
    status.setAttribute('data-runs', count);
    status.setAttribute('data-images-loaded', loaded);
    status.setAttribute('data-images', images.length);
  }
  report();
  window.addEventListener('load', report);
})();
"""


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def html_table(header: list[str], rows: list[list[str]], aligns: Optional[list[str]] = None, cls: str = "results") -> str:
    aligns = aligns or ["l"] * len(header)
    lines = [f'<div class="scroll"><table class="{cls}">', "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
    lines += ["<tr>" + "".join(f'<td class="{a}">{esc(c)}</td>' for a, c in zip(aligns, row)) + "</tr>" for row in rows]
    return "\n".join(lines + ["</table></div>"])


def sweep_section(data: Mapping[str, Any]) -> str:
    cols = data["columns"]
    parts = [
        f'<section class="sweep" id="sweep-{esc(data["id"])}">',
        f'<h2>{esc(data["title"])}</h2>',
        "<p>" + " · ".join(f'<a href="{esc(name)}">{esc(name)}</a>' for name in data["files"]) + "</p>",
        '<ul class="header">' + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in data["header"]) + "</ul>",
        html_table([c["label"] for c in cols], data["rows"], [c["align"] for c in cols]),
        '<ul class="notes">' + "".join(f"<li>{esc(note)}</li>" for note in data["notes"]) + "</ul>",
        '<div class="plots">',
    ]
    for plot in data["plots"]:
        parts.append(f'<figure><img src="{esc(plot["svg"])}" alt="{esc(data["id"])} {esc(plot["kind"])}">'
                     f'<figcaption>{esc(plot["kind"])} (<a href="{esc(plot["png"])}">PNG</a>)</figcaption></figure>')
    parts += ["</div>", f"<h3>Runs ({len(data['runs'])})</h3>", f'<div class="runs" id="runs-{esc(data["id"])}"></div>', "</section>"]
    return "\n".join(parts)


def csv_section(path: Path, section_id: str, heading: str) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return ""
    markdown = path.with_suffix(".md")
    link = f'<p><a href="{esc(markdown.name)}">{esc(markdown.name)}</a> · <a href="{esc(path.name)}">{esc(path.name)}</a></p>'
    aligns = ["l" if not any(is_number(row[i]) for row in rows[1:] if i < len(row)) else "r" for i in range(len(rows[0]))]
    return "\n".join([f'<section class="extra" id="{esc(section_id)}">', f"<h2>{esc(heading)}</h2>", link,
                      html_table(rows[0], rows[1:], aligns), "</section>"])


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def extra_tables(out: Path) -> list[tuple[str, str, Path]]:
    """(section id, heading, CSV) of Tables 2 and 1, when `ablate table` / `ablate complexity` wrote them."""
    found = [(f"table2-{path.stem.removeprefix('table2_')}", f"Table 2 at scale {path.stem.removeprefix('table2_')}: "
              "test BLEU and training cost", path) for path in sorted(out.glob("table2_*.csv"))]
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
    payload = json.dumps([{"id": t["id"], "base_row": t["base_row"], "runs": t["runs"]} for t in tables],
                         sort_keys=True, ensure_ascii=False).replace("</", "<\\/")  # no early </script>
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>attention-ablations: results</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        "<h1>attention-ablations: results</h1>",
        "<p>Built by <code>ablate table</code> from the run records under <code>records/</code>; "
        "opens from disk, no server or network needed.</p>",
        "<nav>" + "".join(nav) + "</nav>",
        '<p id="render-status" class="muted">per-run sections need JavaScript</p>',
        '<noscript><p>JavaScript is off: tables and plots are shown, per-run sections are not.</p></noscript>',
    ]
    parts += [sweep_section(t) for t in tables]
    parts += [csv_section(path, section, heading) for section, heading, path in extras]
    parts += [f'<script type="application/json" id="dashboard-data">{payload}</script>', f"<script>{SCRIPT}</script>",
              "</body>", "</html>"]
    return "\n".join(parts) + "\n"


def write_dashboard(out: str | Path) -> Path:
    path = Path(out) / INDEX_FILE
    write_atomic(path, render_dashboard(out))
    return path
