"""The Transformer of "Attention Is All You Need", section 3, as a plain nn.Module.

Read top to bottom it follows the paper: multi-head attention (3.2), the position-wise feed-forward network (3.3),
the residual sublayers and the encoder and decoder layers (3.1), then the whole model with its embeddings and
positions (3.4, 3.5). Defaults are the paper's: post-norm, interleaved sinusoids, ReLU feed-forward, one embedding
matrix shared by source, target and pre-softmax projection, scaled by sqrt(d_model). Every Table 3 knob and the
common modern variants (pre-norm, RoPE, learned positions, RMSNorm, GELU/SwiGLU, grouped-query attention) are
config values. How attention and dropout are computed (PyTorch's kernels or the native ones) is at the end; the
decoder's cache for incremental decoding is decoding_cache.py, beam search beam_search.py.

Shapes: B batch, S source length, T target length, D d_model, H heads, G key/value heads, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import native
from .config import ModelConfig
from .decoding_cache import DecoderCache, LayerCache, StepKeys, spare_buffers
from .positional import LearnedPositions, RotaryPositions, SinusoidalPositions, apply_rope


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

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor | StepKeys], causal: bool, beams: int = 1
    ) -> Tensor:
        # q [B*K, H, T, d_k]: K rows (beams) per key row; k [B, G, L, d_k], v [B, G, L, d_v];
        # mask broadcasts to [B, H, K*T, L], True = attend, or names the keys of one decoding step (T = 1)
        BK, H, T, _ = q.shape
        if isinstance(mask, StepKeys):
            out = native.decode_attention(q.view(BK, H, -1), k, v, mask.origin, mask.valid)  # [B*K, H*d_v]
            return self.out_proj(out.view(BK, 1, -1))
        q = (
            q.view(BK // beams, beams, H, T, -1).transpose(1, 2).reshape(BK // beams, H, beams * T, -1)
        )  # [B, H, K*T, d_k]
        dropout_p = self.dropout if self.training else 0.0
        explicit = prefers_explicit_attention(q) if self.kernel is None else self.kernel == "explicit"
        if explicit:
            out = explicit_attention(q, k, v, mask, causal, dropout_p)  # [B, H, K*T, d_v]
        else:
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                is_causal=causal,
                enable_gqa=self.g != self.h,
                dropout_p=dropout_p,
            )  # [B, H, K*T, d_v]
        out = out.view(BK // beams, H, beams, T, -1).permute(0, 2, 3, 1, 4)  # [B, K, T, H, d_v]
        return self.out_proj(out.reshape(BK, T, self.h * self.d_v))  # [B*K, T, D]

    def queries(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return self.q_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)  # [B, H, T, d_k]

    def self_projections(self, x: Tensor, rope: Optional[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries [B, H, T, d_k], keys [B, G, T, d_k] and values [B, G, T, d_v] of x; with RoPE's
        tables (cos, sin) the queries and keys are rotated by their positions."""
        q, (k, v) = self.queries(x), self.project_kv(x)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return q, k, v


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


def make_norm(cfg: ModelConfig) -> nn.Module:
    return nn.RMSNorm(cfg.d_model) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model)


def deepnorm_constants(cfg: ModelConfig) -> tuple[float, float, float, float]:
    """DeepNet's (Wang et al., 2022) encoder-decoder constants for N encoder and M = N decoder layers:
    (alpha_encoder, beta_encoder, alpha_decoder, beta_decoder)."""
    n = m = cfg.N
    return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16), (3 * m) ** 0.25, (12 * m) ** -0.25


class Residual(nn.Module):
    """post: LayerNorm(x + Dropout(f(x))), the paper's; pre: x + Dropout(f(LayerNorm(x))); deepnorm: post-norm
    over alpha * x + Dropout(f(x)), with DeepNet's alpha (and its beta-scaled initialisation, see Transformer)."""

    def __init__(self, cfg: ModelConfig, alpha: float = 1.0):
        super().__init__()
        self.pre = cfg.norm_placement == "pre"
        self.alpha = alpha
        self.norm = make_norm(cfg)
        self.dropout = cfg.P_drop

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre:
            return x + dropout(sublayer(self.norm(x)), self.dropout, self.training)
        return self.norm(self.alpha * x + dropout(sublayer(x), self.dropout, self.training))


