"""The data cache: where tokenizers, encodings and the built-in corpus live, keyed by content hashes.

Every cached directory is written under a temporary name and renamed into place (``publish``), so a reader never
sees half of one and concurrent processes that build the same entry keep one of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Optional

from ..config import DataConfig
from .corpus import PathLike

DEFAULT_CACHE_DIR = Path("~/.cache/attention-ablations")
FORMAT_VERSION = 1  # bump to invalidate cached tokenizers / encodings


def default_cache_dir(data_cfg: Optional[DataConfig] = None) -> Path:
    """``data.cache_dir`` when set, else ``$ABLATE_CACHE``, else ``~/.cache/attention-ablations``."""
    if data_cfg is not None and data_cfg.cache_dir:
        return Path(data_cfg.cache_dir).expanduser()
    env = os.environ.get("ABLATE_CACHE")
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


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


def cache_key(payload: dict[str, Any]) -> str:
    """The hex sha256 of a JSON payload (keys sorted): the name of what it describes in the cache."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def publish(tmp: Path, final: Path) -> None:
    """Move a fully written temporary directory into place; if another process won the race, keep theirs."""
    try:
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
