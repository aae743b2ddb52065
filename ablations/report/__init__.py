"""`ablate table SWEEP --scale S`: a sweep's table and everything built beside it, from run records only.

Pure functions of the records: nothing is trained and no clock is read. The table (table3.py) is written as
`<out>/<sweep>_<scale>.md`, `.csv` and `.tex` (a parsing sweep's in Table 4's layout, table4.py, without plots), with its plots under `<out>/plots/` (plots.py), Table 2 as
`<out>/table2_<scale>.*` when the sweep has base and big rows (table2.py), the table as data in
`<out>/<sweep>_<scale>.json`, and the offline dashboard `<out>/index.html` over every table there
(dashboard.py); the same records give the same bytes. `ablate table` selects runs as `ablate sweep` does (`--set`,
`--data`, `--rows`, `--seeds`/`--seed-list`, `--runs` for sweep's `--out`), reads published records only with
`--published`, and exits 1 without writing anything when a selected run is missing unless `--partial`. Layers, each importing only those below it: this module;
table4; plots, dashboard, table2; table3; contrasts; collect (records, references, the bootstrap) and render (cells, writers).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from . import table4
from .collect import RunRecord, Selection, collect, published_for, selecting, unfinished
from .dashboard import write_dashboard, write_table_data
from .plots import table_curves, write_plots
from .table2 import build_cost_table, write_cost_table
from .table3 import Table, build_table, plain, shown_overrides, write_table


def write_outputs(table: Table, out: str | Path) -> list[Path]:
    """The table, its plots, Table 2 when the sweep has base and big rows, the table as data, and the dashboard;
    for a parsing sweep, Table 4's layout and its data (no plots: they draw BLEU and PPL), and the dashboard."""
    if table4.is_parsing(table.sweep, table.scale):
        paths = table4.write_table(table, out)
        paths.append(table4.write_table_data(table, table_curves(table), out))
        return paths + [write_dashboard(out)]
    paths = write_table(table, out)
    curves = table_curves(table)
    paths += write_plots(table, out, curves)
    cost = build_cost_table(table, out)
    if cost is not None:
        paths += write_cost_table(cost, out)
    paths.append(write_table_data(table, curves, out))
    paths.append(write_dashboard(out))  # every table under `out`, not only this one
    return paths


def selection_of(args: argparse.Namespace) -> Selection:
    """The runs `ablate sweep` would train with the same `--set`, `--data`, `--rows` and seeds."""
    from ..sweep import command_sets, parse_id_list, selected_seeds

    rows = tuple(parse_id_list(args.rows, "--rows")) if args.rows else None
    return Selection(rows, selected_seeds(args), command_sets(args), published=args.published)


def describe_selection(args: argparse.Namespace) -> Optional[str]:
    parts = [f"rows {args.rows} (and base)"] if args.rows else []
    if args.seeds is not None or args.seed_list:
        parts.append(f"seeds {args.seed_list or ', '.join(map(str, range(args.seeds)))}")
    parts += [f"--set {value}" for value in args.set or []]
    parts += [f"--data {args.data}"] if args.data else []
    return "; ".join(parts) or None


def table_command(args: argparse.Namespace) -> str:
    """`ablate table` as it was run, the line in each table's header that rebuilds it: the selectors and flags, not
    --runs and --out, which name one machine's folders. With --published it rebuilds the table on any clone from the
    records under results/records/ alone (tests/test_published_tables.py checks every committed table does)."""
    argv = ["ablate", "table", args.sweep, "--scale", args.scale]
    argv += ["--rows", args.rows] if args.rows else []
    if args.seed_list:
        argv += ["--seed-list", args.seed_list]
    elif args.seeds is not None:
        argv += ["--seeds", str(args.seeds)]
    for value in args.set or []:
        argv += ["--set", value]
    argv += ["--data", args.data] if args.data else []
    argv += ["--scales", args.scales] if args.scales else []
    argv += [flag for flag, given in (("--published", args.published), ("--partial", args.partial)) if given]
    return shlex.join(argv)


