"""Parsing as translation: trees round-trip through their linearisation; EVALB's conventions, hand-worked and
against an independent scorer (PYEVALB)."""

from __future__ import annotations

import random

import pytest

from lightning_modules.parsing.evalb import brackets, evalb, score_sentence
from lightning_modules.parsing.trees import (
    Tree,
    TreeError,
    from_target,
    normalize,
    parse_output,
    read_tree,
    strip_tags,
    target_of,
    to_target,
)

# Penn Treebank-format trees written for these tests (not WSJ text): traces, function tags, indices, punctuation,
# quotes, unary chains, PRT, a TOP root and PTB's unlabelled outer brackets.
PTB_TREES = [
    "( (S (NP-SBJ (DT The) (NN company)) (VP (VBD said) (SBAR (-NONE- 0) (S (NP-SBJ (PRP it)) (VP (MD would) "
    "(VP (VB cut) (NP (CD 300) (NNS jobs))))))) (. .)) )",
    "( (S (NP-SBJ-1 (NNS Shares)) (VP (VBD were) (VP (VBN sold) (NP (-NONE- *-1)) (PP-TMP (IN on) "
    "(NP (NNP Friday))))) (. .)) )",
    "(TOP (S (`` ``) (NP-SBJ (PRP We)) (VP (VBP are) (ADJP-PRD (JJ pleased))) (, ,) ('' '') (NP-SBJ (PRP she)) "
    "(VP (VBD added)) (. .)))",
    "( (S (NP-SBJ (NNP Mr.) (NNP Smith)) (VP (VBD gave) (PRT (RP up)) (NP (PRP$ his) (NN seat))) (. .)) )",
    "( (SINV (S-TPC-2 (NP-SBJ (DT The) (NN market)) (VP (VBD fell))) (, ,) (VP (VBD said) (S (-NONE- *T*-2))) "
    "(NP-SBJ (DT an) (NN analyst)) (. .)) )",
    "( (S (NP-SBJ (NP (DT the) (NN price)) (PP (IN of) (NP (NN gold)))) (VP (VBD rose) (NP-EXT (CD 2) (NN %)) "
    "(PP-DIR (TO to) (NP (QP ($ $) (CD 400)) (-NONE- *U*)))) (: ;) (S (NP-SBJ (NN silver)) (VP (VBD fell))) (. .)) )",
    "( (FRAG (NP (NN Yes)) (. .)) )",
    "( (S (S (NP-SBJ (PRP I)) (VP (VBD came))) (CC and) (S (NP-SBJ (PRP I)) (VP (VBD saw))) (. !)) )",
]


@pytest.mark.parametrize("text", PTB_TREES)
def test_a_normalized_ptb_tree_round_trips_exactly_through_its_target(text):
    tree = normalize(read_tree(text))
    assert "-NONE-" not in str(tree) and "-SBJ" not in str(tree) and "TOP" not in str(tree)
    again, repair = from_target(to_target(tree, "pos"), tree.words(), "pos")
    assert again == tree and not repair.needed
    again, repair = from_target(to_target(tree, "xx"), tree.words(), "xx")
    assert again == strip_tags(tree) and not repair.needed
    assert read_tree(str(tree)) == tree


def test_the_target_reads_like_vinyals_et_al():
    tree = read_tree("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps)) (. .))")
    assert target_of(tree) == "(S (NP XX XX )NP (VP XX )VP XX )S"
    assert target_of(tree, "pos") == "(S (NP DT NN )NP (VP VBZ )VP . )S"
    assert " ".join(tree.words()) == "the cat sleeps ."


def test_malformed_trees_are_rejected_with_the_reason():
    for text, reason in (
        ("(S (NP (DT the)", "unbalanced"),
        ("(S (NP))", "empty constituent"),
        ("(S (X a)) b", "text after"),
        ("", "empty tree"),
        ("(S (X a)))", "text after"),
    ):
        with pytest.raises(TreeError, match=reason):
            read_tree(text)


def test_malformed_outputs_are_repaired_into_trees_and_the_repair_is_counted():
    words = "the cat sleeps".split()
    tree, repair = parse_output("(S (NP XX XX )NP (VP XX )VP", words)  # unclosed root
    assert str(tree) == "(S (NP (XX the) (XX cat)) (VP (XX sleeps)))" and repair.closed_at_end == 1
    tree, repair = parse_output(
        ")S (S (NP XX XX )VP XX )S XX XX", words
    )  # stray and mislabelled closings, extra leaves
    assert str(tree) == "(S (NP (XX the) (XX cat)) (XX sleeps))"
    assert (repair.dropped_closings, repair.relabelled_closings, repair.leaves_dropped) == (1, 1, 2)
    tree, repair = parse_output("(NP XX )NP (VP )VP", words)  # missing leaves go to the root; an empty constituent
    assert str(tree) == "(NP (XX the) (XX cat) (XX sleeps))"
    assert (repair.leaves_added, repair.empty_removed, repair.wrapped) == (2, 1, False)
    tree, repair = parse_output("(NP XX )NP (VP XX XX )VP", words)  # two tops: wrapped in one constituent
    assert str(tree) == "(S (NP (XX the)) (VP (XX cat) (XX sleeps)))" and repair.wrapped
    tree, repair = parse_output("", words)
    assert tree.words() == words and repair.wrapped and repair.needed


