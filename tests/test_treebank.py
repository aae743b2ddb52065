"""The built-in treebank: the generated source sentences with their gold trees, round-tripping exactly."""

from __future__ import annotations

import re

from lightning_modules.data.generated import generate_pairs, generate_treebank, write_treebank
from lightning_modules.parsing.evalb import evalb
from lightning_modules.parsing.trees import from_target, normalize, read_tree, strip_tags, to_target


def tokens(sentence: str) -> list[str]:
    """The corpus's source sentence split as the tree's words: punctuation attached by the realiser split off."""
    return re.findall(r"[^\s,.?]+|[,.?]", sentence)


def test_every_tree_is_its_sentences_and_round_trips_exactly():
    pairs = generate_pairs(2000, 7)
    trees = generate_treebank(2000, 7)
    labels = set()
    for (source, _), (sentence, text) in zip(pairs, trees):
        tree = read_tree(text)
        assert tree.words() == tokens(source) == sentence.split()
        assert normalize(tree) == tree  # no traces, no function tags: already what a parser is trained on
        again, repair = from_target(to_target(tree, "pos"), tree.words(), "pos")
        assert again == tree and not repair.needed
        again, repair = from_target(to_target(tree, "xx"), tree.words(), "xx")
        assert again == strip_tags(tree) and not repair.needed
        labels |= {token[1:] for token in to_target(tree) if token.startswith("(")}
    assert labels >= {"S", "SQ", "SBAR", "NP", "VP", "PP", "ADVP", "WHNP"}
    assert evalb([read_tree(t) for _, t in trees[:200]], [read_tree(t) for _, t in trees[:200]]).f1 == 100.0


def test_the_treebank_is_deterministic_and_its_splits_are_disjoint(tmp_path):
    assert generate_treebank(50, 3) == generate_treebank(50, 3) != generate_treebank(50, 4)
    path = write_treebank(tmp_path / "tb", train_trees=300, dev_trees=50, test_trees=50, seed=5)
    splits = {name: (path / f"{name}.tree").read_text().splitlines() for name in ("train", "valid", "test")}
    assert [len(lines) for lines in splits.values()] == [300, 50, 50]
    sentences = {name: {" ".join(read_tree(t).words()) for t in lines} for name, lines in splits.items()}
    assert not (sentences["valid"] & sentences["train"]) and not (sentences["test"] & sentences["train"])
    assert not (sentences["test"] & sentences["valid"])
    before = (path / "train.tree").stat().st_mtime_ns
    write_treebank(tmp_path / "tb", train_trees=300, dev_trees=50, test_trees=50, seed=5)
    assert (path / "train.tree").stat().st_mtime_ns == before  # same parameters: nothing rewritten
