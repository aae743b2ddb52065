"""Training checkpoints: which one a run resumes from, and averaging the last few (section 6: the last 5
checkpoints for base models, the last 20 for big ones)."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import Tensor

STEP_CHECKPOINT = re.compile(r"step-(\d+)\.ckpt$")


def load_checkpoint(path: Path) -> dict:
    """Safe loading: tensors and plain containers only, never pickled code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated or corrupted files raise many types
        raise ValueError(f"{path}: not a readable checkpoint ({type(error).__name__}: {error})") from None


def step_checkpoints(directory: Path) -> list[Path]:
    """Periodic checkpoints `step-NNNNNNN.ckpt`, oldest first."""
    found = [(int(m.group(1)), p) for p in Path(directory).glob("step-*.ckpt") if (m := STEP_CHECKPOINT.search(p.name))]
    return [p for _, p in sorted(found)]


def average_checkpoints(paths: Sequence[Path]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of several checkpoints (in float64, cast back to the last one's types)."""
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    total: dict[str, Tensor] = {}
    for path in paths:
        state = load_checkpoint(path)["state_dict"]
        if total and state.keys() != total.keys():
            raise ValueError(f"{path}: its weights do not match {paths[0]} (different model?)")
        for name, value in state.items():
            total[name] = total[name] + value.double() if name in total else value.double()
    last = state  # the weights of paths[-1], loaded last
    return {name: (value / len(paths)).to(last[name].dtype) for name, value in total.items()}


def checkpoint_problem(path: Path) -> Optional[str]:
    """None if `path` is a whole training checkpoint that loads safely; else what is wrong with it.

    The zip archive's CRCs catch truncation and flipped bytes; loading with weights_only=True (memory-mapped, so
    cheap) catches anything that is not plain tensors and containers.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        if damaged is not None:
            return f"checksum mismatch in {damaged}"
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # truncated, corrupted or unsafe files raise many types
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    if not isinstance(state, dict) or not {"state_dict", "loops", "optimizer_states"} <= state.keys():
        return "not a training checkpoint (no weights, loop or optimiser state)"
    return None


def resume_checkpoint(checkpoints: Path) -> tuple[Optional[Path], list[str]]:
    """The checkpoint to resume from, and warnings about damaged ones.

    `last.ckpt` if it is whole, else the newest whole `step-*.ckpt`, else None (train from scratch). Every damaged
    checkpoint is renamed to `<name>.corrupt` (kept for inspection, never resumed from or averaged again).
    """
    candidates = [checkpoints / "last.ckpt", *reversed(step_checkpoints(checkpoints))]
    chosen: Optional[Path] = None
    warnings: list[str] = []
    for path in candidates:
        if not path.exists():
            continue
        problem = checkpoint_problem(path)
        if problem is None:
            chosen = chosen or path
            continue
        quarantined = path.with_name(path.name + ".corrupt")
        os.replace(path, quarantined)
        warnings.append(f"{path.name} is damaged ({problem}); moved to {quarantined.name}")
    if warnings:
        warnings.append(f"resuming from {chosen.name}" if chosen else "no whole checkpoint left: training from scratch")
    return chosen, warnings
