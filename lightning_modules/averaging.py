"""Checkpoint averaging (section 6: the last 5 checkpoints for base models, the last 20 for big ones)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

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
    """Element-wise mean of the model weights of several checkpoints (in float64, cast back)."""
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    total: dict[str, Tensor] = {}
    for path in paths:
        state = load_checkpoint(path)["state_dict"]
        if total and state.keys() != total.keys():
            raise ValueError(f"{path}: its weights do not match {paths[0]} (different model?)")
        for name, value in state.items():
            total[name] = total[name] + value.double() if name in total else value.double()
    reference = load_checkpoint(paths[-1])["state_dict"]
    return {name: (value / len(paths)).to(reference[name].dtype) for name, value in total.items()}
