"""A corpus on disk: ``{split}.{lang}`` files found, read and checked.

Lines are split on ``\\n`` only (as ``wc -l`` counts them), a trailing ``\\r`` is dropped and surrounding
whitespace stripped. Problems raise ``CorpusError`` (a ``ValueError``) naming the file(s), line numbers and counts.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union

DEFAULT_MAX_CHARS = 1000  # lines longer than this (in characters) are counted as over-long by the checks

PathLike = Union[str, os.PathLike]


class CorpusError(ValueError):
    """A corpus is missing, malformed or cannot be obtained; the message says which file and what to do."""


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


def require_split(files: SplitFiles, role: str) -> SplitFiles:
    """``files`` when both exist; else a ``CorpusError`` naming the missing ones."""
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
        raise CorpusError(
            f"corpus directory {directory} does not exist (expected files like {directory / f'{train}.{src_lang}'})"
        )
    if src_lang == tgt_lang:
        raise CorpusError(f"source and target language are both {src_lang!r}; files are named {{split}}.{{lang}}")
    train_files = require_split(_split_files(directory, train, src_lang, tgt_lang), "train")
    dev_files = (
        require_split(_split_files(directory, dev, src_lang, tgt_lang), "dev")
        if dev
        else _first_existing(directory, DEV_CANDIDATES, src_lang, tgt_lang, "dev")
    )
    test_files = (
        require_split(_split_files(directory, test, src_lang, tgt_lang), "test")
        if test
        else _first_existing(directory, TEST_CANDIDATES, src_lang, tgt_lang, "test")
    )
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
        snippet = raw[max(0, e.start - 20) : e.start + 20]
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
    return (max_chars is not None and len(text) > max_chars) or (
        max_words is not None and len(text.split()) > max_words
    )


def require_text(path: PathLike, role: str = "corpus") -> Path:
    """``path`` when it holds something besides whitespace; else a ``CorpusError`` naming it (an empty or blank file
    would otherwise reach sentencepiece's BPE training, whose error names no file)."""
    path = Path(path)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            if chunk.strip():
                return path
    size = path.stat().st_size
    raise CorpusError(
        f"{role} file {path} is empty" if size == 0 else f"{role} file {path} holds only whitespace ({size} bytes)"
    )


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
    require_split(files, role)
    require_text(files.src, f"{role} split {files.name!r}")
    require_text(files.tgt, f"{role} split {files.name!r}")
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
        raise CorpusError(
            f"{role} split {files.name!r} ({files.src}, {files.tgt}) has no usable pairs "
            f"({report.lines} lines, {report.skipped_empty} with an empty side)"
        )
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
