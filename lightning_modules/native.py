"""Native CPU kernels: one incremental decoding step's attention and beam search's choice of the 2K best
continuations (kernels/decoding.cpp), and training's dropout noise (kernels/dropout.cpp).

They are compiled with the machine's C++ compiler on first use (about a second), cached under $ATTENTION_KERNEL_CACHE
(default ~/.cache/attention-ablations/kernels; a temporary directory if that is not writable), keyed by sources,
flags, compiler and CPU, and called through ctypes, so they need neither PyTorch's headers nor a build step at
install. Where no compiler works, PyTorch's attention, torch.topk and torch's dropout take over after one warning;
ATTENTION_NATIVE_KERNELS=0 turns them off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import torch
from torch import Tensor

from .cpuinfo import cpuinfo_lines

SOURCES = tuple(Path(__file__).with_name("kernels") / name for name in ("decoding.cpp", "dropout.cpp"))
# -march=native: the vector width of this CPU (its binary is cached per CPU); no -ffast-math, whose finite-math
# assumption would break the -inf handling. -fopenmp links libgomp.so.1, the runtime PyTorch has already loaded,
# so the kernel's threads are PyTorch's; compilers without OpenMP or -march=native get the portable build, which
# honours only the kernel's `omp simd` loops and runs on one thread.
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-std=c++17", "-shared", "-fPIC")
PORTABLE_FLAGS = ("-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-std=c++17", "-shared", "-fPIC")

enabled = os.environ.get("ATTENTION_NATIVE_KERNELS", "1") != "0"


@contextmanager
def switched(on: bool) -> Iterator[None]:
    """The kernels turned on or off for the calls inside, `enabled` restored after (`ablate bench` times both)."""
    global enabled
    before, enabled = enabled, on
    try:
        yield
    finally:
        enabled = before


def available() -> bool:
    """Whether the kernels are turned on and build on this machine."""
    return enabled and library() is not None


def usable(x: Tensor) -> bool:
    """Whether a decoding step on `x` (the decoder's input) can run its attention natively: fp32 on CPU, no autocast,
    no gradient (the kernel has no backward), and the kernel available."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
        and available()
    )


def decode_attention(q: Tensor, k: Tensor, v: Tensor, origin: Optional[Tensor], valid: Optional[Tensor]) -> Tensor:
    """softmax(q k^T / sqrt(d_k)) v for one new position per query row, over the key rows each query may see.

    q [B*K, H, d_k] contiguous: beam k of source b is row b*K + k. k [B, G, R, d_k], v [B, G, R, d_v] with unit
    stride in the last dimension. origin [B, K, L] (self-attention over the cache): beam k sees row p*K + origin[b, k, p]
    for each position p < L. Otherwise (cross-attention) every beam sees rows p < L where valid [B, L] (default: all).
    Returns [B*K, H*d_v].
    """
    lib = library()
    if lib is None:
        raise RuntimeError("the native kernels are not available on this machine (see the warning above)")
    BK, H, d_k = q.shape
    B, G, _, d_v = v.shape
    L = origin.shape[-1] if origin is not None else valid.shape[-1] if valid is not None else k.shape[2]
    if not (
        q.dtype == k.dtype == v.dtype == torch.float32
        and q.is_contiguous()
        and k.stride(3) == 1
        and v.stride(3) == 1
        and (origin is None or origin.is_contiguous())
        and (valid is None or valid.is_contiguous())
    ):
        raise ValueError(
            "decode_attention: expected fp32 tensors, q, origin and valid contiguous, k and v contiguous in "
            "their last dimension"
        )
    out = q.new_empty(BK, H * d_v)
    status = lib.decode_attention(
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        out.data_ptr(),
        *k.stride()[:3],
        *v.stride()[:3],
        origin.data_ptr() if origin is not None else None,
        valid.data_ptr() if valid is not None else None,
        B,
        BK // B,
        H,
        G,
        L,
        d_k,
        d_v,
        d_k**-0.5,
        torch.get_num_threads(),
    )
    if status:
        raise ValueError(f"decode_attention: {H} query heads for {G} key/value heads; expected a multiple")
    return out


def beam_candidates(
    logp: Tensor, scores: Tensor, banned: Tensor, eos_id: int, only_eos: Optional[Tensor], n: int
) -> tuple[Tensor, Tensor]:
    """The n best continuations of each source's beams: the largest logp[b, k, j] + scores[b, k] over beams k and tokens j
    not in `banned`, as values [B, n] and flat indices k*V + j [B, n], best first, among equal values the lower
    index. Where only_eos[b], EOS is each beam's only continuation. Places without a finite candidate hold -inf.

    logp [B, K, V], scores [B, K]: fp32 on CPU; banned: token ids; only_eos [B] bool or None. The values equal
    torch.topk's over (logp + scores[..., None]) with the banned tokens at -inf, flattened to [B, K*V].
    """
    lib = library()
    if lib is None:
        raise RuntimeError("the native kernels are not available on this machine (see the warning above)")
    B, K, V = logp.shape
    if not (
        logp.dtype == scores.dtype == torch.float32
        and logp.is_contiguous()
        and scores.is_contiguous()
        and scores.shape == (B, K)
        and 0 < n <= K * V
        and 0 <= eos_id < V
    ):
        raise ValueError(
            f"beam_candidates: expected contiguous fp32 logp [B, K, V] and scores [B, K], 0 < n <= K*V and "
            f"an EOS id below V; got logp {tuple(logp.shape)} {logp.dtype}, scores {tuple(scores.shape)}, "
            f"n = {n}, eos_id = {eos_id}"
        )
    banned = banned.to(torch.int64).contiguous()
    only_eos = only_eos.contiguous() if only_eos is not None else None
    values, indices = logp.new_empty(B, n), torch.empty(B, n, dtype=torch.int64)
    lib.beam_candidates(
        logp.data_ptr(),
        scores.data_ptr(),
        B,
        K,
        V,
        banned.data_ptr(),
        banned.numel(),
        only_eos.data_ptr() if only_eos is not None else None,
        eos_id,
        n,
        values.data_ptr(),
        indices.data_ptr(),
        torch.get_num_threads(),
    )
    return values, indices


