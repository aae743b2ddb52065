"""The one reader of /proc/cpuinfo (Linux): the CPU's model name and instruction-set flags.

Its readers: the native kernels' build cache (what -march=native depends on), a run's record and the benchmark
and complexity headers (through ablations/provenance.py). It lives here, below ablations, because native.py needs
it and lightning_modules never imports ablations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def cpuinfo_lines() -> list[str]:
    """The lines of /proc/cpuinfo; [] where there is none (not Linux) or it cannot be read."""
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def cpu_field(name: str) -> Optional[str]:
    """The value of the first line of /proc/cpuinfo named `name` ("model name", "flags"); None without one."""
    return next((line.split(":", 1)[1].strip() for line in cpuinfo_lines() if line.startswith(name)), None)


def native_bf16() -> bool:
    """Whether this CPU computes in bf16 natively (avx512_bf16 or amx_bf16). Elsewhere PyTorch emulates bf16 on the
    CPU, correctly but many times slower than fp32."""
    flags = (cpu_field("flags") or "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags
