"""A sweep's contrasts (`contrasts:` in its file): seed-paired differences between two rows other than the
reference, so that a grid's table states each factor's effect at each level of the other, from the records, as
it states every row's Δ against the reference.

A contrast is measured as Δ is (stats.paired_delta: a 95 % t-interval over the seeds both rows have) and read as
the paper's small effects are (stats.equivalence: TOST at ±0.5 BLEU and ±2 % of the `against` row's PPL, else
whether an interval excludes 0). The paper prints no figure for them, so a contrast gets a reading, never a
verdict, and the readings are not corrected for multiplicity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from ..sweep import Contrast
from .render import escape_markdown, interval, markdown_table, signed
from .rows import ppl_decimals
from .stats import PairedDelta, Verdict, equivalence, paired_delta

PerSeed = Callable[[str, str], Mapping[int, float]]  # (row id, metric) -> {seed: value} over the row's done runs


@dataclass(frozen=True)
class ContrastResult:
    contrast: Contrast
    bleu: PairedDelta
    ppl: PairedDelta
    reading: Verdict  # equivalent / differs / unresolved
    p_equivalence: Optional[float]


def measure_contrasts(
    contrasts: Sequence[Contrast], per_seed: PerSeed, mean_ppl: Callable[[str], Optional[float]]
) -> tuple[ContrastResult, ...]:
    results = []
    for contrast in contrasts:
        bleu = paired_delta(per_seed(contrast.row, "dev_bleu"), per_seed(contrast.against, "dev_bleu"))
        ppl = paired_delta(per_seed(contrast.row, "dev_ppl"), per_seed(contrast.against, "dev_ppl"))
        reading, p_equivalence = equivalence(bleu, ppl, mean_ppl(contrast.against))
        results.append(ContrastResult(contrast, bleu, ppl, reading, p_equivalence))
    return tuple(results)


def seeds_text(result: ContrastResult) -> str:
    return ", ".join(map(str, result.bleu.seeds)) or "none shared"


HEADER = ("contrast", "Δ BLEU", "Δ BLEU 95 % CI", "Δ PPL", "Δ PPL 95 % CI", "reading", "seeds")
ALIGNS = ("l", "r", "r", "r", "r", "l", "l")


UNSPREAD_PPL_DIGITS = 3  # a contrast on one seed has no interval to size its decimals from


def cells(result: ContrastResult) -> list[str]:
    shared = len(result.bleu.seeds)
    reading = result.reading if shared >= 2 else ("unresolved (one seed)" if shared else "not measured")
    half_width = None if result.ppl.ci is None else (result.ppl.ci[1] - result.ppl.ci[0]) / 2
    ppl_digits = ppl_decimals(half_width) or UNSPREAD_PPL_DIGITS  # as rows' PPL cells: enough to show the spread
    return [
        result.contrast.label,
        signed(result.bleu.mean, 1),
        interval(result.bleu.ci, 1),
        signed(result.ppl.mean, ppl_digits),
        interval(result.ppl.ci, ppl_digits),
        reading,
        seeds_text(result),
    ]


def markdown_lines(results: Sequence[ContrastResult]) -> list[str]:
    if not results:
        return []
    rows = ([escape_markdown(cell) for cell in cells(result)] for result in results)
    return ["", "Contrasts (seed-paired, row − against; see the notes):", ""] + markdown_table(HEADER, ALIGNS, rows)


def sentences(results: Sequence[ContrastResult]) -> list[str]:
    """One line per contrast, for the TeX footnotes."""
    return [
        f"Contrast {c[0]}: Δ BLEU {c[1]} {c[2]}, Δ PPL {c[3]} {c[4]} over seeds {c[6]}: {c[5]}."
        for c in map(cells, results)
    ]


def note(results: Sequence[ContrastResult], absent: Sequence[Contrast]) -> Optional[str]:
    if not results and not absent:
        return None
    text = (
        "Contrasts: the sweep's pairs of rows other than the reference, each a t-interval over the seed-paired "
        "differences row − against (as Δ); read as the paper's small effects are (equivalent when TOST at 5 % passes "
        "for BLEU and PPL at the margins above, the PPL margin taken from the against row, differs when either interval "
        "excludes 0, else unresolved), with no paper figure to judge against and no multiplicity correction."
    )
    if absent:
        text += " Not in this table: " + ", ".join(contrast.label for contrast in absent) + "."
    return text


def as_data(results: Sequence[ContrastResult]) -> list[dict[str, Any]]:
    """What results/<sweep>_<scale>.json carries as `contrasts`."""
    return [
        {
            "row": result.contrast.row,
            "against": result.contrast.against,
            "reading": result.reading,
            "p_equivalence": result.p_equivalence,
            "delta_bleu": result.bleu.mean,
            "delta_ppl": result.ppl.mean,
            "delta_bleu_ci": None if result.bleu.ci is None else list(result.bleu.ci),
            "delta_ppl_ci": None if result.ppl.ci is None else list(result.ppl.ci),
            "delta_bleu_per_seed": result.bleu.by_seed(),
            "delta_ppl_per_seed": result.ppl.by_seed(),
            "seeds": list(result.bleu.seeds),
        }
        for result in results
    ]
