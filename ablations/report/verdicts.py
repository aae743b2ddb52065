"""A sweep table's verdicts as the table states them: each row's seed-paired evidence and verdict against the paper
(stats.judge), their count and rank correlation, the rows that differ only inside the equivalence margins, and how many
seeds each unresolved row would take (stats.SeedPlan). table3 puts these lines in its notes and JSON."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from .convergence import not_learned
from .rows import RowResult, per_seed
from .stats import (
    MARGIN_BLEU,
    MOST_SEEDS_PLANNED,
    POWER,
    VERDICTS,
    RowEvidence,
    judge,
    paired_delta,
    paper_effect,
    ppl_margin,
    rank_correlation,
)


def difference(value: Optional[float], base: Optional[float]) -> Optional[float]:
    return None if value is None or base is None else value - base


def with_verdicts(results: tuple[RowResult, ...], base: RowResult) -> tuple[RowResult, ...]:
    """Each row's seed-paired evidence against base and its verdict against the paper (stats.judge)."""
    base_paper = {"bleu": base.row.paper.bleu, "ppl": base.row.paper.ppl}
    evidence = {
        result.row.id: RowEvidence(
            result.row.id,
            paper_effect({"bleu": result.row.paper.bleu, "ppl": result.row.paper.ppl}, base_paper),
            paired_delta(per_seed(result, "dev_bleu"), per_seed(base, "dev_bleu")),
            paired_delta(per_seed(result, "dev_ppl"), per_seed(base, "dev_ppl")),
        )
        for result in results
        if result is not base and result.runs  # rows selected away are not in the table, nor in Holm's family
    }
    judgements = judge(list(evidence.values()), base.mean("dev_ppl"))
    return tuple(
        result
        if result is base
        else replace(result, evidence=evidence.get(result.row.id), judgement=judgements.get(result.row.id))
        for result in results
    )


def verdict_summary(base: RowResult, results: Sequence[RowResult]) -> list[str]:
    """The verdicts counted, how many of the paper's large effects agree, and the rank correlation of Δ PPL; over the
    rows with a finished run (a row selected away, or with no finished run yet, is named, not counted as
    unresolved)."""
    absent = [r.row.id for r in results if r is not base and not r.runs]
    untrained = [r.row.id for r in results if r is not base and r.runs and not r.done]
    judged = [r for r in results if r.judgement is not None]
    missing = [f"Not in this table, so neither judged nor counted: {', '.join(absent)}."] if absent else []
    if untrained:
        missing.append(f"No finished run yet, so not judged (and not counted): {', '.join(untrained)}.")
    unpaired = [
        r.row.id
        for r in results
        if r is not base and r.done and r.judgement is None and r.evidence is not None and r.evidence.paper is not None
    ]
    if unpaired:
        missing.append(
            f"Finished, but no seed in common with base's finished runs, so not judged: {', '.join(unpaired)}."
        )
    lost = {
        r.row.id: [f"s{run.spec.seed} {run.status}" for run in r.runs if run.status in ("diverged", "failed")]
        for r in judged
    }
    if any(lost.values()):
        named = "; ".join(f"{row_id} ({', '.join(seeds)})" for row_id, seeds in lost.items() if seeds)
        missing.append(
            f"Judged on their done seeds only, without the seeds that diverged or failed (an outcome the verdict does "
            f"not weigh; read it beside them): {named}."
        )
    if not judged:
        return missing
    counts = {v: [row_name(r) for r in judged if r.judgement.verdict == v] for v in VERDICTS}
    large = [r for r in judged if r.judgement.judged_on is not None]
    # agrees always named, even at 0: how many of the paper's large effects agree is the table's headline
    large_counts = {
        v: [row_name(r) for r in large if r.judgement.verdict == v] for v in ("agrees", "disagrees", "unresolved")
    }
    lines = [
        "Verdicts: " + "; ".join(f"{v} {len(rows)} ({', '.join(rows)})" for v, rows in counts.items() if rows) + ".",
        f"Of the paper's {len(large)} large effect{'' if len(large) == 1 else 's'} here: "
        + "; ".join(
            f"{v} {len(rows)} ({', '.join(rows) or 'none'})"
            for v, rows in large_counts.items()
            if rows or v == "agrees"
        )
        + ".",
    ]
    interim = [f"{r.row.id} on {len(r.done)} of {len(r.runs)}" for r in judged if r.interim]
    if interim:
        lines.append(
            f"Interim, judged before all the seeds their scale fixes had finished (named so above): {', '.join(interim)}. "
            "A row's verdict is the one on all its fixed seeds; stopping at the first look that passes would inflate its "
            "error rate."
        )
    ours = {r.row.id: r.evidence.ppl.mean for r in results if r.evidence is not None}
    paper = {r.row.id: difference(r.row.paper.ppl, base.row.paper.ppl) for r in results if r is not base}
    rho = rank_correlation(ours, paper)
    if rho is not None:
        shared = sum(1 for k in ours if ours[k] is not None and paper.get(k) is not None)
        lines.append(f"Spearman rank correlation of our mean Δ PPL with the paper's over {shared} rows: {rho:+.2f}.")
    return lines + missing


