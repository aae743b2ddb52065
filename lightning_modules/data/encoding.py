"""Encoded splits: a split's token ids as flat ``.npy`` arrays with offsets, cached under tokenizer + file hashes."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import sentencepiece as spm

from .cache import FORMAT_VERSION, building, cache_key, default_cache_dir, file_digest, publish
from .corpus import DEFAULT_MAX_CHARS, PathLike, SplitFiles, SplitReport, require_split, scan_split
from .tokenizer import sentencepiece_threads

ENCODE_CHUNK = 100_000  # lines encoded at once (bounds memory on WMT-sized corpora)


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
        return self.src_ids[self.src_offsets[i] : self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    def save(self, directory: Path) -> None:
        for name in self.ARRAYS:
            np.save(directory / f"{name}.npy", getattr(self, name), allow_pickle=False)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "EncodedSplit":
        return cls(
            **{
                name: np.load(directory / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
                for name in cls.ARRAYS
            }
        )


class _Encoder:
    """Collects kept pairs and encodes them in chunks into flat numpy arrays."""

    def __init__(self, sp: spm.SentencePieceProcessor, dtype: np.dtype, num_threads: int):
        self.sp, self.dtype, self.num_threads = sp, dtype, num_threads
        self.pending: list[tuple[int, str, str]] = []
        self.parts: dict[str, list[np.ndarray]] = {
            "src_ids": [],
            "src_len": [],
            "tgt_ids": [],
            "tgt_len": [],
            "line_index": [],
        }

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
        cat = {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=self.dtype if k.endswith("ids") else np.int64))
            for k, v in self.parts.items()
        }

        def offsets(lengths: np.ndarray) -> np.ndarray:
            return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

        return EncodedSplit(
            cat["src_ids"], offsets(cat["src_len"]), cat["tgt_ids"], offsets(cat["tgt_len"]), cat["line_index"]
        )


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
    require_split(files, role)
    key = cache_key(
        {
            "kind": "encoded",
            "version": FORMAT_VERSION,
            "tokenizer": tok_key,
            "role": role,
            "drop_empty": role == "train",
            "max_chars": DEFAULT_MAX_CHARS,
            "src": file_digest(files.src),
            "tgt": file_digest(files.tgt),
        }
    )
    root = cache / "encoded"
    final = root / f"{files.name}-{key[:24]}"
    if not (final / "report.json").is_file():
        with building(final):
            if not (final / "report.json").is_file():  # not built while this process waited
                _encode_split(sp, files, role, final, num_threads)
    report = SplitReport(**json.loads((final / "report.json").read_text()))
    report.role, report.src, report.tgt = role, str(files.src), str(files.tgt)
    return EncodedSplit.load(final), report


def _encode_split(
    sp: spm.SentencePieceProcessor, files: SplitFiles, role: str, final: Path, num_threads: Optional[int]
) -> None:
    dtype = np.dtype(np.uint16 if sp.get_piece_size() <= np.iinfo(np.uint16).max + 1 else np.int32)
    encoder = _Encoder(sp, dtype, sentencepiece_threads(num_threads))
    report = scan_split(files, role, keep=encoder)
    encoded = encoder.result()
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        encoded.save(tmp)
        (tmp / "report.json").write_text(json.dumps(asdict(report), indent=1))
        publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
