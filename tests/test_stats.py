"""Seed-aware statistics: paired intervals, Holm, TOST and the verdicts, against independent computations."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ablations.report.stats import (
    PairedDelta,
    PaperEffect,
    RowEvidence,
    holm,
    judge,
    paired_delta,
    paper_effect,
    rank_correlation,
    t_test_power,
    tost_miss,
    tost_p,
)
from ablations.sweep import load_sweep

ROOT = Path(__file__).resolve().parent.parent


def test_the_paired_interval_is_scipys_one_sample_t_interval_of_the_differences():
    row = {0: 26.1, 1: 25.0, 2: 25.9, 3: 24.7, 7: 30.0}  # seed 7 has no base: not paired, left out
    base = {0: 25.2, 1: 24.8, 2: 25.1, 3: 24.9, 4: 20.0}
    delta = paired_delta(row, base)
    diffs = [row[s] - base[s] for s in (0, 1, 2, 3)]
    test = scipy_stats.ttest_1samp(diffs, 0.0)
    lo, hi = test.confidence_interval(0.95)
    assert delta.seeds == (0, 1, 2, 3)
    assert delta.mean == pytest.approx(sum(diffs) / 4)
    assert delta.ci == pytest.approx((lo, hi))
    assert delta.p_value == pytest.approx(test.pvalue)
    assert delta.p_value == pytest.approx(
        scipy_stats.ttest_rel([row[s] for s in range(4)], [base[s] for s in range(4)]).pvalue
    )


def test_one_seed_has_no_interval_and_is_never_evidence():
    delta = paired_delta({0: 40.0}, {0: 20.0, 1: 21.0})
    assert delta.mean == 20.0 and delta.ci is None and delta.p_value is None and not delta.excludes_zero
    effect = PaperEffect(delta_bleu=-2.1, delta_ppl=1.19)
    (verdict,) = judge([RowEvidence("C1", effect, delta, paired_delta({0: 9.0}, {0: 5.0}))], base_ppl=5.0).values()
    assert verdict.verdict == "unresolved"


def test_holm_matches_a_hand_worked_example():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})


def test_tost_agrees_with_two_one_sided_scipy_tests():
    diffs = [0.1, -0.2, 0.05, 0.15, -0.05]
    delta = paired_delta({i: d for i, d in enumerate(diffs)}, {i: 0.0 for i in range(5)})
    margin = 0.5
    lower = scipy_stats.ttest_1samp(diffs, -margin, alternative="greater").pvalue
    upper = scipy_stats.ttest_1samp(diffs, margin, alternative="less").pvalue
    assert tost_p(delta, margin) == pytest.approx(max(lower, upper))
    assert tost_p(delta, margin) < 0.05
    assert tost_p(delta, 0.01) > 0.05


def test_the_papers_large_effects_are_the_ten_rows_the_issue_names():
    sweep = load_sweep(ROOT / "sweeps" / "table3.yaml")
    base = sweep.row("base").paper
    effects = {
        r.id: paper_effect({"bleu": r.paper.bleu, "ppl": r.paper.ppl}, {"bleu": base.bleu, "ppl": base.ppl})
        for r in sweep.rows
        if r.id != "base"
    }
    large = sorted(row for row, effect in effects.items() if effect.large)
    assert large == sorted(["A1", "B1", "C1", "C2", "C4", "C5", "D1", "D3", "D4", "big"])
    assert effects["B1"].judged_on == "bleu"  # its PPL effect (+0.24) is small
    assert {effects[r].judged_on for r in large if r != "B1"} == {"ppl"}
    assert effects["D3"].direction("ppl") == -1 and effects["C1"].direction("ppl") == 1


def _evidence(row_id, effect, bleu_diffs, ppl_diffs):
    seeds = range(len(bleu_diffs))
    return RowEvidence(
        row_id,
        effect,
        paired_delta({s: d for s, d in zip(seeds, bleu_diffs)}, {s: 0.0 for s in seeds}),
        paired_delta({s: d for s, d in zip(seeds, ppl_diffs)}, {s: 0.0 for s in seeds}),
    )


def test_verdicts_for_agreeing_disagreeing_equivalent_differing_and_unresolved_rows():
    c1 = PaperEffect(delta_bleu=-2.1, delta_ppl=1.19)  # large, judged on PPL (worse)
    big = PaperEffect(delta_bleu=0.6, delta_ppl=-0.59)  # large, judged on PPL (better)
    e = PaperEffect(delta_bleu=-0.1, delta_ppl=0.0)  # small
    rows = [
        _evidence("C1", c1, [-3, -2.5, -3.2, -2.8], [0.8, 0.9, 1.0, 0.85]),
        _evidence("big", big, [1, 1, 1, 1], [0.5, 0.6, 0.55, 0.58]),  # PPL worse: against the paper
        _evidence("D1", PaperEffect(-1.2, 0.85), [1, -1, 2, -2], [0.3, -0.2, 0.1, -0.4]),
        _evidence("E", e, [0.05, -0.1, 0.02, 0.04], [0.01, -0.01, 0.0, 0.005]),
        _evidence("A2", PaperEffect(-0.3, 0.08), [-1.0, -1.2, -0.9, -1.1], [0.02, 0.03, 0.02, 0.025]),
        _evidence("A3", PaperEffect(0.0, -0.01), [2, -2, 1.5, -1], [0.3, -0.3, 0.2, -0.1]),
        RowEvidence("X", None, PairedDelta(1.0, (0.5, 1.5), 0.01, (0, 1)), PairedDelta(None, None, None, ())),
    ]
    verdicts = judge(rows, base_ppl=5.0)
    assert {k: v.verdict for k, v in verdicts.items()} == {
        "C1": "agrees",
        "big": "disagrees",
        "D1": "unresolved",
        "E": "equivalent",
        "A2": "differs",
        "A3": "unresolved",
    }
    assert verdicts["C1"].judged_on == "ppl" and verdicts["C1"].p_holm < 0.05
    assert verdicts["E"].p_equivalence < 0.05
    assert verdicts["A2"].within_margin is False  # BLEU about -1, twice its margin
    assert verdicts["C1"].within_margin is None and verdicts["A3"].within_margin is None  # only `differs` rows


def test_a_difference_inside_the_equivalence_margin_is_flagged_within_margin():
    # PPL differs by about 0.02 with a tight interval, inside +-2 % of 5.0; BLEU too wide for equivalence
    row = _evidence("A4", PaperEffect(-0.4, 0.09), [2, -2, 1.5, -1], [0.02, 0.03, 0.025, 0.022])
    (judgement,) = judge([row], base_ppl=5.0).values()
    assert judgement.verdict == "differs" and judgement.within_margin is True
    (wider,) = judge([row], base_ppl=1.0).values()  # margin 0.02: the interval reaches past it
    assert wider.verdict == "differs" and wider.within_margin is False


def test_holm_can_leave_a_row_unresolved_that_alone_would_pass():
    effect = PaperEffect(-2.1, 1.19)
    # p about 0.03 alone; with nine other equally strong-but-not-overwhelming rows Holm keeps it below 0.05 only if
    # the smallest adjusted p is below 0.05: build one clear row and one marginal row.
    marginal = _evidence("C2", PaperEffect(-0.5, 0.27), [0, 0, 0], [0.1, 0.5, 0.2])
    clear = _evidence("C1", effect, [0, 0, 0], [1.0, 1.01, 0.99])
    alone = judge([marginal], base_ppl=5.0)["C2"]
    together = judge(
        [marginal, clear] + [_evidence(f"R{i}", effect, [0, 0, 0], [0.1, 0.5, 0.2]) for i in range(5)], base_ppl=5.0
    )["C2"]
    assert alone.p_holm == pytest.approx(paired_delta({0: 0.1, 1: 0.5, 2: 0.2}, {0: 0, 1: 0, 2: 0}).p_value)
    assert together.p_holm > alone.p_holm


def test_an_untested_large_row_counts_at_p_1_in_holms_family_and_a_row_without_seeds_gets_no_verdict():
    effect = PaperEffect(-2.1, 1.19)
    marginal = _evidence("C2", PaperEffect(-0.5, 0.27), [0, 0, 0], [0.1, 0.5, 0.2])
    one_seed = _evidence("C4", effect, [0], [0.4])
    no_seed = RowEvidence("D1", effect, paired_delta({}, {0: 1.0}), paired_delta({}, {0: 1.0}))
    alone = judge([marginal], base_ppl=5.0)
    partial = judge([marginal, one_seed, no_seed], base_ppl=5.0)
    p = paired_delta({0: 0.1, 1: 0.5, 2: 0.2}, {0: 0, 1: 0, 2: 0}).p_value
    assert alone["C2"].p_holm == pytest.approx(p)
    assert partial["C2"].p_holm == pytest.approx(3 * p)  # a family of 3: C4 and D1 at p = 1
    assert partial["C4"].verdict == "unresolved" and partial["C4"].p_holm is None  # one seed: never evidence
    assert "D1" not in partial  # nothing trained: not judged at all
    # the family's untested rows landing with any p-values never raise C2's adjusted p
    landed = judge([marginal, _evidence("C4", effect, [0, 0, 0], [0.3, 0.5, 0.4])], base_ppl=5.0)
    assert landed["C2"].p_holm <= judge([marginal, one_seed], base_ppl=5.0)["C2"].p_holm


def test_rank_correlation_is_spearmans_rho_over_shared_rows():
    ours = {"A": 0.1, "B": 0.5, "C": 0.2, "D": None}
    paper = {"A": 1.0, "B": 3.0, "C": 2.0, "D": 4.0}
    assert rank_correlation(ours, paper) == pytest.approx(1.0)
    assert rank_correlation({"A": 1.0, "B": 2.0}, paper) is None
    assert math.isclose(rank_correlation({"A": 3.0, "B": 2.0, "C": 1.0}, paper), -0.5)


def test_t_test_power_is_g_powers_textbook_figure_and_the_plan_is_the_fewest_seeds_with_80_percent():
    # G*Power, one-sample t-test, d = 0.5, two-sided 5 %: 34 for power 0.80 (actual 0.8078); 33 falls short.
    assert t_test_power(0.5, 1.0, 34, 0.05) == pytest.approx(0.8078, abs=5e-4)
    assert t_test_power(0.5, 1.0, 33, 0.05) < 0.8
    seeds = [0, 1, 2]
    row, base = {0: 0.6, 1: 1.2, 2: 0.3}, dict.fromkeys(seeds, 0.0)  # mean 0.7, sd 0.458: d 1.53
    (judgement,) = judge([_evidence("B2", PaperEffect(-0.4, 0.09), [0, 0, 0], [0.6, 1.2, 0.3])], 5.0).values()
    plan = judgement.plan
    assert judgement.verdict == "unresolved" and plan.towards == "differs" and plan.alpha == pytest.approx(0.05)
    delta = paired_delta(row, base)
    assert (
        t_test_power(delta.mean, delta.sd, plan.seeds, 0.05)
        >= 0.8
        > t_test_power(delta.mean, delta.sd, plan.seeds - 1, 0.05)
    )
    assert plan.seeds == 6


def test_tost_power_bound_holds_against_simulated_experiments():
    rng = np.random.default_rng(0)
    mean, sd, margin, n = 0.1, 0.4, 0.5, 8
    samples = rng.normal(mean, sd, size=(20000, n))
    m, se = samples.mean(axis=1), samples.std(axis=1, ddof=1) / math.sqrt(n)
    critical = scipy_stats.t.ppf(0.95, n - 1)
    passed = ((m + margin) / se > critical) & ((margin - m) / se > critical)
    bound = 1 - tost_miss(mean, sd, margin, n, 0.05)
    assert bound <= passed.mean() + 0.01 and passed.mean() - bound < 0.05  # a bound, and a close one


def test_unresolved_rows_get_a_seed_plan_towards_the_side_their_mean_lies_on():
    c1 = PaperEffect(delta_bleu=-2.1, delta_ppl=1.19)  # the paper: PPL rises
    rows = [
        _evidence("C1", c1, [-3, -2.5, -3.2, -2.8], [0.8, 0.9, 1.0, 0.85]),  # resolved: agrees, no plan
        _evidence("A1", PaperEffect(-0.9, 0.37), [0, 0, 0], [-0.03, -0.01, -0.02]),  # PPL falls: towards disagrees
        _evidence("C4", c1, [0], [0.4]),  # one seed: nothing to plan from
        _evidence("E", PaperEffect(-0.1, 0.0), [0.3, -0.4, 0.2], [0.02, -0.05, 0.01]),  # within margins
        _evidence("A3", PaperEffect(0.0, -0.01), [2, -2, 1.5], [0.3, -0.3, 0.2]),  # BLEU outside its margin
    ]
    verdicts = judge(rows, base_ppl=5.0)
    assert verdicts["C1"].verdict == "agrees" and verdicts["C1"].plan is None
    assert verdicts["A1"].plan.towards == "disagrees"
    assert verdicts["A1"].plan.alpha == pytest.approx(0.05 / 2)  # A1 and C4 still open in a family of 3
    assert verdicts["C4"].plan.towards == "unresolved" and verdicts["C4"].plan.seeds is None
    assert verdicts["C4"].plan.why == "one seed gives no spread"
    assert verdicts["E"].verdict == "unresolved" and verdicts["E"].plan.towards == "equivalent"
    bleu, ppl = (
        paired_delta({0: 0.3, 1: -0.4, 2: 0.2}, dict.fromkeys(range(3), 0.0)),
        paired_delta({0: 0.02, 1: -0.05, 2: 0.01}, dict.fromkeys(range(3), 0.0)),
    )
    seeds = verdicts["E"].plan.seeds
    power = lambda n: 1 - tost_miss(bleu.mean, bleu.sd, 0.5, n, 0.05) - tost_miss(ppl.mean, ppl.sd, 0.1, n, 0.05)  # noqa: E731
    assert power(seeds) >= 0.8 > power(seeds - 1)
    assert verdicts["A3"].plan.towards == "differs"
