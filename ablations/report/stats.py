"""Seed-aware statistics for a sweep table: what a row's difference from base is, and whether it is evidence.

Seeds are common random numbers across rows: seed i gives every row the same data order and the same draws where
the shapes agree, so a row is compared with base seed by seed. For a metric m and the seeds both have,
d_i = m(row, seed i) - m(base, seed i); the row's effect is mean(d) with a 95 % t-interval over those seeds
(mean +- t_{0.975, n-1} * sd(d) / sqrt(n)), its p-value the two-sided paired t-test. One seed gives no interval
and no p-value: a one-seed difference is never evidence. Sentence-level resampling (sacreBLEU's paired
bootstrap) says how sure one seed's BLEU is, not how a row's training varies, so it plays no part here.

Each row gets a verdict against the paper's Table 3:
- The paper's large effects (|delta BLEU| >= 0.5 or |delta PPL| >= 0.25; ten rows of Table 3) are judged on
  perplexity where the paper's PPL effect is large, else on BLEU: `agrees` when the Holm-corrected paired test
  rejects "no difference" (familywise 5 % over all the large-effect rows in the table, those with fewer than 2
  seeds counted at p = 1, so a partial table's verdicts stand as its other rows land) and the mean lies on the
  paper's side,
  `disagrees` when it rejects with the mean on the other side, else `unresolved`.
- The rows whose paper effect is small get `equivalent` when both BLEU and PPL pass a TOST equivalence test at
  5 % with margins of +-0.5 BLEU and +-2 % of base's perplexity, else `differs` when either 95 % interval
  excludes 0, else `unresolved`.
The rank correlation (Spearman) of our mean delta PPL with the paper's, over every row that has both, says
whether the ordering holds even where single rows do not resolve.

An unresolved row also gets a planning figure, not evidence (`SeedPlan`): the fewest seeds in all with which its
test would reach 80 % power if the true per-seed difference had the mean and spread measured so far (noncentral t).
A large effect is planned at the Holm level it would face with the rows resolved so far staying resolved (5 % / k,
k the large-effect rows still unresolved), towards the side its mean lies on; a small one towards `equivalent` when
both means lie within the margins (TOST, its power bounded from below by 1 - the sum of the one-sided tests' misses),
else towards `differs` (either metric's t-test at 5 %). Measured spreads of two or three seeds are themselves rough,
so the figure says where more seeds could pay, not what they will show. It is for fixing a seed count before
training: adding seeds one at a time until a test passes would inflate its error rate (optional stopping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Optional, Sequence

from scipy import stats as scipy_stats
from scipy.stats import nct

LEVEL = 0.95
ALPHA = 1 - LEVEL
LARGE_BLEU = 0.5  # the paper's |delta BLEU| from which a row's effect counts as large
LARGE_PPL = 0.25  # ... and |delta PPL|
MARGIN_BLEU = 0.5  # equivalence margins for the rows whose paper effect is small
MARGIN_PPL_RELATIVE = 0.02  # of base's mean perplexity (about +-0.1 at the paper's 4.92)
POWER = 0.8  # the power a SeedPlan asks of a row's test
MOST_SEEDS_PLANNED = 100  # beyond this a SeedPlan says "more than", not a number

Metric = Literal["bleu", "ppl"]
Verdict = Literal["agrees", "disagrees", "equivalent", "differs", "unresolved"]
VERDICTS: tuple[Verdict, ...] = ("agrees", "disagrees", "equivalent", "differs", "unresolved")


@dataclass(frozen=True)
class PairedDelta:
    """A row's seed-paired difference from base on one metric."""

    mean: Optional[float]
    ci: Optional[tuple[float, float]]  # 95 % t-interval; None with fewer than 2 seeds
    p_value: Optional[float]  # two-sided paired t-test; None with fewer than 2 seeds
    seeds: tuple[int, ...]  # the seeds both the row and base have
    differences: tuple[float, ...] = ()  # row - base on each of `seeds`, in their order: what the interval is made of

    def by_seed(self) -> dict[str, float]:
        """The per-seed differences keyed by seed, as JSON writes them."""
        return {str(seed): difference for seed, difference in zip(self.seeds, self.differences)}

    @property
    def excludes_zero(self) -> bool:
        return self.ci is not None and (self.ci[0] > 0 or self.ci[1] < 0)

    @property
    def sd(self) -> Optional[float]:
        """The sample standard deviation of the per-seed differences (from the interval's half-width)."""
        if self.ci is None or self.mean is None:
            return None
        n = len(self.seeds)
        return (self.ci[1] - self.mean) / scipy_stats.t.ppf(1 - ALPHA / 2, n - 1) * math.sqrt(n)


