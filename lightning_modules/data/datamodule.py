"""The Lightning data module: a corpus checked, tokenized, encoded and batched for ``TranslationModule``."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import lightning.pytorch as pl
import numpy as np
import sentencepiece as spm
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset

from ..config import BatchPlan, DataConfig, batch_plan
from ..parsing.trees import Tree
from .batching import EvalShard, ResumableLoader, TokenBudgetBatchSampler
from .cache import default_cache_dir
from .corpus import CorpusError, CorpusSplits, PathLike, read_lines, resolve_splits
from .datasets import dataset_directory, default_split_names
from .encoding import EncodedSplit, load_or_encode_split
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, load_or_train_tokenizer, tokenizer_key
from .treebank import SPLITS, SRC, TGT, gold_trees, parsing_corpus_dir, tree_symbols


class PairDataset(Dataset):
    """Pairs ``rows`` of an ``EncodedSplit``; items are (line index, source ids, target ids), ids capped at ``max_len``."""

    def __init__(self, encoded: EncodedSplit, rows: Optional[np.ndarray] = None, max_len: Optional[int] = None):
        self.encoded = encoded
        self.rows = np.arange(len(encoded)) if rows is None else np.asarray(rows, dtype=np.int64)
        self.max_len = max_len

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        row = int(self.rows[i])
        src, tgt = self.encoded.src(row), self.encoded.tgt(row)
        if self.max_len is not None:
            src, tgt = src[: self.max_len], tgt[: self.max_len]
        return int(self.encoded.line_index[row]), np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Tensor lengths in a batch: source + EOS, BOS + target."""
        ls, lt = self.encoded.src_lengths[self.rows], self.encoded.tgt_lengths[self.rows]
        if self.max_len is not None:
            ls, lt = np.minimum(ls, self.max_len), np.minimum(lt, self.max_len)
        return ls + 1, lt + 1


