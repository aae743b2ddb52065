"""What made a result, for records and table headers: the code's commit, the CPU and the device."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any, Optional

from lightning_modules.cpuinfo import cpu_field


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows of it."""
    return cpu_field("model name") or platform.processor() or platform.machine()


def worker() -> dict[str, Any]:
    """The kind of worker this process trains on, what its minutes depend on: device, CPU model and torch threads."""
    import torch

    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "cpu_model": cpu_model(),
        "torch_threads": torch.get_num_threads(),
    }


def hardware() -> dict[str, Any]:
    """What ran the run, for table headers: its `worker`, torch, and whether the native kernels were on and built
    (`native_kernels`: on a CPU they draw training's dropout masks, so the same seed trains another run without
    them; `ablate reproduce` replays a record with its own setting). The code's commit is not here: a run reads it
    when each attempt starts (`code_commit`), since the checkout may move on while it trains; a resumed run's
    earlier workers are under `attempt_workers`."""
    import torch

    from lightning_modules import native

    return {**worker(), "torch_version": torch.__version__, "native_kernels": native.available()}


def trained_by(attempt_commits: list[Optional[str]]) -> Optional[str]:
    """The record's `commit`: the commits its attempts started from, distinct and in order ("a, b" where a resumed
    run's attempts ran different code); None when no attempt could read one."""
    known = list(dict.fromkeys(commit for commit in attempt_commits if commit))
    return ", ".join(known) or None


def code_commit(directory: Path = Path(__file__).parent) -> Optional[str]:
    """The git commit (short) of the code in `directory` (default: this package's), suffixed "+dirty" where tracked
    files other than results/ (what the code writes, not the code) differ from it, so that a figure made with
    uncommitted code says so; None outside a git checkout (an installed copy) or without git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        return commit + (
            "+dirty" if git("status", "--porcelain", "--untracked-files=no", "--", ":(top,exclude)results") else ""
        )
    except (OSError, subprocess.SubprocessError):
        return None
