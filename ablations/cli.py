"""The `ablate` command. Each subcommand is a thin shell over a function of the framework."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Optional, Sequence


def cmd_params(args: argparse.Namespace) -> int:
    from .params import parameter_table

    rows = parameter_table(args.sweep, vocab_size=args.vocab, scale=args.scale)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Parameters of {args.sweep} (vocabulary {args.vocab}, scale {args.scale or 'paper units'})")
    for column in ("row", "group", "params", "paper", "Δ", "within tolerance"):
        table.add_column(column, justify="left" if column in ("row", "group") else "right")
    for row in rows:
        paper = row["paper_params_m"]
        table.add_row(
            row["row"], row["group"], f"{row['params'] / 1e6:.1f}M",
            "—" if paper is None else f"{paper:g}M",
            "" if paper is None else f"{row['params'] / 1e6 - paper:+.1f}M",
            "" if row["within_tolerance"] is None else ("yes" if row["within_tolerance"] else "NO"),
        )
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ablate", description="Reproduce and extend the ablations of 'Attention Is All You Need'.")
    sub = parser.add_subparsers(dest="command", required=True)

    params = sub.add_parser("params", help="parameter count of every row of a sweep beside the paper's")
    params.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    params.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (default: the paper's 37000)")
    params.add_argument("--scale", default=None, help="count at a scale preset instead of the paper's units")
    params.add_argument("--json", action="store_true", help="print a JSON list")
    params.set_defaults(handler=cmd_params)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ValueError as error:
        print(f"ablate {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
