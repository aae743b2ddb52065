"""The built-in corpus and treebank on disk: pairs drawn from seeded streams, held-out splits without a training
sentence, files written atomically under a manifest."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pathlib
import random
import re
from typing import Iterator

from ...atomic import write_atomic
from .lexicon import Draws
from .realisation import realise
from .sentences import gen_plan
from .trees import tree_of

GENERATOR_VERSION = 2
SRC_LANG, TGT_LANG = "en", "de"
MIN_WORDS, MAX_WORDS = 2, 40
SPLITS = ("train", "valid", "test")
MANIFEST = "corpus.json"


def _iter_plans(rng: random.Random) -> Iterator[tuple[tuple, tuple[str, str]]]:
    """(structure, (source, target)) of the sentences whose both sides have MIN_WORDS..MAX_WORDS words."""
    while True:
        plan = gen_plan(rng)
        src, tgt = realise(*plan)
        ns, nt = src.count(" ") + 1, tgt.count(" ") + 1
        if MIN_WORDS <= ns <= MAX_WORDS and MIN_WORDS <= nt <= MAX_WORDS:
            yield plan, (src, tgt)


def _iter_pairs(rng: random.Random) -> Iterator[tuple[str, str]]:
    return (pair for _, pair in _iter_plans(rng))


def generate_pairs(n: int, seed: int, lexicon_scale: int = 1) -> list[tuple[str, str]]:
    """n (source, target) sentence pairs, deterministic from seed, with ``lexicon_scale`` times the content words."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    it = _iter_pairs(Draws(seed, lexicon_scale))
    return [next(it) for _ in range(n)]