def missing_message(missing: Sequence[RunRecord], total: int, published: Sequence[RunRecord], args) -> str:
    counts: dict[str, int] = {}
    for run in missing:
        counts[run.status] = counts.get(run.status, 0) + 1
    what = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    lines = [
        f"{len(missing)} of {total} selected runs have no finished record under "
        f"{Path(args.runs) / missing[0].spec.sweep / args.scale}/ ({what}): "
        + ", ".join(f"{run.spec.row}-s{run.spec.seed}" for run in missing[:8])
        + (", ..." if len(missing) > 8 else "")
    ]
    if published:
        lines.append(
            f"{len(published)} of them are published records under {args.out}/records/ (not your runs): "
            "add --published to use them"
        )
    lines.append(
        "train them with `ablate sweep` and the same selectors, or add --partial to write the table with the gaps"
    )
    return "\n".join(lines)


def selected_table(table: Table, selection: Selection, description: Optional[str], command: str) -> Table:
    """Only the selected rows (base among them); the header says what was selected, which runs are published, what
    the overrides changed and, last, the command that built it; the overrides name the table's files (Table.stem)."""
    overrides = shown_overrides(selection.sets)
    keep = selection.row_ids(table.sweep)
    rows = table.rows if keep is None else tuple(result for result in table.rows if result.row.id in keep)
    from_published = sum(run.from_published for result in rows for run in result.runs)
    header = []
    for label, value in table.header:
        if label == "Runs" and from_published:
            value = f"{value} ({from_published} from published records)"
        header.append((label, value))
        if label == "Sweep" and description:
            header.append(("Selection", description))
        if label == "Scale settings" and overrides:
            header.append(("Overrides", describe_overrides(overrides, table.scale.settings)))
    header.append(("Command", command))
    return replace(table, rows=rows, header=tuple(header), overrides=overrides)


def describe_overrides(overrides: Sequence[tuple[str, str]], settings: Mapping[str, Any]) -> str:
    """What `--set`/`--data` changed for every run, beside what the preset says where it says something."""
    parts = []
    for key, value in overrides:
        preset = f" (the preset's: {plain(settings[key])})" if key in settings else ""
        parts.append(f"{key}={value}{preset}")
    return ", ".join(parts)


def cmd_table(args: argparse.Namespace) -> int:
    from ..sweep import load_sweep, scale_named

    selection = selection_of(args)
    sweep, scale = load_sweep(args.sweep), scale_named(args.sweep, args.scale)
    with selecting(selection):
        records = collect(sweep, scale, args.runs, args.out)
        missing = unfinished(records)
        message = ""
        if missing:
            published = [] if args.published else published_for(missing, sweep, scale, args.out)
            message = missing_message(missing, len(records), published, args)
            if not args.partial:
                print(f"ablate table: {message}", file=sys.stderr)
                return 1
        build = table4.build_table if table4.is_parsing(sweep, scale) else build_table
        table = selected_table(
            build(args.sweep, args.scale, runs=args.runs, out=args.out),
            selection,
            describe_selection(args),
            table_command(args),
        )
    for path in write_outputs(table, args.out):
        print(path)
    print(dict(table.header)["Runs"])
    if message:
        print(f"--partial: {message}", file=sys.stderr)
    return 0


def add_table_parser(sub: Any) -> None:
    from ..sweep import SCALE_HELP, add_scales_argument, add_selection_arguments

    parser = sub.add_parser(
        "table",
        help="a sweep's table at one scale, from run records (Markdown, CSV, LaTeX), "
        "its plots, Table 2 and results/index.html",
        description="Table the runs that `ablate sweep` with the same selectors (--set, --data, --rows, --seeds or "
        "--seed-list; sweep's --out is --runs here) trained. Exit code 1, writing nothing, when a selected run has no "
        "finished record, unless --partial. Records published under <out>/records/ are used only with --published.",
    )
    parser.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    parser.add_argument("--scale", required=True, help=SCALE_HELP)
    add_selection_arguments(
        parser,
        rows_help="comma-separated row ids, e.g. A1,B2 (default: all rows); base is always in",
        set_help="the override the runs were trained with, as for sweep",
    )
    parser.add_argument("--runs", default="runs", help="root of run folders: sweep's --out (default: runs/)")
    parser.add_argument("--out", default="results", help="where tables and published records go (default: results/)")
    parser.add_argument(
        "--published",
        action="store_true",
        help="also use the records published under <out>/records/ (the repository's own tables); "
        "the header counts them",
    )
    parser.add_argument(
        "--partial", action="store_true", help="write the table even when selected runs are missing (exit 0)"
    )
    add_scales_argument(parser)
    parser.set_defaults(handler=cmd_table)
