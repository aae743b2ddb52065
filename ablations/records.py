"""Run folders and their records, written only through a temporary file renamed into place.

A run folder holds `config.yaml` (the resolved config and where the run comes from) and `metrics.json`
(status and metrics). A reader sees either the old or the new file, never half of one.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import yaml

from lightning_modules.atomic import write_atomic, write_atomic_bytes  # noqa: F401 (also imported from here)
from lightning_modules.config import RunConfig

STATUSES = ("pending", "running", "done", "failed", "diverged")
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
METRICS_LOCK = ".metrics.lock"


def write_renderings(stem: Path, value: Any, renderers: Any) -> list[Path]:
    """`<stem>.md`, `.csv`, `.tex`, ...: each (suffix, render) pair's rendering of one value, written atomically."""
    paths = []
    for suffix, render in renderers:
        path = Path(stem).with_suffix(suffix)
        write_atomic(path, render(value))
        paths.append(path)
    return paths


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Optional[dict[str, Any]]:
    """The JSON document at path; None if there is none; a ValueError naming the file if it is unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON record ({error}); move it away to start the run afresh") from None


def write_config(run_dir: Path, config: RunConfig, meta: dict[str, Any]) -> None:
    document = {"run_id": config.run_id(), "meta": meta, "config": config.to_dict()}
    write_atomic(Path(run_dir) / CONFIG_FILE, yaml.safe_dump(document, sort_keys=False))


def read_config(path: Path) -> tuple[RunConfig, dict[str, Any]]:
    """A resolved config file: either a run folder's config.yaml or a bare RunConfig mapping."""
    from .sweep import read_yaml

    document = read_yaml(Path(path))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a mapping")
    if "config" in document:
        return _config_from(document["config"], path), dict(document.get("meta") or {})
    return _config_from(document, path), {}


def _config_from(values: Any, path: Path) -> RunConfig:
    try:
        return RunConfig.from_dict(values)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def read_metrics(run_dir: Path) -> Optional[dict[str, Any]]:
    return read_json(Path(run_dir) / METRICS_FILE)


@contextmanager
def _record_lock(run_dir: Path) -> Iterator[None]:
    """Serialise read-modify-write of one run's metrics.json across processes (launcher, trainer, job wrapper).

    Atomic renames alone keep every version whole, but two writers that read the same version would each drop
    the other's fields. A blocking flock on `<run>/.metrics.lock`, held only for the few milliseconds of an update.
    """
    path = Path(run_dir) / METRICS_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update_metrics(run_dir: Path, **values: Any) -> dict[str, Any]:
    """Merge values into the run's metrics.json (atomically, and without losing a concurrent writer's fields)."""
    with _record_lock(run_dir):
        record = read_metrics(run_dir) or {}
        record.update(values)
        if record.get("status") not in STATUSES:
            raise ValueError(f"status {record.get('status')!r}: expected one of {', '.join(STATUSES)}")
        write_json(Path(run_dir) / METRICS_FILE, record)
    return record


def run_folder(root: str | Path, meta: dict[str, Any], config: RunConfig) -> Path:
    """`<root>/<sweep>/<scale>/<row>-s<seed>-<run id>`: readable, and unique by the config hash."""
    return Path(root) / meta.get("sweep", "adhoc") / meta.get("scale", "custom") / f"{meta.get('row', 'run')}-s{config.seed}-{config.run_id()}"
