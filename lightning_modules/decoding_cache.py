"""The decoder's key/value cache, so that incremental decoding and beam search pay for one new position a step.

Shapes: B sources, K beams per source, G key/value heads, S source length, d_k / d_v head sizes.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor, nn


@dataclass
class LayerCache:
    """One decoder layer's keys and values: self-attention's written once per position and beam slot,
    cross-attention's projected once per source."""

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


def _grown(
    buffer: Optional[Tensor], new: Tensor, length: int, beams: int, capacity: int, spare: list[Tensor]
) -> Tensor:
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
    Copying each beam's history instead would move the whole cache twice per step (the reorder, then the append)
    into fresh allocations.
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
                for name in (
                    "self_k",
                    "self_v",
                ):  # only the positions written, back into the buffer: it stays for reuse
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


# Per model, weakly (not in its state, copies or pickles): the buffers `Transformer.recycle` keeps between searches.
spare_buffers: "weakref.WeakKeyDictionary[nn.Module, list[Tensor]]" = weakref.WeakKeyDictionary()
