"""What a table's training curves say beside its final numbers: runs that never learned, whether base reached a
plateau over the last fifth of its budget, and whether the rows' Δ PPL already had its sign before the cool-down."""

from __future__ import annotations

from typing import Optional, Sequence

from .collect import RunRecord, read_curves
from .rows import RowResult
from .stats import paired_delta

NOT_LEARNED_BLEU = 1.0  # a finished run whose final dev BLEU is below this did not learn to translate


def not_learned(result: RowResult) -> list[RunRecord]:
    """The row's done runs that finished without learning the task (final dev BLEU under NOT_LEARNED_BLEU)."""
    return [
        run
        for run in result.done
        if isinstance(bleu := run.metrics.get("dev_bleu"), (int, float)) and bleu < NOT_LEARNED_BLEU
    ]


def not_learned_line(results: Sequence[RowResult]) -> Optional[str]:
    """Names the runs that never learned, with their final and best dev PPL. They stay in the means and
    intervals as they ran: leaving a seed out after seeing its result would choose the result."""
    cells = []
    for result in results:
        for run in not_learned(result):
            ppl = run.metrics.get("dev_ppl")
            curve = read_curves(run.folder)["dev/ppl"]
            final = f", dev PPL {ppl:.2f}" if isinstance(ppl, (int, float)) else ""
            best = f"; best dev PPL {min(v for _, v in curve):.2f}" if curve else ""
            cells.append(f"{result.row.id} s{run.spec.seed} (dev BLEU {run.metrics['dev_bleu']:.1f}{final}{best})")
    if not cells:
        return None
    return (
        f"Did not learn (final dev BLEU under {NOT_LEARNED_BLEU:g}): {', '.join(cells)}. These runs stay in the "
        "means, intervals and verdicts as they ran; leaving them out after seeing them would choose the result."
    )


PLATEAU_FRACTION = 0.2  # the last fifth of the budget
PLATEAU_TOLERANCE = 0.02  # a plateau: dev PPL moves by less than 2 % over it


def value_before(curve: Sequence[tuple[int, float]], step: float) -> Optional[float]:
    """The curve's last value at or before `step`; None when it has none that early."""
    before = [value for at, value in curve if at <= step]
    return before[-1] if before else None


def plateau_change(curve: Sequence[tuple[int, float]], last_step: int) -> Optional[float]:
    """Relative change of dev PPL over the last fifth of a run's steps: from the last evaluation at or before
    step 0.8 × last_step to the last evaluation; None when the curve has no point that early."""
    start = value_before(curve, last_step * (1 - PLATEAU_FRACTION))
    if start is None or not curve:
        return None
    return (curve[-1][1] - start) / start


def early_ppl(run: RunRecord) -> Optional[float]:
    """Dev PPL at the start of the run's last fifth (before a cool-down of that length): where a shorter budget
    without the decay would have stopped."""
    steps = run.metrics.get("steps")
    if not isinstance(steps, int):
        return None
    return value_before(read_curves(run.folder)["dev/ppl"], steps * (1 - PLATEAU_FRACTION))


def early_by_seed(result: RowResult) -> dict[int, float]:
    """{seed: early_ppl} over the row's done runs that have a point that early."""
    values = {run.spec.seed: early_ppl(run) for run in result.done}
    return {seed: value for seed, value in values.items() if value is not None}


def earlier_line(base: RowResult, results: Sequence[RowResult]) -> Optional[str]:
    """Whether each row's mean Δ PPL already had its final sign at 80 % of the budgets (seed-paired, like Δ): a
    sign that flips late says the comparison depends on the budget, as it does when rows learn at different speeds."""
    base_early = early_by_seed(base)
    held, flipped = [], []
    for result in results:
        final = result.evidence.ppl.mean if result.evidence is not None else None
        if result is base or final is None:
            continue
        early = paired_delta(early_by_seed(result), base_early).mean
        if early is None:
            continue
        digits = result.ppl_digits(base)
        (held if (early > 0) == (final > 0) else flipped).append(
            f"{result.row.id} ({early:+.{digits}f} then {final:+.{digits}f})"
        )
    if not held and not flipped:
        return None
    judged = len(held) + len(flipped)
    return (
        f"Earlier in training: at {100 * (1 - PLATEAU_FRACTION):g} % of each run's steps, the mean Δ PPL had its "
        f"final sign in {len(held)} of {judged} row{'' if judged == 1 else 's'}"
        + (f"; it flipped in {', '.join(flipped)}." if flipped else ".")
    )


def plateau_line(base: RowResult) -> Optional[str]:
    """Whether base trained to a plateau, seed by seed, from its dev-PPL curves (the table's rows compare where
    training ends, not how fast it learns, only when it did)."""
    changes = []
    for run in base.done:
        curve = read_curves(run.folder)["dev/ppl"]
        steps = run.metrics.get("steps")
        if curve and isinstance(steps, int):
            change = plateau_change(curve, steps)
            if change is not None:
                changes.append((run.spec.seed, change))
    if not changes:
        return None
    flat = sum(abs(change) < PLATEAU_TOLERANCE for _, change in changes)
    cells = ", ".join(f"s{seed} {100 * change:+.1f} %" for seed, change in changes)
    return (
        f"Plateau: {base.row.id}'s dev PPL over the last fifth of its steps changed by {cells}; "
        f"{flat} of {len(changes)} seeds within ±{100 * PLATEAU_TOLERANCE:g} % (the table compares where training "
        + ("ends)." if flat == len(changes) else "ends only where it plateaued; otherwise also how fast rows learn).")
    )
