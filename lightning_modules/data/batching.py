"""Token-budget batches: packed by length, shuffled per (seed, epoch), sharded over ranks, resumable mid-epoch."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
from torch.utils.data import DataLoader, Sampler


class _EpochHook:
    """Exposed as ``batch_sampler.sampler``: Lightning calls ``set_epoch`` on that attribute at each epoch start."""

    def __init__(self, owner: "TokenBudgetBatchSampler"):
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of similar-length pairs whose padded size fits ``max_tokens`` on each side.

    ``lengths_src`` / ``lengths_tgt`` are the lengths of the tensors the batch will hold (source + EOS,
    BOS + target). A batch ``b`` satisfies ``len(b) * max(lengths_src[b]) <= max_tokens`` and the same for the
    target, padding included (fairseq's ``--max-tokens``; the paper's ~25k source + 25k target tokens per step
    is ``data.batch_tokens`` over all devices; a device packs ``BatchPlan.device_tokens``).

    Packing (like fairseq's ``batch_by_size``): pairs are sorted by max(source, target) length, the side that
    binds the budget, then by source - target length (so a batch's pairs have similar shapes on both sides),
    ties broken at random (``seed``) -- or, with ``sort_chunk=k``, sorted so within shuffled chunks of ``k``
    pairs -- and packed greedily in that order. On Multi30k (BPE 8k, 4096 tokens) padding is 4% of a batch;
    sorting by (target, source) instead padded 12% of the source side. The packing is fixed for a seed (so
    ``len()`` is the same every epoch) unless ``repack_each_epoch=True`` (ties then broken by (seed, epoch); the
    batch count may then change between epochs). Each epoch the batch order is shuffled with (seed, epoch) when
    ``shuffle``; without ``shuffle``, ties keep index order and batches come shortest first (for evaluation).

    Distributed: every rank builds the same global list of batches and takes ``batches[rank::world_size]``, so
    no pair is seen by two ranks in an epoch and every rank gets the same number of batches (DDP would hang
    otherwise). To make the count divisible by ``world_size`` without dropping data, the batches with the most
    pairs are split in two (smaller batches stay within the budget); only when every batch is down to one pair
    (fewer pairs than ranks, or pairs so long that each fills the budget alone) are batches repeated, fewer than
    ``world_size`` of them (those pairs are seen twice in that epoch).

    Epochs: ``set_epoch(e)``; Lightning calls it through ``self.sampler.set_epoch`` at each training epoch start
    (it looks for ``batch_sampler.sampler``), and ``epoch_fn`` (e.g. ``lambda: trainer.current_epoch``), if given,
    is read whenever an iterator is created and takes precedence.

    ``oversize``: a pair longer than ``max_tokens`` on one side raises (``"error"``) or forms a batch of its
    own (``"single"``, for evaluation).
    """

    def __init__(
        self,
        lengths_src: Sequence[int],
        lengths_tgt: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        *,
        max_sentences: Optional[int] = None,
        sort_chunk: Optional[int] = None,
        repack_each_epoch: bool = False,
        oversize: str = "error",
        epoch_fn: Optional[Callable[[], int]] = None,
    ):
        self.lengths_src = np.asarray(lengths_src, dtype=np.int64)
        self.lengths_tgt = np.asarray(lengths_tgt, dtype=np.int64)
        if self.lengths_src.shape != self.lengths_tgt.shape or self.lengths_src.ndim != 1:
            raise ValueError(
                f"lengths_src and lengths_tgt must be 1-d and equally long, got {self.lengths_src.shape} and {self.lengths_tgt.shape}"
            )
        if len(self.lengths_src) == 0:
            raise ValueError("no examples to batch")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens = {max_tokens}: expected a positive integer")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank = {rank} with world_size = {world_size}: expected 0 <= rank < world_size")
        if oversize not in ("error", "single"):
            raise ValueError(f"oversize = {oversize!r}: expected 'error' or 'single'")
        if seed < 0:
            raise ValueError(f"seed = {seed}: expected a non-negative integer")
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.max_sentences = max_sentences
        self.sort_chunk = sort_chunk
        self.repack_each_epoch = repack_each_epoch and shuffle
        self.oversize = oversize
        self.epoch_fn = epoch_fn
        self.epoch = 0
        self.sampler = _EpochHook(self)
        self._packed: Optional[tuple[int, list[np.ndarray]]] = None  # (packing epoch, global batches)
        self._resume: Optional[tuple[int, int]] = None  # (epoch, batches of it already consumed): see resume_at

    # -- packing ---------------------------------------------------------------------------------------------
    def _sort(self, idx: np.ndarray) -> np.ndarray:
        """``idx`` stably sorted by max(source, target) length, then by source - target length."""
        s, t = self.lengths_src[idx], self.lengths_tgt[idx]
        return idx[np.lexsort((s - t, np.maximum(s, t)))]

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.lengths_src)
        if not self.shuffle:
            return self._sort(np.arange(n))
        perm = np.random.default_rng([self.seed, 0x5EED, epoch]).permutation(n)
        chunk = self.sort_chunk or n
        # lexsort is stable: pairs of equal lengths stay in random order
        return np.concatenate([self._sort(perm[start : start + chunk]) for start in range(0, n, chunk)])

    def _pack(self, order: np.ndarray) -> list[np.ndarray]:
        ls, lt = self.lengths_src.tolist(), self.lengths_tgt.tolist()
        budget, cap = self.max_tokens, self.max_sentences or len(ls)
        batches: list[list[int]] = []
        cur: list[int] = []
        ms = mt = 0
        for i in order.tolist():
            s, t = ls[i], lt[i]
            if s > budget or t > budget:
                if self.oversize == "error":
                    raise ValueError(
                        f"example {i} has lengths (source {s}, target {t}) over max_tokens = {budget}; "
                        "filter long pairs first or raise the token budget"
                    )
                batches.append([i])
                continue
            n = len(cur) + 1
            ns, nt = max(ms, s), max(mt, t)
            if cur and (n * ns > budget or n * nt > budget or n > cap):
                batches.append(cur)
                cur, ns, nt = [], s, t
            cur.append(i)
            ms, mt = ns, nt
        if cur:
            batches.append(cur)
        return [np.asarray(b, dtype=np.int64) for b in batches]

    def _equalise(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Make the batch count a multiple of world_size: split the largest batches, else repeat batches."""
        w = self.world_size
        extra = (-len(batches)) % w
        while extra:
            sizes = [len(b) for b in batches]
            j = int(np.argmax(sizes))
            if sizes[j] < 2:
                break
            b = batches[j]
            batches[j : j + 1] = [b[: len(b) // 2], b[len(b) // 2 :]]
            extra -= 1
        if extra:  # every batch holds one pair: repeat from the start
            batches = batches + [batches[k % len(batches)] for k in range(extra)]
        return batches

    def global_batches(self, epoch: Optional[int] = None) -> list[np.ndarray]:
        """All ranks' batches of an epoch, in the order they are dealt out (rank r gets positions r, r+w, ...)."""
        epoch = self.epoch if epoch is None else epoch
        pack_epoch = epoch if self.repack_each_epoch else 0
        if self._packed is None or self._packed[0] != pack_epoch:
            self._packed = (pack_epoch, self._equalise(self._pack(self._order(pack_epoch))))
        batches = self._packed[1]
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(batches))
            batches = [batches[k] for k in perm]
        return batches

    def batches(self, epoch: Optional[int] = None) -> list[list[int]]:
        """This rank's batches of an epoch, as lists of example indices."""
        return [b.tolist() for b in self.global_batches(epoch)[self.rank :: self.world_size]]

    # -- Sampler protocol -----------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def resume_at(self, epoch: int, consumed: int) -> None:
        """Make the next iterator over ``epoch`` start after its first ``consumed`` batches (a run resumed mid-epoch).

        Applies once, and only if that iterator is for ``epoch``: a resumed run then sees exactly the batches an
        uninterrupted run would have seen next, in the same order.
        """
        if consumed < 0 or epoch < 0:
            raise ValueError(f"resume_at(epoch={epoch}, consumed={consumed}): expected non-negative integers")
        self._resume = (int(epoch), int(consumed))

    def __iter__(self) -> Iterator[list[int]]:
        if self.epoch_fn is not None:
            self.epoch = int(self.epoch_fn())
        batches = self.batches(self.epoch)
        if self._resume is not None:
            epoch, consumed = self._resume
            self._resume = None
            if epoch == self.epoch:
                batches = batches[consumed:]
        return iter(batches)

    def __len__(self) -> int:
        return len(self.global_batches(self.epoch if self.repack_each_epoch else 0)) // self.world_size

    def padding_efficiency(self, epoch: Optional[int] = None) -> dict[str, float]:
        """Non-pad tokens / padded tokens of all batches of an epoch (all ranks), per side and both sides."""
        real_s = real_t = pad_s = pad_t = 0
        for b in self.global_batches(epoch):
            s, t = self.lengths_src[b], self.lengths_tgt[b]
            real_s += int(s.sum())
            real_t += int(t.sum())
            pad_s += len(b) * int(s.max())
            pad_t += len(b) * int(t.max())
        return {"src": real_s / pad_s, "tgt": real_t / pad_t, "both": (real_s + real_t) / (pad_s + pad_t)}


