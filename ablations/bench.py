"""`ablate bench`: our training step and decoder measured side by side with their peers, in one process.

Every contender gets the same model dimensions, the same batches (TokenBudgetBatchSampler on the built-in
corpus), the same thread count, the same precision, the same loss (label-smoothed cross entropy) and the
same optimiser algorithm (Adam(0.9, 0.98, 1e-9) with the inverse-square-root schedule). Contenders run
interleaved, one after another in every round, and each figure is the median over rounds, so a burst of load
from other processes hits them all alike.

Training contenders:
* ``ours``: TranslationModule.training_step and its optimiser driven by a Lightning Trainer (logger,
  checkpoints, progress bar and validation off, as far as Lightning allows);
* ``bare_loop``: the same Transformer, loss and optimiser in a plain PyTorch loop (the cost of Lightning);
* ``marian``: Hugging Face MarianMTModel at the same dimensions (post-norm, ReLU, tied embeddings);
* ``torch_transformer``: torch.nn.Transformer at the same dimensions, with our embeddings and tied output.

Each round a contender trains on a warm-up batch and then on the timed batches; throughput is non-pad target
tokens of the timed batches over their wall time (the Trainer's start-up in each round is not timed: it is a
one-off cost of a run, not of a step).

Decoding: beam 4 on dev sentences with our cached decoder, our decoder without the key/value cache (outputs
must be identical) and Hugging Face ``generate(num_beams=4)`` on a MarianMTModel holding our weights (the
residual-stream dimensions permuted so that Marian's half-split sinusoids equal our interleaved ones; the
teacher-forced logits are checked to agree). Length penalty 0 for all three: HF normalises by |Y|^alpha,
GNMT by ((5+|Y|)/6)^alpha, and only at alpha = 0 do both rank hypotheses alike, so outputs can be compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import resource
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from lightning_modules import native
from lightning_modules.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from lightning_modules.cpuinfo import cpu_field
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID, TokenBudgetBatchSampler, TranslationDataModule, collate_pairs
from lightning_modules.flops import step_flops
from lightning_modules.module import TranslationModule, label_smoothed_loss, make_optimizer
from lightning_modules.positional import sinusoids
from lightning_modules.beam_search import beam_search
from lightning_modules.transformer import Transformer, prefers_explicit_attention

from .provenance import code_commit, cpu_model

PRECISIONS = ("32-true", "bf16-mixed")
CLOCKS = ("wall", "cpu")
# Dense bf16 peak of common GPUs in TFLOP/s (vendor data sheets, without sparsity), for model FLOPs utilisation.
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "RTX 4090": 165.0}
RATIO_KEYS = ("train_vs_marian", "train_vs_torch_transformer", "train_vs_bare_loop", "decode_vs_hf_generate", "decode_vs_uncached")


# Model widths and batch size per `--dims`, over BenchOptions' defaults (the small preset's, what this CPU's figures
# use): the paper's base model at its 25,000-token batches, for a GPU's tokens/s and MFU. The vocabulary stays the
# built-in corpus's BPE.
DIMENSIONS: dict[str, dict[str, int]] = {
    "small": {},
    "base": dict(d_model=512, d_ff=2048, heads=8, layers=6, batch_tokens=25_000),
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
    beam_size: int = 4
    precision: str = "32-true"
    device: str = "cpu"
    clock: str = "wall"  # "cpu": this process's CPU time, for a CPU shared with other jobs (threads are ours alone)
    levers: bool = True  # also time each speed lever against its alternative
    compile: bool = False  # include torch.compile among the levers (minutes of warm-up on CPU)
    multi30k: Optional[str] = None  # Multi30k directory, for its padding efficiency
    corpus_pairs: int = 50_000
    peak_tflops: Optional[float] = None  # bf16 peak of the GPU, when it is not in BF16_PEAK_TFLOPS
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("d_model", "d_ff", "heads", "layers", "vocab_size", "batch_tokens", "threads", "rounds", "timed_batches",
                     "decode_sentences", "decode_batch_sentences", "decode_rounds", "beam_size", "corpus_pairs"):
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
            raise ValueError("bench.clock = 'cpu': only with device 'cpu' (a GPU's work is not this process's CPU time)")
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
        settings = dict(rounds=3, timed_batches=2, decode_sentences=32, decode_batch_sentences=32, decode_rounds=2, levers=False)
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def at(cls, dims: str, quick: bool = False, **overrides: Any) -> "BenchOptions":
        """The options for DIMENSIONS[dims] ("small" or "base"), full or quick."""
        if dims not in DIMENSIONS:
            raise ValueError(f"bench dims = {dims!r}: expected one of {', '.join(DIMENSIONS)}")
        settings = {**DIMENSIONS[dims], **overrides}
        return cls.quick(**settings) if quick else cls(**settings)

    def model_config(self) -> ModelConfig:
        return ModelConfig(N=self.layers, d_model=self.d_model, d_ff=self.d_ff, h=self.heads,
                           P_drop=self.P_drop, max_positions=256, norm_placement="post", ffn="relu", tie_embeddings=True)

    def data_config(self) -> DataConfig:
        return DataConfig(dataset="generated", vocab_size=self.vocab_size, batch_tokens=self.batch_tokens, max_tokens=128,
                          generated_pairs=self.corpus_pairs)

    def run_config(self) -> RunConfig:
        return RunConfig(model=self.model_config(), data=self.data_config(),
                         train=TrainConfig(warmup_steps=200, precision=self.precision), seed=self.seed)


# ---------------------------------------------------------------------------------------------------------------
# Measurement helpers
# ---------------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Mark:
    """A point in time on both clocks: wall (perf_counter) and this process's CPU time (all its threads)."""

    wall: float
    cpu: float

    @classmethod
    def now(cls) -> "Mark":
        return cls(time.perf_counter(), time.process_time())

    def until(self, later: "Mark") -> dict[str, float]:
        return {"wall": later.wall - self.wall, "cpu": later.cpu - self.cpu}


