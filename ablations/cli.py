"""The `ablate` command. Each subcommand is a thin shell over a function of the framework."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
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


def resolve_run(args: argparse.Namespace):
    """The RunConfig and meta that `ablate train` arguments describe."""
    from .records import read_config
    from .sweep import apply_overrides, build_config, expand, load_sweep, parse_sets, scales_for

    sets = parse_sets(args.set or [])
    if args.data:
        sets["data.path"] = args.data
    if args.config:
        if args.sweep or args.row or args.scale:
            raise ValueError("--config takes a resolved config; do not combine it with --sweep/--row/--scale")
        config, meta = read_config(args.config)
        if args.seed is not None:
            sets["seed"] = args.seed
        if sets:
            config = build_config(apply_overrides(config.to_dict(), sets, "--set"), str(args.config))
        meta["run_id"] = config.run_id()
        return config, meta
    missing = [flag for flag, value in (("--sweep", args.sweep), ("--row", args.row), ("--scale", args.scale)) if not value]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}: give --sweep, --row and --scale, or --config FILE")
    sweep = load_sweep(args.sweep)
    scales = scales_for(args.sweep)
    if args.scale not in scales:
        raise ValueError(f"--scale {args.scale!r}: unknown; scales: {', '.join(scales)}")
    seed = args.seed if args.seed is not None else sweep.seeds[0]
    (spec,) = expand(sweep, scales[args.scale], seeds=[seed], rows=[args.row], sets=sets)
    meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
    return spec.config, meta


def cmd_train(args: argparse.Namespace) -> int:
    import yaml

    from .launch import pin_cpus_from_env, train_lock

    pin_cpus_from_env()  # before torch starts its threads: the cores `ablate sweep` gave this run
    config, meta = resolve_run(args)
    if args.print_config:
        print(yaml.safe_dump({"run_id": config.run_id(), "meta": meta, "config": config.to_dict()}, sort_keys=False), end="")
        return 0
    from .records import run_folder

    run_dir = Path(args.run_dir) if args.run_dir else run_folder(args.out, meta, config)
    print(f"run {meta['run_id']} -> {run_dir}", file=sys.stderr)
    with train_lock(run_dir):  # one trainer per run folder, whoever started it
        from .train import train_run

        metrics = train_run(config, run_dir, meta, progress=sys.stderr.isatty())
    keys = ("status", "dev_ppl", "dev_bleu", "dev_bleu_tok", "test_bleu", "test_bleu_tok", "steps", "wall_seconds")
    print(json.dumps({k: metrics.get(k) for k in keys}, indent=2))
    return 0 if metrics.get("status") == "done" else 1


def parse_id_list(text: str, flag: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{flag} {text!r}: expected a comma-separated list")
    if len(set(items)) != len(items):
        raise ValueError(f"{flag} {text!r}: an item appears twice")
    return items


def cmd_sweep(args: argparse.Namespace) -> int:
    from .launch import run_sweep
    from .sweep import parse_sets

    sets = parse_sets(args.set or [])
    if args.data:
        sets["data.path"] = args.data
    rows = parse_id_list(args.rows, "--rows") if args.rows else None
    seeds = None
    if args.seeds is not None:
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: expected a positive number of seeds (0..N-1)")
        seeds = list(range(args.seeds))
    elif args.seed_list:
        try:
            seeds = [int(s) for s in parse_id_list(args.seed_list, "--seed-list")]
        except ValueError as error:
            raise ValueError(f"--seed-list {args.seed_list!r}: expected integers like 0,1 ({error})") from None
        if any(s < 0 for s in seeds):
            raise ValueError(f"--seed-list {args.seed_list!r}: seeds are non-negative")
    return run_sweep(args.sweep, args.scale, rows=rows, seeds=seeds, workers=args.workers, out=args.out, sets=sets,
                     dry_run=args.dry_run, retry_failed=args.retry_failed)


def cmd_average(args: argparse.Namespace) -> int:
    import torch

    from lightning_modules.averaging import average_checkpoints, step_checkpoints

    paths = step_checkpoints(args.checkpoints)[-args.last :]
    if not paths:
        raise ValueError(f"{args.checkpoints}: no step-*.ckpt checkpoints found")
    torch.save({"state_dict": average_checkpoints(paths), "averaged": [p.name for p in paths]}, args.output)
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) -> {args.output}")
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

    train = sub.add_parser("train", help="train and evaluate one run (a sweep row at a scale, or a resolved config)")
    train.add_argument("--sweep", help="sweep file, e.g. sweeps/table3.yaml")
    train.add_argument("--row", help="row id, e.g. base")
    train.add_argument("--scale", help="scale preset: tiny, small or paper (sweeps/scales.yaml)")
    train.add_argument("--config", help="a resolved config file (a run folder's config.yaml)")
    train.add_argument("--data", help="corpus directory (sets data.path)")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="override, e.g. --set positional=none --set train.max_steps=500")
    train.add_argument("--seed", type=int, help="random seed (default: the sweep's first)")
    train.add_argument("--out", default="runs", help="root of run folders (default: runs/)")
    train.add_argument("--run-dir", help="train into exactly this folder instead of one under --out (used by `ablate sweep`)")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.set_defaults(handler=cmd_train)

    sweep = sub.add_parser(
        "sweep", help="train a sweep's rows x seeds on this machine, K runs at a time (skips finished runs)",
        description="Train every run of a sweep at a scale, each in a process of its own, K at a time. Finished runs are "
        "skipped, interrupted ones resume from their last checkpoint; a lock per run folder keeps two sweeps on the same "
        "--out from training the same run. Exit code 0 only when every selected run ends done.",
    )
    sweep.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    sweep.add_argument("--scale", required=True, help="scale preset: tiny, small or paper (scales.yaml beside the sweep)")
    sweep.add_argument("--rows", help="comma-separated row ids, e.g. A1,B2 (default: all rows)")
    seeds = sweep.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, metavar="N", help="the first N seeds, 0..N-1 (default: the sweep's seeds)")
    seeds.add_argument("--seed-list", metavar="S,S", help="explicit seeds, e.g. 0,1")
    sweep.add_argument("--workers", type=int, metavar="K", help="runs at a time (default: one per GPU, else 1); each gets cores // K")
    sweep.add_argument("--out", default="runs", help="root of run folders (default: runs/)")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE", help="override for every run, e.g. --set train.max_steps=500")
    sweep.add_argument("--data", help="corpus directory (sets data.path)")
    sweep.add_argument("--dry-run", action="store_true", help="print the runs, their status and cost; train nothing")
    sweep.add_argument("--retry-failed", action="store_true", help="also rerun failed and diverged runs")
    sweep.set_defaults(handler=cmd_sweep)

    average = sub.add_parser("average", help="average the last k periodic checkpoints of a run")
    average.add_argument("checkpoints", help="a run's checkpoints/ folder")
    average.add_argument("--last", type=int, default=5, help="how many of the latest checkpoints (paper: 5 base, 20 big)")
    average.add_argument("--output", required=True, help="file to write the averaged weights to")
    average.set_defaults(handler=cmd_average)
    from .tables import add_table_parser

    add_table_parser(sub)
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
