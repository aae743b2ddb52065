"""The bench's measuring instruments: both clocks, interleaved rounds and medians, model FLOPs, peak memory."""

from __future__ import annotations

import math
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

# Dense bf16 peak of common GPUs in TFLOP/s (vendor data sheets, without sparsity), for model FLOPs utilisation.
BF16_PEAK_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Mark:
    """A point in time on both clocks: wall (perf_counter) and this process's CPU time (all its threads)."""

    wall: float
    cpu: float

    @classmethod
    def now(cls) -> "Mark":
        return cls(time.perf_counter(), time.process_time())

    def until(self, later: "Mark") -> dict[str, float]:
        return {"wall": later.wall - self.wall, "cpu": later.cpu - self.cpu}


def interleave(contenders: dict[str, Callable[[], dict[str, float]]], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Call every contender once per round, in the same order; each returns its own measured seconds per clock."""
    times: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, measure in contenders.items():
            times[name].append(measure())
    return times


def median_seconds(rounds: list[dict[str, float]], clock: str) -> float:
    return statistics.median(r[clock] for r in rounds)


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs for rates (tokens/s, sentences/s): > 1 means we are faster."""
    return ours / theirs if theirs > 0 else math.inf


def bf16_peak_flops(device: torch.device, override_tflops: Optional[float]) -> Optional[float]:
    if override_tflops is not None:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in BF16_PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def timed_loop(
    step: Callable[[dict[str, Any]], None], batches: list[dict[str, Any]], device: torch.device
) -> dict[str, float]:
    """Seconds (per clock) for batches[1:], after an untimed warm-up step on batches[0]."""
    step(batches[0])
    synchronize(device)
    started = Mark.now()
    for batch in batches[1:]:
        step(batch)
    synchronize(device)
    return started.until(Mark.now())


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[dict[str, float], Any]:
    synchronize(device)
    started = Mark.now()
    result = fn()
    synchronize(device)
    return started.until(Mark.now()), result