def interleave(contenders: dict[str, Callable[[], dict[str, float]]], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Call every contender once per round, in the same order; each returns its own measured seconds per clock."""
    times: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, measure in contenders.items():
            times[name].append(measure())
    return times


def median_seconds(rounds: list[dict[str, float]], clock: str) -> float:
    return statistics.median(r[clock] for r in rounds)


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs for rates (tokens/s, sentences/s): > 1 means we are faster."""
    return ours / theirs if theirs > 0 else math.inf


def padding_efficiency(sampler: TokenBudgetBatchSampler) -> float:
    """Non-pad tokens / processed tokens over both sides of every batch of an epoch."""
    return sampler.padding_efficiency(0)["both"]


def bucketed_and_unbucketed(lengths_src, lengths_tgt, batch_tokens: int, seed: int = 0) -> dict[str, float]:
    """Padding efficiency of length-bucketed batches (ours) and of the same packing in random order."""
    bucketed = TokenBudgetBatchSampler(lengths_src, lengths_tgt, batch_tokens, seed=seed)
    unbucketed = TokenBudgetBatchSampler(lengths_src, lengths_tgt, batch_tokens, seed=seed, sort_chunk=1)  # chunks of 1: no sorting
    return {"bucketed": padding_efficiency(bucketed), "unbucketed": padding_efficiency(unbucketed)}


def bf16_peak_flops(device: torch.device, override_tflops: Optional[float]) -> Optional[float]:
    if override_tflops is not None:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in BF16_PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


# ---------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------


def built_in_corpus(options: BenchOptions) -> TranslationDataModule:
    data = TranslationDataModule(options.data_config(), seed=options.seed, max_positions=256)
    data.setup("fit")
    return data


def multi30k_corpus(path: str, batch_tokens: int, seed: int) -> TranslationDataModule:
    """Multi30k as the small preset cuts it (BPE 8000), batched at `batch_tokens`."""
    cfg = DataConfig(dataset="multi30k", path=path, vocab_size=8000, batch_tokens=batch_tokens, max_tokens=256)
    data = TranslationDataModule(cfg, seed=seed, max_positions=512, download=False)
    data.setup("fit")
    return data


def training_batches(data: TranslationDataModule, count: int, device: torch.device) -> list[dict[str, Any]]:
    """The first `count` batches of the first training epoch, collated once and moved to `device`."""
    dataset = data._dataset("train")
    indices = data.train_sampler().batches(0)[:count]
    return [to_device(collate_pairs([dataset[i] for i in batch]), device) for batch in indices]


def decode_sources(data: TranslationDataModule, options: BenchOptions, device: torch.device) -> list[Tensor]:
    """The first dev sentences, sorted by length and cut into batches, as padded source tensors."""
    dataset = data._dataset("dev")
    n = min(options.decode_sentences, len(dataset))
    order = sorted(range(n), key=lambda i: len(dataset[i][1]))
    size = options.decode_batch_sentences
    return [collate_pairs([dataset[i] for i in order[k: k + size]])["src"].to(device) for k in range(0, n, size)]


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}


def collate_seconds(data: TranslationDataModule, batches: int) -> float:
    """Median seconds to collate one training batch on the main process (the work a loader worker would take over)."""
    dataset = data._dataset("train")
    indices = data.train_sampler().batches(0)[:batches]
    times = []
    for batch in indices:
        started = time.perf_counter()
        collate_pairs([dataset[i] for i in batch])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------------------------
# Training contenders: each a callable that trains on the warm-up batch, then times the rest
# ---------------------------------------------------------------------------------------------------------------


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16-mixed" else nullcontext()


def timed_loop(step: Callable[[dict[str, Any]], None], batches: list[dict[str, Any]], device: torch.device) -> dict[str, float]:
    """Seconds (per clock) for batches[1:], after an untimed warm-up step on batches[0]."""
    step(batches[0])
    synchronize(device)
    started = Mark.now()
    for batch in batches[1:]:
        step(batch)
    synchronize(device)
    return started.until(Mark.now())


def plain_step(forward: Callable[[dict[str, Any]], Tensor], optimizer, schedule, device: torch.device, precision: str,
               eps_ls: float) -> Callable[[dict[str, Any]], None]:
    """One training step with no Lightning: forward, label-smoothed loss, backward, Adam, schedule."""

    def step(batch: dict[str, Any]) -> None:
        with autocast(device, precision):
            logits = forward(batch)
            loss_sum, _ = label_smoothed_loss(logits, batch["tgt_out"], eps_ls, PAD_ID)
        (loss_sum / batch["n_tgt_tokens"]).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)

    return step