def paired_delta(row: Mapping[int, float], base: Mapping[int, float]) -> PairedDelta:
    """mean(row[s] - base[s]) over the seeds both have, with its t-interval and paired t-test."""
    seeds = tuple(sorted(set(row) & set(base)))
    diffs = tuple(row[s] - base[s] for s in seeds)
    if not diffs:
        return PairedDelta(None, None, None, seeds)
    mean = math.fsum(diffs) / len(diffs)
    if len(diffs) < 2:
        return PairedDelta(mean, None, None, seeds, diffs)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = scipy_stats.t.ppf(1 - ALPHA / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs))
    if sd == 0:
        p_value = 1.0 if mean == 0 else 0.0
    else:
        p_value = float(2 * scipy_stats.t.sf(abs(mean) / (sd / math.sqrt(len(diffs))), len(diffs) - 1))
    return PairedDelta(mean, (mean - half, mean + half), p_value, seeds, diffs)


def seed_interval(values: Mapping[int, float]) -> PairedDelta:
    """The mean of one metric over seeds with its 95 % t-interval: the paired formula against zero."""
    return paired_delta(values, dict.fromkeys(values, 0.0))


def tost_p(delta: PairedDelta, margin: float) -> Optional[float]:
    """p-value of the two one-sided t-tests that the true difference lies within (-margin, +margin)."""
    if delta.ci is None or delta.mean is None:
        return None
    n = len(delta.seeds)
    se = delta.sd / math.sqrt(n)
    if se == 0:
        return 0.0 if abs(delta.mean) < margin else 1.0
    lower = scipy_stats.t.sf((delta.mean + margin) / se, n - 1)  # H0: diff <= -margin
    upper = scipy_stats.t.cdf((delta.mean - margin) / se, n - 1)  # H0: diff >= +margin
    return float(max(lower, upper))


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (familywise error over the given tests)."""
    order = sorted(p_values, key=lambda key: (p_values[key], key))
    adjusted, running = {}, 0.0
    for rank, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[key]))
        adjusted[key] = running
    return adjusted


@dataclass(frozen=True)
class PaperEffect:
    """What the paper's Table 3 says of a row against base."""

    delta_bleu: Optional[float]
    delta_ppl: Optional[float]

    @property
    def large(self) -> bool:
        # Rounded to the paper's printed precision: 4.67 - 4.92 must count as the -0.25 it is printed as.
        return (self.delta_bleu is not None and round(abs(self.delta_bleu), 2) >= LARGE_BLEU) or (
            self.delta_ppl is not None and round(abs(self.delta_ppl), 2) >= LARGE_PPL
        )

    @property
    def judged_on(self) -> Optional[Metric]:
        """The metric a large effect is judged on: perplexity where its effect is large, else BLEU."""
        if not self.large:
            return None
        return "ppl" if self.delta_ppl is not None and round(abs(self.delta_ppl), 2) >= LARGE_PPL else "bleu"

    def direction(self, metric: Metric) -> int:
        value = self.delta_ppl if metric == "ppl" else self.delta_bleu
        return 0 if not value else (1 if value > 0 else -1)


def paper_effect(row: Mapping[str, Optional[float]], base: Mapping[str, Optional[float]]) -> Optional[PaperEffect]:
    """The paper's deltas from its printed figures ({"bleu", "ppl"}); None where the paper prints neither."""

    def delta(metric: str) -> Optional[float]:
        if row.get(metric) is None or base.get(metric) is None:
            return None
        return float(row[metric]) - float(base[metric])

    effect = PaperEffect(delta("bleu"), delta("ppl"))
    return None if effect.delta_bleu is None and effect.delta_ppl is None else effect


@dataclass(frozen=True)
class RowEvidence:
    row_id: str
    paper: Optional[PaperEffect]
    bleu: PairedDelta
    ppl: PairedDelta


