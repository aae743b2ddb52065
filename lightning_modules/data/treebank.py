"""Treebanks for parsing as translation (section 6.3): where the trees are, and the parallel text made from them.

Two dataset kinds (``data.dataset``):

* ``treebank``: the built-in treebank, the generated source language's sentences with their gold trees
  (generated/'s ``write_treebank``), written into the cache on first use as ``corpus/treebank-<trees>-<seed>/``
  with ``data.generated_pairs`` training trees, 1,000 dev and 1,000 test trees, deterministic from
  ``data.generated_seed``.
* ``ptb``: a directory of Penn Treebank-style bracketed trees (``data.path``, only read), one tree per line. The
  files of each split, the first that exists (``TREEBANK_FILES``): train ``train.tree`` or ``02-21.tree`` (WSJ
  sections 02-21), dev ``valid.tree``, ``dev.tree`` or ``22.tree`` (WSJ 22), test ``test.tree`` or ``23.tree``
  (WSJ 23). A missing split or a line that is not a tree is a ``CorpusError`` naming the file (and line).

Every tree is normalised as is usual for the WSJ (trees.normalize: empty elements and function tags removed) and
turned into three line-aligned files per split, cached under a hash of the tree files
(``corpus/parsing-<key>/{train,valid,test}.{words,linear,gold}``): the source (the tree's words, space-separated),
the target (the linearised tree, trees.to_target with ``XX`` leaves as in Vinyals et al.: the words are copied
back from the source, so the model predicts brackets only) and the gold tree EVALB scores against. The
translation pipeline then trains on words -> linear like any corpus.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..atomic import atomic_open
from ..config import DataConfig
from ..parsing.trees import PLACEHOLDER, Tree, TreeError, normalize, read_tree, source_of, target_of
from .cache import cache_key, default_cache_dir, file_digest, publish
from .corpus import CorpusError, read_lines
from .generated import write_treebank

SRC, TGT, GOLD = "words", "linear", "gold"  # the parallel files' extensions: {split}.words, .linear, .gold
SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # role -> the split's name in the parallel files
TREEBANK_FILES = {
    "train": ("train.tree", "02-21.tree"),
    "dev": ("valid.tree", "dev.tree", "22.tree"),
    "test": ("test.tree", "23.tree"),
}
FORMAT = 1  # bump when the parallel files change for the same trees
BUILTIN_DEV_TREES = BUILTIN_TEST_TREES = 1000  # write_treebank's defaults, stated where they are used


def builtin_treebank_dir(data_cfg: DataConfig) -> Path:
    """Where the built-in treebank of these settings lives: always the cache, never a user's directory."""
    name = f"treebank-{data_cfg.generated_pairs}-{data_cfg.generated_seed}"
    return default_cache_dir(data_cfg) / "corpus" / name


def treebank_files(directory: Path) -> dict[str, Path]:
    """role -> the tree file of that split in ``directory``; a CorpusError naming the expected files otherwise."""
    if not directory.is_dir():
        raise CorpusError(f"data.path = {str(directory)!r} (dataset='ptb') does not exist")
    found = {}
    for role, names in TREEBANK_FILES.items():
        existing = [directory / name for name in names if (directory / name).is_file()]
        if not existing:
            raise CorpusError(
                f"no {role} trees in {directory}: expected one of {', '.join(names)} (one bracketed tree per line, "
                "Penn Treebank style; WSJ sections 02-21 train, 22 dev, 23 test)"
            )
        found[role] = existing[0]
    return found


def tree_directory(data_cfg: DataConfig, download: bool = True) -> Path:
    """The directory of the run's tree files: the built-in treebank (generated on a miss when ``download``) or
    ``data.path``."""
    if data_cfg.dataset == "ptb":
        return Path(data_cfg.path).expanduser()  # config validation guarantees a path
    path = builtin_treebank_dir(data_cfg)
    if download:  # write_treebank leaves files whose manifest records these settings alone
        return write_treebank(
            path,
            train_trees=data_cfg.generated_pairs,
            seed=data_cfg.generated_seed,
            dev_trees=BUILTIN_DEV_TREES,
            test_trees=BUILTIN_TEST_TREES,
        )
    if not (path / "treebank.json").is_file():
        raise CorpusError(
            f"dataset='treebank': the built-in treebank is not in {path} yet; a training run generates it there"
        )
    return path


def read_treebank(path: Path) -> list[Tree]:
    """The normalised trees of a file, one per line; a CorpusError naming the file and line of one that is not."""
    trees = []
    for number, line in enumerate(read_lines(path), 1):
        try:
            tree = normalize(read_tree(line))
        except TreeError as error:
            raise CorpusError(
                f"{path}: line {number}: not a tree ({error}); expected one bracketed tree per line, "
                "Penn Treebank style, e.g. ( (S (NP (DT The) (NN cat)) (VP (VBZ sleeps)) (. .)) )"
            ) from None
        if tree is None:
            raise CorpusError(f"{path}: line {number}: only empty elements (-NONE-), no words to parse")
        trees.append(tree)
    if not trees:
        raise CorpusError(f"{path}: no trees (an empty file)")
    return trees


def parsing_corpus_dir(data_cfg: DataConfig, download: bool = True) -> Path:
    """The parallel words / linear / gold files of the run's treebank, made (and cached) on a miss."""
    directory = tree_directory(data_cfg, download)
    files = treebank_files(directory)
    key = cache_key(
        {"kind": "parsing-corpus", "version": FORMAT, "files": {r: file_digest(p) for r, p in files.items()}}
    )
    root = default_cache_dir(data_cfg) / "corpus"
    final = root / f"parsing-{key[:24]}"
    if all((final / f"{SPLITS[role]}.{ext}").is_file() for role in files for ext in (SRC, TGT, GOLD)):
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-parsing-"))
    try:
        for role, path in files.items():
            trees = read_treebank(path)
            for ext, text in ((SRC, source_of), (TGT, target_of), (GOLD, str)):
                with atomic_open(tmp / f"{SPLITS[role]}.{ext}", "w", encoding="utf-8", newline="\n") as f:
                    f.writelines(text(tree) + "\n" for tree in trees)
        publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def tree_symbols(target_file: Path) -> list[str]:
    """The tree tokens of a target file (``(NP``, ``)NP``, ``XX``), sorted: the tokenizer keeps each one whole."""
    symbols = {PLACEHOLDER}
    for line in read_lines(target_file):
        symbols.update(token for token in line.split() if token[0] in "()")
    return sorted(symbols)


def gold_trees(corpus_dir: Path, role: str) -> list[Tree]:
    return [read_tree(line) for line in read_lines(corpus_dir / f"{SPLITS[role]}.{GOLD}")]