class _StepTimer:
    """A Lightning callback timing from the end of the first (warm-up) batch to the end of the last."""

    def __init__(self, last_batch: int, device: torch.device):
        from lightning.pytorch.callbacks import Callback

        timer = self

        class Timer(Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
                if batch_idx in (0, last_batch):
                    synchronize(device)
                    timer.marks.append(Mark.now())

        self.callback = Timer()
        self.marks: list[Mark] = []

    def seconds(self) -> dict[str, float]:
        if len(self.marks) != 2:
            raise RuntimeError(f"the Lightning contender ran {len(self.marks)} timed marks, expected 2")
        return self.marks[0].until(self.marks[1])


def lightning_contender(module: TranslationModule, batches: list[dict[str, Any]], options: BenchOptions,
                        device: torch.device) -> Callable[[], dict[str, float]]:
    """Our training step as `ablate train` runs it: a Trainer fitting the module for len(batches) steps."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    def measure() -> dict[str, float]:
        timer = _StepTimer(len(batches) - 1, device)
        trainer = pl.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, max_steps=len(batches), max_epochs=-1,
            precision=options.precision, deterministic=True, use_distributed_sampler=False, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            limit_val_batches=0, callbacks=[timer.callback],
        )
        trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None, shuffle=False))
        return timer.seconds()

    return measure


def marian_config(cfg: ModelConfig, vocab_size: int):
    """A MarianConfig with our dimensions: post-norm, ReLU, tied embeddings scaled by sqrt(d_model), our ids."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size, d_model=cfg.d_model, encoder_layers=cfg.N, decoder_layers=cfg.N,
        encoder_attention_heads=cfg.h, decoder_attention_heads=cfg.h, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
        activation_function="relu", dropout=cfg.P_drop, attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout, max_position_embeddings=cfg.max_positions, scale_embedding=True,
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID, decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    )


def require_transformers():
    try:
        import transformers
    except ImportError as error:
        raise ValueError("`ablate bench` compares with Hugging Face transformers, which is not installed: "
                         "pip install 'attention-ablations[dev]' (or pip install transformers)") from error
    return transformers


def marian_model(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    from transformers import MarianMTModel

    return MarianMTModel(marian_config(cfg, vocab_size))


def marian_forward(model: nn.Module) -> Callable[[dict[str, Any]], Tensor]:
    def forward(batch: dict[str, Any]) -> Tensor:
        src = batch["src"]
        return model(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=batch["tgt_in"]).logits

    return forward


class TorchTransformerModel(nn.Module):
    """torch.nn.Transformer at our dimensions, with our scaled tied embeddings, sinusoids and output projection.

    nn.Transformer always ends both stacks with a LayerNorm (two more than the paper's post-norm model).
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.transformer = nn.Transformer(cfg.d_model, cfg.h, cfg.N, cfg.N, cfg.d_ff, cfg.P_drop, activation="relu",
                                          batch_first=True, norm_first=False)
        self.register_buffer("sinusoids", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.P_drop)
        self.scale = math.sqrt(cfg.d_model)

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embed(tokens) * self.scale + self.sinusoids[: tokens.shape[1]])

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        pad = src == PAD_ID
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        hidden = self.transformer(self._embed(src), self._embed(tgt_in), tgt_mask=causal, src_key_padding_mask=pad,
                                  memory_key_padding_mask=pad, tgt_is_causal=True)
        return hidden @ self.embed.weight.T


# ---------------------------------------------------------------------------------------------------------------
# Our weights in a MarianMTModel, so that HF generate decodes the very same model
# ---------------------------------------------------------------------------------------------------------------


def half_split_order(d_model: int) -> Tensor:
    """Marian's dimension m is our dimension order[m]: its sinusoids are [sin..., cos...], ours interleaved."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


@torch.no_grad()
def marian_from_ours(model: Transformer) -> nn.Module:
    """A MarianMTModel computing the same function as `model` (post-norm, ReLU, tied, sinusoidal, d_k = d_model/h).

    The residual stream's coordinates are permuted (a permutation commutes with LayerNorm, residual sums and
    ReLU), so every matrix reading the stream has its input columns permuted and every matrix writing to it its
    output rows.
    """
    cfg = model.cfg
    if (cfg.norm_placement, cfg.ffn, cfg.norm, cfg.positional) != ("post", "relu", "layernorm", "sinusoidal") or not cfg.tie_embeddings \
            or cfg.n_kv_heads != cfg.h or cfg.head_dim_k * cfg.h != cfg.d_model or cfg.head_dim_v * cfg.h != cfg.d_model:
        raise ValueError("marian_from_ours: Marian has only the paper's architecture (post-norm, ReLU, LayerNorm, sinusoids, "
                         "tied embeddings, d_k = d_v = d_model / h)")
    marian = marian_model(cfg, model.vocab_size).to(next(model.parameters()).device)
    order = half_split_order(cfg.d_model).to(next(model.parameters()).device)
    ours = model.state_dict()

    def reads(weight: Tensor) -> Tensor:  # [out, D]: input columns from the stream
        return weight[:, order]

    def writes(tensor: Tensor) -> Tensor:  # [D, in] or [D]: output rows into the stream
        return tensor[order]

    target: dict[str, Tensor] = {"model.shared.weight": reads(ours["src_embed.weight"])}

    def attention(prefix: str, source: str) -> None:
        for name in ("q_proj", "k_proj", "v_proj"):
            target[f"{prefix}.{name}.weight"] = reads(ours[f"{source}.{name}.weight"])
            target[f"{prefix}.{name}.bias"] = ours[f"{source}.{name}.bias"]
        target[f"{prefix}.out_proj.weight"] = writes(ours[f"{source}.out_proj.weight"])
        target[f"{prefix}.out_proj.bias"] = writes(ours[f"{source}.out_proj.bias"])

    def norm(prefix: str, source: str) -> None:
        target[f"{prefix}.weight"], target[f"{prefix}.bias"] = writes(ours[f"{source}.weight"]), writes(ours[f"{source}.bias"])

    def ffn(prefix: str, source: str) -> None:
        target[f"{prefix}.fc1.weight"], target[f"{prefix}.fc1.bias"] = reads(ours[f"{source}.w1.weight"]), ours[f"{source}.w1.bias"]
        target[f"{prefix}.fc2.weight"], target[f"{prefix}.fc2.bias"] = writes(ours[f"{source}.w2.weight"]), writes(ours[f"{source}.w2.bias"])

    for i in range(cfg.N):
        enc, dec = f"model.encoder.layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{enc}.self_attn", f"encoder.{i}.self_attn")
        norm(f"{enc}.self_attn_layer_norm", f"encoder.{i}.attn_res.norm")
        ffn(enc, f"encoder.{i}.ffn")
        norm(f"{enc}.final_layer_norm", f"encoder.{i}.ffn_res.norm")
        attention(f"{dec}.self_attn", f"decoder.{i}.self_attn")
        norm(f"{dec}.self_attn_layer_norm", f"decoder.{i}.self_res.norm")
        attention(f"{dec}.encoder_attn", f"decoder.{i}.cross_attn")
        norm(f"{dec}.encoder_attn_layer_norm", f"decoder.{i}.cross_res.norm")
        ffn(dec, f"decoder.{i}.ffn")
        norm(f"{dec}.final_layer_norm", f"decoder.{i}.ffn_res.norm")
    state = marian.state_dict()
    for name, value in target.items():
        if state[name].shape != value.shape:
            raise RuntimeError(f"marian_from_ours: {name} has shape {tuple(state[name].shape)}, ours {tuple(value.shape)}")
        state[name].copy_(value)
    marian.tie_weights()
    return marian.eval()