class ResumableLoader(DataLoader):
    """The training loader, with the position in its epoch saved in Lightning checkpoints.

    Lightning stores ``state_dict()`` of a training loader that has one in the checkpoint's loop state and calls
    ``load_state_dict`` before the resumed run's first iterator, so a run killed mid-epoch continues with the
    batch after the last one it trained on instead of restarting the epoch's order (which would repeat some
    batches, skip others and make the resumed run differ from an uninterrupted one).

    ``consumed()`` is the number of batches of the current epoch the training loop has taken; the loader cannot
    count that itself, since the loop fetches one batch ahead.
    """

    def __init__(self, *args: Any, consumed: Callable[[], int], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.consumed = consumed

    def state_dict(self) -> dict[str, int]:
        return {"epoch": int(self.batch_sampler.epoch), "consumed": int(self.consumed())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batch_sampler.resume_at(int(state["epoch"]), int(state["consumed"]))


class EvalShard:
    """Rank `rank`'s share of an evaluation's batches: every `world_size`-th batch of `batches`, none repeated.

    Validation under DDP decodes each dev sentence on one rank only (the module gathers the hypotheses and sums the
    losses at the end). Unlike training's sharding, the ranks' batch counts may differ by one: evaluation has no
    gradient to synchronise per batch, and repeating a batch to even them out would count its sentences twice.
    The batches come sorted by length, so dealing them round-robin gives each rank a like share of the work.
    """

    def __init__(self, batches: TokenBudgetBatchSampler, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"EvalShard: rank {rank} of {world_size}; expected 0 <= rank < world_size")
        self.batches, self.rank, self.world_size = batches, rank, world_size

    def _share(self) -> list[list[int]]:
        batches = list(self.batches)
        if 0 < len(batches) < self.world_size:
            # Fewer batches than ranks (a small dev set): Lightning wants a batch on every rank, so the sentences
            # are dealt out instead, in one batch a rank.
            indices = [i for batch in batches for i in batch]
            if len(indices) < self.world_size:
                raise ValueError(
                    f"an evaluation split of {len(indices)} sentences cannot be shared by {self.world_size} ranks; "
                    "expected at least one sentence a rank"
                )
            return [indices[self.rank :: self.world_size]]
        return batches[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._share())

    def __len__(self) -> int:
        return len(self._share())
