"""Table 2 at one scale: test BLEU and training cost of the base and big models, from run records only.

`ablate table` writes `<out>/table2_<scale>.{md,csv,tex}` whenever the sweep has rows `base` and `big`
(sweeps/table3.yaml does). Training cost is given two ways:

* counted: 3 × the forward FLOPs of the actual model (backward ≈ 2 × forward). The forward pass costs 2 FLOPs
  per multiply-add of every weight matrix a token passes through: for a source token the encoder's matrices and
  the decoder's cross-attention key/value projections, for a target token the rest of the decoder and the
  output projection (the matrices are read off the model built on the meta device, so every knob counts).
  The records count target tokens; source tokens are taken as equal in number (both corpora used here are
  near 1:1). The attention products QKᵀ and AV (2·n·(h·d_k + h·d_v) FLOPs per token and attention layer; at the
  tiny scale 4.6·n kFLOPs per token pair beside 1.6 MFLOPs of matrices, 6 % at n = 20) and the norms, softmax and
  embedding look-ups are not counted.
* the paper's method: training time × devices × sustained FLOP/s of one device. The paper used 9.5 TFLOPS for a
  P100. A CPU run's device is a thread: its figure is a dense fp32 matmul on one thread, measured by
  `ablate complexity` on that machine and kept in `<out>/sustained_flops.json` under `cpu:<CPU model>`, so
  that building the table reads a record and never a clock.

Checked against the paper: 12 h × 8 P100 × 9.5 TFLOPS = 3.3·10¹⁸ (base) and 3.5 days × 8 × 9.5 TFLOPS = 2.3·10¹⁹
(big), its Table 2 figures. A note prices the paper's own runs by the counted rule as well, computed from the
sweep's base and big rows in the paper's units (never typed in), and says what share of the P100's 9.5 TFLOPS
the paper's figures imply.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from ..records import write_renderings
from ..sweep import Sweep, paper_units
from .collect import RunRecord
from .render import csv_text, escape_tex, fixed, markdown_table, tex_row, tex_table
from .rows import RowResult
from .table3 import Table, with_overrides, with_overrides_title

ROWS = ("base", "big")
SUSTAINED_FILE = "sustained_flops.json"
# Sustained FLOP/s of one device where no measurement is recorded: the paper's estimate for its GPUs.
DOCUMENTED_FLOPS = {"P100": 9.5e12}


@dataclass(frozen=True)
class PaperRow:
    bleu: float  # newstest2014 EN-DE, tokenized (compound-split) BLEU
    cost: float  # training FLOPs by time × GPUs × sustained FLOP/s
    seconds: float
    devices: int


PAPER = {
    "base": PaperRow(27.3, 3.3e18, 12 * 3600, 8),  # 100K steps at 0.4 s on 8 P100
    "big": PaperRow(28.4, 2.3e19, 3.5 * 24 * 3600, 8),  # 300K steps at 1.0 s on 8 P100
}


# --------------------------------------------------------------------------------------------------------------
# The two ways of counting
# --------------------------------------------------------------------------------------------------------------


def paper_method_flops(seconds: float, devices: int, flops_per_second: float) -> float:
    """The paper's training cost: time × number of devices × sustained FLOP/s of one device."""
    if seconds < 0 or devices < 1 or flops_per_second <= 0:
        raise ValueError(
            f"paper_method_flops: seconds = {seconds}, devices = {devices}, flops_per_second = "
            f"{flops_per_second}: expected seconds >= 0, devices >= 1, a positive FLOP/s"
        )
    return seconds * devices * flops_per_second


@dataclass(frozen=True)
class Device:
    name: str  # as the table shows it
    count: int  # devices the run used: GPUs, or threads on a CPU
    flops_per_second: Optional[float]  # sustained, one device
    source: str  # where the figure comes from, or why there is none


def read_sustained(out: Path) -> dict[str, Mapping[str, Any]]:
    path = out / SUSTAINED_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of device keys to measurements")
    return data


