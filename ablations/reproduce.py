"""`ablate reproduce`: retrain the first steps of a recorded run and compare its training loss with the record's.

A published record is treated as done by its run id, the hash of its resolved config, so a sweep continued on
another machine, or after the code moved on, pairs old records with new runs. That is sound only while the code
still trains the same run from the same config: the same data order, initialisation and update. This command
checks it for one record in a minute: it trains the record's config (same seed, same threads, the schedule of its
whole budget) for `--steps` steps in a temporary folder, deleted afterwards, and compares the training loss the
run logged every 10 steps.

The native kernels draw the dropout masks on CPU: the retrained run has them on or off as the record's
`native_kernels` says (records from 4 December 2026 on), else as ATTENTION_NATIVE_KERNELS says.

The verdict: `identical` (every compared loss equal to all printed digits); `same run` (each within `--rtol`,
relative: the kernels of another CPU or torch build round differently, and the rounding grows step by step; the
README gives measured drifts); `differs` (a loss further off: other data,
initialisation or training code), which exits 1.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

LOSS_KEY = "train/loss"
DEFAULT_STEPS = 50
DEFAULT_RTOL = 1e-3


@dataclass(frozen=True)
class Comparison:
    """The training loss at each step logged by both the record and the retrained run."""

    steps: tuple[int, ...]
    recorded: tuple[float, ...]
    reproduced: tuple[float, ...]
    rtol: float

    @property
    def relative(self) -> tuple[float, ...]:
        return tuple(abs(new - old) / max(abs(old), 1e-12) for old, new in zip(self.recorded, self.reproduced))

    @property
    def verdict(self) -> str:
        if all(old == new for old, new in zip(self.recorded, self.reproduced)):
            return "identical"
        if all(math.isfinite(r) and r <= self.rtol for r in self.relative):
            return "same run"
        return "differs"


def compare(recorded: Sequence[tuple[int, float]], reproduced: Sequence[tuple[int, float]], rtol: float) -> Comparison:
    """The two curves at the steps both logged, in order; a ValueError when they share none."""
    mine = dict(reproduced)
    shared = [(step, value, mine[step]) for step, value in recorded if step in mine]
    if not shared:
        raise ValueError("the record and the retrained run logged no training loss at a common step")
    steps, old, new = zip(*shared)
    return Comparison(tuple(steps), tuple(old), tuple(new), rtol)


def recorded_loss(folder: Path, steps: int) -> list[tuple[int, float]]:
    """The record's training loss up to `steps` (a published record's curves-*.csv or a run folder's logs)."""
    from .report.collect import read_curves

    curve = [(step, value) for step, value in read_curves(folder)[LOSS_KEY] if step < steps]
    if not curve:
        raise ValueError(f"{folder}: no training loss logged before step {steps}; --steps must reach the first (10)")
    return curve


