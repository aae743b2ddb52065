"""Files written only through a temporary file renamed into place: a reader sees the old file or the new one.

The one atomic writer of the project: run records (ablations/records.py), checkpoints, the built-in corpus and
fetched datasets all write through it.
"""

from __future__ import annotations

import functools
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


@functools.lru_cache(maxsize=1)
def process_umask() -> int:
    """This process's umask, read once: from /proc/self/status on Linux (no change to the process), else by setting
    and restoring it (os.umask has no read-only form; done once, on first use)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain new file gets from open(): 0o666 less the umask (0o644 under umask 022)."""
    return 0o666 & ~process_umask()


@contextmanager
def atomic_open(path: Path, mode: str = "wb", **options: Any) -> Iterator[IO]:
    """A handle on a temporary file beside `path`, renamed over it once the block ends without an error.

    A temporary file in the same folder (so the rename cannot cross file systems), flushed to disk before it is
    renamed over the target; on any error (ENOSPC included) the temporary file is removed and the error raised.
    `mode` and `options` are open()'s ("w" with encoding= and newline= for text written as it is produced).
    The file gets the mode open() would give it (0o666 less the umask), not mkstemp's 0o600, so a shared runs/
    folder stays readable by the group when the umask says so.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **options) as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), file_mode())
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write data to path so that a crash, kill or full disk leaves the previous file intact."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def write_atomic(path: Path, text: str) -> None:
    """Write text (UTF-8) to path so that a crash, kill or full disk leaves the previous file intact."""
    write_atomic_bytes(path, text.encode("utf-8"))


def fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (a power cut after it must not bring back the old file)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported here (e.g. some network file systems): the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