def test_random_outputs_always_repair_into_a_tree_over_the_sentence():
    rng = random.Random(0)
    vocab = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX", "XX", "XX", "(", ")"]
    for _ in range(500):
        words = [f"w{i}" for i in range(rng.randint(1, 8))]
        tokens = [rng.choice(vocab) for _ in range(rng.randint(0, 20))]
        tree, _ = from_target(tokens, words)
        assert tree.words() == words
        assert read_tree(str(tree)) == tree


def tree(text: str) -> Tree:
    return read_tree(text)


def test_evalb_hand_worked_cases():
    gold = tree("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now))) (. .))")
    # Perfect: S, NP, VP, ADVP = 4 brackets; the final '.' is not counted in any span.
    assert score_sentence(gold, gold).matched == 4 and score_sentence(gold, gold).exact
    # Attaching the period elsewhere changes nothing: punctuation is deleted before spans are compared.
    moved = tree("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now)) (. .)))")
    assert score_sentence(gold, moved).exact
    # Function tags and indices are cut; ADVP and PRT are one label; XX tags are fine.
    tagged = tree("(S-1 (NP-SBJ (XX the) (XX cat)) (VP=2 (XX sleeps) (PRT (XX now))) (XX .))")
    assert score_sentence(gold, tagged).exact
    # A wrong bracket: precision and recall 3/4.
    wrong = tree("(S (NP (DT the)) (NN cat) (VP (VBZ sleeps) (ADVP (RB now))) (. .))")
    score = score_sentence(gold, wrong)
    assert (score.matched, score.gold, score.test) == (3, 4, 4)
    # A unary chain counts twice, and matches at most as often as the gold has it.
    unary = tree("(S (S (NP (DT the) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now)))) (. .))")
    score = score_sentence(gold, unary)
    assert (score.matched, score.gold, score.test) == (4, 4, 5)
    # A TOP bracket and traces are deleted; a constituent over only deleted words is no bracket.
    gold_trace = tree("(TOP (S (NP-SBJ (-NONE- *)) (VP (VBD left)) (. .)))")
    assert (lambda s: (s.matched, s.gold, s.test))(score_sentence(gold_trace, gold_trace)) == (2, 2, 2)
    # Other words or another length: an error sentence, left out of the totals.
    assert score_sentence(gold, tree("(S (NP (DT a) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now))) (. .))")).error
    assert "length" in score_sentence(gold, tree("(S (NP (DT the)) (. .))")).error
    result = evalb([gold, gold], [wrong, tree("(S (X the))")])
    assert (result.sentences, result.errors, result.matched, result.gold, result.test) == (1, 1, 3, 4, 4)
    assert result.f1 == pytest.approx(75.0)


def _perturbed(tree: Tree, rng: random.Random) -> Tree:
    tokens = to_target(tree, "pos")
    for _ in range(rng.randint(0, 4)):
        i = rng.randrange(len(tokens))
        kind = rng.random()
        if kind < 0.4 and tokens[i].startswith(("(", ")")):
            del tokens[i]
        elif kind < 0.7:
            label = rng.choice(["NP", "VP", "PP", "S"])
            j = rng.randrange(i, len(tokens) + 1)
            tokens[j:j] = [f"){label}"]
            tokens[i:i] = [f"({label}"]
        else:
            tokens[i] = tokens[i] if not tokens[i].startswith("(") else "(" + rng.choice(["NP", "VP", "ADJP"])
    return from_target(tokens, tree.words(), "pos")[0]


def test_evalb_agrees_with_pyevalb_where_their_conventions_meet():
    """PYEVALB scores labelled brackets as sets, without EVALB's deletions: compare on trees without punctuation,
    traces or function tags, and on outputs without duplicate brackets."""
    pyevalb_scorer = pytest.importorskip("PYEVALB.scorer")
    pyevalb_parser = pytest.importorskip("PYEVALB.parser")
    rng = random.Random(1)
    golds = [normalize(read_tree(text)) for text in PTB_TREES]
    golds = [g for g in golds if not set(g.tags()) & {".", ",", ":", "``", "''"}] + [
        tree("(S (NP (DT the) (NN cat)) (VP (VBZ sleeps) (ADVP (RB now))))"),
        tree("(S (NP (NNP John)) (VP (VBD saw) (NP (DT a) (NN dog)) (PP (IN in) (NP (DT the) (NN park)))))"),
    ]
    compared = 0
    for gold in golds:
        for _ in range(100):
            test = _perturbed(gold, rng)
            ours = score_sentence(gold, test)
            kept = [True] * len(gold.words())
            if max(brackets(test, kept).values()) > 1 or max(brackets(gold, kept).values()) > 1:
                continue  # PYEVALB counts sets
            theirs = pyevalb_scorer.Scorer().score_trees(
                pyevalb_parser.create_from_bracket_string(str(gold)),
                pyevalb_parser.create_from_bracket_string(str(test)),
            )
            assert (ours.matched, ours.gold, ours.test) == (
                theirs.matched_brackets,
                theirs.gold_brackets,
                theirs.test_brackets,
            ), (str(gold), str(test))
            compared += 1
    assert compared >= 150