@torch.no_grad()
def logit_difference(model: Transformer, marian: nn.Module, src: Tensor, tgt_in: Tensor) -> float:
    """Largest absolute difference of the teacher-forced logits (eval mode, non-pad target positions)."""
    was_training = model.training
    model.eval()
    try:
        ours = model(src, tgt_in)
        theirs = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in).logits
    finally:
        model.train(was_training)
    keep = tgt_in != PAD_ID
    return float((ours[keep] - theirs[keep]).abs().max())


# ---------------------------------------------------------------------------------------------------------------
# Decoding contenders
# ---------------------------------------------------------------------------------------------------------------


MAX_LEN_OFFSET = 50  # the paper's: output length <= input length + 50


def decode_ours(model: Transformer, sources: list[Tensor], beam_size: int, use_cache: bool) -> list[list[int]]:
    """Our beam search with HF generate's length cap: per batch, the longest source + 50 (ours is per sentence)."""
    outputs: list[list[int]] = []
    for src in sources:
        longest = int((src != PAD_ID).sum(dim=1).max())
        outputs += beam_search(model, src, BOS_ID, EOS_ID, beam_size, 0.0, longest + MAX_LEN_OFFSET,
                               max_len=longest + MAX_LEN_OFFSET, use_cache=use_cache)
    return outputs


@torch.no_grad()
def decode_hf(marian: nn.Module, sources: list[Tensor], beam_size: int) -> list[list[int]]:
    """HF generate with our search's settings: beam K, no length penalty, PAD and BOS never generated, at most
    the batch's longest source + 50 tokens before the EOS."""
    outputs: list[list[int]] = []
    for src in sources:
        longest = int((src != PAD_ID).sum(dim=1).max())
        generated = marian.generate(
            input_ids=src, attention_mask=src != PAD_ID, num_beams=beam_size, length_penalty=0.0, early_stopping=False,
            do_sample=False, max_new_tokens=longest + MAX_LEN_OFFSET + 1, decoder_start_token_id=BOS_ID, eos_token_id=EOS_ID,
            pad_token_id=PAD_ID, suppress_tokens=[PAD_ID, BOS_ID], forced_eos_token_id=None, num_return_sequences=1,
        )
        for row in generated[:, 1:].tolist():  # drop the decoder start token
            outputs.append(row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID])
    return outputs


@contextmanager
def using_native_kernels(enabled: bool) -> Iterator[None]:
    """Our model with the native kernels (decoding's attention and beam candidates, training's dropout noise; where
    they build) or PyTorch's ops."""
    before = native.enabled
    native.enabled = enabled
    try:
        yield
    finally:
        native.enabled = before


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[dict[str, float], Any]:
    synchronize(device)
    started = Mark.now()
    result = fn()
    synchronize(device)
    return started.until(Mark.now()), result


# ---------------------------------------------------------------------------------------------------------------
# Levers: each timed against its alternative, interleaved, on the bare loop of our model
# ---------------------------------------------------------------------------------------------------------------


@contextmanager
def attention_kernel(name: str) -> Iterator[None]:
    """Our attention with the kernel it would choose ("default"), or forced to SDPA or to explicit matmuls."""
    from lightning_modules import transformer

    if name == "default":
        yield
        return
    chosen = transformer.prefers_explicit_attention
    transformer.prefers_explicit_attention = lambda q: name == "explicit"
    try:
        yield
    finally:
        transformer.prefers_explicit_attention = chosen


def lever_contender(options: BenchOptions, batches: list[dict[str, Any]], device: torch.device, *, precision: str,
                    fused_adam: Optional[bool] = None, attention: str = "default", compiled: bool = False,
                    native_kernels: bool = True) -> Callable[[], dict[str, float]]:
    run = options.run_config()
    torch.manual_seed(options.seed)
    model = Transformer(run.model, run.data.vocab_size, PAD_ID).to(device).train()
    forward_model = torch.compile(model, dynamic=True) if compiled else model
    optimizer, schedule = make_optimizer(model.parameters(), run, fused=fused_adam)
    step = plain_step(lambda b: forward_model(b["src"], b["tgt_in"]), optimizer, schedule, device, precision, run.train.eps_ls)

    def measure() -> dict[str, float]:
        with attention_kernel(attention), using_native_kernels(native_kernels):
            return timed_loop(step, batches, device)

    return measure


