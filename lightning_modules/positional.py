"""Position information: the paper's interleaved sinusoids, learned positions, and rotary embeddings (RoPE)."""

from __future__ import annotations

import torch
from torch import nn


def sinusoids(n_positions: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...): interleaved, as in section 3.5."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]  # [P, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # [ceil(D/2)]
    angle = position / (10000.0 ** (two_i / d_model))  # [P, ceil(D/2)]
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def rope_tables(n_positions: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta_i for rotating pairs (x_i, x_{i + head_dim/2}); each [P, head_dim]."""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [head_dim/2]
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * theta  # [P, head_dim/2]
    angle = torch.cat([angle, angle], dim=-1)  # [P, head_dim]
    return angle.cos().float(), angle.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, heads, T, head_dim] by position tables cos/sin [T, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


# The three ways a Transformer knows positions, as the modules it picks once (Transformer.__init__).


class SinusoidalPositions(nn.Module):
    """The paper's fixed table (section 3.5), added to the scaled embeddings of either side."""

    def __init__(self, n_positions: int, d_model: int):
        super().__init__()
        self.register_buffer("table", sinusoids(n_positions, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """x [B, T, D] at positions offset .. offset + T - 1, plus their rows of the table."""
        return x + self.table[offset : offset + x.shape[1]].to(x.dtype)


class LearnedPositions(nn.Embedding):
    """A learned vector per position (Table 3 row E), added to the scaled embeddings; one table per side."""

    def forward(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """x [B, T, D] at positions offset .. offset + T - 1, plus their learned vectors."""
        return x + super().forward(torch.arange(offset, offset + x.shape[1], device=x.device))


class RotaryPositions(nn.Module):
    """RoPE: nothing is added to the embeddings; each self-attention rotates its queries and keys (apply_rope)."""

    def __init__(self, n_positions: int, head_dim: int):
        super().__init__()
        cos, sin = rope_tables(n_positions, head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, offset: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos and sin tables [length, head_dim] of positions offset .. offset + length - 1."""
        return self.cos[offset : offset + length], self.sin[offset : offset + length]
