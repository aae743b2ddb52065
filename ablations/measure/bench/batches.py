"""The bench's data: the built-in corpus (and Multi30k) batched as training batches them, and padding efficiency."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor

from lightning_modules.config import DataConfig
from lightning_modules.data import TokenBudgetBatchSampler, TranslationDataModule, collate_pairs

from .options import BenchOptions


def padding_efficiency(sampler: TokenBudgetBatchSampler) -> float:
    """Non-pad tokens / processed tokens over both sides of every batch of an epoch."""
    return sampler.padding_efficiency(0)["both"]


def bucketed_and_unbucketed(lengths_src, lengths_tgt, batch_tokens: int, seed: int = 0) -> dict[str, float]:
    """Padding efficiency of length-bucketed batches (ours) and of the same packing in random order."""
    bucketed = TokenBudgetBatchSampler(lengths_src, lengths_tgt, batch_tokens, seed=seed)
    unbucketed = TokenBudgetBatchSampler(
        lengths_src, lengths_tgt, batch_tokens, seed=seed, sort_chunk=1
    )  # chunks of 1: no sorting
    return {"bucketed": padding_efficiency(bucketed), "unbucketed": padding_efficiency(unbucketed)}


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
    dataset = data.dataset("train")
    indices = data.train_sampler().batches(0)[:count]
    return [to_device(collate_pairs([dataset[i] for i in batch]), device) for batch in indices]


def epoch_batches(data: TranslationDataModule, device: torch.device) -> Callable[[int], Iterator[dict[str, Any]]]:
    """Epoch -> its training batches, collated one at a time as they are drawn (for the decoding model's short run)."""
    dataset = data.dataset("train")

    def batches(epoch: int) -> Iterator[dict[str, Any]]:
        for indices in data.train_sampler().batches(epoch):
            yield to_device(collate_pairs([dataset[i] for i in indices]), device)

    return batches


def synthetic_epoch_batches(options: BenchOptions, device: torch.device) -> Callable[[int], list[dict[str, Any]]]:
    """Epoch -> `options.decode_train_steps` synthetic training batches (other random pieces each epoch)."""
    from ..gpu_check import synthetic_batches

    def batches(epoch: int) -> list[dict[str, Any]]:
        seed = options.seed + 1000 * (epoch + 1)  # not the timed batches' seed
        return synthetic_batches(options.batch_tokens, options.decode_train_steps, options.vocab_size, device, seed)

    return batches


def synthetic_decode_sources(options: BenchOptions, device: torch.device) -> list[Tensor]:
    """Random sources of WMT-like lengths, length-sorted and cut into batches, as the GPU check decodes them."""
    from ..gpu_check import FIRST_ID, wmt_like_lengths

    src_len, _ = wmt_like_lengths(options.decode_sentences, seed=options.seed + 7)
    rng = np.random.default_rng(options.seed + 8)
    order = np.argsort(src_len, kind="stable")
    size = options.decode_batch_sentences
    sources = []
    for start in range(0, len(order), size):
        items = [
            (int(i), rng.integers(FIRST_ID, options.vocab_size, src_len[i]), np.zeros(0, np.int64))
            for i in order[start : start + size]
        ]
        sources.append(collate_pairs(items)["src"].to(device))
    return sources


def decode_sources(data: TranslationDataModule, options: BenchOptions, device: torch.device) -> list[Tensor]:
    """The first dev sentences, sorted by length and cut into batches, as padded source tensors."""
    dataset = data.dataset("dev")
    n = min(options.decode_sentences, len(dataset))
    order = sorted(range(n), key=lambda i: len(dataset[i][1]))
    size = options.decode_batch_sentences
    return [collate_pairs([dataset[i] for i in order[k : k + size]])["src"].to(device) for k in range(0, n, size)]


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}


def collate_seconds(data: TranslationDataModule, batches: int) -> float:
    """Median seconds to collate one training batch on the main process (the work a loader worker would take over)."""
    dataset = data.dataset("train")
    indices = data.train_sampler().batches(0)[:batches]
    times = []
    for batch in indices:
        started = time.perf_counter()
        collate_pairs([dataset[i] for i in batch])
        times.append(time.perf_counter() - started)
    return statistics.median(times)