def device_key(metrics: Mapping[str, Any]) -> str:
    device = str(metrics.get("device") or "unknown")
    return f"cpu:{metrics.get('cpu_model') or 'unknown'}" if device == "cpu" else f"gpu:{device}"


def run_device(metrics: Mapping[str, Any], sustained: Mapping[str, Mapping[str, Any]]) -> Device:
    key = device_key(metrics)
    cpu = key.startswith("cpu:")
    count = int(metrics.get("torch_threads") or 1) if cpu else int(metrics.get("devices") or 1)
    name = f"{key[4:]} ({'thread' if cpu else 'GPU'})"
    measured = sustained.get(key)
    if measured and isinstance(measured.get("flops_per_second"), (int, float)):
        return Device(
            name,
            count,
            float(measured["flops_per_second"]),
            f"measured: {measured.get('method', '?')}, {measured.get('measured_at', 'date not recorded')}",
        )
    documented = next((value for gpu, value in DOCUMENTED_FLOPS.items() if not cpu and gpu in key), None)
    if documented is not None:
        return Device(name, count, documented, "the paper's estimate")
    return Device(
        name, count, None, f"no sustained FLOP/s recorded for {key} (run `ablate complexity` on that machine)"
    )


# --------------------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostRow:
    row: str
    status: str
    seeds: str  # done/expected
    test_bleu: Optional[float]
    test_bleu_tok: Optional[float]
    steps: Optional[float]
    train_minutes: Optional[float]
    device: Optional[Device]
    paper_method: Optional[float]
    counted: Optional[float]
    paper: PaperRow


def mean(values: list[Optional[float]]) -> Optional[float]:
    values = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def scaled_mean(values: list[Optional[float]], factor: float) -> Optional[float]:
    value = mean(values)
    return None if value is None else value * factor


def training_seconds(run: RunRecord) -> Optional[float]:
    """Training time, evaluation excluded as in the paper's 12 hours; the wall time where a run lacks it."""
    seconds = run.metrics.get("train_seconds", run.metrics.get("wall_seconds"))
    return None if seconds is None else float(seconds)


def run_paper_method(run: RunRecord, sustained: Mapping[str, Mapping[str, Any]]) -> Optional[float]:
    seconds = training_seconds(run)
    device = run_device(run.metrics, sustained)
    if seconds is None or device.flops_per_second is None:
        return None
    return paper_method_flops(seconds, device.count, device.flops_per_second)


def run_counted(run: RunRecord) -> Optional[float]:
    tokens = run.metrics.get("train_tokens")
    from lightning_modules.flops import training_flops  # torch, as before: only when a table counts

    config = run.spec.config
    return None if tokens is None else training_flops(config.model, config.data.vocab_size, float(tokens))


def scored(run: RunRecord, key: str) -> Optional[float]:
    """A run's Table 2 score: its checkpoint average's where it scored one (Table 2's protocol), else its last
    checkpoint's (or, in a record from before averages were scored beside it, what its scores were taken on)."""
    averaged = run.metrics.get("averaged") or {}
    return averaged.get(key) if key in averaged else run.metrics.get(key)


def protocol(result: RowResult) -> str:
    """What the row's test BLEU was scored on, against the paper's protocol for it."""
    paper = {"base": 5, "big": 20}[result.row.id]
    counts = []
    for run in result.done:
        averaged = run.metrics.get("averaged") or {}
        counts.append(averaged.get("checkpoints") or run.metrics.get("averaged_checkpoints") or 0)
    spacing = sorted({run.spec.config.train.checkpoint_every_steps for run in result.done})
    if not counts:
        ours = "no done run"
    elif set(counts) == {0}:
        ours = "the last checkpoint, no averaging"
    else:
        ours = (
            f"the average of the last {', '.join(str(c) for c in sorted(set(counts)))} checkpoints, "
            f"{', '.join(f'{s:,}' for s in spacing)} steps apart"
        )
    return f"{result.row.id}: BLEU scored on {ours} (the paper: the average of the last {paper} checkpoints, written 10 minutes apart)."