def measure_levers(options: BenchOptions, batches: list[dict[str, Any]], device: torch.device, tokens: int) -> dict[str, Any]:
    """tokens/s of the default setting and its alternative for each lever; `wins` says whether the lever helps."""
    compute_dtype = torch.bfloat16 if options.precision == "bf16-mixed" else torch.float32
    explicit = prefers_explicit_attention(torch.empty(0, dtype=compute_dtype, device=device))
    chosen, other = ("explicit", "sdpa") if explicit else ("sdpa", "explicit")
    pairs: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
        "attention_kernel": (chosen, {"attention": chosen}, other, {"attention": other}),
        "bf16_autocast": ("bf16-mixed", {"precision": "bf16-mixed"}, "32-true", {"precision": "32-true"}),
        "fused_adam": ("fused", {"fused_adam": True}, "foreach", {"fused_adam": None}),
    }
    if device.type == "cpu" and native.available():
        pairs["native_dropout"] = ("native", {"native_kernels": True}, "torch", {"native_kernels": False})
    if options.compile:
        pairs["torch_compile"] = ("compiled", {"compiled": True}, "eager", {"compiled": False})
    results: dict[str, Any] = {}
    for lever, (on_name, on_kwargs, off_name, off_kwargs) in pairs.items():
        kwargs = {"precision": options.precision}
        contenders = {}
        for name, extra in ((on_name, on_kwargs), (off_name, off_kwargs)):
            contenders[name] = lever_contender(options, batches, device, **{**kwargs, **extra})
        if lever == "torch_compile":
            started = time.perf_counter()
            contenders[on_name]()  # compilation happens here, not in the timed rounds
            results["torch_compile_warmup_s"] = time.perf_counter() - started
        times = interleave(contenders, options.rounds)
        rates = {name: tokens / median_seconds(seconds, options.clock) for name, seconds in times.items()}
        results[lever] = {"tokens_per_s": rates, "speedup": ratio(rates[on_name], rates[off_name])}
    return results


# ---------------------------------------------------------------------------------------------------------------
# The bench
# ---------------------------------------------------------------------------------------------------------------


def other_clock_ratios(train_times: dict[str, list[dict[str, float]]], decode_times: dict[str, list[dict[str, float]]],
                       clock: str) -> dict[str, Any]:
    """The five ratios on the other clock, as a cross-check (times, not rates: ratio = their seconds / ours)."""
    def speedup(times: dict[str, list[dict[str, float]]], theirs: str) -> float:
        return ratio(median_seconds(times[theirs], clock), median_seconds(times["ours"], clock))

    return {"clock": clock, "train_vs_marian": speedup(train_times, "marian"),
            "train_vs_torch_transformer": speedup(train_times, "torch_transformer"),
            "train_vs_bare_loop": speedup(train_times, "bare_loop"),
            "decode_vs_hf_generate": speedup(decode_times, "hf_generate"), "decode_vs_uncached": speedup(decode_times, "uncached")}


def cpu_info() -> tuple[str, bool]:
    """The CPU's model name and whether it has native bf16 arithmetic (avx512_bf16 or amx_bf16)."""
    flags = cpu_field("flags") or ""
    return cpu_model(), "avx512_bf16" in flags or "amx_bf16" in flags


def default_precision(device: str) -> str:
    """bf16-mixed where the hardware computes in bf16 (CUDA, or a CPU with avx512_bf16/amx_bf16), else fp32."""
    return "bf16-mixed" if device == "cuda" or cpu_info()[1] else "32-true"