def dropout_noise(like: Tensor, p: float) -> Tensor:
    """What dropout multiplies its input by: a tensor shaped like `like` (fp32 or bf16, on CPU), each value 0 with
    probability p, else 1 / (1 - p), as torch's dropout builds it. The values are a hash of a seed drawn from torch's
    default generator and of their index: torch.manual_seed reproduces them, and a checkpoint's RNG state resumes them.
    """
    lib = library()
    if lib is None:
        raise RuntimeError("the native kernels are not available on this machine (see the warning above)")
    if not (like.device.type == "cpu" and like.dtype in (torch.float32, torch.bfloat16) and 0.0 < p < 1.0):
        raise ValueError(
            f"dropout_noise: expected an fp32 or bf16 CPU tensor and 0 < p < 1; got {like.dtype} on "
            f"{like.device}, p = {p}"
        )
    noise = torch.empty(like.shape, dtype=like.dtype)
    seed = int(torch.empty((), dtype=torch.int64).random_())  # uniform over [0, 2^63)
    lib.dropout_noise(
        noise.data_ptr(),
        noise.numel(),
        like.dtype == torch.bfloat16,
        seed,
        min(math.ceil(p * 2**32), 2**32 - 1),
        1.0 / (1.0 - p),
        torch.get_num_threads(),
    )
    return noise


@functools.cache
def library() -> Optional[ctypes.CDLL]:
    """The compiled kernels, built on first use; None (and one warning) where they cannot be built."""
    try:
        path = _build()
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        warnings.warn(
            f"native kernels unavailable, PyTorch's attention, torch.topk and dropout take over: {error}",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.decode_attention.argtypes = [ptr] * 4 + [i64] * 6 + [ptr, ptr] + [i64] * 7 + [ctypes.c_float, ctypes.c_int]
    lib.decode_attention.restype = ctypes.c_int
    lib.beam_candidates.argtypes = [ptr, ptr] + [i64] * 3 + [ptr, i64, ptr, i64, i64, ptr, ptr, ctypes.c_int]
    lib.beam_candidates.restype = None
    lib.dropout_noise.argtypes = [
        ptr,
        i64,
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_uint32,
        ctypes.c_float,
        ctypes.c_int,
    ]
    lib.dropout_noise.restype = None
    return lib


def compiler() -> Optional[str]:
    """The C++ compiler the kernels are built with: $CXX, else c++, g++ or clang++ on the PATH; None if none."""
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def _build() -> Path:
    compiler_path = compiler()
    if compiler_path is None:
        raise RuntimeError("no C++ compiler found (set CXX)")
    sources = [path.read_bytes() for path in SOURCES]
    directory = _cache_directory()
    errors = []
    for flags in (FLAGS, PORTABLE_FLAGS):
        key = hashlib.sha256(
            b"\0".join([*sources, " ".join(flags).encode(), compiler_path.encode(), _cpu_identity().encode()])
        )
        target = directory / f"kernels-{key.hexdigest()[:16]}.so"
        if target.exists():
            return target
        # A private file renamed into place: concurrent workers never load a half-written library.
        handle, scratch = tempfile.mkstemp(suffix=".so", dir=directory)
        os.close(handle)
        try:
            result = subprocess.run(
                [compiler_path, *flags, *map(str, SOURCES), "-o", scratch], capture_output=True, text=True, timeout=300
            )
            if result.returncode == 0:
                os.replace(scratch, target)
                return target
            errors.append(f"{compiler_path} {' '.join(flags)}: {result.stderr.strip()[-500:]}")
        finally:
            if os.path.exists(scratch):
                os.unlink(scratch)
    raise RuntimeError("compiling the kernels (kernels/*.cpp) failed: " + " | ".join(errors))


def _cache_directory() -> Path:
    """$ATTENTION_KERNEL_CACHE, else the user's cache directory; a per-user temporary one where that is not writable
    (a read-only home on a cluster node)."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-ablations" / "kernels"
    for directory in (
        Path(os.environ.get("ATTENTION_KERNEL_CACHE") or default),
        Path(tempfile.gettempdir()) / f"attention-ablations-kernels-{os.getuid() if hasattr(os, 'getuid') else 0}",
    ):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise RuntimeError("no writable directory for the compiled kernel (set ATTENTION_KERNEL_CACHE)")


def _cpu_identity() -> str:
    """What -march=native depends on: the CPU model and its instruction-set flags."""
    lines = [line for line in cpuinfo_lines() if line.startswith(("model name", "flags", "Features"))]
    return "\n".join([platform.machine(), platform.processor(), *lines[:2]])
