"""The data cache: where tokenizers, encodings and the built-in corpus live, keyed by content hashes.

Every cached directory is written under a temporary name and renamed into place (``publish``), so a reader never
sees half of one; a process that finds an entry being built waits for it (``building``) instead of building it too.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

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


@contextmanager
def building(final: Path) -> Iterator[None]:
    """Held while this process builds the cache entry `final` (check for it again inside, then build and publish).

    The ranks of a DDP run under SLURM, or `ablate sweep`'s concurrent workers, all start by preparing the same data;
    without this each would train the same BPE and encode the same corpus beside the others (at paper scale, a 37k
    BPE and ~9M lines each). An exclusive flock on `.<name>.lock` beside the entry, waited for in the kernel: the
    first process builds, the others wait and then find the entry. The kernel releases it when its holder exits or
    is killed, so a build that died leaves no stale lock, only the next process to build it.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(final.parent / f".{final.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[data] waiting for another process to finish building {final}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
