"""What a sweep will cost in GPU-hours: its counted FLOPs over a sustained rate per device, measured or assumed.

The rate is in the dry run's own count (lightning_modules.flops.training_flops over the planned tokens, i.e. the
batch budget per side, padding included), per second of a measured optimiser step: `ablate gpu-check` records it
per model and per-device batch in results/gpu_check.json. So FLOPs / rate is the measured step time scaled by each
row's share of the work, with no separate padding or MFU factor to get wrong. Without that file the rate is an
assumption, and the dry run prints it as one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

GPU_CHECK_FILE = "gpu_check.json"
RESULTS = Path(__file__).resolve().parents[2] / "results"
# The assumption when nothing is measured: 30 % of the dense bf16 peak of an H100/H200 (989 TFLOP/s). A stated
# planning figure, not a measurement; the goal for base on one H200 is 40 % MFU.
ASSUMED_PEAK_TFLOPS = 989.0
ASSUMED_UTILISATION = 0.30


@dataclass(frozen=True)
class Throughput:
    """A device's sustained rate in the dry run's FLOP count, and where it comes from."""

    flops_per_s: float
    basis: str  # one line for the dry run: what was measured where, or that it is an assumption
    measured: bool


ASSUMED = Throughput(
    ASSUMED_PEAK_TFLOPS * 1e12 * ASSUMED_UTILISATION,
    f"ASSUMED, not measured: {ASSUMED_UTILISATION:.0%} of a {ASSUMED_PEAK_TFLOPS:g} TFLOP/s bf16 peak (H100/H200) "
    f"per GPU; run `ablate gpu-check --out results` on the GPU for a measured rate",
    False,
)


def read_measurements(results: Path = RESULTS) -> list[dict[str, Any]]:
    """The training measurements of results/gpu_check.json that carry a planning rate ([] without the file)."""
    path = Path(results) / GPU_CHECK_FILE
    if not path.is_file():
        return []
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable GPU check record ({error})") from None
    if document.get("quick") or document.get("device") != "cuda":
        return []  # a CPU smoke test of the check prices nothing
    device = document.get("machine", {}).get("gpu") or document.get("device")
    entries = []
    for entry in document.get("training", []):
        if isinstance(entry.get("planned_flops_per_s"), (int, float)) and entry["planned_flops_per_s"] > 0:
            entries.append({**entry, "device_name": device, "file": str(path)})
    return entries


def throughput_for(params: int, device_tokens: int, measurements: Sequence[dict[str, Any]]) -> Throughput:
    """The measured rate of the model and per-device batch nearest this run's (in log ratio of parameters plus log
    ratio of tokens per device, the two things a step's efficiency depends on most), else the assumption.

    A run with fewer tokens per device than the measurement it is priced by gets no shorter a step: the rate scales
    down with its tokens. A step's time has a floor that a smaller batch does not lower (results/gpu_check.md: on the
    H200, 3,125 tokens per device took nearly as long as 25,000), so carrying the rate down would price the smaller
    per-device batches of more GPUs as cheaper than measured."""
    if not measurements:
        return ASSUMED

    def distance(entry: dict[str, Any]) -> float:
        return abs(math.log(params / entry["params"])) + abs(math.log(device_tokens / entry["device_tokens"]))

    best = min(measurements, key=distance)
    rate = float(best["planned_flops_per_s"])
    basis = (
        f"measured: {best['file']} ({best.get('device_name') or 'GPU'}, {best['name']}: "
        f"{best['params'] / 1e6:.1f}M parameters at {best['device_tokens']:,} tokens per device"
    )
    if device_tokens < best["device_tokens"]:
        rate *= device_tokens / best["device_tokens"]
        basis += f"; {device_tokens:,} tokens per device priced at that measured step time"
    return Throughput(rate, basis + ")", True)


def gpu_hours(flops: float, throughput: Throughput) -> float:
    """Device-hours of a run of `flops` (all devices together) at `throughput` per device: perfect scaling over
    devices is assumed (DDP's gradient all-reduce overlaps the backward pass); the per-device batch is accounted
    for by measuring at it."""
    return flops / throughput.flops_per_s / 3600.0


def basis_lines(throughputs: Sequence[Optional[Throughput]]) -> list[str]:
    """The distinct bases behind a plan's figures, each once, in first-use order."""
    seen: list[str] = []
    for throughput in throughputs:
        if throughput is not None and throughput.basis not in seen:
            seen.append(throughput.basis)
    return seen


@dataclass(frozen=True)
class WallGuess:
    """Wall seconds of a run not measured yet, from the ones that were: seconds_per_flop × its counted FLOPs plus
    seconds_per_layer_step × N × steps. The second term is what a step pays per layer beyond its counted FLOPs (at
    the widths a CPU trains, many small operators, each with a cost of its own): fitted to the converged Table 3 it
    is most of a base step, which is why one seconds-per-FLOP rate priced a narrow six-layer row (C4) too cheap and a
    wide one (C5, big) too dear."""

    seconds_per_flop: float
    seconds_per_layer_step: float
    basis: str  # one line for the dry run: which form, fitted over how many runs

    def seconds(self, flops: float, layer_steps: float) -> float:
        return self.seconds_per_flop * flops + self.seconds_per_layer_step * layer_steps


def fit_wall_guess(measured: Sequence[tuple[float, float, float]]) -> Optional[WallGuess]:
    """A WallGuess from (counted FLOPs, N × steps, measured seconds) of finished runs; None without any.

    Least squares on relative error (each run weighs the same, whatever its length), over both terms when the runs
    tell them apart (at least two distinct, non-proportional (FLOPs, layer-steps) pairs) and both come out positive;
    otherwise the median seconds per FLOP alone, as with a single measured row."""
    points = [(flops, layers, seconds) for flops, layers, seconds in measured if min(flops, layers, seconds) > 0]
    if not points:
        return None
    rates = sorted(seconds / flops for flops, _, seconds in points)
    median = WallGuess(rates[len(rates) // 2], 0.0, f"the median seconds per FLOP of {len(points)} measured run(s)")
    # Each run's equation divided by its seconds: rows of ten minutes and of three hours count alike.
    design = np.array([(flops / seconds, layers / seconds) for flops, layers, seconds in points])
    if np.linalg.matrix_rank(design / design.max(axis=0)) < 2:  # every run has the same FLOPs per layer-step
        return median
    (per_flop, per_layer_step), *_ = np.linalg.lstsq(design, np.ones(len(points)), rcond=None)
    if per_flop <= 0 or per_layer_step <= 0:
        return median
    fitted = WallGuess(float(per_flop), float(per_layer_step), "")
    worst = max(abs(fitted.seconds(flops, layers) - seconds) / seconds for flops, layers, seconds in points)
    return replace(
        fitted,
        basis=f"a fit over {len(points)} measured run(s): {per_flop * 1e12:.3g} s per TFLOP + "
        f"{per_layer_step * 1e3:.3g} ms per layer-step (N × steps); it misses the measured runs by at most "
        f"{worst:.0%}",
    )