def cost_row(result: RowResult, sustained: Mapping[str, Mapping[str, Any]]) -> CostRow:
    done = result.done
    devices = sorted({run_device(run.metrics, sustained) for run in done}, key=repr)
    return CostRow(
        row=result.row.id,
        status=result.status,
        seeds=f"{len(done)}/{len(result.runs)}",
        test_bleu=mean([scored(run, "test_bleu") for run in done]),
        test_bleu_tok=mean([scored(run, "test_bleu_tok") for run in done]),
        steps=mean([run.metrics.get("steps") for run in done]),
        train_minutes=scaled_mean([training_seconds(run) for run in done], 1 / 60),
        device=devices[0] if len(devices) == 1 else None,
        paper_method=mean([run_paper_method(run, sustained) for run in done]),
        counted=mean([run_counted(run) for run in done]),
        paper=PAPER[result.row.id],
    )


@dataclass(frozen=True)
class CostTable:
    sweep: str
    scale: str
    rows: tuple[CostRow, ...]
    notes: tuple[str, ...]
    overrides: tuple[tuple[str, str], ...] = ()  # its Table's: the overrides its runs were trained with

    @property
    def stem(self) -> str:
        return with_overrides(f"table2_{self.scale}", self.overrides)

    @property
    def title(self) -> str:
        return with_overrides_title(f"Table 2 at scale {self.scale}", self.overrides)


def build_cost_table(table: Table, out: str | Path) -> Optional[CostTable]:
    """Table 2 for the table's scale, or None when the sweep lacks a `base` or a `big` row."""
    results = {result.row.id: result for result in table.rows}
    if not all(row in results for row in ROWS):
        return None
    sustained = read_sustained(Path(out))
    rows = tuple(cost_row(results[row], sustained) for row in ROWS)
    notes = [
        f"Measured at scale {table.scale.name} ({table.sweep.name} sweep), mean over done seeds, on the built-in or "
        "configured test split; the paper's columns are newstest2014 EN-DE at full size.",
        "BLEU is detokenized sacreBLEU 13a; BLEU tok is the paper's compound-split tokenized BLEU (the paper's Table 2 "
        "reports the latter).",
        "Cost (paper's method) = training time × devices × sustained FLOP/s of one device, as the paper computes it "
        "(its base: 12 h × 8 P100 × 9.5 TFLOPS). On a CPU a device is a thread.",
        "Cost (counted) = 3 × forward FLOPs of the model's weight matrices over the trained tokens (source tokens "
        "taken equal to the recorded target tokens; attention products, norms and softmax not counted).",
        papers_runs_counted(table.sweep),
        *(protocol(results[row]) for row in ROWS),
    ]
    for row in rows:
        if row.device is not None and row.device.flops_per_second is None:
            notes.append(f"{row.row}: {row.device.source}.")
        elif row.device is not None:
            notes.append(
                f"{row.row}: {row.device.count} × {row.device.name} at {sci(row.device.flops_per_second)} "
                f"FLOP/s ({row.device.source})."
            )
        elif row.status != "done":
            notes.append(f"{row.row}: no done run ({row.status}); its measured cells are blank.")
    return CostTable(table.sweep.name, table.scale.name, rows, tuple(notes), table.overrides)


