"""Run folders and their records, written only through a temporary file renamed into place.

A run folder holds `config.yaml` (the resolved config and where the run comes from) and `metrics.json`
(status and metrics). A reader sees either the old or the new file, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from lightning_modules.config import RunConfig

STATUSES = ("pending", "running", "done", "failed", "diverged")
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"


def write_atomic(path: Path, text: str) -> None:
    """Write text to path so that a crash, kill or full disk leaves the previous file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


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


def update_metrics(run_dir: Path, **values: Any) -> dict[str, Any]:
    record = read_metrics(run_dir) or {}
    record.update(values)
    if record.get("status") not in STATUSES:
        raise ValueError(f"status {record.get('status')!r}: expected one of {', '.join(STATUSES)}")
    write_json(Path(run_dir) / METRICS_FILE, record)
    return record


def run_folder(root: str | Path, meta: dict[str, Any], config: RunConfig) -> Path:
    """`<root>/<sweep>/<scale>/<row>-s<seed>-<run id>`: readable, and unique by the config hash."""
    return Path(root) / meta.get("sweep", "adhoc") / meta.get("scale", "custom") / f"{meta.get('row', 'run')}-s{config.seed}-{config.run_id()}"
