"""`ablate complexity`: the paper's Table 1 measured on this machine, beside its O(·) columns.

Four layer types, each at width d over a sequence of n positions, timed forward on one thread:

* self-attention: softmax(X·Xᵀ/√d)·X, the operation the paper's O(n²·d) counts (the Q/K/V/output projections
  are O(n·d²), a feed-forward cost the paper's column leaves out, so they are not timed);
* restricted self-attention: the same within a neighbourhood of r positions centred on each query, O(r·n·d);
* recurrent: torch's fused tanh RNN with hidden size d, one step per position, O(n·d²);
* convolution: a 1-d convolution with kernel k and d channels in and out, O(k·n·d²).

Per layer it reports the time and counted FLOPs against n (d fixed) and against d (n fixed), the exponents fitted
in log-log over the largest sizes (small sizes are dominated by per-call overhead), and two structural
measurements:

* sequential operations: the depth of the layer's autograd graph, the longest chain of operations that must
  run one after another (the RNN is unrolled as a cell loop here, since the fused op hides its steps);
* maximum path length: the fewest layer applications through which output position 0 depends on input position
  n − 1, found with forward-mode autodiff (a tangent on the input at n − 1, read at the output at 0). Layers are
  stacked for the parallel types; for the recurrent layer an application is one step, and a window of w steps
  (from a zero state) is the analogue of w stacked layers. Convolutions are measured contiguous (kernel k:
  O(n/k)) and causal dilated (dilation k^l at layer l: O(log_k n), the paper's figure).

It also measures the sustained FLOP/s of one thread with a dense fp32 matmul and keeps it in
`<out>/sustained_flops.json`, from which `ablate table` computes Table 2's cost by the paper's method.

Writes `<out>/table1.md`, `table1.csv` (one row per layer) and `table1_timings.csv` (every measurement), with
the date, machine and thread count. These are measurements: a rerun gives different bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..provenance import cpu_model
from ..records import write_atomic
from ..report.render import csv_text, markdown_table
from ..report.table2 import SUSTAINED_FILE, read_sustained

LAYERS = ("self-attention", "restricted self-attention", "recurrent", "convolutional")
# The paper's Table 1, row by row: complexity per layer, sequential operations, maximum path length.
PAPER = {
    "self-attention": ("O(n²·d)", "O(1)", "O(1)"),
    "restricted self-attention": ("O(r·n·d)", "O(1)", "O(n/r)"),
    "recurrent": ("O(n·d²)", "O(n)", "O(n)"),
    "convolutional": ("O(k·n·d²)", "O(1)", "O(log_k(n))"),
}
# Expected exponents of n and d in the complexity column: what a fit should come close to.
EXPECTED = {"self-attention": (2, 1), "restricted self-attention": (1, 1), "recurrent": (1, 2), "convolutional": (1, 2)}
PATH_KINDS = ("self-attention", "restricted self-attention", "recurrent", "convolutional", "convolutional (dilated)")


@dataclass(frozen=True)
class ComplexityConfig:
    d: int = 64  # width for the sweep over n
    ns: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)
    n_for_d: int = 256  # length for the sweep over d
    ds: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)  # to 1024: small widths are per-step overhead for the RNN
    r: int = 15  # restricted neighbourhood: r positions centred on the query (odd)
    k: int = 3  # convolution kernel (odd)
    fit_points: int = 4  # the largest sizes the exponents are fitted on
    path_ns: tuple[int, ...] = (16, 64, 256)
    path_d: int = 8
    min_seconds: float = 0.05  # one timing batch runs at least this long
    repeats: int = 5  # batches per size; the fastest is kept (other processes only ever add time)
    threads: int = 1
    matmul_size: int = 1024  # the sustained-FLOP/s benchmark's square matrices
    quick: bool = False  # `--quick`'s sizes: a smoke test, and its tables say so

    def __post_init__(self) -> None:
        for name in ("d", "n_for_d", "r", "k", "fit_points", "path_d", "repeats", "threads", "matmul_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"complexity.{name} = {value!r}: expected a positive integer")
        for name in ("r", "k"):
            if getattr(self, name) % 2 == 0 or getattr(self, name) < 3:
                raise ValueError(
                    f"complexity.{name} = {getattr(self, name)}: expected an odd number >= 3 (centred window)"
                )
        for name in ("ns", "ds", "path_ns"):
            values = getattr(self, name)
            if (
                not values
                or any(not isinstance(v, int) or v < 2 for v in values)
                or list(values) != sorted(set(values))
            ):
                raise ValueError(f"complexity.{name} = {values!r}: expected increasing integers >= 2")
        for name in ("ns", "ds"):
            if len(getattr(self, name)) < max(2, self.fit_points):
                raise ValueError(
                    f"complexity.{name} = {getattr(self, name)!r}: expected at least fit_points = "
                    f"{self.fit_points} (and 2) sizes to fit an exponent"
                )
        if self.min_seconds <= 0:
            raise ValueError(f"complexity.min_seconds = {self.min_seconds!r}: expected a positive number of seconds")


QUICK = ComplexityConfig(
    ns=(16, 32, 64, 128),
    ds=(16, 32, 64),
    n_for_d=64,
    fit_points=3,
    path_ns=(8, 16, 32),
    min_seconds=0.002,
    repeats=2,
    matmul_size=128,
    quick=True,
)
QUICK_OUT = "runs/complexity-quick"  # `--quick`'s default --out: a scratch folder, never the committed results/
QUICK_TITLE = "quick (smoke test, not a result)"


# --------------------------------------------------------------------------------------------------------------
# The layers and their counted FLOPs
# --------------------------------------------------------------------------------------------------------------


def attention(x, window: Optional[int] = None):
    """softmax(x·xᵀ/√d)·x over all positions, or over `window` positions centred on each query."""
    import torch

    n, d = x.shape
    if window is None:
        return torch.softmax(x @ x.T / math.sqrt(d), dim=-1) @ x
    half = window // 2
    padded = torch.nn.functional.pad(x, (0, 0, half, half))
    keys = padded.unfold(0, window, 1).transpose(1, 2)  # (n, window, d): the neighbourhood of each query
    scores = torch.einsum("nd,nwd->nw", x, keys) / math.sqrt(d)
    offsets = torch.arange(window) - half
    positions = torch.arange(n)[:, None] + offsets[None, :]
    scores = scores.masked_fill((positions < 0) | (positions >= n), float("-inf"))  # padding is not a position
    return torch.einsum("nw,nwd->nd", torch.softmax(scores, dim=-1), keys)


def counted_flops(layer: str, n: int, d: int, r: int, k: int) -> int:
    """Multiply-adds × 2 of the timed operation (softmax, tanh and biases left out)."""
    if layer == "self-attention":
        return 2 * (n * n * d) * 2  # x·xᵀ, then weights·x
    if layer == "restricted self-attention":
        return 2 * (n * r * d) * 2
    if layer == "recurrent":
        return 2 * (2 * d * d) * n  # W_ih·x_t and W_hh·h_{t-1} per step
    if layer == "convolutional":
        return 2 * (k * d * d) * n
    raise ValueError(f"layer = {layer!r}: expected one of {', '.join(LAYERS)}")


def make_layer(layer: str, d: int, r: int, k: int, dtype=None) -> Callable:
    """The timed forward of one layer type at width d, on a (n, d) input."""
    import torch

    if layer == "self-attention":
        return attention
    if layer == "restricted self-attention":
        return lambda x: attention(x, r)
    if layer == "recurrent":
        rnn = torch.nn.RNN(d, d, batch_first=True, dtype=dtype)
        return lambda x: rnn(x[None])[0][0]
    if layer == "convolutional":
        conv = torch.nn.Conv1d(d, d, k, padding=k // 2, dtype=dtype)
        return lambda x: conv(x.T[None])[0].T
    raise ValueError(f"layer = {layer!r}: expected one of {', '.join(LAYERS)}")


# --------------------------------------------------------------------------------------------------------------
# Timing and fitting
# --------------------------------------------------------------------------------------------------------------


def time_call(function: Callable[[], Any], min_seconds: float, repeats: int) -> float:
    """Seconds per call: calls batched until a batch lasts min_seconds, the fastest of `repeats` batches."""
    function()  # warm-up: allocations, kernel selection
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            break
        calls *= 2
    best = elapsed / calls
    for _ in range(repeats - 1):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def fit_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """The slope of log(value) against log(size), least squares: p in value ≈ c·size^p."""
    if len(sizes) != len(values) or len(sizes) < 2:
        raise ValueError(f"fit_exponent: sizes ({len(sizes)}) and values ({len(values)}): expected two or more pairs")
    if any(s <= 0 for s in sizes) or any(v <= 0 for v in values):
        raise ValueError("fit_exponent: sizes and values must be positive for a log-log fit")
    if len(set(sizes)) == 1:
        raise ValueError("fit_exponent: all sizes are equal")
    return statistics.linear_regression([math.log(s) for s in sizes], [math.log(v) for v in values]).slope


@dataclass(frozen=True)
class Timing:
    layer: str
    axis: str  # "n" (d fixed) or "d" (n fixed)
    n: int
    d: int
    seconds: float
    flops: int


def measure_timings(config: ComplexityConfig) -> list[Timing]:
    import torch

    torch.manual_seed(0)
    timings = []
    with torch.no_grad():
        for layer in LAYERS:
            points = [("n", n, config.d) for n in config.ns] + [("d", config.n_for_d, d) for d in config.ds]
            layers = {}
            for axis, n, d in points:
                if d not in layers:
                    layers[d] = make_layer(layer, d, config.r, config.k)
                x = torch.randn(n, d)
                seconds = time_call(lambda: layers[d](x), config.min_seconds, config.repeats)
                timings.append(Timing(layer, axis, n, d, seconds, counted_flops(layer, n, d, config.r, config.k)))
    return timings


def exponents(timings: Sequence[Timing], layer: str, axis: str, fit_points: int) -> tuple[float, float]:
    """(time exponent, counted-FLOPs exponent) of the layer along the axis, over the largest `fit_points` sizes."""
    points = sorted((t for t in timings if t.layer == layer and t.axis == axis), key=lambda t: (t.n, t.d))[-fit_points:]
    sizes = [t.n if axis == "n" else t.d for t in points]
    return fit_exponent(sizes, [t.seconds for t in points]), fit_exponent(sizes, [t.flops for t in points])


# --------------------------------------------------------------------------------------------------------------
# Sequential operations and path length
# --------------------------------------------------------------------------------------------------------------


def graph_depth(output) -> int:
    """The longest chain of autograd nodes from `output` back to a leaf: operations that must run in sequence."""
    depth: dict[Any, int] = {}
    stack = [(output.grad_fn, False)]
    while stack:
        node, expanded = stack.pop()
        if node is None or node in depth:
            continue
        children = [child for child, _ in node.next_functions if child is not None]
        if expanded:
            depth[node] = 1 + max((depth[child] for child in children), default=0)
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in children if child not in depth)
    return depth.get(output.grad_fn, 0)


def sequential_depth(layer: str, n: int, d: int, r: int, k: int) -> int:
    """Autograd depth of one layer on n positions; the RNN unrolled as a cell loop so that its steps show."""
    import torch

    torch.manual_seed(0)
    x = torch.randn(n, d, requires_grad=True)
    if layer == "recurrent":
        cell = torch.nn.RNNCell(d, d)
        h = torch.zeros(1, d)
        outputs = []
        for t in range(n):
            h = cell(x[t : t + 1], h)
            outputs.append(h)
        return graph_depth(torch.cat(outputs).sum())
    return graph_depth(make_layer(layer, d, r, k)(x).sum())


def depends(apply: Callable, n: int, d: int) -> bool:
    """Whether output position 0 depends on input position n - 1 (forward-mode AD, float64, no rounding to 0)."""
    import torch
    import torch.autograd.forward_ad as fwAD

    torch.manual_seed(1)
    x = torch.randn(n, d, dtype=torch.float64)
    tangent = torch.zeros(n, d, dtype=torch.float64)
    tangent[n - 1] = torch.randn(d, dtype=torch.float64)
    with fwAD.dual_level():
        y = apply(fwAD.make_dual(x, tangent))
        return bool(fwAD.unpack_dual(y).tangent[0].abs().max() > 0)


def smallest(predicate: Callable[[int], bool], high: int) -> Optional[int]:
    """The smallest L in 1..high with predicate(L), for a predicate monotone in L (bisection); None if none."""
    if not predicate(high):
        return None
    low = 1
    while low < high:
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle + 1
    return low


def path_length(kind: str, n: int, d: int, r: int, k: int) -> Optional[int]:
    """The fewest layer applications (or recurrent steps) linking positions 0 and n - 1, measured."""
    import torch

    torch.manual_seed(0)
    if kind == "self-attention":
        return smallest(lambda L: depends(lambda x: stack(x, L, attention), n, d), n)
    if kind == "restricted self-attention":
        return smallest(lambda L: depends(lambda x: stack(x, L, lambda h: attention(h, r)), n, d), n)
    if kind == "recurrent":
        cell = torch.nn.RNNCell(d, d, dtype=torch.float64)

        def window(steps: int, x):
            # The recurrence reads from position n - 1 down to 0, so its output at position 0 is its last state;
            # here that state is computed from a zero state only `steps` steps back (positions steps - 1 .. 0).
            h = torch.zeros(1, d, dtype=torch.float64)
            for t in reversed(range(steps)):
                h = cell(x[t : t + 1], h)
            return h.expand(n, d)

        return smallest(lambda steps: depends(lambda x: window(steps, x), n, d), n)
    if kind == "convolutional":  # contiguous, centred ("same" padding): each layer reaches k // 2 further
        layers = [torch.nn.Conv1d(d, d, k, padding=k // 2, dtype=torch.float64) for _ in range(n)]
        return smallest(lambda L: depends(lambda x: convolve(x, layers[:L], [0] * L), n, d), n)
    if kind == "convolutional (dilated)":
        # Causal and dilated as in WaveNet and ByteNet, here reading forwards so that position 0 is the one that
        # sees furthest: layer l has dilation k^l and right padding, output t reads t, t + k^l, ..., t + (k-1)·k^l.
        depth = math.ceil(math.log(n, k)) + 1
        layers = [torch.nn.Conv1d(d, d, k, dilation=k**i, dtype=torch.float64) for i in range(depth)]
        pads = [(k - 1) * k**i for i in range(depth)]
        return smallest(lambda L: depends(lambda x: convolve(x, layers[:L], pads[:L]), n, d), depth)
    raise ValueError(f"kind = {kind!r}: expected one of {', '.join(PATH_KINDS)}")


def convolve(x, layers: Sequence, right_pads: Sequence[int]):
    """Convolutions in sequence over a (n, d) input, each after padding right_pads[i] zeros on the right."""
    import torch

    h = x.T[None]
    for layer, pad in zip(layers, right_pads):
        h = layer(torch.nn.functional.pad(h, (0, pad)) if pad else h)
    return h[0].T


def stack(x, layers: int, layer: Callable):
    for _ in range(layers):
        x = layer(x)
    return x


def theoretical_path(kind: str, n: int, r: int, k: int) -> int:
    """What the layer's structure implies for positions 0 and n - 1 (n >= 2)."""
    if kind == "self-attention":
        return 1
    if kind == "restricted self-attention":
        return math.ceil((n - 1) / (r // 2))
    if kind == "recurrent":
        return n
    if kind == "convolutional":
        return math.ceil((n - 1) / (k // 2))
    if kind == "convolutional (dilated)":
        # L causal layers with dilations 1, k, ..., k^(L-1) reach every offset up to k^L - 1 (its base-k digits).
        return next(L for L in range(1, n + 1) if k**L >= n)
    raise ValueError(f"kind = {kind!r}: expected one of {', '.join(PATH_KINDS)}")


# --------------------------------------------------------------------------------------------------------------
# Sustained FLOP/s and the whole measurement
# --------------------------------------------------------------------------------------------------------------


def sustained_flops(size: int, min_seconds: float, repeats: int) -> float:
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    return 2 * size**3 / time_call(lambda: a @ b, min_seconds, repeats)


@dataclass(frozen=True)
class Measurement:
    config: ComplexityConfig
    timings: tuple[Timing, ...]
    depths: dict  # (layer, n) -> autograd depth
    paths: dict  # (kind, n) -> measured path length
    matmul_flops: float
    machine: dict
    measured_at: str
    seconds: float


def machine() -> dict[str, Any]:
    import platform

    import torch

    # cpu_model(): the same source as a run's `cpu_model`, so Table 2 can match them
    return {
        "cpu_model": cpu_model(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "system": platform.system(),
        "cores": os.cpu_count(),
    }


def measure(config: ComplexityConfig) -> Measurement:
    import datetime

    import torch

    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        timings = tuple(measure_timings(config))
        depths = {
            (layer, n): sequential_depth(layer, n, config.path_d, config.r, config.k)
            for layer in LAYERS
            for n in config.path_ns
        }
        paths = {
            (kind, n): path_length(kind, n, config.path_d, config.r, config.k)
            for kind in PATH_KINDS
            for n in config.path_ns
        }
        matmul = sustained_flops(config.matmul_size, config.min_seconds, config.repeats)
    finally:
        torch.set_num_threads(threads)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Measurement(config, timings, depths, paths, matmul, machine(), now, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------------------


def summary_rows(m: Measurement) -> list[dict[str, str]]:
    c = m.config
    rows = []
    for layer in LAYERS:
        time_n, flops_n = exponents(m.timings, layer, "n", c.fit_points)
        time_d, flops_d = exponents(m.timings, layer, "d", c.fit_points)
        kinds = [layer] if layer != "convolutional" else ["convolutional", "convolutional (dilated)"]
        paths = "; ".join(
            ("dilated: " if kind.endswith("(dilated)") else "")
            + ", ".join(f"{m.paths[kind, n]}" for n in c.path_ns)
            + f" (structure: {', '.join(str(theoretical_path(kind, n, c.r, c.k)) for n in c.path_ns)})"
            for kind in kinds
        )
        paper = PAPER[layer]
        rows.append(
            {
                "layer": layer,
                "paper_complexity": paper[0],
                "expected_exponent_n": str(EXPECTED[layer][0]),
                "time_exponent_n": f"{time_n:.2f}",
                "flops_exponent_n": f"{flops_n:.2f}",
                "expected_exponent_d": str(EXPECTED[layer][1]),
                "time_exponent_d": f"{time_d:.2f}",
                "flops_exponent_d": f"{flops_d:.2f}",
                "paper_sequential_ops": paper[1],
                "graph_depth": ", ".join(str(m.depths[layer, n]) for n in c.path_ns),
                "paper_max_path_length": paper[2],
                "path_length": paths,
            }
        )
    return rows


SUMMARY_LABELS = {
    "layer": "layer",
    "paper_complexity": "paper: complexity per layer",
    "time_exponent_n": "time ∝ n^p",
    "flops_exponent_n": "FLOPs ∝ n^p",
    "time_exponent_d": "time ∝ d^p",
    "flops_exponent_d": "FLOPs ∝ d^p",
    "paper_sequential_ops": "paper: sequential ops",
    "graph_depth": "graph depth",
    "paper_max_path_length": "paper: max path length",
    "path_length": "path length",
}


def header(m: Measurement) -> list[str]:
    c = m.config
    return [
        f"Measured {m.measured_at} in {m.seconds:.0f} s on {m.machine['cpu_model']} ({m.machine['cores']} cores; "
        f"{c.threads} thread{'s' if c.threads > 1 else ''} used), torch {m.machine['torch']}, Python {m.machine['python']}.",
        f"A measurement, not a build: rerunning gives other times (and other bytes). Forward pass, batch 1, fp32; "
        f"each time is the fastest of {c.repeats} batches of at least {c.min_seconds * 1000:g} ms.",
        f"Against n: d = {c.d}, n = {', '.join(map(str, c.ns))}. Against d: n = {c.n_for_d}, d = {', '.join(map(str, c.ds))}. "
        f"Neighbourhood r = {c.r}, kernel k = {c.k}. Exponents are least-squares slopes in log-log over the largest "
        f"{c.fit_points} sizes.",
        f"Graph depth and path length at n = {', '.join(map(str, c.path_ns))} (d = {c.path_d}). Graph depth: the longest "
        "chain of autograd operations in one layer (the RNN unrolled into cells). Path length: the fewest stacked "
        "layers (recurrent: steps) through which output position 0 depends on input position n − 1, by forward-mode "
        "autodiff; in brackets what the structure implies. The convolution's path is O(n/k) contiguous and O(log_k n) "
        "dilated (dilation k^l), the case the paper's column states.",
        f"Sustained FLOP/s of one thread (dense fp32 {c.matmul_size}² matmul): {m.matmul_flops:.3e}; kept for Table 2 "
        "in sustained_flops.json.",
    ]


def render_markdown(m: Measurement) -> str:
    keys = list(SUMMARY_LABELS)
    title = QUICK_TITLE if m.config.quick else "measured"
    lines = [f"# Table 1: per-layer cost, {title}", ""] + [f"- {line}" for line in header(m)] + [""]
    lines += markdown_table(
        [SUMMARY_LABELS[key] for key in keys],
        ["l", "l"] + ["r"] * 4 + ["l"] * 4,
        ([row[key] for key in keys] for row in summary_rows(m)),
    )
    lines += [
        "",
        "Expected exponents from the paper's column: self-attention n² d¹, restricted n¹ d¹, recurrent n¹ d², "
        "convolutional n¹ d².",
    ]
    for axis, held, sizes in (("n", f"d = {m.config.d}", m.config.ns), ("d", f"n = {m.config.n_for_d}", m.config.ds)):
        lines += ["", f"## Time per layer (ms) against {axis}, {held}", ""]
        cells = {
            layer: [f"{t.seconds * 1000:.3f}" for t in m.timings if t.layer == layer and t.axis == axis]
            for layer in LAYERS
        }
        lines += markdown_table(
            ["layer"] + [f"{axis}={size}" for size in sizes],
            ["l"] + ["r"] * len(sizes),
            ([layer] + cells[layer] for layer in LAYERS),
        )
    return "\n".join(lines) + "\n"


SUMMARY_CSV_KEYS = (
    "layer",
    "paper_complexity",
    "expected_exponent_n",
    "time_exponent_n",
    "flops_exponent_n",
    "expected_exponent_d",
    "time_exponent_d",
    "flops_exponent_d",
    "paper_sequential_ops",
    "graph_depth",
    "paper_max_path_length",
    "path_length",
)


def render_summary_csv(m: Measurement) -> str:
    provenance = [m.measured_at, m.machine["cpu_model"], m.config.threads]
    return csv_text(
        [*SUMMARY_CSV_KEYS, "measured_at", "cpu_model", "threads"],
        ([row[key] for key in SUMMARY_CSV_KEYS] + provenance for row in summary_rows(m)),
    )


def render_timings_csv(m: Measurement) -> str:
    return csv_text(
        ["layer", "axis", "n", "d", "seconds", "counted_flops", "measured_at", "cpu_model", "threads"],
        (
            [
                t.layer,
                t.axis,
                t.n,
                t.d,
                f"{t.seconds:.6e}",
                t.flops,
                m.measured_at,
                m.machine["cpu_model"],
                m.config.threads,
            ]
            for t in m.timings
        ),
    )


def record_sustained(m: Measurement, out: Path) -> Path:
    """Merge this machine's one-thread figure into `<out>/sustained_flops.json`, keyed as Table 2 looks it up."""
    path = out / SUSTAINED_FILE
    entries = dict(read_sustained(out))
    entries[f"cpu:{m.machine['cpu_model']}"] = {
        "flops_per_second": m.matmul_flops,
        "per": "thread",
        "measured_at": m.measured_at,
        "method": f"dense fp32 {m.config.matmul_size}x{m.config.matmul_size} matmul on 1 thread, fastest of {m.config.repeats}",
    }
    write_atomic(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
    return path


def write_results(m: Measurement, out: str | Path, sustained: bool = True) -> list[Path]:
    out = Path(out)
    paths = []
    for name, render in (
        ("table1.md", render_markdown),
        ("table1.csv", render_summary_csv),
        ("table1_timings.csv", render_timings_csv),
    ):
        write_atomic(out / name, render(m))
        paths.append(out / name)
    if sustained and m.config.threads == 1:
        paths.append(record_sustained(m, out))
    return paths


def cmd_complexity(args: argparse.Namespace) -> int:
    config = QUICK if args.quick else ComplexityConfig()
    if args.threads is not None:
        config = dataclasses.replace(config, threads=args.threads)
    measurement = measure(config)
    out = args.out or (QUICK_OUT if args.quick else "results")
    # A quick run is too coarse to price Table 2 with: it never overwrites the recorded figure.
    for path in write_results(measurement, out, sustained=not args.quick):
        print(path)
    for row in summary_rows(measurement):
        print(
            f"{row['layer']:>26}: time ∝ n^{row['time_exponent_n']} d^{row['time_exponent_d']}; "
            f"graph depth {row['graph_depth']}; path {row['path_length']}"
        )
    return 0


def add_complexity_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "complexity",
        help="Table 1 measured: time, FLOPs, sequential ops and path length per layer type",
        description="Time self-attention, restricted self-attention, a recurrent and a convolutional "
        "layer against n and d on this CPU, fit the exponents, measure sequential operations and "
        "maximum path length, and write <out>/table1.{md,csv}. A measurement: needs a quiet machine.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds (a smoke test, not a result)")
    parser.add_argument(
        "--threads", type=int, help="torch threads for the timings (default: 1, the paper's per-device view)"
    )
    parser.add_argument(
        "--out",
        help=f"where table1.* go (default: results/; with --quick {QUICK_OUT}/, its tables titled {QUICK_TITLE!r})",
    )
    parser.set_defaults(handler=cmd_complexity)
