"""The `ablate` command. Each subcommand is a thin shell over a function of the framework."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence


def cmd_params(args: argparse.Namespace) -> int:
    from .params import parameter_table

    rows = parameter_table(args.sweep, vocab_size=args.vocab, scale=args.scale)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    vocabularies = ", ".join(str(v) for v in sorted({row["vocab"] for row in rows})) or "-"
    table = Table(title=f"Parameters of {args.sweep} (vocabulary {vocabularies}, scale {args.scale or 'paper units'})")
    for column in ("row", "group", "params", "paper", "Δ", "within tolerance"):
        table.add_column(column, justify="left" if column in ("row", "group") else "right")
    for row in rows:
        paper = row["paper_params_m"]
        table.add_row(
            row["row"],
            row["group"],
            f"{row['params'] / 1e6:.1f}M",
            "—" if paper is None else f"{paper:g}M",
            "" if paper is None else f"{row['params'] / 1e6 - paper:+.1f}M",
            "" if row["within_tolerance"] is None else ("yes" if row["within_tolerance"] else "NO"),
        )
    Console().print(table)
    return 0


def resolve_run(args: argparse.Namespace):
    """The RunConfig and meta that `ablate train` arguments describe."""
    from .records import read_config
    from .sweep import apply_sets, build_config, command_sets, expand, load_sweep, scale_named

    sets = command_sets(args)
    if args.config:
        if args.sweep or args.row or args.scale:
            raise ValueError("--config takes a resolved config; do not combine it with --sweep/--row/--scale")
        config, meta = read_config(args.config)
        if args.seed is not None:
            sets["seed"] = args.seed
        if sets:
            config = build_config(apply_sets(config.to_dict(), sets), str(args.config))
        meta["run_id"] = config.run_id()
        return config, meta
    missing = [
        flag for flag, value in (("--sweep", args.sweep), ("--row", args.row), ("--scale", args.scale)) if not value
    ]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}: give --sweep, --row and --scale, or --config FILE")
    sweep = load_sweep(args.sweep)
    scale = scale_named(args.sweep, args.scale)
    seed = args.seed if args.seed is not None else sweep.seeds[0]
    (spec,) = expand(sweep, scale, seeds=[seed], rows=[args.row], sets=sets)
    meta = {"sweep": spec.sweep, "row": spec.row, "group": spec.group, "scale": spec.scale, "run_id": spec.run_id}
    return spec.config, meta


def train_callbacks() -> list:
    """The extra Lightning callbacks of `ablate train`: in a trial of `ablate search`, the callback that reports to
    its study and stops the trial when pruned (on every DDP rank: the decision is broadcast); [] otherwise."""
    from .search.trial import optuna_callbacks_from_env

    return optuna_callbacks_from_env()


# `ablate train`'s exit code after a preemption checkpoint: 128 + the signal, as a shell reports a process the
# signal ended (SIGTERM: 143), since it stopped on the signal, but with its step saved.
PREEMPTED_EXIT = 128


def scored(config) -> dict[str, str]:
    """What a run's figures are, in words: the last checkpoint (Table 3's protocol, the paper's single models) and,
    with eval.average_last > 1, also the average that Table 2 reads."""
    what = {"figures": "the last checkpoint, no averaging (Table 3's protocol: the paper's single models)"}
    k = config.eval.average_last
    if k > 1:
        what["averaged"] = (
            f"also the mean of the last {k} checkpoints, {config.train.checkpoint_every_steps:,} steps apart, "
            "scored apart in metrics.json's `averaged` (Table 2's protocol)"
        )
    return what


def cmd_train(args: argparse.Namespace) -> int:
    import yaml

    from .launch.processes import emulated_bf16_warning, pin_cpus_from_env
    from .records import train_lock

    pin_cpus_from_env()  # before torch starts its threads: the cores `ablate sweep` gave this run
    config, meta = resolve_run(args)
    if args.print_config:
        print(
            yaml.safe_dump(
                {"run_id": config.run_id(), "meta": meta, "scored": scored(config), "config": config.to_dict()},
                sort_keys=False,
                allow_unicode=True,
                width=200,
            ),
            end="",
        )
        return 0
    if args.devices < 1:
        raise ValueError(f"--devices {args.devices}: expected a positive integer")
    from .records import read_metrics, run_folder
    from .train import Preempted, is_rank_zero, train_run

    run_dir = Path(args.run_dir) if args.run_dir else run_folder(args.out, meta, config)
    callbacks = train_callbacks()
    if not is_rank_zero():  # a DDP rank >= 1 that Lightning started: rank 0 holds the lock and writes the records
        try:
            train_run(
                config,
                run_dir,
                meta,
                progress=False,
                devices=args.devices,
                accelerator=args.accelerator,
                callbacks=callbacks,
                nodes=args.nodes,
            )
        except Preempted as stop:
            return PREEMPTED_EXIT + stop.signum
        return 0
    if config.data.task == "parsing":
        keys = ("status", "dev_ppl", "dev_f1", "test_f1", "test_invalid", "steps", "wall_seconds")
    else:
        keys = ("status", "dev_ppl", "dev_bleu", "dev_bleu_tok", "test_bleu", "test_bleu_tok", "steps", "wall_seconds")
    with train_lock(run_dir):  # one trainer per run folder, whoever started it
        record = read_metrics(run_dir) or {}
        if record.get("status") == "done" and not getattr(args, "force", False):
            # Done: nothing to train or evaluate; re-evaluating would rewrite its scores and wall_seconds.
            print(f"run {meta['run_id']} is done ({run_dir}); nothing changed (--force re-evaluates)", file=sys.stderr)
            print(json.dumps({k: record.get(k) for k in keys}, indent=2))
            return 0
        print(f"run {meta['run_id']} -> {run_dir}", file=sys.stderr)
        on_gpu = {"auto": None, "cpu": False}.get(args.accelerator, True)
        warning = emulated_bf16_warning([config.train.precision], on_gpu)
        if warning:
            print(f"ablate train: {warning}", file=sys.stderr)
        try:
            metrics = train_run(
                config,
                run_dir,
                meta,
                progress=sys.stderr.isatty(),
                devices=args.devices,
                accelerator=args.accelerator,
                callbacks=callbacks,
                nodes=args.nodes,
            )
        except Preempted as stop:
            print(f"ablate train: {stop}; {run_dir} resumes from its last checkpoint", file=sys.stderr)
            return PREEMPTED_EXIT + stop.signum
    print(json.dumps({k: metrics.get(k) for k in keys}, indent=2))
    return 0 if metrics.get("status") == "done" else 1


def parse_workers(text: str) -> int | str:
    from .launch.processes import parse_workers as parse

    return parse(text)


def cmd_sweep(args: argparse.Namespace) -> int:
    from .launch.local import run_sweep
    from .sweep import command_sets, parse_id_list, selected_seeds

    sets = command_sets(args)
    rows = parse_id_list(args.rows, "--rows") if args.rows else None
    seeds = selected_seeds(args)
    if args.gpus_per_run is not None and args.gpus_per_run < 1:
        raise ValueError(f"--gpus-per-run {args.gpus_per_run}: expected a positive integer")
    slurm = slurm_options(args)
    return run_sweep(
        args.sweep,
        args.scale,
        rows=rows,
        seeds=seeds,
        workers=parse_workers(args.workers) if args.workers is not None else None,
        out=args.out,
        sets=sets,
        dry_run=args.dry_run,
        retry_failed=args.retry_failed,
        gpus_per_run=args.gpus_per_run or 1,
        slurm=slurm,
        wait=args.wait,
        reuse=not args.no_reuse,
        published=args.published,
        nodes=args.nodes,
        as_json=args.json,
        order=args.order,
    )


SLURM_FLAGS = (
    "slurm_partition",
    "slurm_time",
    "slurm_gpus_per_node",
    "slurm_cpus_per_task",
    "slurm_array_parallelism",
    "slurm_cluster",
    "wait",
)


def slurm_options(args: argparse.Namespace):
    """The SlurmOptions of `ablate sweep --launcher slurm ...`; None for the local launcher."""
    if args.launcher != "slurm":
        given = ["--" + flag.replace("_", "-") for flag in SLURM_FLAGS if getattr(args, flag) not in (None, False)]
        if given:
            raise ValueError(f"{', '.join(given)}: only with --launcher slurm (the local launcher always waits)")
        return None
    from .launch.slurm import SlurmOptions

    if args.workers is not None:
        raise ValueError("--workers is for the local launcher; with --launcher slurm use --slurm-array-parallelism")
    gpus = args.gpus_per_run or 1
    if args.slurm_gpus_per_node is not None:
        if args.slurm_gpus_per_node < 0:
            raise ValueError(f"--slurm-gpus-per-node {args.slurm_gpus_per_node}: expected 0 or more")
        if args.gpus_per_run is not None and args.slurm_gpus_per_node != gpus:
            raise ValueError(
                f"--slurm-gpus-per-node {args.slurm_gpus_per_node} and --gpus-per-run {gpus} disagree: "
                "each run is one job with its GPUs on one node"
            )
        gpus = args.slurm_gpus_per_node
    for flag, value in (
        ("--slurm-time", args.slurm_time),
        ("--slurm-cpus-per-task", args.slurm_cpus_per_task),
        ("--slurm-array-parallelism", args.slurm_array_parallelism),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} {value}: expected a positive integer")
    return SlurmOptions(
        partition=args.slurm_partition,
        time_min=args.slurm_time or SlurmOptions.time_min,
        gpus_per_run=gpus,
        nodes=args.nodes,
        cpus_per_task=args.slurm_cpus_per_task,
        array_parallelism=args.slurm_array_parallelism,
        cluster=args.slurm_cluster,
    )


def cmd_search(args: argparse.Namespace) -> int:
    from .launch.processes import auto_workers
    from .search.command import run_search
    from .sweep import command_sets

    workers = parse_workers(args.workers)
    return run_search(
        args.search,
        trials=args.trials,
        storage=args.storage,
        workers=auto_workers() if workers == "auto" else workers,
        scale=args.scale,
        out=args.out,
        sampler=args.sampler,
        trial_timeout=args.trial_timeout,
        sets=command_sets(args),
    )


def cmd_sync(args: argparse.Namespace) -> int:
    from .sync import sync_runs

    return sync_runs(args.runs_dir, timeout=args.timeout, dry_run=args.dry_run)


def cmd_average(args: argparse.Namespace) -> int:
    import io

    import torch

    from lightning_modules.atomic import write_atomic_bytes
    from lightning_modules.checkpoints import average_checkpoints, step_checkpoints

    paths = step_checkpoints(args.checkpoints)[-args.last :]
    if not paths:
        raise ValueError(
            f"{args.checkpoints}: no step-*.ckpt checkpoints found (they are written every "
            "train.checkpoint_every_steps; a run shorter than that has only last.ckpt)"
        )
    if Path(args.output).exists() and not args.force:
        raise ValueError(f"--output {args.output}: the file exists; give another name, or --force to replace it")
    buffer = io.BytesIO()
    torch.save({"state_dict": average_checkpoints(paths), "averaged": [p.name for p in paths]}, buffer)
    write_atomic_bytes(Path(args.output), buffer.getvalue())  # a crash never leaves half a file
    print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) -> {args.output}")
    return 0


def bench_command_line(args: argparse.Namespace) -> str:
    """The `ablate bench` command that `args` came from, for the report."""
    words = [f"OMP_NUM_THREADS={args.threads}", "ablate", "bench"]
    for flag in ("quick", "compile", "no_levers"):
        if getattr(args, flag):
            words.append("--" + flag.replace("_", "-"))
    for flag in ("dims", "markdown", "multi30k", "threads", "device", "precision", "clock", "peak_tflops"):
        if getattr(args, flag) is not None:
            words += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    return " ".join(words)


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from .measure.bench.options import BenchOptions, default_precision
    from .measure.bench.report import PADDING_TARGET, RATIO_KEYS, TARGETS, json_dumps, to_markdown
    from .measure.bench.run import run_bench

    if args.multi30k and not Path(args.multi30k).is_dir():
        raise ValueError(f"--multi30k {args.multi30k}: not a directory")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    # The precision our presets train these dimensions in (the small preset: bf16-mixed) where the hardware has bf16.
    args.precision = args.precision or default_precision(args.device)
    overrides = {
        "threads": args.threads,
        "device": args.device,
        "precision": args.precision,
        "multi30k": args.multi30k,
        "compile": args.compile,
        "clock": args.clock,
        "peak_tflops": args.peak_tflops,
    }
    if args.no_levers:
        overrides["levers"] = False
    options = BenchOptions.at(args.dims or "small", quick=args.quick, **overrides)
    result = run_bench(options, progress=lambda message: print(f"[bench] {message}", file=sys.stderr, flush=True))
    if args.markdown:
        Path(args.markdown).write_text(to_markdown(result, bench_command_line(args)), encoding="utf-8")
    if args.json:
        print(json_dumps(result))
        return 0
    for key in RATIO_KEYS:
        print(f"{key:28s} {result[key]:7.3f}  (target >= {TARGETS[key]:g})")
    for corpus, value in result["padding_efficiency"].items():
        print(f"{'padding_efficiency ' + corpus:28s} {value:7.3f}  (target >= {PADDING_TARGET:g})")
    return 0


def add_search_parser(sub: Any) -> None:
    from .sweep import DATA_HELP

    parser = sub.add_parser(
        "search",
        help="hyperparameter search (optuna) around a sweep row; each trial is a training process",
        description="Search the parameters of a search file (e.g. sweeps/search_tiny.yaml) with optuna: K worker "
        "processes share one study, each trial trains in a process of its own and may be pruned at a validation. "
        "Ends with exactly N trials in the study, prints the best and writes <out>/<name>_best.yaml, a sweep file.",
    )
    parser.add_argument("search", help="search file, e.g. sweeps/search_tiny.yaml")
    parser.add_argument(
        "--trials", type=int, metavar="N", help="trials in the study in all (default: the file's budget)"
    )
    parser.add_argument(
        "--storage",
        help="sqlite:///F.db, postgresql://..., journal:PATH or PATH.journal (default: sqlite:///<out>/<name>.db)",
    )
    parser.add_argument(
        "--workers",
        default="1",
        metavar="K|auto",
        help="trials at a time, each a worker process (default 1); auto: one per core on CPU, one per GPU with GPUs",
    )
    parser.add_argument("--scale", help="scale preset (default: the file's scale)")
    parser.add_argument(
        "--out", default="runs/search", help="where the study, trial runs and best sweep go (default: runs/search)"
    )
    parser.add_argument(
        "--sampler",
        choices=("tpe", "grid"),
        default="tpe",
        help="tpe (seeded, default) or grid (every combination of categorical choices, enqueued)",
    )
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="fixed in every trial, e.g. --set train.max_steps=300"
    )
    parser.add_argument("--data", help=DATA_HELP)
    parser.add_argument(
        "--trial-timeout", type=float, metavar="SECONDS", help="stop and fail a trial that trains longer"
    )
    parser.set_defaults(handler=cmd_search)


def build_parser() -> argparse.ArgumentParser:
    from .sweep import DATA_HELP, SCALE_HELP, add_selection_arguments

    parser = argparse.ArgumentParser(
        prog="ablate", description="Reproduce and extend the ablations of 'Attention Is All You Need'."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    params = sub.add_parser("params", help="parameter count of every row of a sweep beside the paper's")
    params.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    params.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="shared vocabulary size (default: the scale's own data.vocab_size with --scale, else the paper's 37000)",
    )
    params.add_argument("--scale", default=None, help="count at a scale preset instead of the paper's units")
    params.add_argument("--json", action="store_true", help="print a JSON list")
    params.set_defaults(handler=cmd_params)

    train = sub.add_parser("train", help="train and evaluate one run (a sweep row at a scale, or a resolved config)")
    train.add_argument("--sweep", help="sweep file, e.g. sweeps/table3.yaml")
    train.add_argument("--row", help="row id, e.g. base")
    train.add_argument("--scale", help=SCALE_HELP)
    train.add_argument("--config", help="a resolved config file (a run folder's config.yaml)")
    train.add_argument("--data", help=DATA_HELP)
    train.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override, e.g. --set positional=none --set train.max_steps=500",
    )
    train.add_argument("--seed", type=int, help="random seed (default: the sweep's first)")
    train.add_argument("--out", default="runs", help="root of run folders (default: runs/)")
    train.add_argument(
        "--run-dir", help="train into exactly this folder instead of one under --out (used by `ablate sweep`)"
    )
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.add_argument(
        "--force",
        action="store_true",
        help="re-evaluate a run that is already done (default: say it is done and change nothing)",
    )
    train.add_argument(
        "--devices",
        type=int,
        default=1,
        metavar="G",
        help="DDP ranks per node (GPUs, or CPU processes with --accelerator cpu); a step is still data.batch_tokens "
        "per side over all of them (each device takes its share; see data.device_batch_tokens)",
    )
    train.add_argument(
        "--nodes",
        type=int,
        default=1,
        metavar="N",
        help="nodes of --devices each (under SLURM: the job's nodes; default 1)",
    )
    train.add_argument(
        "--accelerator",
        default="auto",
        choices=("auto", "cpu", "gpu", "cuda"),
        help="Lightning accelerator (default: auto)",
    )
    add_wandb_arguments(train)
    train.set_defaults(handler=cmd_train)

    sweep = sub.add_parser(
        "sweep",
        help="train a sweep's rows x seeds on this machine, K runs at a time (skips finished runs)",
        description="Train every run of a sweep at a scale, each in a process of its own, K at a time. Finished runs are "
        "skipped, interrupted ones resume from their last checkpoint; a lock per run folder keeps two sweeps on the same "
        "--out from training the same run. Exit code 0 only when every selected run ends done.",
    )
    sweep.add_argument("sweep", help="sweep file, e.g. sweeps/table3.yaml")
    sweep.add_argument("--scale", required=True, help=SCALE_HELP)
    add_selection_arguments(
        sweep,
        rows_help="comma-separated row ids, e.g. A1,B2 (default: all rows)",
        set_help="override for every run, e.g. --set train.max_steps=500",
    )
    sweep.add_argument(
        "--workers",
        metavar="K|auto",
        help="runs at a time (default: one per GPU; on CPU one single-thread run per core); each gets cores // K. "
        "auto: one single-thread run per core on CPU; with GPUs, runs per GPU by the largest run's parameters (4 under 10M, 2 under 100M, else 1: "
        "a small model leaves most of a GPU idle), at most one per core",
    )
    sweep.add_argument("--out", default="runs", help="root of run folders (default: runs/)")
    sweep.add_argument("--dry-run", action="store_true", help="print the runs, their status and cost; train nothing")
    sweep.add_argument("--retry-failed", action="store_true", help="also rerun failed and diverged runs")
    sweep.add_argument(
        "--order",
        default="longest",
        metavar="longest|cheapest",
        help="which runs start first, by FLOPs: longest (default: the shortest wall time for the whole sweep) or "
        "cheapest (the most finished runs soonest, on a machine held for a limited time)",
    )
    sweep.add_argument(
        "--no-reuse",
        action="store_true",
        help="train a run even when another sweep under --out, or a record published under --published, has a done "
        "run with the same id (same config)",
    )
    sweep.add_argument(
        "--published",
        default="results",
        metavar="DIR",
        help="where committed records are (DIR/records/); a pending run published there with the same id takes that "
        "record instead of training (default: results)",
    )
    sweep.add_argument(
        "--gpus-per-run",
        type=int,
        metavar="G",
        help="GPUs per run and node (default 1), trained with DDP when G > 1 (without CUDA: G CPU processes); a "
        "step is still data.batch_tokens per side over all of a run's devices",
    )
    sweep.add_argument(
        "--nodes",
        type=int,
        default=1,
        metavar="N",
        help="nodes per run, each with --gpus-per-run GPUs (--launcher slurm; the dry run plans it anywhere)",
    )
    sweep.add_argument(
        "--json", action="store_true", help="with --dry-run: print the plan as one JSON object (runs, total, basis)"
    )
    sweep.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: train here, K at a time (default); slurm: submit one job array through submitit and return",
    )
    slurm = sweep.add_argument_group("SLURM (--launcher slurm)")
    slurm.add_argument("--slurm-partition", metavar="P", help="partition to submit to")
    slurm.add_argument(
        "--slurm-time",
        type=int,
        metavar="MIN",
        help="time limit per run in minutes (default: 1440); "
        "a run reaching it is requeued (up to 3 times) and resumes from its last checkpoint",
    )
    slurm.add_argument(
        "--slurm-gpus-per-node", type=int, metavar="G", help="GPUs per job (default: --gpus-per-run; 0: CPU-only jobs)"
    )
    slurm.add_argument("--slurm-cpus-per-task", type=int, metavar="C", help="CPUs per task (one task per GPU)")
    slurm.add_argument("--slurm-array-parallelism", type=int, metavar="K", help="runs of the array running at once")
    slurm.add_argument(
        "--slurm-cluster", help=argparse.SUPPRESS
    )  # submitit cluster: "local" runs the jobs here (tests)
    slurm.add_argument("--wait", action="store_true", help="wait for the jobs and report like the local launcher")
    add_wandb_arguments(sweep)
    sweep.set_defaults(handler=cmd_sweep)

    sync = sub.add_parser(
        "sync",
        help="upload offline wandb runs of run folders (wandb sync), skipping synced ones",
        description="Find <run>/wandb/offline-run-* under RUNS_DIR and upload each with `wandb sync`. Runs "
        "already synced (wandb's .synced marker) are skipped. Fails fast when no wandb server answers.",
    )
    sync.add_argument(
        "runs_dir", nargs="?", default="runs", metavar="RUNS_DIR", help="root of run folders (default: runs/)"
    )
    sync.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds for the whole sync, not per run (default: 600); it stops at the first run that times out or "
        "when they are spent, and says how many runs it did not try",
    )
    sync.add_argument("--dry-run", action="store_true", help="list what would be synced")
    sync.set_defaults(handler=cmd_sync)

    average = sub.add_parser("average", help="average the last k periodic checkpoints of a run")
    average.add_argument("checkpoints", help="a run's checkpoints/ folder")
    average.add_argument(
        "--last", type=int, default=5, help="how many of the latest checkpoints (paper: 5 base, 20 big)"
    )
    average.add_argument("--output", required=True, help="file to write the averaged weights to (a new file)")
    average.add_argument("--force", action="store_true", help="replace --output if it exists")
    average.set_defaults(handler=cmd_average)
    from .report import add_table_parser

    add_table_parser(sub)
    add_search_parser(sub)
    from .sweep import add_scales_argument

    for name in ("params", "train", "sweep", "search"):  # the table parser adds its own
        add_scales_argument(sub.choices[name])
    bench = sub.add_parser(
        "bench",
        help="training and decoding speed beside Hugging Face, torch.nn.Transformer and a bare loop",
        description="Measure, in one process, interleaved, with medians: training tokens/s of our Lightning step against a "
        "bare PyTorch loop, Hugging Face MarianMTModel and torch.nn.Transformer at the same dimensions, batches, threads and "
        "precision; beam-4 decoding against HF generate and our uncached decoder; the batch sampler's padding efficiency; "
        "peak memory; and each speed lever against its alternative. Needs `transformers` (the dev extra).",
    )
    bench.add_argument(
        "--quick", action="store_true", help="about a minute: fewer rounds and sentences, no lever timings"
    )
    bench.add_argument(
        "--dims",
        choices=("tiny", "small", "base"),
        help="tiny: the tiny preset's step (d_model 64, 1,024-token batches); small (default): d_model 128, "
        "2,048-token batches, sized for a CPU core; base: the paper's base "
        "model (d_model 512, d_ff 2048) at its 25,000-token batches, for a GPU's tokens/s and MFU",
    )
    bench.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    bench.add_argument("--markdown", metavar="FILE", help="also write the report, e.g. results/bench.md")
    bench.add_argument(
        "--multi30k", metavar="DIR", help="Multi30k directory (train.en/train.de ...), for its padding efficiency"
    )
    bench.add_argument("--threads", type=int, default=1, help="torch threads for every contender (default: 1)")
    bench.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available, else cpu")
    bench.add_argument(
        "--precision",
        choices=("32-true", "bf16-mixed"),
        help="for every training contender (default: bf16-mixed on CUDA and on CPUs with avx512_bf16 or "
        "amx_bf16, else 32-true); decoding is timed in fp32",
    )
    bench.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall (default) or cpu: this process's CPU time, steadier when other jobs share the cores",
    )
    bench.add_argument(
        "--peak-tflops", type=float, help="the GPU's dense bf16 peak, when its name is not known to the bench"
    )
    bench.add_argument("--compile", action="store_true", help="also time torch.compile (minutes of warm-up on CPU)")
    bench.add_argument("--no-levers", action="store_true", help="skip the lever timings of the full bench")
    bench.set_defaults(handler=cmd_bench)
    from .measure.complexity import add_complexity_parser

    add_complexity_parser(sub)
    from .measure.gpu_check import add_gpu_check_parser

    add_gpu_check_parser(sub)
    from .reproduce import add_reproduce_parser

    add_reproduce_parser(sub)
    return parser


def command_environment(args: argparse.Namespace) -> dict[str, str]:
    """Options that this command and the processes it starts read from the environment."""
    from .sweep import SCALES_ENV
    from .tracking import ENTITY_ENV, PROJECT_ENV, TAGS_ENV

    env = {}
    if getattr(args, "scales", None):  # seen by scale_named here and in the processes this command starts
        env[SCALES_ENV] = str(Path(args.scales).absolute())
    for name, variable in (("wandb_project", PROJECT_ENV), ("wandb_entity", ENTITY_ENV), ("wandb_tags", TAGS_ENV)):
        if getattr(args, name, None):
            env[variable] = getattr(args, name)
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    import os

    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    env = command_environment(args)
    previous = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        return handler(args)
    except ValueError as error:
        print(f"ablate {args.command}: error: {error}", file=sys.stderr)
        return 2
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def add_wandb_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wandb-project", help="wandb project (default: $WANDB_PROJECT, else attention-ablations)")
    parser.add_argument("--wandb-entity", help="wandb entity, a user or team (default: $WANDB_ENTITY, else yours)")
    parser.add_argument(
        "--wandb-tags", metavar="T,T", help="extra wandb tags, comma-separated (also $ABLATE_WANDB_TAGS)"
    )


if __name__ == "__main__":
    sys.exit(main())