class EncoderLayer(nn.Module):
    """One of the encoder's N layers (section 3.1): self-attention over the source, then the feed-forward network,
    each a residual sublayer."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.ffn = MultiHeadAttention(cfg), FeedForward(cfg)
        alpha = deepnorm_constants(cfg)[0] if cfg.norm_placement == "deepnorm" else 1.0
        self.attn_res, self.ffn_res = Residual(cfg, alpha), Residual(cfg, alpha)

    def forward(self, x: Tensor, pad_mask: Tensor, rope: Optional[tuple[Tensor, Tensor]]) -> Tensor:
        def self_attention(y: Tensor) -> Tensor:
            return self.self_attn.attend(*self.self_attn.self_projections(y, rope), pad_mask, causal=False)

        x = self.attn_res(x, self_attention)
        return self.ffn_res(x, self.ffn)


class DecoderLayer(nn.Module):
    """One of the decoder's N layers (section 3.1): masked self-attention over the target so far, attention over the
    encoder's output, then the feed-forward network, each a residual sublayer. With a cache it takes only the new
    positions, their keys and values appended to the cache's."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.cross_attn, self.ffn = MultiHeadAttention(cfg), MultiHeadAttention(cfg), FeedForward(cfg)
        alpha = deepnorm_constants(cfg)[2] if cfg.norm_placement == "deepnorm" else 1.0
        self.self_res, self.cross_res, self.ffn_res = Residual(cfg, alpha), Residual(cfg, alpha), Residual(cfg, alpha)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | StepKeys,
        rope: Optional[tuple[Tensor, Tensor]],
        beams: int,
        cache: Optional[LayerCache],
        offset: int,
        self_mask: Optional[Tensor | StepKeys],
    ) -> Tensor:
        # x [B*K, T, D]: K rows (beams) per source; memory [B, S, D]; the masks as MultiHeadAttention.attend takes them
        def self_attention(y: Tensor) -> Tensor:
            q, k, v = self.self_attn.self_projections(y, rope)
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
    """The encoder-decoder of section 3 (Figure 1): token embeddings scaled by sqrt(d_model) plus positions, N
    encoder layers, N decoder layers and the pre-softmax projection (tied to the embeddings by default).

    `encode` and `decode` are the two halves, as incremental decoding and beam search call them (with a
    DecoderCache, `decode` takes only the new positions); `forward` is teacher forcing. The vocabulary is the
    data's: `vocab_size` word pieces (data.vocab_size), `pad_id` the tokenizer's padding (lightning_modules.data
    .PAD_ID). `max_length` is the longest sequence it encodes (None: no positions, no limit).
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int):
        super().__init__()
        self.cfg = cfg
        self.vocab_size, self.pad_id = vocab_size, pad_id
        self.src_embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        tied = cfg.tie_embeddings
        self.tgt_embed = self.src_embed if tied else nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.out_proj = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.out_proj.weight = self.src_embed.weight
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        # The positional variant, chosen here once: what is added to each side's embeddings (the paper's sinusoids,
        # shared; learned vectors, one table per side), what rotates the self-attention queries and keys (RoPE),
        # and whether a table bounds the length ("none": nothing is added, nothing rotated, no limit).
        self.src_positions = self.tgt_positions = self.rope = None
        if cfg.positional == "sinusoidal":
            self.src_positions = self.tgt_positions = SinusoidalPositions(cfg.max_positions, cfg.d_model)
        elif cfg.positional == "learned":
            self.src_positions = LearnedPositions(cfg.max_positions, cfg.d_model)
            self.tgt_positions = LearnedPositions(cfg.max_positions, cfg.d_model)
        elif cfg.positional == "rope":
            self.rope = RotaryPositions(cfg.max_positions, cfg.head_dim_k)
        self.max_length = None if cfg.positional == "none" else cfg.max_positions
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
            nn.init.zeros_(embedding.weight[self.pad_id])
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.out_proj.weight, std=self.cfg.d_model**-0.5)
        if self.cfg.norm_placement == "deepnorm":
            # DeepNet: Xavier-normal weights, scaled by beta for the feed-forward, value and output projections.
            _, beta_encoder, _, beta_decoder = deepnorm_constants(self.cfg)
            for layers, beta in ((self.encoder, beta_encoder), (self.decoder, beta_decoder)):
                for name, module in layers.named_modules():
                    if isinstance(module, nn.Linear):
                        gain = 1.0 if name.endswith(("q_proj", "k_proj")) else beta
                        nn.init.xavier_normal_(module.weight, gain=gain)

    def _embed(self, tokens: Tensor, table: nn.Embedding, positions: Optional[nn.Module], offset: int) -> Tensor:
        T = tokens.shape[1]
        if self.max_length is not None and offset + T > self.max_length:
            raise ValueError(f"sequence of {offset + T} positions exceeds model.max_positions = {self.max_length}")
        x = table(tokens) * self.embed_scale  # [B, T, D]
        if positions is not None:
            x = positions(x, offset)
        return dropout(x, self.cfg.P_drop, self.training)

    def _rope(self, offset: int, length: int) -> Optional[tuple[Tensor, Tensor]]:
        return self.rope(offset, length) if self.rope is not None else None

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S] -> memory [B, S, D] and the key mask [B, 1, 1, S] (True = a real token)."""
        src_mask = (src != self.pad_id)[:, None, None, :]
        x = self._embed(src, self.src_embed, self.src_positions, 0)
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
        x = self._embed(tgt, self.tgt_embed, self.tgt_positions, offset)
        # One new position per beam on CPU in fp32: the native kernel reads each beam's own keys (see native.py).
        step_natively = cache is not None and T == 1 and not self.training and native.usable(x)
        self_mask = cache.extend(B, BK // B, T, tgt.device, mask=not step_natively) if cache is not None else None
        if step_natively:
            self_mask, src_mask = StepKeys(origin=cache.origin.contiguous()), StepKeys(valid=src_mask.reshape(B, -1))
        rope = self._rope(offset, T)
        for i, layer in enumerate(self.decoder):
            x = layer(
                x,
                memory,
                src_mask,
                rope,
                beams=BK // B,
                cache=cache.layers[i] if cache is not None else None,
                offset=offset,
                self_mask=self_mask,
            )
        if cache is not None:
            cache.length += T
        return self.out_proj(self.decoder_norm(x))

    def new_cache(self, capacity: int = 16) -> DecoderCache:
        """An empty cache; `capacity`: the positions to allocate for at once (decoding longer grows it). It writes into
        the buffers of the last cache handed to `recycle` where they are large enough."""
        return DecoderCache.empty(self.cfg.N, capacity, spare_buffers.pop(self, None))

    def recycle(self, cache: DecoderCache) -> None:
        """Keep `cache`'s buffers for the next search, while in eval mode (`train()` lets them go): a search's buffers
        would be freed at its end, and the next search's fresh pages fault on their first write."""
        if not self.training:
            spare_buffers[self] = cache.buffers()

    def train(self, mode: bool = True) -> "Transformer":
        if mode:
            spare_buffers.pop(self, None)
        return super().train(mode)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src [B, S], tgt_in [B, T] (BOS-prefixed targets) -> logits [B, T, V]."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


# --------------------------------------------------------------------------------------------------------------
# How attention and dropout are computed: PyTorch's kernels, or plain matmuls and native noise where those are faster
# --------------------------------------------------------------------------------------------------------------


def prefers_explicit_attention(q: Tensor) -> bool:
    """bf16 on CPU: SDPA's fused kernel runs slower there than in fp32 (its backward most), while bf16 matmuls run
    faster than fp32 ones; `ablate bench` times both kernels (results/bench.md). Elsewhere SDPA's fused kernels win."""
    return q.dtype == torch.bfloat16 and q.device.type == "cpu"


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, dropout_p: float
) -> Tensor:
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
    took a sizeable share of a CPU training step (the bench's native_dropout lever, results/bench.md). Elsewhere
    (CUDA, fp64, no compiler, inside torch.compile) torch's dropout."""
    if not training or p == 0.0:
        return x
    if (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.bfloat16)
        and p < 1.0
        and not torch.compiler.is_compiling()
        and native.available()
    ):
        return x * native.dropout_noise(x, p)
    return F.dropout(x, p)