def derive_seed(seed: int, split: str) -> int:
    # "ablations.corpus": the module's name before it moved here; it seeds every split, so it stays.
    digest = hashlib.sha256(f"ablations.corpus/{seed}/{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _heldout(n: int, seed: int, split: str, seen: set, lexicon_scale: int) -> tuple[list, int]:
    """n pairs from the split's own stream whose source sentence is not in ``seen`` (then added to it)."""
    it = _iter_pairs(Draws(derive_seed(seed, split), lexicon_scale))
    pairs, rejected = [], 0
    while len(pairs) < n:
        src, tgt = next(it)
        if src in seen:
            rejected += 1
            continue
        seen.add(src)
        pairs.append((src, tgt))
    return pairs, rejected


def _written_already(manifest: pathlib.Path, params: dict, files: list[pathlib.Path]) -> bool:
    """Whether ``manifest`` records exactly ``params`` and every file exists; if not, any manifest is removed first,
    so that a crash while the files are rewritten never leaves a manifest describing other files."""
    if not manifest.exists():
        return False
    try:
        old = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and old.get("params") == params and all(f.is_file() for f in files):
        return True
    manifest.unlink()  # invalidate before touching any file
    return False


def write_corpus(
    directory: str | os.PathLike,
    train_pairs: int = 50_000,
    seed: int = 1234,
    dev_pairs: int = 1000,
    test_pairs: int = 1000,
    lexicon_scale: int = 1,
) -> pathlib.Path:
    """Write train.en/train.de/valid.en/valid.de/test.en/test.de (one sentence per line, UTF-8, '\\n').

    Each file is written to a temporary file and moved into place with ``os.replace``; the manifest
    ``corpus.json`` (parameters, generator version, statistics) is written last, and any older manifest is
    removed first, so a crash midway never leaves a manifest describing other files.  When the manifest
    already records identical parameters (and the files exist) nothing is regenerated.

    Train, valid and test come from independent streams derived from ``seed``; a valid/test pair whose
    source sentence occurs in train (or earlier in valid/test) is skipped and the next one drawn, so the
    held-out sets never repeat a training sentence; the manifest counts the skips.
    """
    for name, value in (("train_pairs", train_pairs), ("dev_pairs", dev_pairs), ("test_pairs", test_pairs)):
        if not isinstance(value, int) or value < (1 if name == "train_pairs" else 0):
            raise ValueError(
                f"{name} must be a {'positive' if name == 'train_pairs' else 'non-negative'} int, got {value!r}"
            )
    path = pathlib.Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    # "ablations.corpus": the old module name, kept so that corpora already written stay valid.
    params = {
        "generator": "ablations.corpus",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "train_pairs": train_pairs,
        "dev_pairs": dev_pairs,
        "test_pairs": test_pairs,
        "src_lang": SRC_LANG,
        "tgt_lang": TGT_LANG,
    }
    if lexicon_scale != 1:  # absent at 1, so corpora written before the knob existed stay valid
        params["lexicon_scale"] = lexicon_scale
    files = [path / f"{split}.{lang}" for split in SPLITS for lang in (SRC_LANG, TGT_LANG)]
    manifest = path / MANIFEST
    if _written_already(manifest, params, files):
        return path

    train = generate_pairs(train_pairs, derive_seed(seed, "train"), lexicon_scale)
    seen = {s for s, _ in train}
    valid, valid_rejected = _heldout(dev_pairs, seed, "valid", seen, lexicon_scale)
    test, test_rejected = _heldout(test_pairs, seed, "test", seen, lexicon_scale)
    splits = {"train": train, "valid": valid, "test": test}
    for split, pairs in splits.items():
        for side, lang in enumerate((SRC_LANG, TGT_LANG)):
            write_atomic(path / f"{split}.{lang}", "".join(p[side] + "\n" for p in pairs))
    info = {
        "params": params,
        "files": {f"{split}.{lang}": len(pairs) for split, pairs in splits.items() for lang in (SRC_LANG, TGT_LANG)},
        "heldout_skipped_as_duplicates": {"valid": valid_rejected, "test": test_rejected},
        "stats": _stats(train),
    }
    write_atomic(manifest, json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return path


_WORD = re.compile(r"[^\s,.?]+")


def _stats(pairs: list) -> dict:
    """Sentence lengths (whitespace words) and word-type counts (punctuation split off, case kept) per side."""
    out = {}
    for side, lang in enumerate((SRC_LANG, TGT_LANG)):
        lengths = [p[side].count(" ") + 1 for p in pairs]
        types = {w for p in pairs for w in _WORD.findall(p[side])}
        out[lang] = {
            "mean_words": round(sum(lengths) / max(len(lengths), 1), 2),
            "min_words": min(lengths, default=0),
            "max_words": max(lengths, default=0),
            "word_types": len(types),
        }
    return out


def generate_treebank(n: int, seed: int) -> list[tuple[str, str]]:
    """n (sentence, bracketed gold tree) of the source language, deterministic from seed: the sentences
    ``generate_pairs(n, seed)`` has as sources, tokenised as the tree's words (punctuation split off)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    trees = [tree_of(*plan) for plan, _ in itertools.islice(_iter_plans(Draws(seed)), n)]
    return [(" ".join(_TREE_WORD.findall(tree)), tree) for tree in trees]


_TREE_WORD = re.compile(r"\([^\s()]+ ([^\s()]+)\)")


def write_treebank(
    directory: str | os.PathLike,
    train_trees: int = 20_000,
    seed: int = 1234,
    dev_trees: int = 1000,
    test_trees: int = 1000,
) -> pathlib.Path:
    """Write {train,valid,test}.tree (one bracketed tree per line, Penn Treebank style) and treebank.json.

    Train, valid and test come from streams derived from ``seed`` (not the translation corpus's); a held-out tree
    whose sentence is in train or earlier is skipped, as ``write_corpus`` does. Unchanged parameters: nothing is
    rewritten.
    """
    path = pathlib.Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    params = {
        "generator": "lightning_modules.data.generated",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "train_trees": train_trees,
        "dev_trees": dev_trees,
        "test_trees": test_trees,
    }
    manifest = path / "treebank.json"
    files = [path / f"{split}.tree" for split in SPLITS]
    if _written_already(manifest, params, files):
        return path
    seen: set = set()
    counts = {}
    for split, n in (("train", train_trees), ("valid", dev_trees), ("test", test_trees)):
        stream = generate_treebank(3 * n + 100 if split != "train" else n, derive_seed(seed, f"treebank-{split}"))
        kept = []
        for sentence, tree in stream:
            if split != "train" and sentence in seen:
                continue
            seen.add(sentence)
            kept.append(tree)
            if len(kept) == n:
                break
        if len(kept) < n:
            raise ValueError(f"treebank {split}: only {len(kept)} distinct sentences of {n}")
        write_atomic(path / f"{split}.tree", "".join(tree + "\n" for tree in kept))
        counts[f"{split}.tree"] = len(kept)
    write_atomic(manifest, json.dumps({"params": params, "files": counts}, indent=2) + "\n")
    return path