@dataclass(frozen=True)
class SeedPlan:
    """How many seeds an unresolved row would take to resolve, were its measured mean and spread the truth."""

    towards: Verdict  # the verdict its measured means point to ("unresolved" when they point nowhere yet)
    seeds: Optional[int]  # the fewest seeds in all with POWER; None: more than MOST_SEEDS_PLANNED, or `why`
    alpha: float  # the level its test is planned at
    why: Optional[str] = None  # why there is nothing to plan from


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    judged_on: Optional[Metric]  # large effects: the metric judged; small ones: None (both)
    p_holm: Optional[float] = None  # large effects: the Holm-adjusted p of the judged metric
    p_equivalence: Optional[float] = None  # small effects: the larger TOST p of the two metrics
    plan: Optional[SeedPlan] = None  # unresolved rows only
    # `differs` rows: True when every interval that excludes 0 lies inside its equivalence margin (detectable, and
    # smaller than the table's margins call relevant)
    within_margin: Optional[bool] = None


def t_test_power(mean: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided one-sample t-test at level alpha with n seeds, for true differences ~ (mean, sd)."""
    df, shift = n - 1, mean / sd * math.sqrt(n)
    critical = scipy_stats.t.ppf(1 - alpha / 2, df)
    return float(nct.sf(critical, df, shift) + nct.cdf(-critical, df, shift))


def tost_miss(mean: float, sd: float, margin: float, n: int, alpha: float) -> float:
    """The summed chances that either one-sided test of TOST fails with n seeds: 1 - this bounds its power below."""
    df, se = n - 1, sd / math.sqrt(n)
    critical = scipy_stats.t.ppf(1 - alpha, df)
    return float(nct.cdf(critical, df, (mean + margin) / se) + nct.cdf(critical, df, (margin - mean) / se))


def fewest_seeds(power: Callable[[int], float], measured: int) -> Optional[int]:
    """The fewest seeds, more than those measured, at which power(n) reaches POWER; None beyond MOST_SEEDS_PLANNED."""
    return next((n for n in range(max(measured + 1, 2), MOST_SEEDS_PLANNED + 1) if power(n) >= POWER), None)


def plan_large(delta: PairedDelta, paper_direction: int, alpha: float) -> SeedPlan:
    """Seeds for a large effect's paired t-test at level alpha (its Holm level), towards the side its mean lies on."""
    if delta.sd is None or delta.mean is None:
        return SeedPlan("unresolved", None, alpha, why="one seed gives no spread")
    if delta.mean == 0:
        return SeedPlan("unresolved", None, alpha, why="its mean difference is 0")
    towards: Verdict = "agrees" if (delta.mean > 0) == (paper_direction > 0) else "disagrees"
    if delta.sd == 0:
        return SeedPlan(towards, None, alpha, why="its seeds' differences are identical, no spread to plan from")
    mean, sd = delta.mean, delta.sd  # sd is derived from the interval: read it once, not once per n tried
    seeds = fewest_seeds(lambda n: t_test_power(mean, sd, n, alpha), len(delta.seeds))
    return SeedPlan(towards, seeds, alpha)


def plan_small(bleu: PairedDelta, ppl: PairedDelta, margin_ppl: Optional[float]) -> SeedPlan:
    """Seeds for a small effect: towards `equivalent` (TOST on both metrics) when both means lie within their
    margins, else towards `differs` (the metric whose t-test needs fewer)."""
    if bleu.sd is None or ppl.sd is None:
        return SeedPlan("unresolved", None, ALPHA, why="one seed gives no spread")
    if margin_ppl is None:
        return SeedPlan("unresolved", None, ALPHA, why="no base perplexity for the equivalence margin")
    measured = len(bleu.seeds)
    metrics = ((bleu.mean, bleu.sd, MARGIN_BLEU), (ppl.mean, ppl.sd, margin_ppl))  # (mean, sd, margin)
    if all(abs(mean) < margin for mean, _, margin in metrics):
        if any(sd == 0 for _, sd, _ in metrics):
            why = "its seeds' differences are identical, no spread to plan from"
            return SeedPlan("equivalent", None, ALPHA, why=why)
        seeds = fewest_seeds(
            lambda n: 1 - sum(tost_miss(mean, sd, margin, n, ALPHA) for mean, sd, margin in metrics), measured
        )
        return SeedPlan("equivalent", seeds, ALPHA)
    candidates = [
        fewest_seeds(lambda n, mean=mean, sd=sd: t_test_power(mean, sd, n, ALPHA), measured)
        for mean, sd, _ in metrics
        if mean and sd
    ]
    found = [seeds for seeds in candidates if seeds is not None]
    return SeedPlan("differs", min(found) if found else None, ALPHA)


def judge(rows: Sequence[RowEvidence], base_ppl: Optional[float]) -> dict[str, Judgement]:
    """A verdict per row with a paper effect and at least one seed paired with base (rows the paper does not print,
    and rows with no finished seed, get none); see the module docstring.

    Holm's family is every large-effect row given, tested or not: a row with fewer than 2 paired seeds counts at
    p = 1. Holm's adjusted p-values never rise when another p-value falls, so a verdict reached in a partial table
    stands when the other rows' runs land (it could only be lost to a family that grew, and this one does not)."""
    large = {r.row_id: r for r in rows if r.paper is not None and r.paper.large}
    family = {row_id: getattr(r, r.paper.judged_on).p_value for row_id, r in large.items()}
    adjusted = holm({row_id: 1.0 if p is None else p for row_id, p in family.items()})
    # The Holm level an unresolved large row would face if the rows resolved so far stay resolved.
    open_level = ALPHA / max(1, sum(1 for row_id in large if adjusted[row_id] >= ALPHA))
    margin_ppl = ppl_margin(base_ppl)
    out: dict[str, Judgement] = {}
    for r in rows:
        if r.paper is None or not (r.bleu.seeds or r.ppl.seeds):
            continue
        if r.row_id in large:
            metric = r.paper.judged_on
            delta = getattr(r, metric)
            p = None if family[r.row_id] is None else adjusted[r.row_id]
            verdict: Verdict = "unresolved"
            if p is not None and p < ALPHA and delta.mean:
                verdict = "agrees" if (delta.mean > 0) == (r.paper.direction(metric) > 0) else "disagrees"
            plan = plan_large(delta, r.paper.direction(metric), open_level) if verdict == "unresolved" else None
            out[r.row_id] = Judgement(verdict, metric, p_holm=p, plan=plan)
            continue
        verdict, p_equivalence = equivalence(r.bleu, r.ppl, base_ppl)
        plan = plan_small(r.bleu, r.ppl, margin_ppl) if verdict == "unresolved" else None
        within = differs_within_margin(r.bleu, r.ppl, margin_ppl) if verdict == "differs" else None
        out[r.row_id] = Judgement(verdict, None, p_equivalence=p_equivalence, plan=plan, within_margin=within)
    return out


def equivalence(bleu: PairedDelta, ppl: PairedDelta, reference_ppl: Optional[float]) -> tuple[Verdict, Optional[float]]:
    """A difference with no expected side: `equivalent` when TOST passes for BLEU (+-MARGIN_BLEU) and PPL
    (+-MARGIN_PPL_RELATIVE of the reference's perplexity), else `differs` when either interval excludes 0, else
    `unresolved`; with the larger of the two TOST p-values."""
    margin_ppl = ppl_margin(reference_ppl)
    p_eq = [tost_p(bleu, MARGIN_BLEU), None if margin_ppl is None else tost_p(ppl, margin_ppl)]
    p_equivalence = None if None in p_eq else max(p_eq)
    if p_equivalence is not None and p_equivalence < ALPHA:
        return "equivalent", p_equivalence
    if bleu.excludes_zero or ppl.excludes_zero:
        return "differs", p_equivalence
    return "unresolved", p_equivalence


def differs_within_margin(bleu: PairedDelta, ppl: PairedDelta, margin_ppl: Optional[float]) -> Optional[bool]:
    """Whether every interval that excludes 0 lies wholly inside its margin (None without a PPL margin)."""
    if margin_ppl is None:
        return None
    differing = [(d, m) for d, m in ((bleu, MARGIN_BLEU), (ppl, margin_ppl)) if d.excludes_zero]
    return bool(differing) and all(-m < d.ci[0] and d.ci[1] < m for d, m in differing)


def ppl_margin(reference_ppl: Optional[float]) -> Optional[float]:
    """The equivalence margin for perplexity: MARGIN_PPL_RELATIVE of the reference row's mean."""
    return None if reference_ppl is None else MARGIN_PPL_RELATIVE * reference_ppl


def rank_correlation(ours: Mapping[str, Optional[float]], paper: Mapping[str, Optional[float]]) -> Optional[float]:
    """Spearman's rho between our and the paper's values over the keys both have (None below 3 such keys)."""
    keys = sorted(k for k in ours if ours[k] is not None and paper.get(k) is not None)
    if len(keys) < 3:
        return None
    rho = scipy_stats.spearmanr([ours[k] for k in keys], [paper[k] for k in keys]).statistic
    return None if math.isnan(rho) else float(rho)
