"""Corpora, the joint BPE tokenizer, token-budget batches and the Lightning data module.

The pieces, in the order a run uses them:

* ``dataset_directory(data_cfg)``: where a named dataset's text lies (``dir``, ``multi30k``, ``generated``,
  ``wmt14-en-de``; WMT14 dev/test are fetched with sacreBLEU when online, otherwise the error lists the files
  to place).
* ``resolve_splits(...)`` / ``check_corpus(...)``: find ``{split}.{lang}`` files and check them (equal line
  counts, valid UTF-8, empty and over-long lines counted). Problems raise ``CorpusError`` (a ``ValueError``)
  naming the file(s), line numbers and counts.
* ``load_or_train_tokenizer(train_files, vocab_size, cache_dir)``: a joint sentencepiece BPE with exactly
  ``vocab_size`` pieces and ids pad=0, unk=1, bos=2, eos=3, cached under a content hash.
* ``load_or_encode_split(...)``: token ids of a split, cached as ``.npy`` arrays (flat ids + offsets).
* ``TokenBudgetBatchSampler``: batches of similar-length pairs whose padded size is at most ``max_tokens``
  on each side, shuffled per (seed, epoch), sharded over ranks with equal batch counts.
* ``TranslationDataModule``: all of the above behind ``prepare_data`` / ``setup`` / ``*_dataloader``.

Lines are split on ``\\n`` only (as ``wc -l`` counts them), a trailing ``\\r`` is dropped and surrounding
whitespace stripped.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import lightning.pytorch as pl
import numpy as np
import sentencepiece as spm
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset, Sampler

from .config import DataConfig

log = logging.getLogger(__name__)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)

DEFAULT_CACHE_DIR = Path("~/.cache/attention-ablations")
DEFAULT_MAX_CHARS = 1000  # lines longer than this (in characters) are counted as over-long by the checks
INPUT_SENTENCE_SIZE = 2_000_000  # sentences sampled for BPE training
ENCODE_CHUNK = 100_000  # lines encoded at once (bounds memory on WMT-sized corpora)
_FORMAT_VERSION = 1  # bump to invalidate cached tokenizers / encodings

PathLike = Union[str, os.PathLike]


class CorpusError(ValueError):
    """A corpus is missing, malformed or cannot be obtained; the message says which file and what to do."""


# --------------------------------------------------------------------------------------------------------------
# Splits and checks
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitFiles:
    name: str  # split name as in the file names, e.g. "train", "val", "newstest2014"
    src: Path
    tgt: Path


@dataclass(frozen=True)
class CorpusSplits:
    directory: Path
    src_lang: str
    tgt_lang: str
    train: SplitFiles
    dev: SplitFiles
    test: SplitFiles

    def items(self) -> list[tuple[str, SplitFiles]]:
        """(role, files) with role in train, dev, test."""
        return [("train", self.train), ("dev", self.dev), ("test", self.test)]


DEV_CANDIDATES = ("valid", "val", "dev")
TEST_CANDIDATES = ("test", "test2016")  # Multi30k: train/val/test2016/test2017/...


def _split_files(directory: Path, split: str, src_lang: str, tgt_lang: str) -> SplitFiles:
    return SplitFiles(split, directory / f"{split}.{src_lang}", directory / f"{split}.{tgt_lang}")


def _require(files: SplitFiles, role: str) -> SplitFiles:
    missing = [p for p in (files.src, files.tgt) if not p.is_file()]
    if missing:
        raise CorpusError(f"{role} split {files.name!r}: missing " + ", ".join(str(p) for p in missing))
    return files


def _first_existing(directory: Path, candidates: Sequence[str], src_lang: str, tgt_lang: str, role: str) -> SplitFiles:
    for name in candidates:
        files = _split_files(directory, name, src_lang, tgt_lang)
        if files.src.is_file() and files.tgt.is_file():
            return files
    expected = "; ".join(f"{directory / name}.{{{src_lang},{tgt_lang}}}" for name in candidates)
    raise CorpusError(f"no {role} split in {directory}: expected one of {expected}")


def resolve_splits(
    directory: PathLike,
    src_lang: str,
    tgt_lang: str,
    train: str = "train",
    dev: Optional[str] = None,
    test: Optional[str] = None,
) -> CorpusSplits:
    """Find ``{split}.{lang}`` files for train, dev and test in ``directory``.

    ``dev=None``: the first of ``valid``, ``val``, ``dev`` whose two files exist. ``test=None``: ``test``, else
    ``test2016`` (Multi30k). A missing file raises ``CorpusError`` naming the expected path(s).
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise CorpusError(f"corpus directory {directory} does not exist (expected files like {directory / f'{train}.{src_lang}'})")
    if src_lang == tgt_lang:
        raise CorpusError(f"source and target language are both {src_lang!r}; files are named {{split}}.{{lang}}")
    train_files = _require(_split_files(directory, train, src_lang, tgt_lang), "train")
    dev_files = (_require(_split_files(directory, dev, src_lang, tgt_lang), "dev") if dev
                 else _first_existing(directory, DEV_CANDIDATES, src_lang, tgt_lang, "dev"))
    test_files = (_require(_split_files(directory, test, src_lang, tgt_lang), "test") if test
                  else _first_existing(directory, TEST_CANDIDATES, src_lang, tgt_lang, "test"))
    return CorpusSplits(directory, src_lang, tgt_lang, train_files, dev_files, test_files)


@dataclass
class SplitReport:
    """What the checks found in one split. ``kept`` pairs go on to encoding."""

    role: str  # train, dev or test
    name: str
    src: str
    tgt: str
    lines: int = 0
    empty_src: int = 0
    empty_tgt: int = 0
    skipped_empty: int = 0  # train only: pairs with an empty side are dropped; dev/test keep every line
    long_src: int = 0  # over max_chars characters (or max_words whitespace words, if given)
    long_tgt: int = 0
    kept: int = 0

    def summary(self) -> str:
        text = f"{self.role} ({self.name}): {self.lines} lines, {self.kept} kept"
        if self.empty_src or self.empty_tgt:
            text += f"; empty lines: {self.empty_src} source, {self.empty_tgt} target"
        if self.skipped_empty:
            text += f"; {self.skipped_empty} pairs with an empty side skipped"
        if self.long_src or self.long_tgt:
            text += f"; over-long lines: {self.long_src} source, {self.long_tgt} target"
        return text


