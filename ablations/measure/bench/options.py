"""What `ablate bench` measures (BenchOptions, the `--dims` presets) and on what machine (CPU, bf16, versions)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any, Optional

import torch

from lightning_modules.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from lightning_modules.cpuinfo import native_bf16

from ...provenance import code_commit, cpu_model

PRECISIONS = ("32-true", "bf16-mixed")
CLOCKS = ("wall", "cpu")


# Model widths and batch size per `--dims`, over BenchOptions' defaults (the small preset's, what this CPU's figures
# use): the paper's base model at its 25,000-token batches and 37,000-piece vocabulary, for a GPU's tokens/s and MFU.
# The built-in corpus has about 3,100 word types (lightning_modules/data/generated/), too few for a 37k BPE, so base
# runs on synthetic batches: random word pieces of WMT-like lengths, as the GPU check's (gpu_check.synthetic_batches);
# tiny and small keep the corpus's BPE.
DIMENSIONS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, d_ff=256, batch_tokens=1024),  # the tiny preset's step, which every CPU table pays for
    "small": {},
    "base": dict(d_model=512, d_ff=2048, heads=8, layers=6, batch_tokens=25_000, vocab_size=37_000, synthetic=True),
}


@dataclass(frozen=True)
class BenchOptions:
    """What `ablate bench` measures and how long it spends on it."""

    d_model: int = 128  # the small preset's widths (width_divisor 4), the paper's depth and heads
    d_ff: int = 512
    heads: int = 8
    layers: int = 6
    P_drop: float = 0.1
    vocab_size: int = 2000  # the tiny preset's BPE on the built-in corpus
    batch_tokens: int = 2048  # per side, as in the tiny and small presets
    threads: int = 1
    rounds: int = 5
    timed_batches: int = 4  # per contender per round, after one warm-up batch
    decode_sentences: int = 96
    decode_batch_sentences: int = 48
    decode_rounds: int = 5  # the decoders' ratio is the tightest: five rounds steady its medians
    decode_train_steps: int = 500  # the decoding model's short fp32 run on the bench's corpus (cached: trained.py)
    beam_size: int = 4
    precision: str = "32-true"
    device: str = "cpu"
    clock: str = "wall"  # "cpu": this process's CPU time, for a CPU shared with other jobs (threads are ours alone)
    levers: bool = True  # also time each speed lever against its alternative
    compile: bool = False  # include torch.compile among the levers (minutes of warm-up on CPU)
    multi30k: Optional[str] = None  # Multi30k directory, for its padding efficiency
    corpus_pairs: int = 50_000
    synthetic: bool = False  # random word pieces of WMT-like lengths instead of the built-in corpus (any vocab_size)
    peak_tflops: Optional[float] = None  # bf16 peak of the GPU, when it is not in BF16_PEAK_TFLOPS
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "d_model",
            "d_ff",
            "heads",
            "layers",
            "vocab_size",
            "batch_tokens",
            "threads",
            "rounds",
            "timed_batches",
            "decode_sentences",
            "decode_batch_sentences",
            "decode_rounds",
            "decode_train_steps",
            "beam_size",
            "corpus_pairs",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"bench.{name} = {value!r}: expected a positive integer")
        if self.d_model % self.heads:
            raise ValueError(f"bench.heads = {self.heads}: expected a divisor of d_model ({self.d_model})")
        if self.precision not in PRECISIONS:
            raise ValueError(f"bench.precision = {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.clock not in CLOCKS:
            raise ValueError(f"bench.clock = {self.clock!r}: expected one of {', '.join(CLOCKS)}")
        if self.clock == "cpu" and self.device != "cpu":
            raise ValueError(
                "bench.clock = 'cpu': only with device 'cpu' (a GPU's work is not this process's CPU time)"
            )
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"bench.device = {self.device!r}: expected 'cpu' or 'cuda'")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("bench.device = 'cuda': no CUDA device is available")
        if not 0.0 <= self.P_drop < 1.0:
            raise ValueError(f"bench.P_drop = {self.P_drop!r}: expected a number in [0, 1)")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise ValueError(f"bench.peak_tflops = {self.peak_tflops!r}: expected a positive number")

    @classmethod
    def quick(cls, **overrides: Any) -> "BenchOptions":
        """About a minute on one CPU core: fewer rounds, batches and sentences; the same dimensions."""
        settings = dict(
            rounds=3, timed_batches=2, decode_sentences=32, decode_batch_sentences=32, decode_rounds=2, levers=False
        )
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def at(cls, dims: str, quick: bool = False, **overrides: Any) -> "BenchOptions":
        """The options for DIMENSIONS[dims] ("tiny", "small" or "base"), full or quick."""
        if dims not in DIMENSIONS:
            raise ValueError(f"bench dims = {dims!r}: expected one of {', '.join(DIMENSIONS)}")
        settings = {**DIMENSIONS[dims], **overrides}
        return cls.quick(**settings) if quick else cls(**settings)

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            N=self.layers,
            d_model=self.d_model,
            d_ff=self.d_ff,
            h=self.heads,
            P_drop=self.P_drop,
            max_positions=256,
            norm_placement="post",
            ffn="relu",
            tie_embeddings=True,
        )

    def data_config(self) -> DataConfig:
        return DataConfig(
            dataset="generated",
            vocab_size=self.vocab_size,
            batch_tokens=self.batch_tokens,
            max_tokens=128,
            generated_pairs=self.corpus_pairs,
        )

    def run_config(self) -> RunConfig:
        return RunConfig(
            model=self.model_config(),
            data=self.data_config(),
            train=TrainConfig(warmup_steps=200, precision=self.precision),
            seed=self.seed,
        )


def require_transformers():
    try:
        import transformers
    except ImportError as error:
        raise ValueError(
            "`ablate bench` compares with Hugging Face transformers, which is not installed: "
            "pip install 'attention-ablations[dev]' (or pip install transformers)"
        ) from error
    return transformers


def cpu_info() -> tuple[str, bool]:
    """The CPU's model name and whether it has native bf16 arithmetic (avx512_bf16 or amx_bf16)."""
    return cpu_model(), native_bf16()


def default_precision(device: str) -> str:
    """bf16-mixed where the hardware computes in bf16 (CUDA, or a CPU with avx512_bf16/amx_bf16), else fp32."""
    return "bf16-mixed" if device == "cuda" or cpu_info()[1] else "32-true"


def machine() -> dict[str, Any]:
    cpu, bf16 = cpu_info()
    import lightning

    info = {
        "cpu": cpu,
        "cpu_bf16": bf16,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
        "commit": code_commit(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    try:
        info["transformers"] = require_transformers().__version__
    except ValueError:
        info["transformers"] = None
    return info
