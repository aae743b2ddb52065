"""One run: a resolved config in, a run folder with config, checkpoints, curves and metrics out."""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from tqdm.auto import tqdm

from lightning_modules.checkpoints import average_checkpoints, resume_checkpoint, step_checkpoints
from lightning_modules.config import BatchPlan, RunConfig, batch_plan
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID, TranslationDataModule
from lightning_modules.module import TranslationModule

from .provenance import code_commit, hardware, trained_by, worker
from .records import LOG_TAIL_LINES, read_metrics, update_metrics, write_atomic, write_atomic_bytes, write_config

log = logging.getLogger("ablate")
REQUEUE_ENV = "ABLATE_REQUEUE"  # "submitit": train_run leaves requeueing to submitit (no Lightning auto-requeue)


class StepProgress(pl.callbacks.ProgressBar):
    """A progress bar over optimiser steps (not epochs): step, loss, tokens/s, dev BLEU and ETA."""

    SHOWN = ("train/loss", "train/tokens_per_s", "dev/ppl", "dev/bleu", "dev/f1")

    def __init__(self, max_steps: int) -> None:
        super().__init__()
        self.max_steps = max_steps
        self.bar: Optional[tqdm] = None
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.enabled and trainer.is_global_zero:
            self.bar = tqdm(
                total=self.max_steps, initial=trainer.global_step, desc="train", unit="step", dynamic_ncols=True
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if self.bar is None:
            return
        self.bar.update(trainer.global_step - self.bar.n)
        if trainer.global_step % 10 == 0:
            metrics = trainer.progress_bar_metrics
            self.bar.set_postfix(
                {k.split("/")[-1]: f"{float(metrics[k]):.4g}" for k in self.SHOWN if k in metrics}, refresh=False
            )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def is_rank_zero() -> bool:
    """False in the extra ranks of a distributed run, read from the environment before any trainer exists.

    Lightning's DDP launcher re-executes the command with LOCAL_RANK >= 1 (NODE_RANK for other nodes); SLURM tasks
    have SLURM_PROCID; torchrun sets RANK. Rank 0 (the process that launches the others) has none of them set > 0.
    Not Lightning's `rank_zero_only.rank`: it takes the first of RANK, LOCAL_RANK, SLURM_PROCID that is set and
    never reads NODE_RANK, so the first process of a second node (LOCAL_RANK 0) would count as rank 0.
    """
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        value = os.environ.get(key, "0").strip() or "0"
        if value.isdigit() and int(value) > 0:
            return False
    return True


class GlobalTokenCount(pl.Callback):
    """Under DDP each rank counts the tokens of its own batches: make `train_tokens` (target) and `train_src_tokens`
    (source) the counts over all ranks.

    At every checkpoint (saving is collective: every rank dumps, rank 0 writes) and at the end of training, the
    ranks sum what they counted since the last sync, so the checkpoint, a resumed run and the record all hold the
    global counts.
    """

    COUNTS = ("train_tokens", "train_src_tokens")

    def __init__(self) -> None:
        self.base = dict.fromkeys(self.COUNTS, 0)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # restored from the checkpoint on resume: already global
        self.base = {name: getattr(pl_module, name) for name in self.COUNTS}

    def _sync(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size > 1:
            local = torch.tensor(
                [float(getattr(pl_module, name) - self.base[name]) for name in self.COUNTS],
                dtype=torch.float64,
                device=pl_module.device,
            )
            total = trainer.strategy.reduce(local, reduce_op="sum")
            for name, value in zip(self.COUNTS, total.tolist()):
                self.base[name] += int(round(value))
                setattr(pl_module, name, self.base[name])

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._sync(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sync(trainer, pl_module)


def cluster_plugins() -> list:
    """Under SLURM, its environment without Lightning's auto-requeue: Lightning's SIGUSR1 handler writes an
    `hpc_ckpt_N.ckpt` in the middle of a step, which the resume (checkpoints/last.ckpt) never reads. CheckpointOnSignal
    writes last.ckpt at the end of the step instead, and the run requeues after it (`requeue`): never twice."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


# What schedulers send before they stop a job: SLURM's `--signal` (USR1 by Lightning's convention, USR2 by submitit's,
# `ablate sweep --launcher slurm`), and TERM (SLURM's preemption and time limit; `ablate sweep` stopping its runs).
PREEMPTION_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
REQUEUE_SIGNAL = signal.SIGUSR1  # the one after which `ablate train` under SLURM (not submitit) requeues its job


class Preempted(Exception):
    """Training stopped on a preemption signal, at the end of optimiser step `step`, with checkpoints/last.ckpt
    holding that step: a rerun resumes there and loses nothing."""

    def __init__(self, signum: int, step: int) -> None:
        super().__init__(f"{signal.Signals(signum).name}: stopped after step {step}, checkpointed to resume there")
        self.signum, self.step = signum, step


class CheckpointOnSignal(pl.Callback):
    """On a PREEMPTION_SIGNALS signal: finish the optimiser step under way, write `path` (last.ckpt), raise Preempted.

    The handler only notes the signal: checkpointing inside it would save the middle of a step (half-applied
    gradients, a loader position between micro-batches). At each step's end the ranks agree whether any of them was
    signalled (SLURM signals every task, `ablate sweep` the process group, a user perhaps one process), so all save
    together (saving is collective) and stop at the same step. Lightning installs its own SIGTERM handler when fit
    starts; this one replaces it from on_train_start, and Lightning's teardown puts back the handlers from before fit.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received = 0  # the first signal's number; 0: none
        self._step = 0

    def _note(self, signum: int, frame) -> None:
        self.received = self.received or signum

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._step = trainer.global_step
        if threading.current_thread() is threading.main_thread():  # Python lets only the main thread set handlers
            for signum in PREEMPTION_SIGNALS:
                signal.signal(signum, self._note)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if trainer.global_step == self._step:
            return  # a micro-batch that is not a step's last (accumulation), or a skipped step
        self._step = trainer.global_step
        signum = self.received
        if trainer.world_size > 1:
            flag = torch.tensor(signum, dtype=torch.int64, device=pl_module.device)
            signum = int(trainer.strategy.reduce(flag, reduce_op=torch.distributed.ReduceOp.MAX))
        if signum:
            trainer.save_checkpoint(self.path)
            raise Preempted(signum, trainer.global_step)


def requeue(stop: Preempted) -> Optional[str]:
    """After a preemption checkpoint under SLURM (outside submitit, which requeues its own jobs): on REQUEUE_SIGNAL,
    requeue this job as Lightning's auto-requeue did (the job restarts `ablate train`, which resumes). What happened,
    in words; None where nothing is to be requeued."""
    if stop.signum != REQUEUE_SIGNAL or os.environ.get(REQUEUE_ENV) == "submitit" or not cluster_plugins():
        return None
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    if not job.replace("_", "").isdigit():
        return f"not requeued: no SLURM job id ({job!r})"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"requeueing SLURM job {job} failed: {error}"
    if result.returncode:
        return f"requeueing SLURM job {job} failed: {result.stderr.strip() or f'exit code {result.returncode}'}"
    return f"requeued SLURM job {job}"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written like records: serialised in memory, then a temporary file renamed into place.

    Lightning's own writer truncates the target and writes into it (through a temporary file in /tmp, moved across
    file systems), so a kill or a full disk in the middle leaves a truncated `last.ckpt`; here the previous file stays
    whole until the new one is complete on disk, and a failed write (ENOSPC) removes its temporary file and raises.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomic_bytes(Path(path), buffer.getbuffer())


def finish_wandb(failed: bool) -> None:
    """End this process's wandb run, if one was started: WandbLogger never does, so a second train_run in the same
    process (a notebook, a test) would log into the first run. A failed run is marked as such."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=1 if failed else 0)


def csv_logger(run_dir: Path, attempt: int) -> CSVLogger:
    """`<run>/logs/attempt-N/metrics.csv`, the curve records publish and `read_curves` reads.

    A new CSV folder per attempt: resuming into the same folder would delete the earlier rows. Every row is written
    as it is logged (Lightning's default keeps 100 in memory), so a killed run loses none that its last checkpoint
    covers."""
    return CSVLogger(save_dir=str(run_dir), name="logs", version=f"attempt-{attempt}", flush_logs_every_n_steps=1)


def make_loggers(run_dir: Path, config: RunConfig, meta: dict[str, Any], attempt: int) -> list:
    loggers: list = [csv_logger(run_dir, attempt)]
    mode = os.environ.get("WANDB_MODE", "offline")
    if mode != "disabled":
        from .tracking import wandb_logger

        loggers.append(wandb_logger(run_dir, config, meta, mode))
    return loggers


def record_start(
    run_dir: Path, config: RunConfig, meta: dict[str, Any], plan: BatchPlan, nodes: int, started: float, lead: bool
) -> tuple[dict[str, Any], int, list[Optional[str]]]:
    """The lead rank writes config.yaml and records the attempt `running`, clearing an earlier failure's fields.

    Both say how this attempt cuts a step (`plan`: devices over all nodes, tokens per device and micro-batch,
    accumulation): config.yaml under meta.batch, metrics.json at its top level. metrics.json's `attempt_commits`
    gains the commit of the code this attempt runs, read now: the process has imported it, and a checkout that moves
    on before the run ends must not rename the code that trained it. `attempt_workers` gains the worker it runs on
    (a run resumed on another machine or thread count has minutes of both; the record's top level names the last).

    Returns the record as it was before, the attempt's number (1 for a first run): ranks >= 1 start after rank
    0 recorded it, so they read the same number without adding one; and the attempts' commits, this one's last.
    """
    previous = read_metrics(run_dir) or {}
    attempt = int(previous.get("attempts", 0)) + (1 if lead else 0)
    commits = [*(previous.get("attempt_commits") or []), code_commit()] if lead else []
    if lead:
        write_config(run_dir, config, {**meta, "batch": {**plan.to_dict(), "nodes": nodes}})
        cleared = {
            key: None for key in ("reason", "log_tail", "failed_at", "diverged_step") if previous.get(key) is not None
        }  # an earlier failure's
        update_metrics(
            run_dir,
            status="running",
            attempts=attempt,
            seed=config.seed,
            run_id=config.run_id(),
            started_at=started,
            nodes=nodes,
            attempt_commits=commits,
            attempt_workers=[*(previous.get("attempt_workers") or []), worker()],
            **plan.to_dict(),
            **cleared,
        )
    return previous, attempt, commits


def make_data(config: RunConfig) -> TranslationDataModule:
    """The run's data, prepared and set up for fitting (the corpus generated or read, BPE trained or cached)."""
    data = TranslationDataModule(
        config.data,
        seed=config.seed,
        max_positions=config.model.max_positions,
        eval_max_sentences=config.eval.batch_sentences,
    )
    data.prepare_data()
    data.setup("fit")
    return data


def resume_point(run_dir: Path, checkpoints: Path, previous: dict[str, Any], lead: bool) -> Optional[Path]:
    """The checkpoint to resume from; damaged ones are moved away, said on stderr and kept in the record."""
    # Ranks >= 1 start inside rank 0's fit, after it moved damaged checkpoints away: they find the same one.
    resume_from, warnings = resume_checkpoint(checkpoints)
    for warning in warnings:
        log.warning("%s: %s", run_dir, warning)
        print(f"ablate train: warning: {run_dir}: {warning}", file=sys.stderr, flush=True)
    if warnings and lead:
        update_metrics(run_dir, checkpoint_warnings=list(previous.get("checkpoint_warnings") or []) + warnings)
    return resume_from


def fit_trainer(
    config: RunConfig,
    run_dir: Path,
    loggers: list,
    callbacks: Sequence[pl.Callback],
    progress: bool,
    plan: BatchPlan,
    accelerator: str,
    nodes: int = 1,
) -> pl.Trainer:
    """The trainer that fits: step-based, periodic checkpoints written atomically, `callbacks` after its own.

    `plan.devices` ranks in all, `plan.devices // nodes` on each of `nodes` nodes, each accumulating
    `plan.accumulation` micro-batches a step."""
    train_cfg = config.train
    devices = plan.devices // nodes
    periodic = ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="step-{step:07d}",
        auto_insert_metric_name=False,
        every_n_train_steps=train_cfg.checkpoint_every_steps,
        save_top_k=train_cfg.keep_checkpoints,
        monitor="step",
        mode="max",
        save_last=True,
    )
    fit_callbacks: list = [periodic, GlobalTokenCount(), CheckpointOnSignal(run_dir / "checkpoints" / "last.ckpt")]
    if progress:
        fit_callbacks.append(StepProgress(train_cfg.max_steps))
    fit_callbacks += callbacks
    return pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        num_nodes=nodes,
        strategy="ddp" if plan.devices > 1 else "auto",
        plugins=[*cluster_plugins(), AtomicCheckpointIO()],
        max_steps=train_cfg.max_steps,
        max_epochs=-1,
        max_time={"minutes": train_cfg.max_minutes} if train_cfg.max_minutes else None,
        val_check_interval=train_cfg.val_every_steps * plan.accumulation,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        accumulate_grad_batches=plan.accumulation,
        gradient_clip_val=train_cfg.gradient_clip or None,
        precision=train_cfg.precision,
        deterministic=True,
        use_distributed_sampler=False,
        logger=loggers,
        callbacks=fit_callbacks,
        enable_progress_bar=progress,
        enable_model_summary=False,
        default_root_dir=str(run_dir),
        log_every_n_steps=min(10, train_cfg.val_every_steps),
    )


def record_divergence(
    run_dir: Path, module: TranslationModule, started: float, attempt_commits: list[Optional[str]]
) -> dict[str, Any]:
    """A run whose training loss was not finite: `diverged` at that step, with what it had trained and the code
    that trained it."""
    step, loss = module.diverged["step"], module.diverged["loss"]
    return update_metrics(
        run_dir,
        status="diverged",
        commit=trained_by(attempt_commits),
        diverged_step=step,
        steps=step - 1,
        reason=f"training loss {loss} at step {step}",
        train_tokens=module.train_tokens,
        train_seconds=module.train_seconds,
        wall_seconds=time.time() - started,
        diverged_at=time.time(),
    )


def average_last(module: TranslationModule, config: RunConfig, checkpoints: Path) -> int:
    """Load the mean of the last `eval.average_last` periodic checkpoints into `module`; how many were averaged
    (0, loading nothing, when fewer than two exist)."""
    averaged = 0
    if config.eval.average_last > 1:
        paths = step_checkpoints(checkpoints)[-config.eval.average_last :]
        if len(paths) > 1:
            module.load_state_dict(average_checkpoints(paths))
            averaged = len(paths)
    return averaged


AVERAGED_KEYS = ("loss", "ppl", "bleu", "bleu_tok", "chrf")


def final_evaluation(
    module: TranslationModule,
    data: TranslationDataModule,
    config: RunConfig,
    run_dir: Path,
    loggers: list,
    attempt: int,
    accelerator: str,
    steps: int = 0,
    averaged: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Dev and test results of the trained model (`averaged`: of the checkpoint average loaded into it), its
    hypotheses written beside the record (dev.hyp, or dev.averaged.hyp).

    Logged at `steps` (the run's trained steps: the CSV `-final` log's `step` and wandb's `trainer/global_step`),
    so the final scores sit at the end of the run's step axis, not at 0. The average's scores go to a CSV log of
    their own (`-final-averaged`) and not to wandb, where they would overwrite the last checkpoint's."""
    suffix = ".averaged" if averaged else ""
    module.bleu_limit = None
    # A trainer of its own for the final evaluation: evaluating through the fit trainer would rewrite its CSV log.
    evaluator = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        plugins=cluster_plugins(),
        precision=config.train.precision,
        deterministic=True,
        use_distributed_sampler=False,
        logger=[
            CSVLogger(save_dir=str(run_dir), name="logs", version=f"attempt-{attempt}-final{suffix.replace('.', '-')}"),
            *([] if averaged else loggers[1:]),
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    # Lightning logs an evaluation's epoch-end metrics at the fit loop's count of optimiser steps: a fresh trainer's
    # is 0. Set it to the steps trained (a counter of the loop, read only for logging here).
    evaluator.fit_loop.epoch_loop._batches_that_stepped = steps
    evaluator.validate(module, datamodule=data, verbose=False)
    evaluator.test(module, datamodule=data, verbose=False)
    dev, test = module.results["dev"], module.results["test"]
    write_atomic(run_dir / f"dev{suffix}.hyp", "\n".join(dev.get("hypotheses", [])) + "\n")
    write_atomic(run_dir / f"test{suffix}.hyp", "\n".join(test.get("hypotheses", [])) + "\n")
    for split, result in (("dev", dev), ("test", test)):
        if "trees" in result:  # parsing: the outputs repaired into trees, as EVALB scored them
            write_atomic(run_dir / f"{split}{suffix}.parse", "\n".join(result["trees"]) + "\n")
    return dev, test


def translation_scores(dev: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    return {
        "dev_bleu": dev.get("bleu"),
        "dev_bleu_tok": dev.get("bleu_tok"),
        "dev_chrf": dev.get("chrf"),
        "test_bleu": test.get("bleu"),
        "test_bleu_tok": test.get("bleu_tok"),
        "test_chrf": test.get("chrf"),
        "sacrebleu_signature": test.get("sacrebleu_signature"),
        "bleu_tok_signature": test.get("bleu_tok_signature"),
    }


PARSE_SCORES = ("f1", "precision", "recall", "exact", "invalid", "repairs", "evalb_errors", "sentences")


def parse_scores(dev: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """A parsing run's scores, recorded as BLEU is for translation: EVALB F1, precision and recall on dev and test,
    with how many outputs were invalid and how they were repaired (lightning_modules.parsing.score)."""
    scores = {
        f"{split}_{key}": result.get(key) for split, result in (("dev", dev), ("test", test)) for key in PARSE_SCORES
    }
    return {**scores, "parse_signature": test.get("parse_signature")}


def result_metrics(
    config: RunConfig,
    module: TranslationModule,
    trainer: pl.Trainer,
    dev: dict[str, Any],
    test: dict[str, Any],
    averaged: Optional[dict[str, Any]],
    started: float,
    attempt_commits: list[Optional[str]],
) -> dict[str, Any]:
    """The finished run's record: dev and test scores of the last checkpoint (Table 3's protocol), those of the
    checkpoint average under `averaged` when the run asks for one (Table 2's), cost, and what ran it (`commit`:
    the code its attempts started from, `trained_by`)."""
    train_seconds = module.train_seconds
    wall = time.time() - started
    scores = parse_scores(dev, test) if config.data.task == "parsing" else translation_scores(dev, test)
    return {
        "dev_loss": dev["loss"],
        "dev_ppl": dev["ppl"],
        **scores,
        "test_loss": test["loss"],
        "test_ppl": test["ppl"],
        "params": module.params,
        "steps": trainer.global_step,
        "train_tokens": module.train_tokens,
        "train_src_tokens": module.train_src_tokens,
        # Measured (real, non-pad) tokens per optimiser step, over all devices: what batch_tokens bounds, padding
        # included, per side.
        "tokens_per_step_measured": module.train_tokens / max(trainer.global_step, 1),
        "src_tokens_per_step_measured": module.train_src_tokens / max(trainer.global_step, 1),
        "train_seconds": train_seconds,
        "wall_seconds": wall,
        "train_tokens_per_second": module.train_tokens / max(train_seconds, 1e-9),
        # The checkpoints averaged into the scores above: none since the average is evaluated beside the last
        # checkpoint (records from before hold the count their scores were averaged over).
        "averaged_checkpoints": 0,
        "averaged": averaged,
        "seed": config.seed,
        "status": "done" if math.isfinite(dev["loss"]) else "diverged",
        **hardware(),
        "commit": trained_by(attempt_commits),
    }


def record_failure(run_dir: Path, error: Exception) -> None:
    """Record why before re-raising, so the folder says `failed` rather than a `running` nobody runs."""
    try:
        update_metrics(
            run_dir,
            status="failed",
            reason=f"{type(error).__name__}: {error}",
            log_tail=traceback.format_exc().splitlines()[-LOG_TAIL_LINES:],
            failed_at=time.time(),
        )
    except Exception:  # e.g. a full disk: the original error matters more
        log.exception("could not record the failure of %s", run_dir)


def train_run(
    config: RunConfig,
    run_dir: Path,
    meta: Optional[dict[str, Any]] = None,
    progress: bool = True,
    devices: int = 1,
    accelerator: str = "auto",
    callbacks: Sequence[pl.Callback] = (),
    nodes: int = 1,
) -> dict[str, Any]:
    """Train and evaluate one run in `run_dir`, resuming from its last checkpoint if there is one.

    `callbacks` join the fit trainer's own (checkpointing, the token count, the progress bar): `ablate train`
    passes a search trial's pruning callback there.

    `devices` x `nodes` > 1: Lightning DDP with that many ranks, `devices` per node (`strategy="ddp"` re-executes
    the command for ranks >= 1; under SLURM the job's tasks are the ranks). A step is `data.batch_tokens` per side
    over all ranks: each packs its share (`batch_plan`), accumulating micro-batches where `data.device_batch_tokens`
    caps it. Only rank 0 writes records and runs the final evaluation; the other ranks return {} after training.

    On a preemption signal (SIGUSR1, SIGUSR2, SIGTERM) it checkpoints at the end of the step under way, records the
    stop under `preemptions` and raises Preempted (after requeueing a SLURM job on SIGUSR1: `requeue`).
    """
    run_dir = Path(run_dir)
    meta = dict(meta or {})
    meta.setdefault("run_id", config.run_id())
    lead = is_rank_zero()
    started = time.time()
    if devices < 1 or nodes < 1:
        raise ValueError(f"devices = {devices}, nodes = {nodes}: expected positive integers")
    plan = batch_plan(config.data, devices * nodes)  # before anything is recorded: a ValueError names the field
    previous, attempt, commits = record_start(run_dir, config, meta, plan, nodes, started, lead)
    try:
        pl.seed_everything(config.seed, workers=True, verbose=False)
        data = make_data(config)
        module = TranslationModule(config, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
        checkpoints = run_dir / "checkpoints"
        resume_from = resume_point(run_dir, checkpoints, previous, lead)
        loggers = make_loggers(run_dir, config, meta, attempt)
        trainer = fit_trainer(config, run_dir, loggers, callbacks, progress, plan, accelerator, nodes)
        # weights_only: a checkpoint is data, never code (tensors, numbers, strings and containers only).
        trainer.fit(module, datamodule=data, ckpt_path=str(resume_from) if resume_from else None, weights_only=True)
        if not trainer.is_global_zero:
            return {}  # rank 0 evaluates and records
        if module.diverged is not None:
            return record_divergence(run_dir, module, started, commits)
        if trainer.world_size > 1 and torch.distributed.is_initialized():
            # Rank 0 evaluates alone: with the group still up, the evaluation waited on the departed ranks (a hang).
            torch.distributed.destroy_process_group()
        steps = trainer.global_step
        dev, test = final_evaluation(module, data, config, run_dir, loggers, attempt, accelerator, steps)
        averaged = None
        count = average_last(module, config, checkpoints)  # the last checkpoint is scored: now the average
        if count:
            mean_dev, mean_test = final_evaluation(
                module, data, config, run_dir, loggers, attempt, accelerator, steps, averaged=True
            )
            averaged = {"checkpoints": count}
            for split, result in (("dev", mean_dev), ("test", mean_test)):
                averaged.update({f"{split}_{key}": result.get(key) for key in AVERAGED_KEYS})
        return update_metrics(run_dir, **result_metrics(config, module, trainer, dev, test, averaged, started, commits))
    except Preempted as stop:
        # Still `running` (the folder reads stale, so `ablate sweep` resumes it), with the stop on record.
        if lead:
            note = {"signal": signal.Signals(stop.signum).name, "step": stop.step, "at": time.time()}
            update_metrics(run_dir, preemptions=list(previous.get("preemptions") or []) + [note])
            requeued = requeue(stop)
            if requeued:
                print(f"ablate train: {run_dir}: {requeued}", file=sys.stderr, flush=True)
        raise
    except Exception as error:
        if lead:
            record_failure(run_dir, error)
        raise
    finally:
        finish_wandb(failed=isinstance(sys.exc_info()[1], Exception))
