"""A parser's outputs scored as the field scores them: each output repaired into a tree over its sentence's words
(trees.from_target, every repair counted), then labelled bracket precision, recall and F1 (evalb.py, EVALB with
COLLINS.prm)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .evalb import evalb
from .trees import Leaves, Repair, Tree, parse_output

REPAIR_KINDS = tuple(f.name for f in dataclasses.fields(Repair))
# Recorded beside the scores, as sacreBLEU's signature is beside BLEU: what produced the figure.
SIGNATURE = "evalb:COLLINS.prm|labelled|micro|repair:trees.from_target"


def score_parses(hypotheses: Sequence[str], golds: Sequence[Tree], leaves: Leaves = "xx") -> dict[str, Any]:
    """Corpus scores of linearised outputs against the gold trees, one per line.

    Returns ``f1``, ``precision``, ``recall`` (percent), ``exact`` (sentences matched completely), ``invalid`` (the
    outputs that were not a well-formed tree over their sentence and needed a repair), ``repairs`` (each repair
    kind summed over the outputs; ``wrapped`` counts outputs), ``evalb_errors`` (sentences EVALB left out: 0, since
    a repaired tree always has the sentence's words), ``sentences`` (scored), ``parse_signature`` and ``trees`` (the repaired trees).
    """
    if len(hypotheses) != len(golds):
        raise ValueError(f"{len(hypotheses)} outputs but {len(golds)} gold trees: expected one tree per line")
    if not golds:
        raise ValueError("no outputs to score")
    trees, repairs, invalid = [], dict.fromkeys(REPAIR_KINDS, 0), 0
    for hypothesis, gold in zip(hypotheses, golds):
        tree, repair = parse_output(hypothesis, gold.words(), leaves)
        trees.append(tree)
        invalid += repair.needed
        for kind in REPAIR_KINDS:
            repairs[kind] += int(getattr(repair, kind))
    result = evalb(golds, trees)
    return {
        "f1": result.f1,
        "precision": result.precision,
        "recall": result.recall,
        "exact": result.exact,
        "invalid": invalid,
        "repairs": repairs,
        "evalb_errors": result.errors,
        "sentences": result.sentences,
        "parse_signature": SIGNATURE,
        "trees": [str(tree) for tree in trees],
    }