def collate_pairs(items: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """``src`` [B,S] = ids + EOS, ``tgt_in`` [B,T] = BOS + ids, ``tgt_out`` [B,T] = ids + EOS, padded with PAD;
    ``n_src_tokens`` / ``n_tgt_tokens`` (ints, non-pad in ``src`` / ``tgt_out``); ``index`` [B] line numbers."""
    b = len(items)
    s_len = max(len(s) for _, s, _ in items) + 1
    t_len = max(len(t) for _, _, t in items) + 1
    src = np.full((b, s_len), PAD_ID, dtype=np.int64)
    tgt_in = np.full((b, t_len), PAD_ID, dtype=np.int64)
    tgt_out = np.full((b, t_len), PAD_ID, dtype=np.int64)
    n_src = n_tgt = 0
    for row, (_, s, t) in enumerate(items):
        src[row, : len(s)] = s
        src[row, len(s)] = EOS_ID
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
        n_src += len(s) + 1
        n_tgt += len(t) + 1
    return {
        "src": torch.from_numpy(src),
        "tgt_in": torch.from_numpy(tgt_in),
        "tgt_out": torch.from_numpy(tgt_out),
        "n_src_tokens": n_src,
        "n_tgt_tokens": n_tgt,
        "index": torch.tensor([i for i, _, _ in items], dtype=torch.long),
    }


class TranslationDataModule(pl.LightningDataModule):
    """Train / dev / test batches of one corpus for ``TranslationModule``.

    ``prepare_data`` (one process per node) checks the corpus, trains or loads the BPE and encodes every split,
    all cached in ``data.cache_dir``; ``setup`` loads from the cache (doing the work itself on a miss). Training
    pairs longer than ``data.max_tokens`` word pieces (with BOS/EOS, or longer than ``max_positions``) are
    skipped and counted; pairs with an empty side are skipped and counted.

    Training batches: ``TokenBudgetBatchSampler`` with ``batch_plan(data, world size).device_tokens`` per side (a step
    is ``data.batch_tokens`` over all devices and accumulated micro-batches), sharded by the trainer's global rank /
    world size; the trainer must accumulate the plan's ``accumulation`` (checked). **The caller must build the Trainer with
    ``use_distributed_sampler=False``** (Lightning cannot inject a distributed sampler into a custom batch
    sampler; the sampler shards itself). The epoch is taken from ``trainer.current_epoch`` whenever an epoch's
    iterator is created (and Lightning's own ``set_epoch`` call reaches it too), so batch order changes per epoch.
    Under a trainer the training loader is a ``ResumableLoader``: its position in the epoch is saved in checkpoints,
    so a run resumed mid-epoch continues with the next batch.

    Dev / test batches: the whole split on every rank, sorted by length, in a fixed order (no sharding: each
    rank evaluates everything, so metrics need no gathering; decode on rank 0 if time matters). Dev/test keep
    every line (references must align); ids over ``max_positions - 1`` are truncated (counted, warned about).

    Batches are dicts: ``src``, ``tgt_in``, ``tgt_out`` (Long [B, ·]), ``n_src_tokens``, ``n_tgt_tokens`` (int),
    ``index`` (line numbers into ``dev_references`` / ``test_references``).

    Parsing (``data.task == "parsing"``, treebank.py): the corpus is the treebank's parallel words -> linearised tree
    files, and ``gold_trees(role)`` the trees the outputs are scored against. The vocabulary is shared, as the
    paper's (one embedding matrix for source, target and output): one BPE over words and trees, in which every
    tree token of the training targets is one piece of its own, so the output's brackets are a closed set of
    whole tokens and the words are word pieces.
    """

    def __init__(
        self,
        data_cfg: DataConfig,
        corpus_dir: Optional[PathLike] = None,
        seed: int = 0,
        max_positions: int = 1024,
        *,
        eval_batch_tokens: Optional[int] = None,
        eval_max_sentences: Optional[int] = None,
        sort_chunk: Optional[int] = None,
        download: bool = True,
    ):
        super().__init__()
        if max_positions < 2:
            raise ValueError(f"max_positions = {max_positions}: expected at least 2")
        self.data_cfg = data_cfg
        self.corpus_dir = Path(corpus_dir).expanduser() if corpus_dir is not None else None
        self.seed = seed
        self.max_positions = max_positions
        # Evaluation holds no gradients, but a device's memory cap still applies to it.
        self.eval_batch_tokens = eval_batch_tokens or data_cfg.device_batch_tokens or data_cfg.batch_tokens
        self.eval_max_sentences = eval_max_sentences
        self.sort_chunk = sort_chunk
        self.download = download
        self.cache_dir = default_cache_dir(data_cfg)
        self.tokenizer: Optional[spm.SentencePieceProcessor] = None
        self.splits: Optional[CorpusSplits] = None
        self.report: dict[str, dict[str, Any]] = {}
        self._encoded: dict[str, EncodedSplit] = {}
        self._datasets: dict[str, PairDataset] = {}
        self._texts: dict[str, tuple[list[str], list[str]]] = {}
        self._gold: dict[str, list[Tree]] = {}
        self._tok_key: Optional[str] = None

    # -- preparation ------------------------------------------------------------------------------------------
    def _resolve(self) -> CorpusSplits:
        if self.splits is None:
            cfg = self.data_cfg
            if cfg.task == "parsing":
                directory = parsing_corpus_dir(cfg, download=self.download)
                self.splits = resolve_splits(directory, SRC, TGT, SPLITS["train"], SPLITS["dev"], SPLITS["test"])
            else:
                directory = self.corpus_dir or dataset_directory(cfg, download=self.download)
                train, dev, test = default_split_names(cfg)
                self.splits = resolve_splits(directory, cfg.src_lang, cfg.tgt_lang, train=train, dev=dev, test=test)
        return self.splits

    def _load_tokenizer(self) -> spm.SentencePieceProcessor:
        if self.tokenizer is None:
            splits = self._resolve()
            files = [splits.train.src, splits.train.tgt]
            symbols = tree_symbols(splits.train.tgt) if self.data_cfg.task == "parsing" else ()
            self.tokenizer = load_or_train_tokenizer(files, self.data_cfg.vocab_size, self.cache_dir, symbols=symbols)
            self._tok_key = tokenizer_key(files, self.data_cfg.vocab_size, symbols=symbols)
        return self.tokenizer

    def _encode(self, role: str) -> EncodedSplit:
        if role not in self._encoded:
            sp = self._load_tokenizer()
            files = dict(self._resolve().items())[role]
            encoded, report = load_or_encode_split(sp, self._tok_key, files, role, self.cache_dir)
            self._encoded[role] = encoded
            self.report[role] = asdict(report)
            rank_zero_info(f"[data] {report.summary()}")
        return self._encoded[role]

    def prepare_data(self) -> None:
        """Check the corpus, train/load the tokenizer and encode all splits into the cache (no state kept)."""
        for role in ("train", "dev", "test"):
            self._encode(role)

    def setup(self, stage: Optional[str] = None) -> None:
        roles = {"fit": ("train", "dev"), "validate": ("dev",), "test": ("test",)}.get(
            stage or "", ("train", "dev", "test")
        )
        for role in roles:
            self._dataset(role)

    # -- datasets ---------------------------------------------------------------------------------------------
    def dataset(self, role: str) -> PairDataset:
        """The encoded pairs of "train", "dev" or "test", built once: what the loaders batch (`ablate bench` too)."""
        return self._dataset(role)

    def _dataset(self, role: str) -> PairDataset:
        if role in self._datasets:
            return self._datasets[role]
        encoded = self._encode(role)
        ls, lt = encoded.src_lengths, encoded.tgt_lengths
        if role == "train":
            limit = min(self.data_cfg.max_tokens, self.max_positions)
            keep = (ls + 1 <= limit) & (lt + 1 <= limit)
            skipped = int(len(keep) - keep.sum())
            self.report[role]["skipped_long"] = skipped
            self.report[role]["train_pairs"] = int(keep.sum())
            if skipped:
                rank_zero_info(
                    f"[data] train: skipped {skipped} of {len(keep)} pairs over {limit} word pieces "
                    f"(with BOS/EOS) on a side (data.max_tokens = {self.data_cfg.max_tokens}, max_positions = {self.max_positions})"
                )
            if not keep.any():
                raise CorpusError(f"every training pair is longer than {limit} word pieces; raise data.max_tokens")
            dataset = PairDataset(encoded, np.nonzero(keep)[0])
        else:
            cap = self.max_positions - 1
            truncated = int(((ls > cap) | (lt > cap)).sum())
            self.report[role]["truncated"] = truncated
            if truncated:
                rank_zero_warn(
                    f"[data] {role}: {truncated} pairs longer than max_positions - 1 = {cap} word pieces "
                    "are truncated for the loss (BLEU still uses the full references)"
                )
            dataset = PairDataset(encoded, max_len=cap)
        self._datasets[role] = dataset
        return dataset

    def texts(self, role: str) -> tuple[list[str], list[str]]:
        """The source and target lines of the ``train``, ``dev`` or ``test`` split, as in its files."""
        if role not in self._texts:
            files = dict(self._resolve().items())[role]
            self._texts[role] = (read_lines(files.src), read_lines(files.tgt))
        return self._texts[role]

    def gold_trees(self, role: str) -> list[Tree]:
        """Parsing: the normalised gold trees of the ``dev`` or ``test`` split, line-aligned with its sources."""
        if self.data_cfg.task != "parsing":
            raise ValueError(f"data.dataset = {self.data_cfg.dataset!r} is a translation corpus: it has no trees")
        if role not in self._gold:
            self._gold[role] = gold_trees(self._resolve().directory, role)
        return self._gold[role]

    @property
    def dev_references(self) -> list[str]:
        return self.texts("dev")[1]

    @property
    def test_references(self) -> list[str]:
        return self.texts("test")[1]

    @property
    def vocab_size(self) -> int:
        return self._load_tokenizer().get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Word-piece ids of ``text`` (no BOS/EOS)."""
        return self._load_tokenizer().encode(text)

    def decode(self, ids: Union[Sequence[int], torch.Tensor, np.ndarray]) -> str:
        """Text of ``ids``: stops at the first EOS, drops PAD and BOS."""
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        return self._load_tokenizer().decode(out)

    # -- loaders ----------------------------------------------------------------------------------------------
    def _loader(
        self, dataset: PairDataset, sampler: TokenBudgetBatchSampler | EvalShard, **resumable: Any
    ) -> DataLoader:
        workers = self.data_cfg.num_workers
        # A generator of its own: every new iterator draws a base seed from it, which would otherwise come from the
        # global torch RNG that dropout uses, so validating (a new dev iterator) or resuming (a new training
        # iterator) would shift every later dropout mask.
        generator = torch.Generator().manual_seed(self.seed)
        cls = ResumableLoader if resumable else DataLoader
        return cls(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate_pairs,
            num_workers=workers,
            generator=generator,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=workers > 0,
            **resumable,
        )

    def _rank_world(self) -> tuple[int, int]:
        trainer = self._trainer_or_none()
        if trainer is None:
            return 0, 1
        return int(trainer.global_rank), int(trainer.world_size)

    def _trainer_or_none(self) -> Optional[pl.Trainer]:
        return getattr(self, "trainer", None)

    def batch_plan(self, world_size: int = 1) -> BatchPlan:
        """How a step of ``data.batch_tokens`` is cut over ``world_size`` devices (ValueError if it cannot be)."""
        return batch_plan(self.data_cfg, world_size)

    def train_sampler(
        self, rank: int = 0, world_size: int = 1, epoch_fn: Optional[Callable[[], int]] = None
    ) -> TokenBudgetBatchSampler:
        dataset = self._dataset("train")
        ls, lt = dataset.lengths()
        return TokenBudgetBatchSampler(
            ls,
            lt,
            self.batch_plan(world_size).device_tokens,
            shuffle=True,
            seed=self.seed,
            rank=rank,
            world_size=world_size,
            sort_chunk=self.sort_chunk,
            epoch_fn=epoch_fn,
        )

    def train_dataloader(self) -> DataLoader:
        trainer = self._trainer_or_none()
        rank, world = self._rank_world()
        if trainer is not None and world > 1:
            # Lightning keeps the Trainer's use_distributed_sampler only on its private accelerator connector (no
            # public property in lightning 2.6); where that is gone the check is skipped, not the training.
            connector = getattr(trainer, "_accelerator_connector", None)
            if getattr(connector, "use_distributed_sampler", False):
                raise RuntimeError(
                    "TranslationDataModule shards its own token-budget batches: build the Trainer with "
                    "use_distributed_sampler=False"
                )
        plan = self.batch_plan(world)
        if trainer is not None and trainer.accumulate_grad_batches != plan.accumulation:
            raise RuntimeError(
                f"the trainer accumulates {trainer.accumulate_grad_batches} micro-batches, but a step of "
                f"data.batch_tokens = {self.data_cfg.batch_tokens} over {world} device(s) needs {plan.accumulation} of "
                f"{plan.device_tokens} tokens: build it with accumulate_grad_batches=batch_plan(...).accumulation"
            )
        epoch_fn = (lambda: trainer.current_epoch) if trainer is not None else None
        sampler = self.train_sampler(rank, world, epoch_fn)
        if trainer is None:
            return self._loader(self._dataset("train"), sampler)
        sampler.set_epoch(trainer.current_epoch)
        # Batches of this epoch the loop has handed to training (restored with the loop state on resume): the epoch
        # loop's public batch_idx counts from 0.
        consumed = lambda: trainer.fit_loop.epoch_loop.batch_idx + 1  # noqa: E731
        return self._loader(self._dataset("train"), sampler, consumed=consumed)

    def _eval_loader(self, role: str) -> DataLoader:
        dataset = self._dataset(role)
        ls, lt = dataset.lengths()
        sampler = TokenBudgetBatchSampler(
            ls, lt, self.eval_batch_tokens, shuffle=False, max_sentences=self.eval_max_sentences, oversize="single"
        )
        rank, world = self._rank_world()
        if world > 1:  # each rank decodes its share; TranslationModule gathers the hypotheses and sums the losses
            return self._loader(dataset, EvalShard(sampler, rank, world))
        return self._loader(dataset, sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")
