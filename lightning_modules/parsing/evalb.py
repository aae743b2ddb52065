"""Labelled bracket precision, recall and F1 as EVALB scores them with its standard COLLINS.prm parameters.

The conventions (Sekine & Collins' EVALB, COLLINS.prm), each implemented here and tested:
- LABELED 1: a bracket is (label, first word, last word); brackets are a multiset, so the two identical
  brackets of a unary chain ``(S (S ...))`` count twice, and each gold bracket matches at most one test bracket.
- Preterminals (part-of-speech tags) are not brackets, and their tags are not scored.
- DELETE_LABEL TOP -NONE- , : `` '' . : words tagged with one of these (punctuation, traces) are removed before
  spans are counted, in the gold and the test tree alike; the gold tree's tags decide (a parser's ``XX`` leaves
  carry none), and a bracket left without words is dropped. A ``TOP`` bracket is dropped.
- Labels are cut at the first ``-`` or ``=`` (``NP-SBJ-1`` and ``NP=2`` are ``NP``), except labels that begin
  with ``-`` (``-NONE-``).
- EQ_LABEL ADVP PRT: the two labels are the same label.
- A sentence whose test words differ from the gold words (another length, or other words) is an error: it is left
  out of the totals and counted, as EVALB does.
Totals are EVALB's corpus-level ("micro") figures: matched / test brackets and matched / gold brackets.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from .trees import Tree, plain_label

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
EQUIVALENT_LABELS = {"PRT": "ADVP"}


def canonical_label(label: str) -> str:
    label = plain_label(label)
    return EQUIVALENT_LABELS.get(label, label)


def brackets(tree: Tree, kept: Sequence[bool]) -> Counter:
    """The multiset of (label, start, end) over the words ``kept`` (end exclusive, in kept-word positions)."""
    out: Counter = Counter()
    position = 0

    def walk(node: Tree) -> None:
        nonlocal position
        if node.is_preterminal:
            position += kept[walk.index]
            walk.index += 1
            return
        start = position
        for child in node.children:
            if isinstance(child, Tree):
                walk(child)
            else:  # a bare word under a phrase counts as a kept word
                position += kept[walk.index]
                walk.index += 1
        label = canonical_label(node.label)
        if position > start and label not in DELETE_LABELS:
            out[(label, start, position)] += 1

    walk.index = 0  # the next word's index in the sentence
    walk(tree)
    return out


@dataclass(frozen=True)
class SentenceScore:
    matched: int
    gold: int
    test: int
    error: Optional[str] = None  # why the sentence is left out (EVALB's length/words unmatch)

    @property
    def exact(self) -> bool:
        return self.error is None and self.matched == self.gold == self.test


def score_sentence(gold: Tree, test: Tree) -> SentenceScore:
    words, test_words = gold.words(), test.words()
    if len(words) != len(test_words):
        return SentenceScore(0, 0, 0, f"length unmatch: gold {len(words)} words, test {len(test_words)}")
    if words != test_words:
        return SentenceScore(0, 0, 0, "words unmatch")
    kept = [tag not in DELETE_LABELS for tag in _leaf_tags(gold)]
    gold_brackets, test_brackets = brackets(gold, kept), brackets(test, kept)
    matched = sum((gold_brackets & test_brackets).values())
    return SentenceScore(matched, sum(gold_brackets.values()), sum(test_brackets.values()))


def _leaf_tags(tree: Tree) -> list[str]:
    if tree.is_preterminal:
        return [tree.label]
    return [tag for child in tree.children for tag in (_leaf_tags(child) if isinstance(child, Tree) else [""])]


@dataclass(frozen=True)
class EvalbResult:
    precision: float  # percent, as EVALB prints it
    recall: float
    f1: float
    sentences: int  # scored
    errors: int  # left out: words or length differ
    exact: int  # complete matches
    matched: int
    gold: int
    test: int


def evalb(gold: Iterable[Tree], test: Iterable[Tree]) -> EvalbResult:
    scores = [score_sentence(g, t) for g, t in zip(gold, test, strict=True)]
    good = [s for s in scores if s.error is None]
    matched, n_gold, n_test = (sum(getattr(s, k) for s in good) for k in ("matched", "gold", "test"))
    precision = 100.0 * matched / n_test if n_test else 0.0
    recall = 100.0 * matched / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return EvalbResult(
        precision, recall, f1, len(good), len(scores) - len(good), sum(s.exact for s in good), matched, n_gold, n_test
    )
