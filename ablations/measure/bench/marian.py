"""Hugging Face MarianMTModel at our dimensions, and our weights in it, so that HF generate decodes our model."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from lightning_modules.config import ModelConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID
from lightning_modules.transformer import Transformer


def marian_config(cfg: ModelConfig, vocab_size: int):
    """A MarianConfig with our dimensions: post-norm, ReLU, tied embeddings scaled by sqrt(d_model), our ids."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.N,
        decoder_layers=cfg.N,
        encoder_attention_heads=cfg.h,
        decoder_attention_heads=cfg.h,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function="relu",
        dropout=cfg.P_drop,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        max_position_embeddings=cfg.max_positions,
        scale_embedding=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )


MARIAN_ATTENTION = ("sdpa", "eager")  # HF's attention implementations that the bench times Marian with


def marian_model(cfg: ModelConfig, vocab_size: int, attention: str = "sdpa") -> nn.Module:
    """A fresh MarianMTModel at our dimensions with HF's attention `attention`: "sdpa" (HF's default) or "eager" (plain
    matmuls, which on CPU in bf16 run faster than SDPA's kernel, as ours do)."""
    from transformers import MarianMTModel

    if attention not in MARIAN_ATTENTION:
        raise ValueError(f"marian_model: attention {attention!r}; expected one of {', '.join(MARIAN_ATTENTION)}")
    return MarianMTModel._from_config(marian_config(cfg, vocab_size), attn_implementation=attention)


def marian_forward(model: nn.Module) -> Callable[[dict[str, Any]], Tensor]:
    def forward(batch: dict[str, Any]) -> Tensor:
        src = batch["src"]
        return model(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=batch["tgt_in"]).logits

    return forward


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
    if (
        (cfg.norm_placement, cfg.ffn, cfg.norm, cfg.positional) != ("post", "relu", "layernorm", "sinusoidal")
        or not cfg.tie_embeddings
        or cfg.n_kv_heads != cfg.h
        or cfg.head_dim_k * cfg.h != cfg.d_model
        or cfg.head_dim_v * cfg.h != cfg.d_model
    ):
        raise ValueError(
            "marian_from_ours: Marian has only the paper's architecture (post-norm, ReLU, LayerNorm, sinusoids, "
            "tied embeddings, d_k = d_v = d_model / h)"
        )
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
        target[f"{prefix}.weight"], target[f"{prefix}.bias"] = (
            writes(ours[f"{source}.weight"]),
            writes(ours[f"{source}.bias"]),
        )

    def ffn(prefix: str, source: str) -> None:
        target[f"{prefix}.fc1.weight"], target[f"{prefix}.fc1.bias"] = (
            reads(ours[f"{source}.w1.weight"]),
            ours[f"{source}.w1.bias"],
        )
        target[f"{prefix}.fc2.weight"], target[f"{prefix}.fc2.bias"] = (
            writes(ours[f"{source}.w2.weight"]),
            writes(ours[f"{source}.w2.bias"]),
        )

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
            raise RuntimeError(
                f"marian_from_ours: {name} has shape {tuple(state[name].shape)}, ours {tuple(value.shape)}"
            )
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