@dataclass
class CorpusReport:
    splits: dict[str, SplitReport] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {role: asdict(report) for role, report in self.splits.items()}

    def summary(self) -> str:
        return "\n".join(report.summary() for report in self.splits.values())


def _decode_line(raw: bytes, path: Path, line_no: int, file_offset: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        snippet = raw[max(0, e.start - 20): e.start + 20]
        raise CorpusError(
            f"{path}: invalid UTF-8 at line {line_no}, byte {e.start} of the line (byte {file_offset + e.start} "
            f"of the file): {e.reason}; near {snippet!r}"
        ) from None
    return text.strip()


def _count_rest(handle: Any) -> int:
    return sum(1 for _ in handle)


def iter_pairs(src: Path, tgt: Path) -> Iterator[tuple[int, str, str]]:
    """Yield (line index from 0, source, target), checking UTF-8; unequal line counts raise at the end."""
    n = 0
    src_offset = tgt_offset = 0
    with open(src, "rb") as fs, open(tgt, "rb") as ft:
        # zip_longest, not zip: zip reads a line of the source before finding the target exhausted, and that line
        # would go uncounted (a source one line longer than its target passed the check).
        for raw_s, raw_t in itertools.zip_longest(fs, ft):
            if raw_s is None or raw_t is None:
                n_src = n + (raw_s is not None) + _count_rest(fs)
                n_tgt = n + (raw_t is not None) + _count_rest(ft)
                raise CorpusError(f"line counts differ: {src} has {n_src} lines, {tgt} has {n_tgt} lines")
            s = _decode_line(raw_s, src, n + 1, src_offset)
            t = _decode_line(raw_t, tgt, n + 1, tgt_offset)
            src_offset += len(raw_s)
            tgt_offset += len(raw_t)
            yield n, s, t
            n += 1


def _is_long(text: str, max_chars: Optional[int], max_words: Optional[int]) -> bool:
    return (max_chars is not None and len(text) > max_chars) or (max_words is not None and len(text.split()) > max_words)


def scan_split(
    files: SplitFiles,
    role: str,
    *,
    max_chars: Optional[int] = DEFAULT_MAX_CHARS,
    max_words: Optional[int] = None,
    keep: Optional[Callable[[int, str, str], None]] = None,
) -> SplitReport:
    """Read and check one split; call ``keep(index, src, tgt)`` for every pair that is kept.

    Training pairs with an empty side are skipped (and counted); dev/test keep every line, since hypotheses
    must align with the reference file, but empty lines are counted all the same.
    """
    _require(files, role)
    report = SplitReport(role, files.name, str(files.src), str(files.tgt))
    drop_empty = role == "train"
    for index, s, t in iter_pairs(files.src, files.tgt):
        report.lines += 1
        report.empty_src += not s
        report.empty_tgt += not t
        report.long_src += _is_long(s, max_chars, max_words)
        report.long_tgt += _is_long(t, max_chars, max_words)
        if drop_empty and (not s or not t):
            report.skipped_empty += 1
            continue
        report.kept += 1
        if keep is not None:
            keep(index, s, t)
    if report.kept == 0:
        raise CorpusError(f"{role} split {files.name!r} ({files.src}, {files.tgt}) has no usable pairs "
                          f"({report.lines} lines, {report.skipped_empty} with an empty side)")
    return report


def check_corpus(
    splits: CorpusSplits,
    *,
    max_chars: Optional[int] = DEFAULT_MAX_CHARS,
    max_words: Optional[int] = None,
) -> CorpusReport:
    """Check every split: equal line counts, valid UTF-8, at least one usable pair; count empty/over-long lines.

    Raises ``CorpusError`` on the first problem; returns a ``CorpusReport`` (``.summary()`` for a log line,
    ``.as_dict()`` for a logger).
    """
    report = CorpusReport()
    for role, files in splits.items():
        report.splits[role] = scan_split(files, role, max_chars=max_chars, max_words=max_words)
    return report


def read_lines(path: PathLike) -> list[str]:
    """One stripped string per line, split on ``\\n`` only; UTF-8 errors name the line."""
    path = Path(path)
    out = []
    offset = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            out.append(_decode_line(raw, path, n, offset))
            offset += len(raw)
    return out


# --------------------------------------------------------------------------------------------------------------
# Named datasets
# --------------------------------------------------------------------------------------------------------------

WMT14_DEFAULT = DEFAULT_CACHE_DIR / "wmt14-en-de"
WMT14_SPLITS = {"train": "train", "dev": "newstest2013", "test": "newstest2014"}


def default_cache_dir(data_cfg: Optional[DataConfig] = None) -> Path:
    if data_cfg is not None and data_cfg.cache_dir:
        return Path(data_cfg.cache_dir).expanduser()
    env = os.environ.get("ABLATE_CACHE")
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


def generated_corpus_dir(data_cfg: DataConfig) -> Path:
    """Where the built-in corpus of these generator settings lives: always the cache, never a user's directory."""
    return default_cache_dir(data_cfg) / "corpus" / f"generated-{data_cfg.generated_pairs}-{data_cfg.generated_seed}"


def default_split_names(data_cfg: DataConfig) -> tuple[str, Optional[str], Optional[str]]:
    """(train, dev, test) split names: the config's, else the dataset's own (WMT14: newstest2013/2014)."""
    dev, test = data_cfg.dev_split, data_cfg.test_split
    if data_cfg.dataset == "wmt14-en-de":
        dev = dev or WMT14_SPLITS["dev"]
        test = test or WMT14_SPLITS["test"]
    return data_cfg.train_split, dev, test


def dataset_directory(data_cfg: DataConfig, download: bool = True) -> Path:
    """The directory holding ``data_cfg.dataset``'s ``{split}.{lang}`` files (fetching WMT14 dev/test if possible)."""
    kind = data_cfg.dataset
    if kind in ("dir", "multi30k"):
        path = Path(data_cfg.path).expanduser()  # config validation guarantees a path
        if not path.is_dir():
            raise CorpusError(f"data.path = {str(path)!r} (dataset={kind!r}) does not exist")
        return path
    if kind == "generated":
        path = generated_corpus_dir(data_cfg)
        expected = [path / f"{data_cfg.train_split}.{lang}" for lang in (data_cfg.src_lang, data_cfg.tgt_lang)]
        missing = [str(p) for p in expected if not p.is_file()]
        if missing:
            raise CorpusError(f"dataset='generated': the generated corpus is not in {path} (missing {', '.join(missing)}); "
                              "generate it there first (the caller writes it before building the data module)")
        return path
    if kind == "wmt14-en-de":
        path = Path(data_cfg.path).expanduser() if data_cfg.path else WMT14_DEFAULT.expanduser()
        return ensure_wmt14(path, data_cfg.src_lang, data_cfg.tgt_lang, download=download)
    raise CorpusError(f"data.dataset = {kind!r}: unknown dataset")


def _write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line.replace("\n", " ").strip() + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _fetch_sacrebleu(test_set: str, directory: Path, split: str) -> None:
    """Write ``{split}.en`` / ``{split}.de`` from sacreBLEU's ``test_set`` (en-de: source English, reference German)."""
    from sacrebleu.dataset import DATASETS

    dataset = DATASETS[test_set]
    src = read_lines(dataset.get_source_file("en-de"))
    ref = read_lines(dataset.get_reference_files("en-de")[0])
    if len(src) != len(ref) or not src:
        raise CorpusError(f"sacreBLEU {test_set}: {len(src)} source vs {len(ref)} reference lines")
    _write_lines_atomic(directory / f"{split}.de", ref)
    _write_lines_atomic(directory / f"{split}.en", src)


def _fetch_hf_train(directory: Path) -> None:
    """Write train.en / train.de from Hugging Face ``datasets`` ("wmt14", "de-en"), when it is installed and online."""
    import datasets  # noqa: F401  (optional dependency)

    train = datasets.load_dataset("wmt14", "de-en", split="train")
    pairs = train["translation"]
    _write_lines_atomic(directory / "train.de", (p["de"] for p in pairs))
    _write_lines_atomic(directory / "train.en", (p["en"] for p in pairs))


def wmt14_instructions(directory: Path, missing: Sequence[Path]) -> str:
    """What to place where, for the missing WMT14 files only."""
    lines = [f"WMT14 En-De is incomplete in {directory}; place these files (plain UTF-8 text, one sentence per line, "
             "untokenized, .en and .de line-aligned):"]
    lines += [f"  {path}" for path in missing]
    splits = {path.name.rsplit(".", 1)[0] for path in missing}
    lines.append("where:")
    if "train" in splits:
        lines += [
            "  train.{en,de}: the WMT14 En-De training data (Europarl v7 + Common Crawl + News Commentary v9, ~4.5M",
            "      pairs), e.g. from fairseq's examples/translation/prepare-wmt14en2de.sh before tokenization, or",
            "      Hugging Face datasets.load_dataset('wmt14', 'de-en', split='train');",
        ]
    for split, test_set, what in (("newstest2013", "wmt13", "dev, 3,000 lines"),
                                  ("newstest2014", "wmt14/full", "test, the full 3,003 lines")):
        if split in splits:
            lines += [
                f"  {split}.{{en,de}} ({what}): sacrebleu -t {test_set} -l en-de --echo src > {directory / (split + '.en')}",
                f"      and sacrebleu -t {test_set} -l en-de --echo ref > {directory / (split + '.de')};",
            ]
    lines.append("or set data.path to a directory that already holds them.")
    return "\n".join(lines)


def ensure_wmt14(directory: PathLike, src_lang: str = "en", tgt_lang: str = "de", download: bool = True) -> Path:
    """Make sure ``directory`` holds train / newstest2013 / newstest2014 ``.{en,de}``; fetch what can be fetched.

    Dev and test come from sacreBLEU (``wmt13`` and ``wmt14/full``), training text from Hugging Face ``datasets``
    if importable; both only when online. Anything still missing raises ``CorpusError`` listing the files.
    """
    directory = Path(directory).expanduser()
    if {src_lang, tgt_lang} != {"en", "de"}:
        raise CorpusError(f"dataset='wmt14-en-de' needs languages en and de, got src_lang={src_lang!r}, tgt_lang={tgt_lang!r}")

    def missing() -> list[Path]:
        return [directory / f"{split}.{lang}" for split in WMT14_SPLITS.values() for lang in ("en", "de")
                if not (directory / f"{split}.{lang}").is_file()]

    problems: list[str] = []
    if missing() and download:
        directory.mkdir(parents=True, exist_ok=True)
        for test_set, split in (("wmt13", WMT14_SPLITS["dev"]), ("wmt14/full", WMT14_SPLITS["test"])):
            if any(p.name.startswith(split + ".") for p in missing()):
                try:
                    _fetch_sacrebleu(test_set, directory, split)
                except (Exception, SystemExit) as e:  # sacreBLEU calls sys.exit on failed downloads
                    problems.append(f"sacreBLEU {test_set}: {type(e).__name__}: {e}")
        if any(p.name.startswith("train.") for p in missing()):
            try:
                _fetch_hf_train(directory)
            except (Exception, SystemExit) as e:
                problems.append(f"Hugging Face datasets wmt14: {type(e).__name__}: {e}")
    still = missing()
    if still:
        message = wmt14_instructions(directory, still)
        if problems:
            message += "\n(automatic download failed: " + "; ".join(problems) + ")"
        raise CorpusError(message)
    return directory


# --------------------------------------------------------------------------------------------------------------
# Hashing and atomic cache directories
# --------------------------------------------------------------------------------------------------------------

_digest_memo: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def file_digest(path: PathLike) -> str:
    """sha256 of a file's bytes, memoised per (path, size, mtime) in this process."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _digest_lock:
        if key in _digest_memo:
            return _digest_memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    with _digest_lock:
        _digest_memo[key] = digest
    return digest


def _key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _publish(tmp: Path, final: Path) -> None:
    """Move a fully written temporary directory into place; if another process won the race, keep theirs."""
    try:
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------------------

_REACHABLE = re.compile(r"value <= (\d+)")


def tokenizer_key(train_files: Sequence[PathLike], vocab_size: int, character_coverage: float = 1.0,
                  input_sentence_size: int = INPUT_SENTENCE_SIZE, seed: int = 0) -> str:
    """The cache key of a tokenizer: the training files' content hashes and every training setting."""
    return _key({
        "kind": "spm-bpe", "version": _FORMAT_VERSION, "sentencepiece": spm.__version__,
        "files": [file_digest(p) for p in train_files], "vocab_size": vocab_size,
        "character_coverage": character_coverage, "input_sentence_size": input_sentence_size, "seed": seed,
        "normalization": "identity", "ids": list(SPECIAL_IDS),
    })


def _check_tokenizer(sp: spm.SentencePieceProcessor, vocab_size: int, path: Path) -> spm.SentencePieceProcessor:
    got = (sp.get_piece_size(), sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
    if got != (vocab_size, PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise CorpusError(f"tokenizer {path}: (size, pad, unk, bos, eos) = {got}, expected "
                          f"{(vocab_size, PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; delete it to retrain")
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
) -> spm.SentencePieceProcessor:
    """A joint BPE over ``train_files`` (source and target training text) with exactly ``vocab_size`` pieces.

    Ids: pad 0, unk 1, bos 2, eos 3. Normalisation ``identity`` (no NFKC: decoding gives back the text, up to
    whitespace runs), all characters covered (``character_coverage=1.0``), at most ``input_sentence_size``
    sentences sampled for training. Cached in ``cache_dir/tokenizers/<key>/`` where the key hashes the files'
    contents and these settings; written to a temporary directory and renamed into place.
    """
    files = [Path(p).expanduser() for p in train_files]
    for path in files:
        if not path.is_file():
            raise CorpusError(f"tokenizer training file {path} does not exist")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    key = tokenizer_key(files, vocab_size, character_coverage, input_sentence_size, seed)
    root = cache / "tokenizers"
    final = root / key[:24]
    model = final / "spm.model"
    if model.is_file():
        return _check_tokenizer(spm.SentencePieceProcessor(model_file=str(model)), vocab_size, model)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        spm.set_random_generator_seed(seed)
        try:
            spm.SentencePieceTrainer.train(
                input=[str(p) for p in files], model_prefix=str(tmp / "spm"), model_type="bpe",
                vocab_size=vocab_size, hard_vocab_limit=True, character_coverage=character_coverage,
                normalization_rule_name="identity", pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
                num_threads=num_threads or max(1, min(8, os.cpu_count() or 1)), minloglevel=2,
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
        (tmp / "meta.json").write_text(json.dumps({
            "key": key, "files": [str(p) for p in files], "vocab_size": vocab_size,
            "character_coverage": character_coverage, "input_sentence_size": input_sentence_size, "seed": seed,
            "sentencepiece": spm.__version__,
        }, indent=1))
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("trained a %d-piece BPE tokenizer into %s", vocab_size, final)
    return _check_tokenizer(spm.SentencePieceProcessor(model_file=str(model)), vocab_size, model)


# --------------------------------------------------------------------------------------------------------------
# Encoded splits
# --------------------------------------------------------------------------------------------------------------


@dataclass
class EncodedSplit:
    """Token ids of a split (no BOS/EOS), flat with offsets: pair ``i`` is ``src_ids[src_offsets[i]:src_offsets[i+1]]``."""

    src_ids: np.ndarray
    src_offsets: np.ndarray
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray
    line_index: np.ndarray  # line number (from 0) of each pair in the split's files

    ARRAYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "line_index")

    def __len__(self) -> int:
        return len(self.line_index)

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def src(self, i: int) -> np.ndarray:
        return self.src_ids[self.src_offsets[i]: self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_offsets[i]: self.tgt_offsets[i + 1]]

    def save(self, directory: Path) -> None:
        for name in self.ARRAYS:
            np.save(directory / f"{name}.npy", getattr(self, name), allow_pickle=False)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "EncodedSplit":
        return cls(**{name: np.load(directory / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
                      for name in cls.ARRAYS})


class _Encoder:
    """Collects kept pairs and encodes them in chunks into flat numpy arrays."""

    def __init__(self, sp: spm.SentencePieceProcessor, dtype: np.dtype, num_threads: int):
        self.sp, self.dtype, self.num_threads = sp, dtype, num_threads
        self.pending: list[tuple[int, str, str]] = []
        self.parts: dict[str, list[np.ndarray]] = {"src_ids": [], "src_len": [], "tgt_ids": [], "tgt_len": [], "line_index": []}

    def __call__(self, index: int, src: str, tgt: str) -> None:
        self.pending.append((index, src, tgt))
        if len(self.pending) >= ENCODE_CHUNK:
            self.flush()

    def _encode(self, texts: list[str], side: str) -> None:
        ids = self.sp.encode(texts, num_threads=self.num_threads)
        self.parts[f"{side}_len"].append(np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)))
        total = int(self.parts[f"{side}_len"][-1].sum())
        self.parts[f"{side}_ids"].append(np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype, count=total))

    def flush(self) -> None:
        if not self.pending:
            return
        index, src, tgt = zip(*self.pending)
        self.pending = []
        self.parts["line_index"].append(np.asarray(index, dtype=np.int64))
        self._encode(list(src), "src")
        self._encode(list(tgt), "tgt")

    def result(self) -> EncodedSplit:
        self.flush()
        cat = {k: (np.concatenate(v) if v else np.zeros(0, dtype=self.dtype if k.endswith("ids") else np.int64))
               for k, v in self.parts.items()}

        def offsets(lengths: np.ndarray) -> np.ndarray:
            return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

        return EncodedSplit(cat["src_ids"], offsets(cat["src_len"]), cat["tgt_ids"], offsets(cat["tgt_len"]), cat["line_index"])


