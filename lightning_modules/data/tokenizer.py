"""The joint BPE: one sentencepiece model over source and target training text, cached under a content hash."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import sentencepiece as spm

from .cache import FORMAT_VERSION, building, cache_key, default_cache_dir, file_digest, publish
from .corpus import CorpusError, PathLike, require_text

log = logging.getLogger(__name__)

# The tokenizer's special ids: the data pads, starts and ends every sentence with them, and whoever builds the
# model and decodes passes these (the Transformer's pad_id, beam search's bos_id / eos_id); lightning_modules.data
# re-exports them.
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)

INPUT_SENTENCE_SIZE = 2_000_000  # sentences sampled for BPE training
WORD_START = "\u2581"  # sentencepiece's mark of a piece that begins a word (a space before it)


def sentencepiece_threads(requested: Optional[int] = None) -> int:
    """Threads for training and encoding: as requested, else one per CPU core, at most 8."""
    return requested or max(1, min(8, os.cpu_count() or 1))


_REACHABLE = re.compile(r"value <= (\d+)")


def tokenizer_key(
    train_files: Sequence[PathLike],
    vocab_size: int,
    character_coverage: float = 1.0,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    seed: int = 0,
    symbols: Sequence[str] = (),
) -> str:
    """The cache key of a tokenizer: the training files' content hashes and every training setting (``symbols``
    only when there are some, so the keys of tokenizers trained without them stay what they were)."""
    extra = {"symbols": list(symbols)} if symbols else {}
    return cache_key(
        {
            "kind": "spm-bpe",
            "version": FORMAT_VERSION,
            "sentencepiece": spm.__version__,
            "files": [file_digest(p) for p in train_files],
            "vocab_size": vocab_size,
            "character_coverage": character_coverage,
            "input_sentence_size": input_sentence_size,
            "seed": seed,
            "normalization": "identity",
            "ids": list(SPECIAL_IDS),
            **extra,
        }
    )


def _check_tokenizer(sp: spm.SentencePieceProcessor, vocab_size: int, path: Path) -> spm.SentencePieceProcessor:
    got = (sp.get_piece_size(), sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
    if got != (vocab_size, PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise CorpusError(
            f"tokenizer {path}: (size, pad, unk, bos, eos) = {got}, expected "
            f"{(vocab_size, PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; delete it to retrain"
        )
    return sp


def load_or_train_tokenizer(
    train_files: Sequence[PathLike],
    vocab_size: int,
    cache_dir: Optional[PathLike] = None,
    *,
    character_coverage: float = 1.0,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    num_threads: Optional[int] = None,
    seed: int = 0,
    symbols: Sequence[str] = (),
) -> spm.SentencePieceProcessor:
    """A joint BPE over ``train_files`` (source and target training text) with exactly ``vocab_size`` pieces.

    Ids: pad 0, unk 1, bos 2, eos 3. Normalisation ``identity`` (no NFKC: decoding gives back the text, up to
    whitespace runs), all characters covered (``character_coverage=1.0``), at most ``input_sentence_size``
    sentences sampled for training. Cached in ``cache_dir/tokenizers/<key>/`` where the key hashes the files'
    contents and these settings; written to a temporary directory and renamed into place, by one process at a
    time (``cache.building``: a concurrent caller waits for it, then loads it).

    ``symbols`` (parsing: the tree tokens ``(NP``, ``)NP``, ``XX``) are pieces of their own, each with the word-start
    mark, so a space-separated symbol is exactly one piece and never merged into or split by the BPE. Without the
    mark sentencepiece would cut ``(NP`` into ``▁(`` + ``NP`` (it splits by Unicode script), doubling a target.
    """
    files = [Path(p).expanduser() for p in train_files]
    for path in files:
        if not path.is_file():
            raise CorpusError(f"tokenizer training file {path} does not exist")
        require_text(path, "tokenizer training")  # before sentencepiece, whose error names no file
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    key = tokenizer_key(files, vocab_size, character_coverage, input_sentence_size, seed, symbols)
    root = cache / "tokenizers"
    final = root / key[:24]
    model = final / "spm.model"
    if not model.is_file():
        with building(final):
            if not model.is_file():  # not built while this process waited
                _train_tokenizer(
                    files, vocab_size, key, final, character_coverage, input_sentence_size, num_threads, seed, symbols
                )
    return _check_tokenizer(spm.SentencePieceProcessor(model_file=str(model)), vocab_size, model)


def _train_tokenizer(
    files: list[Path],
    vocab_size: int,
    key: str,
    final: Path,
    character_coverage: float,
    input_sentence_size: int,
    num_threads: Optional[int],
    seed: int,
    symbols: Sequence[str],
) -> None:
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        spm.set_random_generator_seed(seed)
        try:
            spm.SentencePieceTrainer.train(
                input=[str(p) for p in files],
                model_prefix=str(tmp / "spm"),
                model_type="bpe",
                vocab_size=vocab_size,
                hard_vocab_limit=True,
                character_coverage=character_coverage,
                normalization_rule_name="identity",
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                num_threads=sentencepiece_threads(num_threads),
                minloglevel=2,
                **({"user_defined_symbols": [WORD_START + symbol for symbol in symbols]} if symbols else {}),
            )
        except RuntimeError as e:
            match = _REACHABLE.search(str(e))
            if match:
                raise CorpusError(
                    f"data.vocab_size = {vocab_size} is more than a joint BPE can reach on this training text: at most "
                    f"{match.group(1)} pieces (including the 4 special ids); set data.vocab_size <= {match.group(1)} "
                    f"or train on more text ({', '.join(str(p) for p in files)})"
                ) from None
            raise
        (tmp / "meta.json").write_text(
            json.dumps(
                {
                    "key": key,
                    "files": [str(p) for p in files],
                    "vocab_size": vocab_size,
                    "character_coverage": character_coverage,
                    "input_sentence_size": input_sentence_size,
                    "seed": seed,
                    "sentencepiece": spm.__version__,
                },
                indent=1,
            )
        )
        publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("trained a %d-piece BPE tokenizer into %s", vocab_size, final)
