"""Corpora, the joint BPE tokenizer, token-budget batches and the Lightning data module.

The pieces, in the order a run uses them (each in its own module; every public name is importable from here):

* ``dataset_directory(data_cfg)`` (datasets.py): where a named dataset's text lies (``dir``, ``multi30k``,
  ``generated``: the built-in corpus of generated/, written into the cache on first use; ``wmt14-en-de``: dev/test
  fetched with sacreBLEU when online, otherwise the error lists the files to place).
* ``resolve_splits(...)`` / ``check_corpus(...)`` (corpus.py): find ``{split}.{lang}`` files and check them (equal
  line counts, valid UTF-8, empty and over-long lines counted). Problems raise ``CorpusError`` (a ``ValueError``)
  naming the file(s), line numbers and counts.
* ``load_or_train_tokenizer(train_files, vocab_size, cache_dir)`` (tokenizer.py): a joint sentencepiece BPE with
  exactly ``vocab_size`` pieces and ids pad=0, unk=1, bos=2, eos=3 (``PAD_ID`` ...), cached under a content hash
  (cache.py).
* ``load_or_encode_split(...)`` (encoding.py): token ids of a split, cached as ``.npy`` arrays (flat ids + offsets).
* ``TokenBudgetBatchSampler`` (batching.py): batches of similar-length pairs whose padded size is at most
  ``max_tokens`` on each side, shuffled per (seed, epoch), sharded over ranks with equal batch counts.
* ``TranslationDataModule`` (datamodule.py): all of the above behind ``prepare_data`` / ``setup`` /
  ``*_dataloader``.

Lines are split on ``\\n`` only (as ``wc -l`` counts them), a trailing ``\\r`` is dropped and surrounding
whitespace stripped.
"""

from .batching import ResumableLoader, TokenBudgetBatchSampler
from .cache import DEFAULT_CACHE_DIR, default_cache_dir, file_digest
from .corpus import (
    DEFAULT_MAX_CHARS,
    DEV_CANDIDATES,
    TEST_CANDIDATES,
    CorpusError,
    CorpusReport,
    CorpusSplits,
    PathLike,
    SplitFiles,
    SplitReport,
    check_corpus,
    iter_pairs,
    read_lines,
    resolve_splits,
    scan_split,
)
from .datamodule import PairDataset, TranslationDataModule, collate_pairs
from .datasets import (
    WMT14_DEFAULT,
    WMT14_SPLITS,
    dataset_directory,
    default_split_names,
    ensure_wmt14,
    generated_corpus_dir,
    wmt14_instructions,
)
from .encoding import ENCODE_CHUNK, EncodedSplit, load_or_encode_split
from .tokenizer import (
    BOS_ID,
    EOS_ID,
    INPUT_SENTENCE_SIZE,
    PAD_ID,
    SPECIAL_IDS,
    UNK_ID,
    load_or_train_tokenizer,
    tokenizer_key,
)

__all__ = [
    "BOS_ID",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_MAX_CHARS",
    "DEV_CANDIDATES",
    "ENCODE_CHUNK",
    "EOS_ID",
    "INPUT_SENTENCE_SIZE",
    "PAD_ID",
    "SPECIAL_IDS",
    "TEST_CANDIDATES",
    "UNK_ID",
    "WMT14_DEFAULT",
    "WMT14_SPLITS",
    "CorpusError",
    "CorpusReport",
    "CorpusSplits",
    "EncodedSplit",
    "PairDataset",
    "PathLike",
    "ResumableLoader",
    "SplitFiles",
    "SplitReport",
    "TokenBudgetBatchSampler",
    "TranslationDataModule",
    "check_corpus",
    "collate_pairs",
    "dataset_directory",
    "default_cache_dir",
    "default_split_names",
    "ensure_wmt14",
    "file_digest",
    "generated_corpus_dir",
    "iter_pairs",
    "load_or_encode_split",
    "load_or_train_tokenizer",
    "read_lines",
    "resolve_splits",
    "scan_split",
    "tokenizer_key",
    "wmt14_instructions",
]