def load_or_encode_split(
    sp: spm.SentencePieceProcessor,
    tok_key: str,
    files: SplitFiles,
    role: str,
    cache_dir: Optional[PathLike] = None,
    *,
    num_threads: Optional[int] = None,
) -> tuple[EncodedSplit, SplitReport]:
    """Check and encode a split (training pairs with an empty side dropped), cached under tokenizer + file hashes.

    Stored as plain ``.npy`` arrays (loaded with ``allow_pickle=False``, memory-mapped) plus the split's
    ``SplitReport`` as JSON, so a cache hit skips reading the text.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    _require(files, role)
    key = _key({"kind": "encoded", "version": _FORMAT_VERSION, "tokenizer": tok_key, "role": role,
                "drop_empty": role == "train", "max_chars": DEFAULT_MAX_CHARS,
                "src": file_digest(files.src), "tgt": file_digest(files.tgt)})
    root = cache / "encoded"
    final = root / f"{files.name}-{key[:24]}"
    if (final / "report.json").is_file():
        report = SplitReport(**json.loads((final / "report.json").read_text()))
        report.role, report.src, report.tgt = role, str(files.src), str(files.tgt)
        return EncodedSplit.load(final), report
    dtype = np.dtype(np.uint16 if sp.get_piece_size() <= np.iinfo(np.uint16).max + 1 else np.int32)
    encoder = _Encoder(sp, dtype, num_threads or max(1, min(8, os.cpu_count() or 1)))
    report = scan_split(files, role, keep=encoder)
    encoded = encoder.result()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        encoded.save(tmp)
        (tmp / "report.json").write_text(json.dumps(asdict(report), indent=1))
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return EncodedSplit.load(final), report


# --------------------------------------------------------------------------------------------------------------
# Token-budget batches
# --------------------------------------------------------------------------------------------------------------


class _EpochHook:
    """Exposed as ``batch_sampler.sampler``: Lightning calls ``set_epoch`` on that attribute at each epoch start."""

    def __init__(self, owner: "TokenBudgetBatchSampler"):
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of similar-length pairs whose padded size fits ``max_tokens`` on each side.

    ``lengths_src`` / ``lengths_tgt`` are the lengths of the tensors the batch will hold (source + EOS,
    BOS + target). A batch ``b`` satisfies ``len(b) * max(lengths_src[b]) <= max_tokens`` and the same for the
    target, padding included (fairseq's ``--max-tokens``; the paper's ~25k source + 25k target tokens per step
    is ``data.batch_tokens``, per device).

    Packing (like fairseq's ``batch_by_size``): pairs are sorted by max(source, target) length, the side that
    binds the budget, then by source - target length (so a batch's pairs have similar shapes on both sides),
    ties broken at random (``seed``) -- or, with ``sort_chunk=k``, sorted so within shuffled chunks of ``k``
    pairs -- and packed greedily in that order. On Multi30k (BPE 8k, 4096 tokens) padding is 4% of a batch;
    sorting by (target, source) instead padded 12% of the source side. The packing is fixed for a seed (so
    ``len()`` is the same every epoch) unless ``repack_each_epoch=True`` (ties then broken by (seed, epoch); the
    batch count may then change between epochs). Each epoch the batch order is shuffled with (seed, epoch) when
    ``shuffle``; without ``shuffle``, ties keep index order and batches come shortest first (for evaluation).

    Distributed: every rank builds the same global list of batches and takes ``batches[rank::world_size]``, so
    no pair is seen by two ranks in an epoch and every rank gets the same number of batches (DDP would hang
    otherwise). To make the count divisible by ``world_size`` without dropping data, the batches with the most
    pairs are split in two (smaller batches stay within the budget); only when every batch is down to one pair
    (fewer pairs than ranks, or pairs so long that each fills the budget alone) are batches repeated, fewer than
    ``world_size`` of them (those pairs are seen twice in that epoch).

    Epochs: ``set_epoch(e)``; Lightning calls it through ``self.sampler.set_epoch`` at each training epoch start
    (it looks for ``batch_sampler.sampler``), and ``epoch_fn`` (e.g. ``lambda: trainer.current_epoch``), if given,
    is read whenever an iterator is created and takes precedence.

    ``oversize``: a pair longer than ``max_tokens`` on one side raises (``"error"``) or forms a batch of its
    own (``"single"``, for evaluation).
    """

    def __init__(
        self,
        lengths_src: Sequence[int],
        lengths_tgt: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        *,
        max_sentences: Optional[int] = None,
        sort_chunk: Optional[int] = None,
        repack_each_epoch: bool = False,
        oversize: str = "error",
        epoch_fn: Optional[Callable[[], int]] = None,
    ):
        self.lengths_src = np.asarray(lengths_src, dtype=np.int64)
        self.lengths_tgt = np.asarray(lengths_tgt, dtype=np.int64)
        if self.lengths_src.shape != self.lengths_tgt.shape or self.lengths_src.ndim != 1:
            raise ValueError(f"lengths_src and lengths_tgt must be 1-d and equally long, got {self.lengths_src.shape} and {self.lengths_tgt.shape}")
        if len(self.lengths_src) == 0:
            raise ValueError("no examples to batch")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens = {max_tokens}: expected a positive integer")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank = {rank} with world_size = {world_size}: expected 0 <= rank < world_size")
        if oversize not in ("error", "single"):
            raise ValueError(f"oversize = {oversize!r}: expected 'error' or 'single'")
        if seed < 0:
            raise ValueError(f"seed = {seed}: expected a non-negative integer")
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.max_sentences = max_sentences
        self.sort_chunk = sort_chunk
        self.repack_each_epoch = repack_each_epoch and shuffle
        self.oversize = oversize
        self.epoch_fn = epoch_fn
        self.epoch = 0
        self.sampler = _EpochHook(self)
        self._packed: Optional[tuple[int, list[np.ndarray]]] = None  # (packing epoch, global batches)
        self._resume: Optional[tuple[int, int]] = None  # (epoch, batches of it already consumed): see resume_at

    # -- packing ---------------------------------------------------------------------------------------------
    def _sort(self, idx: np.ndarray) -> np.ndarray:
        """``idx`` stably sorted by max(source, target) length, then by source - target length."""
        s, t = self.lengths_src[idx], self.lengths_tgt[idx]
        return idx[np.lexsort((s - t, np.maximum(s, t)))]

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.lengths_src)
        if not self.shuffle:
            return self._sort(np.arange(n))
        perm = np.random.default_rng([self.seed, 0x5EED, epoch]).permutation(n)
        chunk = self.sort_chunk or n
        # lexsort is stable: pairs of equal lengths stay in random order
        return np.concatenate([self._sort(perm[start: start + chunk]) for start in range(0, n, chunk)])

    def _pack(self, order: np.ndarray) -> list[np.ndarray]:
        ls, lt = self.lengths_src.tolist(), self.lengths_tgt.tolist()
        budget, cap = self.max_tokens, self.max_sentences or len(ls)
        batches: list[list[int]] = []
        cur: list[int] = []
        ms = mt = 0
        for i in order.tolist():
            s, t = ls[i], lt[i]
            if s > budget or t > budget:
                if self.oversize == "error":
                    raise ValueError(f"example {i} has lengths (source {s}, target {t}) over max_tokens = {budget}; "
                                     "filter long pairs first or raise the token budget")
                batches.append([i])
                continue
            n = len(cur) + 1
            ns, nt = max(ms, s), max(mt, t)
            if cur and (n * ns > budget or n * nt > budget or n > cap):
                batches.append(cur)
                cur, ns, nt = [], s, t
            cur.append(i)
            ms, mt = ns, nt
        if cur:
            batches.append(cur)
        return [np.asarray(b, dtype=np.int64) for b in batches]

    def _equalise(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Make the batch count a multiple of world_size: split the largest batches, else repeat batches."""
        w = self.world_size
        extra = (-len(batches)) % w
        while extra:
            sizes = [len(b) for b in batches]
            j = int(np.argmax(sizes))
            if sizes[j] < 2:
                break
            b = batches[j]
            batches[j: j + 1] = [b[: len(b) // 2], b[len(b) // 2:]]
            extra -= 1
        if extra:  # every batch holds one pair: repeat from the start
            batches = batches + [batches[k % len(batches)] for k in range(extra)]
        return batches

    def global_batches(self, epoch: Optional[int] = None) -> list[np.ndarray]:
        """All ranks' batches of an epoch, in the order they are dealt out (rank r gets positions r, r+w, ...)."""
        epoch = self.epoch if epoch is None else epoch
        pack_epoch = epoch if self.repack_each_epoch else 0
        if self._packed is None or self._packed[0] != pack_epoch:
            self._packed = (pack_epoch, self._equalise(self._pack(self._order(pack_epoch))))
        batches = self._packed[1]
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(batches))
            batches = [batches[k] for k in perm]
        return batches

    def batches(self, epoch: Optional[int] = None) -> list[list[int]]:
        """This rank's batches of an epoch, as lists of example indices."""
        return [b.tolist() for b in self.global_batches(epoch)[self.rank:: self.world_size]]

    # -- Sampler protocol -----------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def resume_at(self, epoch: int, consumed: int) -> None:
        """Make the next iterator over ``epoch`` start after its first ``consumed`` batches (a run resumed mid-epoch).

        Applies once, and only if that iterator is for ``epoch``: a resumed run then sees exactly the batches an
        uninterrupted run would have seen next, in the same order.
        """
        if consumed < 0 or epoch < 0:
            raise ValueError(f"resume_at(epoch={epoch}, consumed={consumed}): expected non-negative integers")
        self._resume = (int(epoch), int(consumed))

    def __iter__(self) -> Iterator[list[int]]:
        if self.epoch_fn is not None:
            self.epoch = int(self.epoch_fn())
        batches = self.batches(self.epoch)
        if self._resume is not None:
            epoch, consumed = self._resume
            self._resume = None
            if epoch == self.epoch:
                batches = batches[consumed:]
        return iter(batches)

    def __len__(self) -> int:
        return len(self.global_batches(self.epoch if self.repack_each_epoch else 0)) // self.world_size

    def padding_efficiency(self, epoch: Optional[int] = None) -> dict[str, float]:
        """Non-pad tokens / padded tokens of all batches of an epoch (all ranks), per side and both sides."""
        real_s = real_t = pad_s = pad_t = 0
        for b in self.global_batches(epoch):
            s, t = self.lengths_src[b], self.lengths_tgt[b]
            real_s += int(s.sum())
            real_t += int(t.sum())
            pad_s += len(b) * int(s.max())
            pad_t += len(b) * int(t.max())
        return {"src": real_s / pad_s, "tgt": real_t / pad_t, "both": (real_s + real_t) / (pad_s + pad_t)}


