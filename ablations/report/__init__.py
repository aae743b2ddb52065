"""`ablate table SWEEP --scale S`: a sweep's table and everything built beside it, from run records only.

Pure functions of the records: nothing is trained and no clock is read. The table (table3.py) is written as
`<out>/<sweep>_<scale>.md`, `.csv` and `.tex`, with its plots under `<out>/plots/` (plots.py), Table 2 as
`<out>/table2_<scale>.*` when the sweep has base and big rows (table2.py), the table as data in
`<out>/<sweep>_<scale>.json`, and the offline dashboard `<out>/index.html` over every table there
(dashboard.py); the same records give the same bytes. Layers, each importing only those below it: this module;
plots, dashboard, table2; table3; collect (records, references, the bootstrap) and render (cells, writers).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .dashboard import write_dashboard, write_table_data
from .plots import table_curves, write_plots
from .table2 import build_cost_table, write_cost_table
from .table3 import Table, build_table, write_table


def write_outputs(table: Table, out: str | Path) -> list[Path]:
    """The table, its plots, Table 2 when the sweep has base and big rows, the table as data, and the dashboard."""
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
    parser = sub.add_parser(
        "table",
        help="a sweep's table at one scale, from run records (Markdown, CSV, LaTeX), "
        "its plots, Table 2 and results/index.html",
    )
    parser.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    parser.add_argument("--scale", required=True, help="scale preset: tiny, small or paper (sweeps/scales.yaml)")
    parser.add_argument("--runs", default="runs", help="root of run folders (default: runs/)")
    parser.add_argument("--out", default="results", help="where tables and published records go (default: results/)")
    parser.set_defaults(handler=cmd_table)