def papers_runs_counted(sweep: Sweep) -> str:
    """The note pricing the paper's own base and big runs by the counted rule: the sweep's rows in the paper's
    units, trained for their steps at their batch size, against the paper's cost by its method."""
    from lightning_modules.flops import parameter_count, training_flops  # torch: only when a table counts

    counted, params, tokens, shares = [], [], [], []
    for name in ROWS:
        config = paper_units(sweep, sweep.row(name))
        trained = config.train.max_steps * config.data.batch_tokens
        flops = training_flops(config.model, config.data.vocab_size, trained)
        counted.append(sci(flops, 1))
        params.append(f"{parameter_count(config.model, config.data.vocab_size) / 1e6:.0f}M")
        tokens.append(sci(trained, 1))
        shares.append(f"{100 * flops / PAPER[name].cost:.0f} %")
    return (
        f"Paper cost counted by the same rule: base {counted[0]} and big {counted[1]} ({params[0]} and {params[1]} "
        f"parameters, {tokens[0]} and {tokens[1]} target tokens), i.e. the paper's figures assume about "
        f"{shares[0]} and {shares[1]} of the P100's {DOCUMENTED_FLOPS['P100'] / 1e12:g} TFLOPS."
    )


def sci(value: Optional[float], digits: int = 2) -> str:
    if value is None:
        return ""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


COLUMNS = (
    "model",
    "BLEU (test)",
    "BLEU tok (test)",
    "paper BLEU EN-DE",
    "steps",
    "train time (min)",
    "cost, paper's method (FLOPs)",
    "cost, counted (FLOPs)",
    "paper cost (FLOPs)",
    "seeds",
)


def display(row: CostRow) -> list[str]:
    done = row.status == "done"
    return [
        f"Transformer ({row.row})",
        fixed(row.test_bleu, 1) if done else row.status,
        fixed(row.test_bleu_tok, 1) if done else row.status,
        f"{row.paper.bleu:.1f}",
        fixed(row.steps, 0),
        fixed(row.train_minutes, 1),
        sci(row.paper_method),
        sci(row.counted),
        sci(row.paper.cost),
        row.seeds,
    ]


def render_markdown(cost: CostTable) -> str:
    aligns = ["l"] + ["r"] * (len(COLUMNS) - 2) + ["l"]
    lines = [f"# {cost.title}: test BLEU and training cost", ""]
    lines += markdown_table(COLUMNS, aligns, (display(row) for row in cost.rows))
    lines += ["", "Notes:", ""] + [f"- {note}" for note in cost.notes]
    return "\n".join(lines) + "\n"


def render_csv(cost: CostTable) -> str:
    header = [
        "row",
        "status",
        "seeds",
        "test_bleu",
        "test_bleu_tok",
        "paper_bleu",
        "steps",
        "train_seconds",
        "devices",
        "device",
        "sustained_flops_per_second",
        "cost_paper_method",
        "cost_counted",
        "paper_cost",
    ]
    rows = []
    for row in cost.rows:
        device = row.device
        rows.append(
            [
                row.row,
                row.status,
                row.seeds,
                fixed(row.test_bleu, 4),
                fixed(row.test_bleu_tok, 4),
                f"{row.paper.bleu:.1f}",
                fixed(row.steps, 0),
                "" if row.train_minutes is None else f"{row.train_minutes * 60:.1f}",
                "" if device is None else str(device.count),
                "" if device is None else device.name,
                "" if device is None or device.flops_per_second is None else f"{device.flops_per_second:.4e}",
                "" if row.paper_method is None else f"{row.paper_method:.4e}",
                "" if row.counted is None else f"{row.counted:.4e}",
                f"{row.paper.cost:.4e}",
            ]
        )
    return csv_text(header, rows)


def render_tex(cost: CostTable) -> str:
    body = [r"\midrule"] + [tex_row(escape_tex(cell) for cell in display(row)) for row in cost.rows]
    return tex_table(
        cost.title,
        "l" + "r" * (len(COLUMNS) - 2) + "l",
        [escape_tex(c) for c in COLUMNS],
        body,
        cost.notes,
    )


def write_cost_table(cost: CostTable, out: str | Path) -> list[Path]:
    renderers = ((".md", render_markdown), (".csv", render_csv), (".tex", render_tex))
    return write_renderings(Path(out) / cost.stem, cost, renderers)