def machine() -> dict[str, Any]:
    cpu, bf16 = cpu_info()
    import lightning

    info = {"cpu": cpu, "cpu_bf16": bf16, "cores": os.cpu_count(), "torch": torch.__version__, "lightning": lightning.__version__,
            "python": platform.python_version(), "load_average": list(os.getloadavg()), "commit": code_commit(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    try:
        info["transformers"] = require_transformers().__version__
    except ValueError:
        info["transformers"] = None
    return info


def run_bench(options: BenchOptions, progress: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Measure everything once; torch's thread count and determinism flag are restored afterwards."""
    require_transformers()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(options.threads)
    # The Lightning contender's Trainer(deterministic=True), as `ablate train` builds it, sets this flag
    # process-wide; setting it first gives every contender the same kernels from the first round on.
    torch.use_deterministic_algorithms(True)
    try:
        return _run_bench(options, progress)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _run_bench(options: BenchOptions, progress: Callable[[str], None]) -> dict[str, Any]:
    device = torch.device(options.device)
    started = time.perf_counter()
    load_before = os.getloadavg()
    run = options.run_config()
    cfg = run.model

    progress("data: built-in corpus")
    data = built_in_corpus(options)
    batches = training_batches(data, options.timed_batches + 1, device)
    timed_tokens = sum(b["n_tgt_tokens"] for b in batches[1:])
    ls, lt = data._dataset("train").lengths()
    padding: dict[str, Any] = {"generated": bucketed_and_unbucketed(ls, lt, options.batch_tokens, options.seed)}
    if options.multi30k:
        progress("data: Multi30k")
        m30k = multi30k_corpus(options.multi30k, options.batch_tokens, options.seed)
        padding["multi30k"] = bucketed_and_unbucketed(*m30k._dataset("train").lengths(), options.batch_tokens, options.seed)

    progress("training: ours (Lightning), bare loop, Marian, torch.nn.Transformer")
    torch.manual_seed(options.seed)
    module = TranslationModule(run, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID).to(device)
    torch.manual_seed(options.seed)
    bare = Transformer(cfg, options.vocab_size, PAD_ID).to(device).train()
    bare_optimizer, bare_schedule = make_optimizer(bare.parameters(), run)
    torch.manual_seed(options.seed)
    marian = marian_model(cfg, options.vocab_size).to(device).train()
    marian_optimizer, marian_schedule = make_optimizer(marian.parameters(), run)
    torch.manual_seed(options.seed)
    torch_tf = TorchTransformerModel(cfg, options.vocab_size).to(device).train()
    torch_optimizer, torch_schedule = make_optimizer(torch_tf.parameters(), run)
    eps = run.train.eps_ls
    train_steps = {
        "ours": lightning_contender(module, batches, options, device),
        "bare_loop": lambda: timed_loop(plain_step(lambda b: bare(b["src"], b["tgt_in"]), bare_optimizer, bare_schedule, device,
                                                   options.precision, eps), batches, device),
        "marian": lambda: timed_loop(plain_step(marian_forward(marian), marian_optimizer, marian_schedule, device,
                                                options.precision, eps), batches, device),
        "torch_transformer": lambda: timed_loop(plain_step(lambda b: torch_tf(b["src"], b["tgt_in"]), torch_optimizer, torch_schedule,
                                                           device, options.precision, eps), batches, device),
    }
    peak: dict[str, float] = {}

    def with_peak(name: str, measure: Callable[[], dict[str, float]]) -> Callable[[], dict[str, float]]:
        def wrapped() -> dict[str, float]:
            reset_peak_memory(device)
            seconds = measure()
            peak[name] = max(peak.get(name, 0.0), peak_memory_mib(device))
            return seconds

        return wrapped

    train_times = interleave({name: with_peak(name, fn) for name, fn in train_steps.items()}, options.rounds)
    clock = options.clock
    train_rate = {name: timed_tokens / median_seconds(seconds, clock) for name, seconds in train_times.items()}

    flops = sum(step_flops(cfg, options.vocab_size, tuple(b["src"].shape), tuple(b["tgt_in"].shape))
                for b in batches[1:])
    peak_flops = bf16_peak_flops(device, options.peak_tflops)
    achieved = {name: flops / median_seconds(seconds, clock) for name, seconds in train_times.items()}

    progress("decoding: cached, uncached, HF generate")
    # Untrained weights, deliberately: after the few training steps above the model answers EOS at once (empty
    # outputs, one decoding step), whereas at initialisation hypotheses run to the length cap, so the decoders
    # are compared on full-length work. The same model for all three; outputs are compared.
    torch.manual_seed(options.seed)
    model = Transformer(cfg, options.vocab_size, PAD_ID).to(device).eval()
    hf = marian_from_ours(model)
    sources = decode_sources(data, options, device)
    probe = batches[0]
    max_logit_difference = logit_difference(model, hf, probe["src"], probe["tgt_in"])

    def ours_without_native_kernels() -> list[list[int]]:
        with using_native_kernels(False):
            return decode_ours(model, sources, options.beam_size, use_cache=True)

    native_kernels = device.type == "cpu" and native.available()  # built here, before the timed rounds
    decoders = {
        "ours": lambda: decode_ours(model, sources, options.beam_size, use_cache=True),
        "uncached": lambda: decode_ours(model, sources, options.beam_size, use_cache=False),
        "hf_generate": lambda: decode_hf(hf, sources, options.beam_size),
    }
    if native_kernels:  # the lever: the same cached decoder with PyTorch's attention and torch.topk
        decoders["ours_without_native_kernels"] = ours_without_native_kernels
    decode_seconds: dict[str, list[dict[str, float]]] = {name: [] for name in decoders}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(options.decode_rounds):
        for name, fn in decoders.items():
            reset_peak_memory(device)
            seconds, outputs[name] = timed(fn, device)
            decode_seconds[name].append(seconds)
            peak[f"decode_{name}"] = max(peak.get(f"decode_{name}", 0.0), peak_memory_mib(device))
    n_sentences = sum(src.shape[0] for src in sources)
    decode_rate = {name: n_sentences / median_seconds(seconds, clock) for name, seconds in decode_seconds.items()}
    if outputs["ours"] != outputs["uncached"]:
        raise RuntimeError("cached and uncached beam search returned different outputs: the key/value cache is wrong")
    if native_kernels and outputs["ours"] != outputs["ours_without_native_kernels"]:
        raise RuntimeError("beam search returned different outputs with the native decoding kernels and without them")
    same_as_hf = sum(a == b for a, b in zip(outputs["ours"], outputs["hf_generate"])) / max(n_sentences, 1)

    levers: dict[str, Any] = {}
    if options.levers:
        progress("levers")
        levers = measure_levers(options, batches, device, timed_tokens)
    if native_kernels:
        levers["decode_native_kernels"] = {
            "sentences_per_s": {"native": decode_rate["ours"], "pytorch": decode_rate["ours_without_native_kernels"]},
            "speedup": ratio(decode_rate["ours"], decode_rate["ours_without_native_kernels"])}
    levers["collate_ms_per_batch"] = collate_seconds(data, 20) * 1e3
    levers["step_ms_ours"] = 1e3 * median_seconds(train_times["ours"], clock) / options.timed_batches
    levers["length_bucketing"] = padding

    result: dict[str, Any] = {
        "train_vs_marian": ratio(train_rate["ours"], train_rate["marian"]),
        "train_vs_torch_transformer": ratio(train_rate["ours"], train_rate["torch_transformer"]),
        "train_vs_bare_loop": ratio(train_rate["ours"], train_rate["bare_loop"]),
        "decode_vs_hf_generate": ratio(decode_rate["ours"], decode_rate["hf_generate"]),
        "decode_vs_uncached": ratio(decode_rate["ours"], decode_rate["uncached"]),
        "padding_efficiency": {corpus: values["bucketed"] for corpus, values in padding.items()},
        "clock": clock,
        "other_clock_ratios": other_clock_ratios(train_times, decode_seconds, "cpu" if clock == "wall" else "wall"),
        "train_tokens_per_s": train_rate,
        "train_seconds": train_times,
        "decode_sentences_per_s": decode_rate,
        "decode_seconds": decode_seconds,
        "decode": {"sentences": n_sentences, "beam_size": options.beam_size, "length_penalty": 0.0,
                   "mean_output_tokens": statistics.mean(len(o) for o in outputs["ours"]) if n_sentences else 0.0,
                   "cached_equals_uncached": True, "same_output_as_hf": same_as_hf, "native_kernels": native_kernels,
                   "max_logit_difference_vs_marian": max_logit_difference},
        "model_flops_per_s": achieved,
        "mfu_vs_bf16_peak": {name: value / peak_flops for name, value in achieved.items()} if peak_flops else None,
        "peak_memory_mib": peak,
        "peak_memory_scope": "per contender (torch.cuda.max_memory_allocated)" if device.type == "cuda"
        else "process peak RSS so far (CPU has no per-contender allocator statistics)",
        "levers": levers,
        "batches": [{"src": list(b["src"].shape), "tgt": list(b["tgt_in"].shape), "tgt_tokens": b["n_tgt_tokens"]} for b in batches],
        "options": dataclasses.asdict(options),
        "machine": {**machine(), "load_average_before": list(load_before)},
        "seconds": time.perf_counter() - started,
    }
    return result


TARGETS = {"train_vs_marian": 1.25, "train_vs_torch_transformer": 1.0, "train_vs_bare_loop": 0.93,
           "decode_vs_hf_generate": 2.0, "decode_vs_uncached": 3.0}
PADDING_TARGET = 0.92


def to_markdown(result: dict[str, Any], command: str) -> str:
    """results/bench.md: the figures, the machine and the command, from one `ablate bench` result."""
    o, m, d = result["options"], result["machine"], result["decode"]
    lines = [
        "# `ablate bench`: our training and decoding beside Hugging Face, torch.nn.Transformer and a bare loop",
        "",
        f"Generated by `{command}` — do not edit by hand.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['cores']} cores visible; avx512_bf16/amx_bf16: {'yes' if m['cpu_bf16'] else 'no'})",
        f"- GPU: {m['gpu'] or 'none in this session: every figure below is CPU'}",
        f"- code: commit {m['commit'] or 'unknown (not a git checkout)'}",
        f"- torch {m['torch']}, lightning {m['lightning']}, transformers {m['transformers']}, Python {m['python']}",
        f"- load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in m['load_average_before'])}; "
        f"after: {', '.join(f'{x:.2f}' for x in m['load_average'])} (other processes shared the cores; "
        "contenders run interleaved and figures are medians over rounds)",
        f"- threads: {o['threads']} for every contender; precision {o['precision']}; device {o['device']}",
        "",
        "## Setup",
        "",
        f"- model: N = {o['layers']} + {o['layers']} layers, d_model {o['d_model']}, d_ff {o['d_ff']}, h {o['heads']} "
        f"(d_k = d_v = {o['d_model'] // o['heads']}), P_drop {o['P_drop']}, vocabulary {o['vocab_size']} (joint BPE), "
        "post-norm, ReLU, tied embeddings",
        f"- batches: TokenBudgetBatchSampler on the built-in corpus, {o['batch_tokens']} tokens per side; per round each "
        f"contender trains on 1 warm-up batch and {o['timed_batches']} timed batches (the same for all), {o['rounds']} rounds",
        f"- shapes [B, S] / [B, T]: " + "; ".join(f"{b['src']} / {b['tgt']}" for b in result["batches"]),
        "- every contender: label-smoothed loss (ε 0.1), Adam(0.9, 0.98, 1e-9), inverse-sqrt schedule",
        f"- decoding: {d['sentences']} dev sentences in length-sorted batches of {o['decode_batch_sentences']}, beam "
        f"{d['beam_size']}, length penalty {d['length_penalty']}, max length the batch's longest source + 50 for all three, {o['decode_rounds']} rounds; "
        "untrained weights (hypotheses run to the cap: every decoder does full-length work), copied into Marian for HF; "
        "in fp32 for all three at any --precision (the cached = uncached check needs exact arithmetic); our cached "
        "decoder's attention and beam candidates: " + ("the native kernels (lightning_modules/kernels/decoding.cpp)"
                                                       if d["native_kernels"] else "PyTorch's attention and torch.topk "
                                                       "(the native kernels are CPU-only, or did not build)"),
        "",
        "## Ratios (> 1: we are faster)",
        "",
        "| ratio | measured | target | met |",
        "|---|---:|---:|---|",
    ]
    for key in RATIO_KEYS:
        lines.append(f"| `{key}` | {result[key]:.3f} | ≥ {TARGETS[key]:g} | {'yes' if result[key] >= TARGETS[key] else 'NO'} |")
    for corpus, value in result["padding_efficiency"].items():
        lines.append(f"| padding efficiency, {corpus} | {value:.3f} | ≥ {PADDING_TARGET:g} | {'yes' if value >= PADDING_TARGET else 'NO'} |")
    other = result["other_clock_ratios"]
    lines += ["", f"Clock: **{result['clock']}** time. The same ratios on the {other['clock']} clock: " + ", ".join(
        f"`{key}` {other[key]:.3f}" for key in RATIO_KEYS) + ".", ""]
    lines += ["", f"## Training (non-pad target tokens/s on the {result['clock']} clock, median)", "", "| contender | tokens/s | rounds: wall/CPU s | model GFLOP/s | MFU vs bf16 peak |",
              "|---|---:|---|---:|---:|"]
    mfu = result["mfu_vs_bf16_peak"]
    for name, rate in result["train_tokens_per_s"].items():
        rounds = ", ".join(f"{r['wall']:.2f}/{r['cpu']:.2f}" for r in result["train_seconds"][name])
        lines.append(f"| {name} | {rate:,.0f} | {rounds} | {result['model_flops_per_s'][name] / 1e9:.1f} | "
                     f"{'n/a (no GPU)' if mfu is None else f'{100 * mfu[name]:.1f}%'} |")
    lines += ["", f"## Decoding (sentences/s on the {result['clock']} clock, median)", "", "| contender | sentences/s | rounds: wall/CPU s |", "|---|---:|---|"]
    for name, rate in result["decode_sentences_per_s"].items():
        rounds = ", ".join(f"{r['wall']:.2f}/{r['cpu']:.2f}" for r in result["decode_seconds"][name])
        lines.append(f"| {name} | {rate:.2f} | {rounds} |")
    lines += ["", f"- cached and uncached outputs identical: {'yes' if d['cached_equals_uncached'] else 'NO'}; "
              f"mean output length {d['mean_output_tokens']:.1f} tokens",
              f"- HF holds our weights: teacher-forced logits differ by at most {d['max_logit_difference_vs_marian']:.2e}; "
              f"identical beam outputs for {100 * d['same_output_as_hf']:.1f}% of sentences",
              "", "## Peak memory (MiB)", "", f"Scope: {result['peak_memory_scope']}.", "",
              "| contender | MiB |", "|---|---:|"]
    for name, mib in result["peak_memory_mib"].items():
        lines.append(f"| {name} | {mib:,.0f} |")
    lines += ["", "## Speed levers", "", "| lever | setting: tokens/s | speed-up of the lever | on by default |", "|---|---|---:|---|"]
    levers = result["levers"]
    for lever in ("attention_kernel", "bf16_autocast", "fused_adam", "torch_compile"):
        if lever in levers:
            rates = "; ".join(f"{name}: {rate:,.0f}" for name, rate in levers[lever]["tokens_per_s"].items())
            lines.append(f"| {lever} | {rates} | {levers[lever]['speedup']:.3f} | {LEVER_DEFAULTS[lever]} |")
    if "decode_native_kernels" in levers:
        kernels = levers["decode_native_kernels"]
        lines.append(f"| decode_native_kernels (sentences/s) | native: {kernels['sentences_per_s']['native']:.2f}; pytorch: "
                     f"{kernels['sentences_per_s']['pytorch']:.2f} | {kernels['speedup']:.3f} | {LEVER_DEFAULTS['decode_native_kernels']} |")
    lines += ["", f"- data loading: collating one batch on the main process takes {levers['collate_ms_per_batch']:.2f} ms, "
              f"{100 * levers['collate_ms_per_batch'] / levers['step_ms_ours']:.2f}% of our {levers['step_ms_ours']:.0f} ms step",
              "- length bucketing (padding efficiency, both sides): " + "; ".join(
                  f"{corpus}: bucketed {v['bucketed']:.3f}, unbucketed {v['unbucketed']:.3f}" for corpus, v in levers["length_bucketing"].items()),
              "", "## Notes", ""] + [f"- {note}" for note in NOTES] + ["", f"Bench wall time: {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


LEVER_DEFAULTS = {
    "attention_kernel": "chosen per call: SDPA's fused kernel, except explicit matmuls for bf16 on CPU; the first "
                        "setting is the one chosen at this precision",
    "bf16_autocast": "where it wins: on in the small (d_model 128) and paper presets; off at tiny (d_model 64: a base run "
                     "measured 3,077 tokens/s in bf16 against 3,674 in fp32)",
    "fused_adam": "no: torch's default (foreach) Adam",
    "native_dropout": "yes on CPU for fp32 and bf16 (where a C++ compiler builds the kernels; ATTENTION_NATIVE_KERNELS=0 "
                      "turns them off): the noise drawn by a counter-based hash instead of torch's Bernoulli sampler; "
                      "torch's fused dropout on CUDA",
    "decode_native_kernels": "yes on CPU (where a C++ compiler builds them; ATTENTION_NATIVE_KERNELS=0 turns them off): "
                             "the attention kernel for fp32 steps without autocast, the beam candidates for every "
                             "search; PyTorch's attention and torch.topk elsewhere",
    "torch_compile": "no (`train.compile: false`)",
}

NOTES = [
    "torch.compile is timed only with `--compile`: an earlier session measured 156 s of warm-up on this CPU and slower "
    "steps afterwards (dynamic shapes: every batch has other lengths), so it stays off by default on CPU.",
    "One host-device synchronisation per training step, on purpose: the divergence check reads whether the loss is "
    "finite before the optimiser step (on CUDA it waits for the forward pass). Otherwise none: the token count is a "
    "Python int from the collate function, the loss stays a tensor, and Lightning converts logged values only when a "
    "logger or progress bar reads them.",
    "Data loading: batches are collated on the main process (`data.num_workers: 0`); the figure above is its share of a "
    "step. With a GPU, `data.num_workers: 1` and pinned memory (on whenever CUDA is present) take it off the critical path.",
    "Without a GPU in this session, MFU is not reported; on CUDA the bench reports model FLOPs/s against the GPU's dense "
    "bf16 peak (known names, or `--peak-tflops`).",
]


def json_dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=float)
