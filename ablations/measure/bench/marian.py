"""Hugging Face models at our dimensions, and our weights in them, so that HF generate decodes our model.

MarianMTModel is the paper's post-norm layer; M2M100 is the same layer in pre-norm, with a norm closing each stack, as
ours (`hf_from_ours` picks by norm placement)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from lightning_modules.config import ModelConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID
from lightning_modules.transformer import Transformer


def shared_config(cfg: ModelConfig, vocab_size: int) -> dict[str, Any]:
    """The fields that Marian's and M2M100's configs share: our dimensions, ReLU, embeddings scaled by sqrt(d_model)
    and tied, our dropouts and ids."""
    return dict(
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
        tie_word_embeddings=True,
    )


def marian_config(cfg: ModelConfig, vocab_size: int):
    """A MarianConfig with our dimensions: post-norm, ReLU, tied embeddings scaled by sqrt(d_model), our ids."""
    from transformers import MarianConfig

    return MarianConfig(
        **shared_config(cfg, vocab_size), forced_eos_token_id=None, share_encoder_decoder_embeddings=True
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


def check_paper_layer(cfg: ModelConfig, placements: tuple[str, ...], what: str) -> None:
    if (
        cfg.norm_placement not in placements
        or (cfg.ffn, cfg.norm, cfg.positional) != ("relu", "layernorm", "sinusoidal")
        or not cfg.tie_embeddings
        or cfg.n_kv_heads != cfg.h
        or cfg.head_dim_k * cfg.h != cfg.d_model
        or cfg.head_dim_v * cfg.h != cfg.d_model
    ):
        raise ValueError(
            f"{what}: HF's model has only the paper's layer ({' or '.join(placements)}-norm, ReLU, LayerNorm, "
            "sinusoids, tied embeddings, d_k = d_v = d_model / h)"
        )


def layer_weights(model: Transformer, order: Tensor) -> dict[str, Tensor]:
    """Our embeddings and layers under the names BART-family models (Marian, M2M100) give them, with the residual
    stream's coordinates permuted by `order` (their dimension m is our dimension order[m])."""
    cfg, ours = model.cfg, model.state_dict()

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
    if cfg.norm_placement == "pre":  # each stack ends with a norm
        norm("model.encoder.layer_norm", "encoder_norm")
        norm("model.decoder.layer_norm", "decoder_norm")
    return target


def load_into(hf: nn.Module, target: dict[str, Tensor], what: str) -> nn.Module:
    state = hf.state_dict()
    for name, value in target.items():
        if state[name].shape != value.shape:
            raise RuntimeError(f"{what}: {name} has shape {tuple(state[name].shape)}, ours {tuple(value.shape)}")
        state[name].copy_(value)
    hf.tie_weights()
    return hf.eval()


@torch.no_grad()
def marian_from_ours(model: Transformer) -> nn.Module:
    """A MarianMTModel computing the same function as `model` (post-norm, ReLU, tied, sinusoidal, d_k = d_model/h).

    Marian's sinusoids are [sin..., cos...], ours interleaved, so the residual stream's coordinates are permuted (a
    permutation commutes with LayerNorm, residual sums and ReLU): every matrix reading the stream has its input
    columns permuted and every matrix writing to it its output rows.
    """
    check_paper_layer(model.cfg, ("post",), "marian_from_ours")
    device = next(model.parameters()).device
    marian = marian_model(model.cfg, model.vocab_size).to(device)
    return load_into(marian, layer_weights(model, half_split_order(model.cfg.d_model).to(device)), "marian_from_ours")


@torch.no_grad()
def m2m100_from_ours(model: Transformer) -> nn.Module:
    """An M2M100ForConditionalGeneration computing the same function as pre-norm `model` (ReLU, tied, sinusoidal,
    d_k = d_model/h), with HF's attention "sdpa".

    M2M100's sinusoids have other frequencies than the paper's, so both of its position tables are overwritten with
    ours: it reads position p (0-based) at row pad + 1 + p. The residual stream keeps our coordinates."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    cfg = model.cfg
    check_paper_layer(cfg, ("pre",), "m2m100_from_ours")
    device = next(model.parameters()).device
    config = M2M100Config(**shared_config(cfg, model.vocab_size), encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    hf = M2M100ForConditionalGeneration._from_config(config, attn_implementation="sdpa").to(device)
    for stack, ours in ((hf.model.encoder, model.src_positions), (hf.model.decoder, model.tgt_positions)):
        table = torch.zeros_like(stack.embed_positions.weights)  # [max_positions + 2, D]
        rows = min(table.shape[0] - (PAD_ID + 1), ours.table.shape[0])
        table[PAD_ID + 1 : PAD_ID + 1 + rows] = ours.table[:rows].to(table)
        stack.embed_positions.weights.copy_(table)
    return load_into(hf, layer_weights(model, torch.arange(cfg.d_model, device=device)), "m2m100_from_ours")


def hf_from_ours(model: Transformer) -> nn.Module:
    """HF's model of `model`'s norm placement holding its weights: Marian for post-norm, M2M100 for pre-norm."""
    return m2m100_from_ours(model) if model.cfg.norm_placement == "pre" else marian_from_ours(model)


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
