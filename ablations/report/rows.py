"""A row of a sweep's table as data: its runs, the mean ± std of each measure over the done seeds, and (set by
verdicts.with_verdicts) its seed-paired evidence against base and its verdict against the paper."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..records import run_seconds
from ..sweep import Row
from .collect import PUBLISHED, RunRecord
from .stats import Judgement, RowEvidence


@dataclass(frozen=True)
class Stat:
    mean: float
    std: Optional[float]  # sample standard deviation, from two values on
    n: int


def stat(values: Sequence[Optional[float]]) -> Optional[Stat]:
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    return Stat(statistics.fmean(values), statistics.stdev(values) if len(values) >= 2 else None, len(values))


def scaled(value: Optional[float], factor: float) -> Optional[float]:
    return None if value is None else value * factor


def measures(metrics: Mapping[str, Any]) -> dict[str, Optional[float]]:
    """The measured columns of one run, in display units."""
    return {
        "dev_ppl": metrics.get("dev_ppl"),
        "dev_bleu": metrics.get("dev_bleu"),
        "dev_bleu_tok": metrics.get("dev_bleu_tok"),
        "params_m": scaled(metrics.get("params"), 1e-6),
        "steps": metrics.get("steps"),
        "tokens_per_s": metrics.get("train_tokens_per_second"),
        "wall_min": scaled(run_seconds(metrics), 1 / 60),
    }


MEASURES = tuple(measures({}))


PPL_DIGITS = (2, 4)  # the fewest and most decimals of a PPL cell (RowResult.ppl_digits)
VISIBLE_SPREAD = 0.5 * 10 ** -PPL_DIGITS[1]  # float noise in equal values lies far below it


def ppl_decimals(spread: Optional[float]) -> Optional[int]:
    """Decimals that show a PPL spread (a std or an interval's half-width) to one significant digit, from 2 to 4;
    None where there is no spread, or it would print as 0 even at the most decimals."""
    if spread is None or spread < VISIBLE_SPREAD:
        return None
    return min(max(-math.floor(math.log10(spread)), PPL_DIGITS[0]), PPL_DIGITS[1])


@dataclass(frozen=True)
class RowResult:
    row: Row
    paper_units: Mapping[str, str]  # column key -> the row's value, formatted
    runs: tuple[RunRecord, ...]
    stats: Mapping[str, Optional[Stat]]
    evidence: Optional[RowEvidence] = None  # seed-paired differences from base (None for base itself)
    judgement: Optional[Judgement] = None  # the verdict against the paper (None where the paper prints nothing)

    @property
    def done(self) -> list[RunRecord]:
        return [run for run in self.runs if run.done]

    @property
    def awaiting(self) -> list[RunRecord]:
        """The seeds its scale expects that have not finished: not yet trained, or training."""
        return [run for run in self.runs if run.status not in PUBLISHED]

    @property
    def interim(self) -> bool:
        """Judged before all its expected seeds finished: a look on the way, not the row's verdict. The verdict is the
        one on the seed count fixed before training; stopping at the first look that passes would inflate its error
        rate (optional stopping)."""
        return self.judgement is not None and bool(self.awaiting)

    @property
    def status(self) -> str:
        """`done` if any seed is done, else the seeds' statuses: `missing`, `failed/running`, ..."""
        return "done" if self.done else "/".join(sorted({run.status for run in self.runs}))

    def mean(self, key: str) -> Optional[float]:
        return None if self.stats[key] is None else self.stats[key].mean

    @property
    def ppl_spread(self) -> Optional[float]:
        """The row's finest PPL spread: the std of its dev PPL over seeds or the half-width of its Δ PPL interval,
        whichever is smaller; None with neither (one seed), or where it would print as 0 even at the most decimals."""
        spreads = [self.stats["dev_ppl"].std if self.stats["dev_ppl"] is not None else None]
        if self.evidence is not None and self.evidence.ppl.ci is not None:
            spreads.append((self.evidence.ppl.ci[1] - self.evidence.ppl.ci[0]) / 2)
        return min((spread for spread in spreads if spread is not None and spread >= VISIBLE_SPREAD), default=None)

    def ppl_digits(self, base: "RowResult") -> int:
        """Decimals for the row's PPL cells: enough for its spread (else base's, the spread its Δ is measured
        against) to show one significant digit, from 2 to 4. Where runs end near PPL 1 (base at converged_4x: 1.085 ±
        0.001), two decimals printed every Δ as +0.00 and every interval as [-0.00, +0.00]; a row that spreads widely
        keeps two."""
        return ppl_decimals(self.ppl_spread or base.ppl_spread) or PPL_DIGITS[0]


def per_seed(result: RowResult, key: str) -> dict[int, float]:
    """{seed: value} over the row's done runs (a metric of seed i is paired with base's of seed i)."""
    values = {run.spec.seed: measures(run.metrics)[key] for run in result.done}
    return {seed: float(v) for seed, v in values.items() if v is not None and math.isfinite(v)}


def summarize(row: Row, runs: Sequence[RunRecord], cells: Mapping[str, str]) -> RowResult:
    stats = {key: stat([measures(run.metrics)[key] for run in runs if run.done]) for key in MEASURES}
    return RowResult(row, dict(cells), tuple(runs), stats)
