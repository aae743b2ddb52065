"""The Transformer of "Attention Is All You Need", section 3, as a plain nn.Module.

Defaults are the paper's: post-norm, interleaved sinusoids, ReLU feed-forward, one embedding matrix shared by
source, target and pre-softmax projection, scaled by sqrt(d_model). Every Table 3 knob and the common modern
variants (pre-norm, RoPE, learned positions, RMSNorm, GELU/SwiGLU, grouped-query attention) are config values.

Shapes: B batch, S source length, T target length, D d_model, H heads, G key/value heads, V vocabulary.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import native
from .config import ModelConfig
from .positional import apply_rope, rope_tables, sinusoids


@dataclass
class LayerCache:
    self_k: Optional[Tensor] = None  # [B, capacity, K, G, d_k]: position t of beam slot k, written once
    self_v: Optional[Tensor] = None  # [B, capacity, K, G, d_v]
    cross_k: Optional[Tensor] = None  # [B, G, S, d_k], projected once per source (not per beam)
    cross_v: Optional[Tensor] = None  # [B, G, S, d_v]
    capacity: int = 16  # positions allocated at the first step; past them the buffers double
    spare: list[Tensor] = field(default_factory=list)  # flat buffers of an earlier search, shared by the layers

    def append(self, k: Tensor, v: Tensor, start: int, beams: int) -> tuple[Tensor, Tensor]:
        """Write the new positions k, v [B*K, G, T, d] at `start`; return every position so far as [B, G, (start+T)*K, d]
        views (row t*K + k: position t of slot k). Position-major, so that a sentence's history is one contiguous
        block and a position's heads are adjacent: a decoding step reads it as a stream."""
        BK, G, T, _ = k.shape
        if self.self_k is None or start + T > self.self_k.shape[1]:
            self.self_k = _grown(self.self_k, k, start, beams, self.capacity, self.spare)
            self.self_v = _grown(self.self_v, v, start, beams, self.capacity, self.spare)
        end = start + T
        for buffer, new in ((self.self_k, k), (self.self_v, v)):
            buffer[:, start:end] = new.view(BK // beams, beams, G, T, -1).permute(0, 3, 1, 2, 4)  # [B, T, K, G, d]
        return self.self_k[:, :end].flatten(1, 2).transpose(1, 2), self.self_v[:, :end].flatten(1, 2).transpose(1, 2)


def _grown(buffer: Optional[Tensor], new: Tensor, length: int, beams: int, capacity: int, spare: list[Tensor]) -> Tensor:
    """[B, size, K, G, d] holding the first `length` positions of `buffer`: `capacity` positions, or twice what is
    needed when the T new ones do not fit; carved from a spare buffer where one is large enough."""
    BK, G, T, d = new.shape
    size = capacity if length + T <= capacity else 2 * (length + T)
    grown = _take(spare, (BK // beams, size, beams, G, d), new)
    if buffer is not None:
        grown[:, :length] = buffer[:, :length]
    return grown


def _take(spare: list[Tensor], shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A [shape] tensor: the start of a flat spare buffer of like's dtype and device, removed from `spare`, or new."""
    count = math.prod(shape)
    for i, flat in enumerate(spare):
        if flat.dtype == like.dtype and flat.device == like.device and flat.numel() >= count:
            return spare.pop(i)[:count].view(shape)
    return like.new_empty(shape)


@dataclass
class DecoderCache:
    """Keys and values of the decoder, so that each decoding step costs one new position.

    Rows are B sources x K beams (row b*K + k; K = 1 outside beam search). A position's self-attention keys and values
    are written once, in the beam slot that produced them, and never copied when beam search reorders its beams:
    `origin[b, k, t]` names the slot that holds beam k's ancestor at position t. The native kernel (native.py) reads
    only those rows; PyTorch's attention (CUDA, bf16) sees every slot and masks the others, K times the scores.
    Copying each beam's history instead moved the whole cache twice per step (the reorder, then the append) into
    fresh allocations: without the copies decoding on one CPU core got 1.4x faster, with the kernel 1.5x more.
    """

    layers: list[LayerCache]
    length: int = 0  # target positions already decoded
    origin: Optional[Tensor] = None  # [B, K, length] slot of each beam's ancestor per position

    @classmethod
    def empty(cls, n_layers: int, capacity: int = 16, spare: Optional[list[Tensor]] = None) -> "DecoderCache":
        shared = spare if spare is not None else []
        return cls([LayerCache(capacity=capacity, spare=shared) for _ in range(n_layers)])

    def buffers(self) -> list[Tensor]:
        """The self-attention buffers, flat and whole (also the rows of sources dropped on the way)."""
        held = [tensor for layer in self.layers for tensor in (layer.self_k, layer.self_v) if tensor is not None]
        return [(tensor if tensor._base is None else tensor._base).view(-1) for tensor in held]

    def extend(self, sources: int, beams: int, new: int, device: torch.device, mask: bool = True) -> Optional[Tensor]:
        """Claim `new` positions for every beam; the self-attention mask [B, 1, K*new, (length+new)*K] (True =
        attend), None when every query may see every key (one beam, one new position) or `mask` is False."""
        slots = torch.arange(beams, device=device)
        own = slots[None, :, None].expand(sources, beams, new)
        self.origin = own if self.origin is None else torch.cat([self.origin, own], dim=2)  # [B, K, t1]
        if not mask or (beams == 1 and new == 1):
            return None
        end = self.length + new
        visible = self.origin[:, :, None, :, None] == slots  # [B, K, 1, t1, K]
        if new > 1:
            causal = torch.arange(end, device=device) <= self.length + torch.arange(new, device=device)[:, None]
            visible = visible & causal[:, :, None]  # [B, K, T, t1, K]
        return visible.reshape(sources, 1, beams * new, end * beams)

    def reorder(self, parents: Tensor, sources: Optional[Tensor] = None) -> None:
        """Beam search moves on: new beam k of source b continues beam parents[b, k] [B', K]; `sources` [B'] keeps
        those sources only (default: all, in order). Only the origin table moves, unless sources are dropped."""
        if sources is not None:
            kept = sources.numel()
            for layer in self.layers:
                for name in ("self_k", "self_v"):  # only the positions written, back into the buffer: it stays for reuse
                    buffer = getattr(layer, name)
                    if buffer is not None:
                        written = buffer[:, : self.length].index_select(0, sources)
                        if kept > buffer.shape[0]:  # sources repeated: more rows than the buffer holds
                            buffer = buffer.new_empty(kept, *buffer.shape[1:])
                        buffer[:kept, : self.length] = written
                        setattr(layer, name, buffer[:kept])
                for name in ("cross_k", "cross_v"):
                    value = getattr(layer, name)
                    if value is not None:
                        setattr(layer, name, value.index_select(0, sources))
            self.origin = self.origin.index_select(0, sources)
        self.origin = self.origin.gather(1, parents[:, :, None].expand(-1, -1, self.origin.shape[2]))


@dataclass(frozen=True)
class StepKeys:
    """The keys each query of one decoding step sees, as the native kernel takes them (see native.decode_attention):
    the origin table [B, K, t] for self-attention, the real source tokens [B, S] for cross-attention."""

    origin: Optional[Tensor] = None
    valid: Optional[Tensor] = None


def prefers_explicit_attention(q: Tensor) -> bool:
    """bf16 on CPU: SDPA's fused kernel runs 2-10x slower there than in fp32 (its backward most), while bf16 matmuls
    run at twice the fp32 rate; `ablate bench` times both kernels. Elsewhere SDPA's fused kernels win."""
    return q.dtype == torch.bfloat16 and q.device.type == "cpu"


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, dropout_p: float) -> Tensor:
    """softmax(q k^T / sqrt(d_k)) v as plain matmuls, with SDPA's arguments (mask: True = attend)."""
    if k.shape[1] != q.shape[1]:  # grouped-query attention: each key/value head serves H / G query heads
        k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # [B, H, T, L]
    if causal:
        T, L = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(T, L, dtype=torch.bool, device=q.device).triu(L - T + 1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(dropout(scores.softmax(-1), dropout_p, True), v)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout(x, p, training), its noise drawn natively on CPU (native.dropout_noise): torch's Bernoulli sampler
    took a tenth of a CPU training step. Elsewhere (CUDA, fp64, no compiler, inside torch.compile) torch's dropout."""
    if not training or p == 0.0:
        return x
    if (x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and p < 1.0
            and not torch.compiler.is_compiling() and native.available()):
        return x * native.dropout_noise(x, p)
    return F.dropout(x, p)


def make_norm(cfg: ModelConfig) -> nn.Module:
    return nn.RMSNorm(cfg.d_model) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O with W_Q, W_K: D -> h*d_k and W_V: D -> h*d_v."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.h, self.g, self.d_k, self.d_v = cfg.h, cfg.n_kv_heads, cfg.head_dim_k, cfg.head_dim_v
        self.q_proj = nn.Linear(cfg.d_model, self.h * self.d_k)
        self.k_proj = nn.Linear(cfg.d_model, self.g * self.d_k)
        self.v_proj = nn.Linear(cfg.d_model, self.g * self.d_v)
        self.out_proj = nn.Linear(self.h * self.d_v, cfg.d_model)
        self.dropout = cfg.attention_dropout
        self.kernel: Optional[str] = None  # None: chosen per call; "explicit" or "sdpa" forces one (`ablate bench`)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, L, _ = x.shape
        k = self.k_proj(x).view(B, L, self.g, self.d_k).transpose(1, 2)  # [B, G, L, d_k]
        v = self.v_proj(x).view(B, L, self.g, self.d_v).transpose(1, 2)  # [B, G, L, d_v]
        return k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor | StepKeys], causal: bool, beams: int = 1) -> Tensor:
        # q [B*K, H, T, d_k]: K rows (beams) per key row; k [B, G, L, d_k], v [B, G, L, d_v];
        # mask broadcasts to [B, H, K*T, L], True = attend, or names the keys of one decoding step (T = 1)
        BK, H, T, _ = q.shape
        if isinstance(mask, StepKeys):
            out = native.decode_attention(q.view(BK, H, -1), k, v, mask.origin, mask.valid)  # [B*K, H*d_v]
            return self.out_proj(out.view(BK, 1, -1))
        q = q.view(BK // beams, beams, H, T, -1).transpose(1, 2).reshape(BK // beams, H, beams * T, -1)  # [B, H, K*T, d_k]
        dropout_p = self.dropout if self.training else 0.0
        explicit = prefers_explicit_attention(q) if self.kernel is None else self.kernel == "explicit"
        if explicit:
            out = explicit_attention(q, k, v, mask, causal, dropout_p)  # [B, H, K*T, d_v]
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self.g != self.h, dropout_p=dropout_p,
            )  # [B, H, K*T, d_v]
        out = out.view(BK // beams, H, beams, T, -1).permute(0, 2, 3, 1, 4)  # [B, K, T, H, d_v]
        return self.out_proj(out.reshape(BK, T, self.h * self.d_v))  # [B*K, T, D]

    def queries(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return self.q_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)  # [B, H, T, d_k]


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2; GELU and SwiGLU are named variants."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.ffn
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff * (2 if cfg.ffn == "swiglu" else 1))
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = cfg.activation_dropout

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.w1(x)
        if self.kind == "swiglu":
            gate, value = hidden.chunk(2, dim=-1)
            hidden = F.silu(gate) * value
        else:
            hidden = F.relu(hidden) if self.kind == "relu" else F.gelu(hidden)
        return self.w2(dropout(hidden, self.dropout, self.training))


class Residual(nn.Module):
    """post: LayerNorm(x + Dropout(f(x))), the paper's; pre: x + Dropout(f(LayerNorm(x)))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm_placement == "pre"
        self.norm = make_norm(cfg)
        self.dropout = cfg.P_drop

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre:
            return x + dropout(sublayer(self.norm(x)), self.dropout, self.training)
        return self.norm(x + dropout(sublayer(x), self.dropout, self.training))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.ffn = MultiHeadAttention(cfg), FeedForward(cfg)
        self.attn_res, self.ffn_res = Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, pad_mask: Tensor, rope: Optional[tuple[Tensor, Tensor]]) -> Tensor:
        def self_attention(y: Tensor) -> Tensor:
            q, (k, v) = self.self_attn.queries(y), self.self_attn.project_kv(y)
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            return self.self_attn.attend(q, k, v, pad_mask, causal=False)

        x = self.attn_res(x, self_attention)
        return self.ffn_res(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.cross_attn, self.ffn = MultiHeadAttention(cfg), MultiHeadAttention(cfg), FeedForward(cfg)
        self.self_res, self.cross_res, self.ffn_res = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(
        self, x: Tensor, memory: Tensor, src_mask: Tensor | StepKeys, rope: Optional[tuple[Tensor, Tensor]], beams: int,
        cache: Optional[LayerCache], offset: int, self_mask: Optional[Tensor | StepKeys],
    ) -> Tensor:
        # x [B*K, T, D]: K rows (beams) per source; memory [B, S, D]; the masks as MultiHeadAttention.attend takes them
        def self_attention(y: Tensor) -> Tensor:
            q, (k, v) = self.self_attn.queries(y), self.self_attn.project_kv(y)
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            if cache is None:
                return self.self_attn.attend(q, k, v, None, causal=True)
            k, v = cache.append(k, v, offset, beams)  # [B, G, (offset+T)*K, d]: every beam slot's positions
            return self.self_attn.attend(q, k, v, self_mask, causal=False, beams=beams)

        def cross_attention(y: Tensor) -> Tensor:
            if cache is None:
                k, v = self.cross_attn.project_kv(memory)
            else:
                if cache.cross_k is None:
                    cache.cross_k, cache.cross_v = self.cross_attn.project_kv(memory)
                k, v = cache.cross_k, cache.cross_v
            return self.cross_attn.attend(self.cross_attn.queries(y), k, v, src_mask, causal=False, beams=beams)

        x = self.self_res(x, self_attention)
        x = self.cross_res(x, cross_attention)
        return self.ffn_res(x, self.ffn)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.tie_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.out_proj.weight = self.src_embed.weight
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        if cfg.positional == "sinusoidal":
            self.register_buffer("sinusoids", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        elif cfg.positional == "learned":
            self.src_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
            self.tgt_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        elif cfg.positional == "rope":
            cos, sin = rope_tables(cfg.max_positions, cfg.head_dim_k)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.N))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.N))
        # Pre-norm leaves the residual stream un-normalised: each stack ends with a norm.
        pre = cfg.norm_placement == "pre"
        self.encoder_norm = make_norm(cfg) if pre else nn.Identity()
        self.decoder_norm = make_norm(cfg) if pre else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.out_proj:
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        # Unit-variance inputs after the sqrt(d_model) scale, as in fairseq and tensor2tensor.
        for embedding in dict.fromkeys([self.src_embed, self.tgt_embed]):  # ordered: reproducible init
            nn.init.normal_(embedding.weight, std=self.cfg.d_model**-0.5)
            nn.init.zeros_(embedding.weight[self.cfg.pad_id])
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.out_proj.weight, std=self.cfg.d_model**-0.5)

    def _check_length(self, length: int) -> None:
        if length > self.cfg.max_positions and self.cfg.positional != "none":
            raise ValueError(f"sequence of {length} positions exceeds model.max_positions = {self.cfg.max_positions}")

    def _embed(self, tokens: Tensor, table: nn.Embedding, positions: Optional[nn.Embedding], offset: int) -> Tensor:
        T = tokens.shape[1]
        self._check_length(offset + T)
        x = table(tokens) * self.embed_scale  # [B, T, D]
        if self.cfg.positional == "sinusoidal":
            x = x + self.sinusoids[offset : offset + T].to(x.dtype)
        elif self.cfg.positional == "learned":
            x = x + positions(torch.arange(offset, offset + T, device=tokens.device))
        return dropout(x, self.cfg.P_drop, self.training)

    def _rope(self, offset: int, length: int) -> Optional[tuple[Tensor, Tensor]]:
        if self.cfg.positional != "rope":
            return None
        return self.rope_cos[offset : offset + length], self.rope_sin[offset : offset + length]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S] -> memory [B, S, D] and the key mask [B, 1, 1, S] (True = a real token)."""
        src_mask = (src != self.cfg.pad_id)[:, None, None, :]
        x = self._embed(src, self.src_embed, getattr(self, "src_positions", None), 0)
        rope = self._rope(0, src.shape[1])
        for layer in self.encoder:
            x = layer(x, src_mask, rope)
        return self.encoder_norm(x), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: Optional[DecoderCache] = None) -> Tensor:
        """tgt [B*K, T] (the new positions when a cache is given), K rows (beams) per source of memory [B, S, D]
        -> logits [B*K, T, V]."""
        (BK, T), B = tgt.shape, memory.shape[0]
        if BK % B:
            raise ValueError(f"decode: {BK} target rows for {B} sources; expected a multiple (K beams per source)")
        offset = cache.length if cache is not None else 0
        x = self._embed(tgt, self.tgt_embed, getattr(self, "tgt_positions", None), offset)
        # One new position per beam on CPU in fp32: the native kernel reads each beam's own keys (see native.py).
        step_natively = cache is not None and T == 1 and not self.training and native.usable(x)
        self_mask = cache.extend(B, BK // B, T, tgt.device, mask=not step_natively) if cache is not None else None
        if step_natively:
            self_mask, src_mask = StepKeys(origin=cache.origin.contiguous()), StepKeys(valid=src_mask.reshape(B, -1))
        rope = self._rope(offset, T)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, src_mask, rope, beams=BK // B, cache=cache.layers[i] if cache is not None else None,
                      offset=offset, self_mask=self_mask)
        if cache is not None:
            cache.length += T
        return self.out_proj(self.decoder_norm(x))

    def new_cache(self, capacity: int = 16) -> DecoderCache:
        """An empty cache; `capacity`: the positions to allocate for at once (decoding longer grows it). It writes into
        the buffers of the last cache handed to `recycle` where they are large enough."""
        return DecoderCache.empty(self.cfg.N, capacity, _spare_buffers.pop(self, None))

    def recycle(self, cache: DecoderCache) -> None:
        """Keep `cache`'s buffers for the next search, while in eval mode (`train()` lets them go): a search's buffers
        would be freed at its end, and the next search's fresh pages fault on their first write."""
        if not self.training:
            _spare_buffers[self] = cache.buffers()

    def train(self, mode: bool = True) -> "Transformer":
        if mode:
            _spare_buffers.pop(self, None)
        return super().train(mode)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src [B, S], tgt_in [B, T] (BOS-prefixed targets) -> logits [B, T, V]."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


# Per model, weakly (not in its state, copies or pickles): the buffers `Transformer.recycle` keeps between searches.
_spare_buffers: "weakref.WeakKeyDictionary[Transformer, list[Tensor]]" = weakref.WeakKeyDictionary()


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (a tied matrix counts once), as the paper counts them."""
    return sum(p.numel() for p in model.parameters())
