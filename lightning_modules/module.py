"""The thin LightningModule: the paper's loss, optimiser and schedule around the plain Transformer."""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any, Optional

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from .beam_search import beam_search
from .config import RunConfig, TrainConfig
from .flops import count_parameters
from .metrics import score_translations
from .parsing.score import score_parses
from .transformer import Transformer


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), steps counted from 1."""
    step = max(step, 1)
    if warmup_steps == 0:
        return scale * d_model**-0.5 * step**-0.5
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def learning_rate(step: int, d_model: int, train: TrainConfig) -> float:
    """The run's rate at optimiser step ``step`` (from 1): the paper's inverse-square-root warm-up, times a linear
    cool-down to zero over the last ``cooldown_fraction`` of ``max_steps`` when that deviation is turned on, so a
    short run ends annealed instead of at a large fraction of its peak."""
    rate = inverse_sqrt_lr(step, d_model, train.warmup_steps, train.lr_scale)
    if train.cooldown_fraction > 0:
        rate *= min(1.0, max(train.max_steps - step + 1, 0) / (train.cooldown_fraction * train.max_steps))
    return rate


def make_optimizer(parameters, config: RunConfig, fused: Optional[bool] = None):
    """Adam(beta1, beta2, eps) at lr 1, scaled per step by ``learning_rate``: (optimizer, LambdaLR)."""
    cfg = config.train
    optimizer = torch.optim.Adam(
        parameters,
        lr=1.0,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        fused=fused,
    )
    d_model = config.model.d_model
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate(step + 1, d_model, cfg))
    return optimizer, schedule


def dropout_seed(seed: int, rank: int) -> int:
    """The seed of DDP rank `rank`'s dropout stream in a run of seed `seed` (rank 0 keeps `seed`'s own stream).

    A hash, not seed + rank: with seed + rank, rank 1 of the seed-0 run would replay the stream of the seed-1 run,
    and a sweep's seeds are meant to be independent."""
    digest = hashlib.sha256(f"dropout {seed} {rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # torch.manual_seed takes up to 2^64 - 1; keep it positive


def label_smoothed_loss(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross entropy and summed NLL over non-pad targets.

    The smoothed target puts 1 - eps on the reference and eps spread uniformly over the vocabulary.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    keep = target != pad_id
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # [B, T]
    uniform = -log_probs.mean(dim=-1)  # [B, T]
    loss = (1.0 - eps) * nll + eps * uniform
    return loss[keep].sum(), nll[keep].sum()


class TranslationModule(pl.LightningModule):
    """Training and evaluation of one run. Expects a datamodule with `decode` and references; the special ids are
    the data's (lightning_modules.data.BOS_ID, EOS_ID, PAD_ID), the vocabulary size data.vocab_size."""

    def __init__(self, config: RunConfig, bos_id: int, eos_id: int, pad_id: int):
        super().__init__()
        self.config = config
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.model = Transformer(config.model, config.data.vocab_size, pad_id)
        self.params = count_parameters(self.model)
        self.bleu_limit: Optional[int] = config.eval.dev_bleu_sentences  # None: the whole split
        self.results: dict[str, dict[str, Any]] = {}
        self._sums: dict[str, Tensor] = {}
        self._hypotheses: dict[int, str] = {}
        self._step_started: Optional[float] = None
        self._fit_started = 0.0
        self.train_tokens = 0  # non-pad target tokens trained on, across resumes
        self.train_src_tokens = 0  # non-pad source tokens (with EOS) trained on, across resumes
        self.train_seconds = 0.0  # time inside fit (training and periodic validation), across resumes
        self.diverged: Optional[dict[str, Any]] = None  # {"step", "loss"} once the training loss is not finite

    # --- training -------------------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        logits = self.model(batch["src"], batch["tgt_in"])
        loss_sum, nll_sum = label_smoothed_loss(logits, batch["tgt_out"], self.config.train.eps_ls, self.pad_id)
        n_tokens = batch["n_tgt_tokens"]
        loss = loss_sum / n_tokens
        if self._not_finite(loss):
            # Stop before the optimiser applies NaN/inf gradients: the weights and checkpoints stay those of the
            # last good step, and the run records the step at which it diverged (returning None skips the step).
            self.diverged = {"step": self.global_step + 1, "loss": float(loss.detach())}
            self.trainer.should_stop = True
            return None
        self.train_tokens += n_tokens
        self.train_src_tokens += batch["n_src_tokens"]
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/nll", nll_sum.detach() / n_tokens)
        now = time.perf_counter()
        if self._step_started is not None:
            self.log("train/tokens_per_s", n_tokens / max(now - self._step_started, 1e-9), prog_bar=True)
        self._step_started = now
        return loss

    def _not_finite(self, loss: Tensor) -> bool:
        bad = not bool(torch.isfinite(loss.detach()))
        if self.trainer.world_size > 1:  # every rank must skip the step and stop together, or DDP hangs
            bad = self.trainer.strategy.reduce_boolean_decision(bad, all=False)
        return bad

    def on_train_start(self) -> None:
        self._fit_started = time.perf_counter() - self.train_seconds

    def on_train_end(self) -> None:
        self.train_seconds = time.perf_counter() - self._fit_started

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.trainer.global_rank > 0:
            # Each DDP rank its own dropout masks: every rank was seeded alike (the same initial weights, which DDP
            # also broadcasts from rank 0), so without this all would drop the same units of their batches. Only
            # dropout draws from the global generators during training (batches are shuffled by seeded generators
            # of their own); torch.manual_seed reseeds the CPU one (the native dropout's seeds) and every CUDA
            # device's. Rank 0 keeps the run's stream, so a one-device run draws exactly as before.
            torch.manual_seed(dropout_seed(self.config.seed, self.trainer.global_rank))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["progress"] = {
            "train_tokens": self.train_tokens,
            "train_src_tokens": self.train_src_tokens,
            "train_seconds": time.perf_counter() - self._fit_started,
        }
        # Dropout draws from the global torch RNG, which Lightning does not checkpoint: without it a resumed run
        # would draw other masks than an uninterrupted one. Tensors only, so weights_only loading accepts it.
        checkpoint["rng"] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        if self.trainer.world_size > 1:
            # Only rank 0 writes the checkpoint (every rank builds it: this is collective): it holds every rank's
            # state, or all ranks would resume drawing rank 0's masks.
            device = self.trainer.strategy.root_device
            gathered = {"torch_ranks": torch.get_rng_state()}
            if device.type == "cuda":
                gathered["cuda_ranks"] = torch.cuda.get_rng_state(device)
            for key, state in gathered.items():
                # A tensor of its own each: set_rng_state crashed (a segfault) on a row of the gathered tensor.
                checkpoint["rng"][key] = [row.clone() for row in self.all_gather(state.to(device)).cpu()]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        progress = checkpoint.get("progress", {})
        self.train_tokens = int(progress.get("train_tokens", 0))
        self.train_src_tokens = int(progress.get("train_src_tokens", 0))
        self.train_seconds = float(progress.get("train_seconds", 0.0))
        rng = checkpoint.get("rng", {})
        rank, world = self.trainer.global_rank, self.trainer.world_size
        if len(rng.get("torch_ranks", ())) == world > 1:
            torch.set_rng_state(rng["torch_ranks"][rank])
            if "cuda_ranks" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state(rng["cuda_ranks"][rank], self.trainer.strategy.root_device)
            return
        if rank > 0:
            return  # saved by another number of ranks: this rank's own stream, from setup
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(rng["cuda"])

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._step_started is None:
            self._step_started = time.perf_counter()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.log("train/lr", optimizer.param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer, schedule = make_optimizer(self.parameters(), self.config)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # --- evaluation -----------------------------------------------------------------------------------------
    def _eval_start(self) -> None:
        self._sums = {
            "loss": torch.zeros((), device=self.device),
            "nll": torch.zeros((), device=self.device),
            "tokens": torch.zeros((), device=self.device),
        }
        self._hypotheses = {}

    def _eval_step(self, batch: dict[str, Any], limit: Optional[int]) -> None:
        logits = self.model(batch["src"], batch["tgt_in"])
        loss_sum, nll_sum = label_smoothed_loss(logits, batch["tgt_out"], self.config.train.eps_ls, self.pad_id)
        self._sums["loss"] += loss_sum
        self._sums["nll"] += nll_sum
        self._sums["tokens"] += batch["n_tgt_tokens"]
        indices = batch["index"].tolist()
        wanted = [i for i, index in enumerate(indices) if limit is None or index < limit]
        if not wanted:
            return
        src = batch["src"] if len(wanted) == len(indices) else batch["src"][wanted]
        ev = self.config.eval
        outputs = beam_search(
            self.model, src, self.bos_id, self.eos_id, ev.beam_size, ev.length_penalty, ev.max_len_offset
        )
        decode = self.trainer.datamodule.decode
        for position, ids in zip(wanted, outputs):
            self._hypotheses[indices[position]] = decode(ids)

    def _gather(self) -> None:
        """Under DDP each rank evaluated its share of the split (data.EvalShard): make the loss sums the totals and
        the hypotheses every rank's, so every rank scores the whole split as one rank would."""
        strategy = self.trainer.strategy
        self._sums = {name: strategy.reduce(total, reduce_op="sum") for name, total in self._sums.items()}
        shares: list[Optional[dict[int, str]]] = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(shares, self._hypotheses)
        self._hypotheses = {index: text for share in shares for index, text in (share or {}).items()}

    def _eval_end(self, split: str, references: list[str], limit: Optional[int]) -> dict[str, Any]:
        if self.trainer.world_size > 1:
            self._gather()
        tokens = self._sums["tokens"].clamp_min(1)
        loss = (self._sums["nll"] / tokens).item()
        result: dict[str, Any] = {
            "loss": loss,
            "ppl": math.exp(min(loss, 50.0)),
            "smoothed_loss": (self._sums["loss"] / tokens).item(),
        }
        n = len(references) if limit is None else min(limit, len(references))
        if len(self._hypotheses) == n and n > 0:
            hypotheses = [self._hypotheses[i] for i in range(n)]
            if self.config.data.task == "parsing":  # outputs are linearised trees: repaired, then EVALB
                result.update(score_parses(hypotheses, self.trainer.datamodule.gold_trees(split)[:n]))
            else:
                result.update(score_translations(hypotheses, references[:n], self.config.data.tgt_lang))
            result["bleu_sentences"] = n
            result["hypotheses"] = hypotheses
        self.results[split] = result
        self.log(f"{split}/loss", loss)
        self.log(f"{split}/ppl", result["ppl"], prog_bar=split == "dev")
        for key in ("bleu", "bleu_tok", "chrf", "f1", "precision", "recall", "invalid"):
            if key in result:
                self.log(f"{split}/{key}", float(result[key]), prog_bar=split == "dev" and key in ("bleu", "f1"))
        return result

    def on_validation_epoch_start(self) -> None:
        self._eval_start()

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, self.bleu_limit)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self._eval_end("dev", self.trainer.datamodule.dev_references, self.bleu_limit)
        self._step_started = None  # evaluation time is not training throughput

    def on_test_epoch_start(self) -> None:
        self._eval_start()

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, None)

    def on_test_epoch_end(self) -> None:
        self._eval_end("test", self.trainer.datamodule.test_references, None)
