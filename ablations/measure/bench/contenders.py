"""What the bench times: the training contenders, the decoders, and our bare loop with one lever switched."""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from lightning_modules import native
from lightning_modules.beam_search import beam_search
from lightning_modules.config import ModelConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID
from lightning_modules.module import TranslationModule, label_smoothed_loss, make_optimizer
from lightning_modules.positional import sinusoids
from lightning_modules.transformer import MultiHeadAttention, Transformer

from .options import BenchOptions
from .timing import Mark, synchronize, timed_loop

# ---------------------------------------------------------------------------------------------------------------
# Training contenders: each a callable that trains on the warm-up batch, then times the rest
# ---------------------------------------------------------------------------------------------------------------


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16-mixed" else nullcontext()


def plain_step(
    forward: Callable[[dict[str, Any]], Tensor],
    optimizer,
    schedule,
    device: torch.device,
    precision: str,
    eps_ls: float,
) -> Callable[[dict[str, Any]], None]:
    """One training step with no Lightning: forward, label-smoothed loss, backward, Adam, schedule."""

    def step(batch: dict[str, Any]) -> None:
        with autocast(device, precision):
            logits = forward(batch)
            loss_sum, _ = label_smoothed_loss(logits, batch["tgt_out"], eps_ls, PAD_ID)
        (loss_sum / batch["n_tgt_tokens"]).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)

    return step


class _StepTimer:
    """A Lightning callback timing from the end of the first (warm-up) batch to the end of the last."""

    def __init__(self, last_batch: int, device: torch.device):
        from lightning.pytorch.callbacks import Callback

        timer = self

        class Timer(Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
                if batch_idx in (0, last_batch):
                    synchronize(device)
                    timer.marks.append(Mark.now())

        self.callback = Timer()
        self.marks: list[Mark] = []

    def seconds(self) -> dict[str, float]:
        if len(self.marks) != 2:
            raise RuntimeError(f"the Lightning contender ran {len(self.marks)} timed marks, expected 2")
        return self.marks[0].until(self.marks[1])


def lightning_contender(
    module: TranslationModule, batches: list[dict[str, Any]], options: BenchOptions, device: torch.device
) -> Callable[[], dict[str, float]]:
    """Our training step as `ablate train` runs it: a Trainer fitting the module for len(batches) steps."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    def measure() -> dict[str, float]:
        timer = _StepTimer(len(batches) - 1, device)
        trainer = pl.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=1,
            max_steps=len(batches),
            max_epochs=-1,
            precision=options.precision,
            deterministic=True,
            use_distributed_sampler=False,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=[timer.callback],
        )
        trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None, shuffle=False))
        return timer.seconds()

    return measure


class TorchTransformerModel(nn.Module):
    """torch.nn.Transformer at our dimensions, with our scaled tied embeddings, sinusoids and output projection.

    nn.Transformer always ends both stacks with a LayerNorm (two more than the paper's post-norm model).
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.transformer = nn.Transformer(
            cfg.d_model,
            cfg.h,
            cfg.N,
            cfg.N,
            cfg.d_ff,
            cfg.P_drop,
            activation="relu",
            batch_first=True,
            norm_first=False,
        )
        self.register_buffer("sinusoids", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.dropout = nn.Dropout(cfg.P_drop)
        self.scale = math.sqrt(cfg.d_model)

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embed(tokens) * self.scale + self.sinusoids[: tokens.shape[1]])

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        pad = src == PAD_ID
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        hidden = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
            tgt_is_causal=True,
        )
        return hidden @ self.embed.weight.T


# ---------------------------------------------------------------------------------------------------------------
# Decoding contenders
# ---------------------------------------------------------------------------------------------------------------


MAX_LEN_OFFSET = 50  # the paper's: output length <= input length + 50


def decode_ours(model: Transformer, sources: list[Tensor], beam_size: int, use_cache: bool) -> list[list[int]]:
    """Our beam search with HF generate's length cap: per batch, the longest source + 50 (ours is per sentence)."""
    outputs: list[list[int]] = []
    for src in sources:
        longest = int((src != PAD_ID).sum(dim=1).max())
        outputs += beam_search(
            model,
            src,
            BOS_ID,
            EOS_ID,
            beam_size,
            0.0,
            longest + MAX_LEN_OFFSET,
            max_len=longest + MAX_LEN_OFFSET,
            use_cache=use_cache,
        )
    return outputs


@torch.no_grad()
def decode_hf(marian: nn.Module, sources: list[Tensor], beam_size: int) -> list[list[int]]:
    """HF generate with our search's settings: beam K, no length penalty, PAD and BOS never generated, at most
    the batch's longest source + 50 tokens before the EOS.

    The same cap as ours: our search lets L tokens be followed only by EOS (L + 1 new tokens, the last EOS), so HF
    gets L + 1 new tokens with EOS forced at the last (forced_eos_token_id); without it HF's capped hypotheses would
    carry an (L + 1)-th ordinary token instead and score without EOS's log-probability."""
    outputs: list[list[int]] = []
    for src in sources:
        longest = int((src != PAD_ID).sum(dim=1).max())
        generated = marian.generate(
            input_ids=src,
            attention_mask=src != PAD_ID,
            num_beams=beam_size,
            length_penalty=0.0,
            early_stopping=False,
            do_sample=False,
            max_new_tokens=longest + MAX_LEN_OFFSET + 1,
            decoder_start_token_id=BOS_ID,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
            suppress_tokens=[PAD_ID, BOS_ID],
            forced_eos_token_id=EOS_ID,
            num_return_sequences=1,
        )
        for row in generated[:, 1:].tolist():  # drop the decoder start token
            outputs.append(row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID])
    return outputs


# ---------------------------------------------------------------------------------------------------------------
# Levers: each timed against its alternative, interleaved, on the bare loop of our model
# ---------------------------------------------------------------------------------------------------------------


ATTENTION_KERNELS = ("default", "sdpa", "explicit")


def use_attention_kernel(model: nn.Module, name: str) -> nn.Module:
    """The model's attention with the kernel it would choose per call ("default"), or forced to SDPA or to explicit
    matmuls: set on each of its attention modules, so no other model is touched."""
    if name not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel {name!r}: expected one of {', '.join(ATTENTION_KERNELS)}")
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.kernel = None if name == "default" else name
    return model


def lever_contender(
    options: BenchOptions,
    batches: list[dict[str, Any]],
    device: torch.device,
    *,
    precision: str,
    fused_adam: Optional[bool] = None,
    attention: str = "default",
    compiled: bool = False,
    native_kernels: bool = True,
) -> Callable[[], dict[str, float]]:
    run = options.run_config()
    torch.manual_seed(options.seed)
    model = use_attention_kernel(Transformer(run.model, run.data.vocab_size, PAD_ID).to(device).train(), attention)
    forward_model = torch.compile(model, dynamic=True) if compiled else model
    optimizer, schedule = make_optimizer(model.parameters(), run, fused=fused_adam)
    step = plain_step(
        lambda b: forward_model(b["src"], b["tgt_in"]), optimizer, schedule, device, precision, run.train.eps_ls
    )

    def measure() -> dict[str, float]:
        with native.switched(native_kernels):
            return timed_loop(step, batches, device)

    return measure