def retrain(config: Any, steps: int, threads: Optional[int], workdir: Path) -> list[tuple[int, float]]:
    """Train `config` as `ablate train` does, stopping after `steps` steps; the training loss it logged."""
    import lightning.pytorch as pl
    import torch

    from lightning_modules.config import batch_plan
    from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID
    from lightning_modules.module import TranslationModule

    from .report.collect import read_curves
    from .train import csv_logger, fit_trainer, make_data

    class StopAfter(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step >= steps:
                trainer.should_stop = True

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        pl.seed_everything(config.seed, workers=True, verbose=False)
        data = make_data(config)
        module = TranslationModule(config, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
        plan = batch_plan(config.data, 1)
        trainer = fit_trainer(config, workdir, [csv_logger(workdir, 1)], [StopAfter()], False, plan, "cpu")
        trainer.fit(module, datamodule=data)
    finally:
        torch.set_num_threads(previous_threads)
    return [(step, value) for step, value in read_curves(workdir)[LOSS_KEY] if step < steps]


def replays_native_kernels(metrics: dict) -> bool:
    """Whether the retrained run turns the native kernels on: as the record's `native_kernels` says, else (records
    before 4 December 2026) as ATTENTION_NATIVE_KERNELS says."""
    from lightning_modules import native

    recorded = metrics.get("native_kernels")
    return native.enabled if recorded is None else bool(recorded)


def reproduce(record: Path, steps: int = DEFAULT_STEPS, rtol: float = DEFAULT_RTOL) -> tuple[Comparison, dict]:
    """Retrain the record's first `steps` steps on this machine's CPU and compare; (comparison, the record's
    metrics.json). The native kernels, which draw the dropout masks on CPU, are on or off as the record's
    `native_kernels` says; a record without it (before 4 December 2026) is replayed as ATTENTION_NATIVE_KERNELS
    says (default on). A ValueError names what the record lacks or what cannot be replayed here."""
    from lightning_modules import native

    from .records import CONFIG_FILE, read_config, read_metrics

    record = Path(record)
    if steps < 1 or not rtol > 0:
        raise ValueError(f"--steps {steps}, --rtol {rtol}: expected a positive number of steps and tolerance")
    if not (record / CONFIG_FILE).is_file():
        raise ValueError(f"{record}: no {CONFIG_FILE}; expected a run folder or a published record")
    config, _ = read_config(record / CONFIG_FILE)
    metrics = read_metrics(record) or {}
    if int(metrics.get("devices") or 1) * int(metrics.get("nodes") or 1) != 1:
        raise ValueError(
            f"{record}: trained on {metrics['devices']} devices x {metrics.get('nodes', 1)} nodes; "
            "reproduce replays single-device runs only"
        )
    recorded = recorded_loss(record, steps)
    with (
        native.switched(replays_native_kernels(metrics)),
        tempfile.TemporaryDirectory(prefix="ablate-reproduce-") as workdir,
    ):
        reproduced = retrain(config, steps, metrics.get("torch_threads"), Path(workdir))
    return compare(recorded, reproduced, rtol), metrics


def cmd_reproduce(args: Any) -> int:
    from lightning_modules import native

    from .provenance import hardware

    comparison, metrics = reproduce(Path(args.record), args.steps, args.rtol)
    here = hardware()
    recorded = metrics.get("native_kernels")
    replayed = replays_native_kernels(metrics) and native.library() is not None
    said = {True: "on", False: "off", None: "not recorded"}
    print(
        f"record: {args.record} (commit {metrics.get('commit')}, {metrics.get('cpu_model')}, "
        f"torch {metrics.get('torch_version')}, {metrics.get('torch_threads')} thread(s), "
        f"native kernels {said[recorded]})"
    )
    print(
        f"here:   {here['cpu_model']}, torch {here['torch_version']}, the first {args.steps} steps, "
        f"native kernels {said[replayed]}"
    )
    print(f"{'step':>6}  {'recorded loss':>15}  {'retrained loss':>15}  relative difference")
    for step, old, new, rel in zip(comparison.steps, comparison.recorded, comparison.reproduced, comparison.relative):
        print(f"{step:>6}  {old:>15.7f}  {new:>15.7f}  {rel:.1e}")
    worst = max(comparison.relative)
    print(
        f"verdict: {comparison.verdict} (largest relative difference {worst:.1e} over "
        f"{len(comparison.steps)} logged steps; tolerance {comparison.rtol:g})"
    )
    return 1 if comparison.verdict == "differs" else 0


def add_reproduce_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "reproduce",
        help="retrain a recorded run's first steps here and compare its training loss with the record's",
        description="Check that this checkout and machine still train a recorded run as it was trained: retrain "
        "the record's config (its seed, threads and schedule) for --steps steps in a temporary folder, deleted "
        "afterwards, and compare the training loss logged every 10 steps. identical: equal to all digits; same "
        "run: within --rtol (kernels of another CPU round differently); differs: exit 1.",
    )
    parser.add_argument("record", help="a run folder or a published record, e.g. results/records/table3_tiny/base-s0-…")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"steps to retrain (default: {DEFAULT_STEPS})")
    parser.add_argument(
        "--rtol",
        type=float,
        default=DEFAULT_RTOL,
        help=f"largest relative loss difference still the same run (default: {DEFAULT_RTOL:g}; rounding grows "
        "with steps, so allow more for longer checks)",
    )
    parser.set_defaults(handler=cmd_reproduce)
