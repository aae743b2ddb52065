"""The parsing datasets: a placed Penn Treebank directory and the built-in treebank, as a corpus the translation
pipeline trains on (words -> linearised tree), with clear errors for a missing or malformed file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ablations.sweep import apply_sets
from lightning_modules.config import DataConfig, RunConfig
from lightning_modules.data import CorpusError, TranslationDataModule
from lightning_modules.data.treebank import SPLITS, parsing_corpus_dir, tree_directory, treebank_files
from lightning_modules.parsing.trees import (
    from_target,
    normalize,
    parse_output,
    read_tree,
    source_of,
    strip_tags,
    target_of,
    to_target,
)

# PTB-format trees written for these tests (not WSJ text), with what the WSJ has: traces, function tags, indices,
# PTB's unlabelled outer brackets, punctuation.
TREES = [
    "( (S (NP-SBJ (DT The) (NN company)) (VP (VBD said) (SBAR (-NONE- 0) (S (NP-SBJ (PRP it)) (VP (MD would) "
    "(VP (VB cut) (NP (CD 300) (NNS jobs))))))) (. .)) )",
    "( (S (NP-SBJ-1 (NNS Shares)) (VP (VBD were) (VP (VBN sold) (NP (-NONE- *-1)) (PP-TMP (IN on) "
    "(NP (NNP Friday))))) (. .)) )",
    "( (S (NP-SBJ (NNP Mr.) (NNP Smith)) (VP (VBD gave) (PRT (RP up)) (NP (PRP$ his) (NN seat))) (. .)) )",
    "( (FRAG (NP (NN Yes)) (. .)) )",
]


def place(directory, names=("02-21.tree", "22.tree", "23.tree"), lines=None):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("\n".join(lines or TREES) + "\n", encoding="utf-8")
    return directory


def test_a_placed_wsj_directory_becomes_words_to_linearised_trees(tmp_path):
    place(tmp_path / "wsj")
    cfg = DataConfig(dataset="ptb", path=str(tmp_path / "wsj"), vocab_size=60, cache_dir=str(tmp_path / "cache"))
    corpus = parsing_corpus_dir(cfg)
    gold = [normalize(read_tree(text)) for text in TREES]
    for role, split in SPLITS.items():
        assert (corpus / f"{split}.words").read_text().splitlines() == [source_of(t) for t in gold]
        assert (corpus / f"{split}.linear").read_text().splitlines() == [target_of(t) for t in gold]
        assert [read_tree(line) for line in (corpus / f"{split}.gold").read_text().splitlines()] == gold
    assert (
        "(NP XX XX )NP" in (corpus / "train.linear").read_text() and "NONE" not in (corpus / "train.gold").read_text()
    )
    assert parsing_corpus_dir(cfg) == corpus  # cached by the trees' content

    data = TranslationDataModule(cfg)
    data.setup("fit")
    assert data.texts("test")[0][0] == "The company said it would cut 300 jobs ."
    assert data.gold_trees("test") == gold
    # The shared vocabulary keeps every tree token whole: a target is one piece per token.
    for line in data.texts("train")[1]:
        pieces = data.tokenizer.encode(line, out_type=str)
        assert len(pieces) == len(line.split()) and data.decode(data.encode(line)) == line
    again, repair = parse_output(data.texts("dev")[1][2], gold[2].words())
    assert again == strip_tags(gold[2]) and not repair.needed


def test_missing_split_names_the_expected_files(tmp_path):
    place(tmp_path / "wsj", names=("02-21.tree", "23.tree"))
    with pytest.raises(CorpusError, match=r"no dev trees in .*wsj: expected one of valid.tree, dev.tree, 22.tree"):
        treebank_files(tmp_path / "wsj")
    with pytest.raises(CorpusError, match="does not exist"):
        treebank_files(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("(S (NP (DT the) (NN cat))", "unbalanced"),
        ("", "empty tree"),
        ("(S (NP (-NONE- *)))", "only empty elements"),
    ],
)
def test_a_malformed_line_names_the_file_and_line(tmp_path, bad, reason):
    place(tmp_path / "wsj", lines=TREES[:2] + [bad] + TREES[2:])
    cfg = DataConfig(dataset="ptb", path=str(tmp_path / "wsj"), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(CorpusError, match=rf"02-21.tree: line 3: .*{reason}"):
        parsing_corpus_dir(cfg)
    assert not list((tmp_path / "cache" / "corpus").glob("parsing-*"))  # nothing half-written is left


def test_the_parsing_datasets_are_validated_and_a_data_path_reads_a_treebank(tmp_path):
    with pytest.raises(ValueError, match="data.path = None: expected a directory of bracketed trees"):
        DataConfig(dataset="ptb")
    with pytest.raises(ValueError, match="no path for dataset='treebank'"):
        DataConfig(dataset="treebank", path=str(tmp_path))
    assert DataConfig(dataset="treebank").task == "parsing" and DataConfig().task == "translation"
    values = RunConfig(data=DataConfig(dataset="treebank")).to_dict()
    assert apply_sets(values, {"data.path": str(tmp_path)})["data"]["dataset"] == "ptb"
    values = RunConfig().to_dict()
    assert apply_sets(values, {"data.path": str(tmp_path)})["data"]["dataset"] == "dir"  # translation unchanged


def test_the_builtin_treebank_lives_in_the_cache(tmp_path):
    cfg = DataConfig(dataset="treebank", generated_pairs=30, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(CorpusError, match="built-in treebank is not in"):
        tree_directory(cfg, download=False)
    directory = tree_directory(cfg)
    assert directory.parent == tmp_path / "cache" / "corpus" and directory.name == "treebank-30-1234"
    files = treebank_files(directory)
    assert [len(files[role].read_text().splitlines()) for role in ("train", "dev", "test")] == [30, 1000, 1000]
    corpus = parsing_corpus_dir(cfg)
    assert len((corpus / "test.words").read_text().splitlines()) == 1000


@pytest.mark.slow
def test_every_tree_of_the_tiny_scales_builtin_treebank_round_trips(tmp_path):
    from ablations.sweep import expand, load_sweep, scale_named
    from lightning_modules.data.generated import generate_treebank
    from lightning_modules.data.treebank import TREEBANK_FILES

    sweep_path = Path(__file__).resolve().parent.parent / "sweeps" / "table4.yaml"
    (spec,) = expand(load_sweep(sweep_path), scale_named(sweep_path, "tiny"), seeds=[0])
    cfg = dataclasses.replace(spec.config.data, cache_dir=str(tmp_path / "cache"))
    directory = tree_directory(cfg)
    counted = 0
    for role in ("train", "dev", "test"):
        for line in (directory / TREEBANK_FILES[role][0]).read_text().splitlines():
            tree = read_tree(line)
            assert normalize(tree) == tree  # nothing for the normalisation to remove
            for leaves, expected in (("pos", tree), ("xx", strip_tags(tree))):
                again, repair = from_target(to_target(tree, leaves), tree.words(), leaves)
                assert again == expected and not repair.needed, line
            counted += 1
    assert counted == cfg.generated_pairs + 2000
    assert generate_treebank(3, 1) == generate_treebank(3, 1)


@pytest.mark.slow
def test_a_tiny_parse_run_end_to_end(tmp_path):
    """A placed PTB-style directory (trees from the generator), trained for a few steps: the record holds F1 and the
    invalid-output counts, the repaired trees are written, and every output became a tree over its sentence."""
    from ablations.train import train_run
    from lightning_modules.config import EvalConfig, ModelConfig, TrainConfig
    from lightning_modules.data.generated import generate_treebank

    trees = [tree for _, tree in generate_treebank(240, 11)]
    (tmp_path / "wsj").mkdir()
    for name, lines in (("train.tree", trees[:200]), ("valid.tree", trees[200:220]), ("test.tree", trees[220:])):
        (tmp_path / "wsj" / name).write_text("\n".join(lines) + "\n")
    config = RunConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=64, h=4, max_positions=96, norm_placement="pre"),
        data=DataConfig(
            dataset="ptb",
            path=str(tmp_path / "wsj"),
            vocab_size=300,
            batch_tokens=512,
            max_tokens=96,
            cache_dir=str(tmp_path / "cache"),
        ),
        train=TrainConfig(max_steps=8, warmup_steps=2, val_every_steps=4, checkpoint_every_steps=4),
        eval=EvalConfig(beam_size=3, length_penalty=0.3, max_len_offset=300, dev_bleu_sentences=5),
    )
    metrics = train_run(config, tmp_path / "run", progress=False)
    assert metrics["status"] == "done" and metrics["test_sentences"] == 20 and metrics["test_evalb_errors"] == 0
    assert 0 <= metrics["test_f1"] <= 100 and 0 <= metrics["test_invalid"] <= 20 and "dev_bleu" not in metrics
    assert set(metrics["test_repairs"]) >= {"closed_at_end", "leaves_added", "wrapped"}
    parses = (tmp_path / "run" / "test.parse").read_text().splitlines()
    words = (tmp_path / "cache").glob("corpus/parsing-*/test.words")
    assert [read_tree(p).words() for p in parses] == [line.split() for line in next(words).read_text().splitlines()]
    assert "dev/f1" in (tmp_path / "run" / "logs" / "attempt-1" / "metrics.csv").read_text().splitlines()[0]