class ResumableLoader(DataLoader):
    """The training loader, with the position in its epoch saved in Lightning checkpoints.

    Lightning stores ``state_dict()`` of a training loader that has one in the checkpoint's loop state and calls
    ``load_state_dict`` before the resumed run's first iterator, so a run killed mid-epoch continues with the
    batch after the last one it trained on instead of restarting the epoch's order (which would repeat some
    batches, skip others and make the resumed run differ from an uninterrupted one).

    ``consumed()`` is the number of batches of the current epoch the training loop has taken; the loader cannot
    count that itself, since the loop fetches one batch ahead.
    """

    def __init__(self, *args: Any, consumed: Callable[[], int], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.consumed = consumed

    def state_dict(self) -> dict[str, int]:
        return {"epoch": int(self.batch_sampler.epoch), "consumed": int(self.consumed())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batch_sampler.resume_at(int(state["epoch"]), int(state["consumed"]))


# --------------------------------------------------------------------------------------------------------------
# Datasets and collation
# --------------------------------------------------------------------------------------------------------------


class PairDataset(Dataset):
    """Pairs ``rows`` of an ``EncodedSplit``; items are (line index, source ids, target ids), ids capped at ``max_len``."""

    def __init__(self, encoded: EncodedSplit, rows: Optional[np.ndarray] = None, max_len: Optional[int] = None):
        self.encoded = encoded
        self.rows = np.arange(len(encoded)) if rows is None else np.asarray(rows, dtype=np.int64)
        self.max_len = max_len

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        row = int(self.rows[i])
        src, tgt = self.encoded.src(row), self.encoded.tgt(row)
        if self.max_len is not None:
            src, tgt = src[: self.max_len], tgt[: self.max_len]
        return int(self.encoded.line_index[row]), np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Tensor lengths in a batch: source + EOS, BOS + target."""
        ls, lt = self.encoded.src_lengths[self.rows], self.encoded.tgt_lengths[self.rows]
        if self.max_len is not None:
            ls, lt = np.minimum(ls, self.max_len), np.minimum(lt, self.max_len)
        return ls + 1, lt + 1


def collate_pairs(items: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """``src`` [B,S] = ids + EOS, ``tgt_in`` [B,T] = BOS + ids, ``tgt_out`` [B,T] = ids + EOS, padded with PAD;
    ``n_src_tokens`` / ``n_tgt_tokens`` (ints, non-pad in ``src`` / ``tgt_out``); ``index`` [B] line numbers."""
    b = len(items)
    s_len = max(len(s) for _, s, _ in items) + 1
    t_len = max(len(t) for _, _, t in items) + 1
    src = np.full((b, s_len), PAD_ID, dtype=np.int64)
    tgt_in = np.full((b, t_len), PAD_ID, dtype=np.int64)
    tgt_out = np.full((b, t_len), PAD_ID, dtype=np.int64)
    n_src = n_tgt = 0
    for row, (_, s, t) in enumerate(items):
        src[row, : len(s)] = s
        src[row, len(s)] = EOS_ID
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1: len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
        n_src += len(s) + 1
        n_tgt += len(t) + 1
    return {
        "src": torch.from_numpy(src), "tgt_in": torch.from_numpy(tgt_in), "tgt_out": torch.from_numpy(tgt_out),
        "n_src_tokens": n_src, "n_tgt_tokens": n_tgt,
        "index": torch.tensor([i for i, _, _ in items], dtype=torch.long),
    }


# --------------------------------------------------------------------------------------------------------------
# The data module
# --------------------------------------------------------------------------------------------------------------


class TranslationDataModule(pl.LightningDataModule):
    """Train / dev / test batches of one corpus for ``TranslationModule``.

    ``prepare_data`` (one process per node) checks the corpus, trains or loads the BPE and encodes every split,
    all cached in ``data.cache_dir``; ``setup`` loads from the cache (doing the work itself on a miss). Training
    pairs longer than ``data.max_tokens`` word pieces (with BOS/EOS, or longer than ``max_positions``) are
    skipped and counted; pairs with an empty side are skipped and counted.

    Training batches: ``TokenBudgetBatchSampler`` with ``data.batch_tokens`` per side per device, sharded by the
    trainer's global rank / world size. **The caller must build the Trainer with
    ``use_distributed_sampler=False``** (Lightning cannot inject a distributed sampler into a custom batch
    sampler; the sampler shards itself). The epoch is taken from ``trainer.current_epoch`` whenever an epoch's
    iterator is created (and Lightning's own ``set_epoch`` call reaches it too), so batch order changes per epoch.
    Under a trainer the training loader is a ``ResumableLoader``: its position in the epoch is saved in checkpoints,
    so a run resumed mid-epoch continues with the next batch.

    Dev / test batches: the whole split on every rank, sorted by length, in a fixed order (no sharding: each
    rank evaluates everything, so metrics need no gathering; decode on rank 0 if time matters). Dev/test keep
    every line (references must align); ids over ``max_positions - 1`` are truncated (counted, warned about).

    Batches are dicts: ``src``, ``tgt_in``, ``tgt_out`` (Long [B, ·]), ``n_src_tokens``, ``n_tgt_tokens`` (int),
    ``index`` (line numbers into ``dev_references`` / ``test_references``).
    """

    def __init__(
        self,
        data_cfg: DataConfig,
        corpus_dir: Optional[PathLike] = None,
        seed: int = 0,
        max_positions: int = 1024,
        *,
        eval_batch_tokens: Optional[int] = None,
        eval_max_sentences: Optional[int] = None,
        sort_chunk: Optional[int] = None,
        download: bool = True,
    ):
        super().__init__()
        if max_positions < 2:
            raise ValueError(f"max_positions = {max_positions}: expected at least 2")
        self.data_cfg = data_cfg
        self.corpus_dir = Path(corpus_dir).expanduser() if corpus_dir is not None else None
        self.seed = seed
        self.max_positions = max_positions
        self.eval_batch_tokens = eval_batch_tokens or data_cfg.batch_tokens
        self.eval_max_sentences = eval_max_sentences
        self.sort_chunk = sort_chunk
        self.download = download
        self.cache_dir = default_cache_dir(data_cfg)
        self.tokenizer: Optional[spm.SentencePieceProcessor] = None
        self.splits: Optional[CorpusSplits] = None
        self.report: dict[str, dict[str, Any]] = {}
        self._encoded: dict[str, EncodedSplit] = {}
        self._datasets: dict[str, PairDataset] = {}
        self._texts: dict[str, tuple[list[str], list[str]]] = {}
        self._tok_key: Optional[str] = None

    # -- preparation ------------------------------------------------------------------------------------------
    def _resolve(self) -> CorpusSplits:
        if self.splits is None:
            cfg = self.data_cfg
            directory = self.corpus_dir or dataset_directory(cfg, download=self.download)
            train, dev, test = default_split_names(cfg)
            self.splits = resolve_splits(directory, cfg.src_lang, cfg.tgt_lang, train=train, dev=dev, test=test)
        return self.splits

    def _load_tokenizer(self) -> spm.SentencePieceProcessor:
        if self.tokenizer is None:
            splits = self._resolve()
            files = [splits.train.src, splits.train.tgt]
            self.tokenizer = load_or_train_tokenizer(files, self.data_cfg.vocab_size, self.cache_dir)
            self._tok_key = tokenizer_key(files, self.data_cfg.vocab_size)
        return self.tokenizer

    def _encode(self, role: str) -> EncodedSplit:
        if role not in self._encoded:
            sp = self._load_tokenizer()
            files = dict(self._resolve().items())[role]
            encoded, report = load_or_encode_split(sp, self._tok_key, files, role, self.cache_dir)
            self._encoded[role] = encoded
            self.report[role] = asdict(report)
            rank_zero_info(f"[data] {report.summary()}")
        return self._encoded[role]

    def prepare_data(self) -> None:
        """Check the corpus, train/load the tokenizer and encode all splits into the cache (no state kept)."""
        for role in ("train", "dev", "test"):
            self._encode(role)

    def setup(self, stage: Optional[str] = None) -> None:
        roles = {"fit": ("train", "dev"), "validate": ("dev",), "test": ("test",)}.get(stage or "", ("train", "dev", "test"))
        for role in roles:
            self._dataset(role)

    # -- datasets ---------------------------------------------------------------------------------------------
    def dataset(self, role: str) -> PairDataset:
        """The encoded pairs of "train", "dev" or "test", built once: what the loaders batch (`ablate bench` too)."""
        return self._dataset(role)

    def _dataset(self, role: str) -> PairDataset:
        if role in self._datasets:
            return self._datasets[role]
        encoded = self._encode(role)
        ls, lt = encoded.src_lengths, encoded.tgt_lengths
        if role == "train":
            limit = min(self.data_cfg.max_tokens, self.max_positions)
            keep = (ls + 1 <= limit) & (lt + 1 <= limit)
            skipped = int(len(keep) - keep.sum())
            self.report[role]["skipped_long"] = skipped
            self.report[role]["train_pairs"] = int(keep.sum())
            if skipped:
                rank_zero_info(f"[data] train: skipped {skipped} of {len(keep)} pairs over {limit} word pieces "
                               f"(with BOS/EOS) on a side (data.max_tokens = {self.data_cfg.max_tokens}, max_positions = {self.max_positions})")
            if not keep.any():
                raise CorpusError(f"every training pair is longer than {limit} word pieces; raise data.max_tokens")
            dataset = PairDataset(encoded, np.nonzero(keep)[0])
        else:
            cap = self.max_positions - 1
            truncated = int(((ls > cap) | (lt > cap)).sum())
            self.report[role]["truncated"] = truncated
            if truncated:
                rank_zero_warn(f"[data] {role}: {truncated} pairs longer than max_positions - 1 = {cap} word pieces "
                               "are truncated for the loss (BLEU still uses the full references)")
            dataset = PairDataset(encoded, max_len=cap)
        self._datasets[role] = dataset
        return dataset

    def _texts_of(self, role: str) -> tuple[list[str], list[str]]:
        if role not in self._texts:
            files = dict(self._resolve().items())[role]
            self._texts[role] = (read_lines(files.src), read_lines(files.tgt))
        return self._texts[role]

    @property
    def dev_sources(self) -> list[str]:
        return self._texts_of("dev")[0]

    @property
    def dev_references(self) -> list[str]:
        return self._texts_of("dev")[1]

    @property
    def test_sources(self) -> list[str]:
        return self._texts_of("test")[0]

    @property
    def test_references(self) -> list[str]:
        return self._texts_of("test")[1]

    @property
    def vocab_size(self) -> int:
        return self._load_tokenizer().get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Word-piece ids of ``text`` (no BOS/EOS)."""
        return self._load_tokenizer().encode(text)

    def decode(self, ids: Union[Sequence[int], torch.Tensor, np.ndarray]) -> str:
        """Text of ``ids``: stops at the first EOS, drops PAD and BOS."""
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        return self._load_tokenizer().decode(out)

    # -- loaders ----------------------------------------------------------------------------------------------
    def _loader(self, dataset: PairDataset, sampler: TokenBudgetBatchSampler, **resumable: Any) -> DataLoader:
        workers = self.data_cfg.num_workers
        # A generator of its own: every new iterator draws a base seed from it, which would otherwise come from the
        # global torch RNG that dropout uses, so validating (a new dev iterator) or resuming (a new training
        # iterator) would shift every later dropout mask.
        generator = torch.Generator().manual_seed(self.seed)
        cls = ResumableLoader if resumable else DataLoader
        return cls(dataset, batch_sampler=sampler, collate_fn=collate_pairs, num_workers=workers, generator=generator,
                   pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0, **resumable)

    def _rank_world(self) -> tuple[int, int]:
        trainer = self._trainer_or_none()
        if trainer is None:
            return 0, 1
        return int(trainer.global_rank), int(trainer.world_size)

    def _trainer_or_none(self) -> Optional[pl.Trainer]:
        return getattr(self, "trainer", None)

    def train_sampler(self, rank: int = 0, world_size: int = 1, epoch_fn: Optional[Callable[[], int]] = None) -> TokenBudgetBatchSampler:
        dataset = self._dataset("train")
        ls, lt = dataset.lengths()
        return TokenBudgetBatchSampler(ls, lt, self.data_cfg.batch_tokens, shuffle=True, seed=self.seed, rank=rank,
                                       world_size=world_size, sort_chunk=self.sort_chunk, epoch_fn=epoch_fn)

    def train_dataloader(self) -> DataLoader:
        trainer = self._trainer_or_none()
        rank, world = self._rank_world()
        if trainer is not None and world > 1:
            connector = getattr(trainer, "_accelerator_connector", None)
            if getattr(connector, "use_distributed_sampler", False):
                raise RuntimeError("TranslationDataModule shards its own token-budget batches: build the Trainer with "
                                   "use_distributed_sampler=False")
        epoch_fn = (lambda: trainer.current_epoch) if trainer is not None else None
        sampler = self.train_sampler(rank, world, epoch_fn)
        if trainer is None:
            return self._loader(self._dataset("train"), sampler)
        sampler.set_epoch(trainer.current_epoch)
        # Batches of this epoch the loop has handed to training (restored with the loop state on resume).
        consumed = lambda: trainer.fit_loop.epoch_loop.batch_progress.current.ready  # noqa: E731
        return self._loader(self._dataset("train"), sampler, consumed=consumed)

    def _eval_loader(self, role: str) -> DataLoader:
        dataset = self._dataset(role)
        ls, lt = dataset.lengths()
        sampler = TokenBudgetBatchSampler(ls, lt, self.eval_batch_tokens, shuffle=False,
                                          max_sentences=self.eval_max_sentences, oversize="single")
        return self._loader(dataset, sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")
