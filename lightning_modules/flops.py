"""The one count of a model's parameters and training FLOPs, read off the model's own layers.

The model is built on the meta device (no memory, no initialisation cost), so every knob counts as it is built.
Parameters as the paper counts them: a tied matrix once. FLOPs: 2 per multiply-add, and a training step costs
3 x its forward pass (the backward is about 2 x the forward). A token passes through weight matrices: a source
token through the encoder's and the decoder's cross-attention key/value projections, a target token through the
rest of the decoder and the output projection. Attention's own products (q k^T and the weighted sum of the
values) grow with the lengths, so they are counted only where the lengths are known (`step_flops`, padded
batches); norms, softmax and embedding look-ups are not counted.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
from torch import nn

from .config import ModelConfig
from .transformer import Transformer

# Building a model takes a pad id; any id of the vocabulary gives the same counts.
_ANY_PAD_ID = 0


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (a tied matrix counts once), as the paper counts them."""
    return sum(p.numel() for p in model.parameters())


def _meta_model(cfg: ModelConfig, vocab_size: int) -> Transformer:
    with torch.device("meta"):
        return Transformer(cfg, vocab_size, _ANY_PAD_ID)


@functools.cache
def parameter_count(cfg: ModelConfig, vocab_size: int) -> int:
    """The parameters of the Transformer `cfg` with a vocabulary of `vocab_size` word pieces."""
    return count_parameters(_meta_model(cfg, vocab_size))


@functools.cache
def multiply_adds_per_token(cfg: ModelConfig, vocab_size: int) -> tuple[int, int]:
    """(per source token, per target token) multiply-adds of the weight matrices, from the model's own layers."""
    source = target = 0
    for name, module in _meta_model(cfg, vocab_size).named_modules():
        if not isinstance(module, nn.Linear):
            continue
        size = module.in_features * module.out_features
        # Cross-attention keys and values are projections of the encoder's output: once per source token.
        if name.startswith("encoder.") or (".cross_attn." in name and name.endswith(("k_proj", "v_proj"))):
            source += size
        else:
            target += size
    return source, target


def training_flops(
    cfg: ModelConfig, vocab_size: int, target_tokens: float, source_tokens: Optional[float] = None
) -> float:
    """3 x forward FLOPs of the weight matrices over a run's tokens (source tokens: as many as target ones)."""
    per_source, per_target = multiply_adds_per_token(cfg, vocab_size)
    source_tokens = target_tokens if source_tokens is None else source_tokens
    return 3 * 2 * (per_source * source_tokens + per_target * target_tokens)


def attention_multiply_adds(cfg: ModelConfig, source_length: int, target_length: int) -> int:
    """Multiply-adds of attention's own products for one sentence pair: q k^T and the weighted sum of the values in
    the encoder's self-attention (S x S), the decoder's (T x T, the causal mask computed whole) and the
    cross-attention (T x S), in every layer."""
    S, T = source_length, target_length
    return cfg.N * cfg.h * (cfg.head_dim_k + cfg.head_dim_v) * (S * S + T * T + T * S)


def step_flops(cfg: ModelConfig, vocab_size: int, src_shape: tuple[int, int], tgt_shape: tuple[int, int]) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward) on padded [B, S] / [B, T] tensors: the
    weight matrices for every position, padding included, and attention's products."""
    (B, S), (_, T) = src_shape, tgt_shape
    per_source, per_target = multiply_adds_per_token(cfg, vocab_size)
    return 3.0 * 2 * B * (per_source * S + per_target * T + attention_multiply_adds(cfg, S, T))