def row_name(result: RowResult) -> str:
    """A row as the verdict counts name it: its id, marked when its verdict is interim."""
    return f"{result.row.id} interim" if result.interim else result.row.id


def within_margin_line(results: Sequence[RowResult], base: RowResult) -> Optional[str]:
    """The rows that differ from base by less than the equivalence margins: a detectable, negligible difference."""
    margin_ppl = ppl_margin(base.mean("dev_ppl"))
    named = []
    for result in results:
        if not (result.judgement and result.judgement.within_margin):
            continue
        parts = [
            f"{label} [{delta.ci[0]:+.2g}, {delta.ci[1]:+.2g}] within ±{margin:.2g}"
            for label, delta, margin in (
                ("BLEU", result.evidence.bleu, MARGIN_BLEU),
                ("PPL", result.evidence.ppl, margin_ppl),
            )
            if delta.excludes_zero
        ]
        named.append(f"{result.row.id} ({'; '.join(parts)})")
    if not named:
        return None
    return (
        "Differs by less than the equivalence margins (detectable, and smaller than the table calls relevant; it is not "
        f"equivalent because the other metric's interval is too wide): {', '.join(named)}."
    )


def seed_plan_line(results: Sequence[RowResult]) -> Optional[str]:
    """How many seeds each unresolved row would take to resolve (stats.SeedPlan): where more seeds could pay."""
    planned = []
    for result in results:
        plan = seeds_to_resolve(result)
        if plan is None:
            continue
        if plan["why"]:
            planned.append(f"{result.row.id}: {plan['why']}")
            continue
        count = plan["seeds"] if plan["seeds"] is not None else f"more than {MOST_SEEDS_PLANNED}"
        planned.append(f"{result.row.id} {count} (towards {plan['towards']}, at {100 * plan['alpha']:.3g} %)")
    if not planned:
        return None
    return (
        f"Seeds to resolve, a planning figure and not evidence: the fewest seeds in all with which an unresolved "
        f"row's test would reach {100 * POWER:g} % power were its measured mean and spread of the per-seed "
        "differences the truth (rough on few seeds); large effects at the Holm level they would face with the rows "
        "resolved so far staying so, small ones towards equivalent where both means lie within the margins (a lower "
        f"bound on TOST's power), else towards differs: {'; '.join(planned)}. Fix a row's seed count before "
        "training its new seeds and judge it on all of them: adding seeds until the test passes inflates its error "
        "rate (optional stopping)."
    )


def seeds_to_resolve(result: RowResult) -> Optional[dict[str, Any]]:
    """An unresolved row's SeedPlan as the table and its JSON state it; `why` says when there is nothing to plan
    from (seeds null), `seeds` is null too when more than MOST_SEEDS_PLANNED would be needed."""
    plan = result.judgement and result.judgement.plan
    if not plan:
        return None
    stalled = sorted(run.spec.seed for run in not_learned(result))
    why = plan.why
    if stalled:
        # A seed that never learned spreads the row by a failure, not by seed noise: no spread to plan from.
        why = f"seed{'s' if len(stalled) > 1 else ''} {', '.join(map(str, stalled))} did not learn, so its spread is not seed noise"
    return {
        "seeds": None if why else plan.seeds,
        "towards": plan.towards,
        "alpha": plan.alpha,
        "power": POWER,
        "why": why,
    }
