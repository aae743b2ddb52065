"""The decoding comparison's model: ours at the bench's dimensions after a short run on the bench's corpus, cached.

Untrained weights send every hypothesis to the length cap, so the decoders would be compared on work no trained model
does and HF's and our stopping rules would never be exercised. A few hundred steps on the built-in corpus (minutes on
one core) are enough for hypotheses to end with EOS at about the references' lengths. The weights are cached in the
data cache, keyed by everything that determines them, so the bf16 and fp32 benches (and reruns) decode the same model
and pay for its training once. It trains in fp32 at any --precision: the weights do not depend on the precision being
timed.

The model is pre-norm (HF's M2M100 holds it for generate; marian.hf_from_ours): the paper's post-norm at the bench's
width stays on the unigram plateau for the whole of a short run (measured at d_model 128: training loss 5.18 at step
500 of a 2.2e-3 peak, warm-up 400, where pre-norm is past it), and a decoder that only emits the most frequent words
would test nothing. Decoding costs the same either way: one norm more per stack.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch

from lightning_modules.config import RunConfig
from lightning_modules.data import PAD_ID
from lightning_modules.data.cache import cache_key, default_cache_dir
from lightning_modules.module import make_optimizer
from lightning_modules.transformer import Transformer

from .contenders import plain_step
from .options import BenchOptions

FORMAT = 2  # bump when the training below changes, so no stale checkpoint is reused


def checkpoint_path(options: BenchOptions) -> Path:
    """Where the trained decoding model of `options` is cached: keyed by what its weights depend on."""
    run = decoding_run_config(options)
    payload = {
        "kind": "bench-decoding-model",
        "format": FORMAT,
        "model": dataclasses.asdict(run.model),
        "data": dataclasses.asdict(run.data),
        "train": dataclasses.asdict(run.train),
        "train_steps": options.decode_train_steps,
        "seed": options.seed,
        "torch": torch.__version__.split("+")[0],
    }
    return default_cache_dir(run.data) / "bench" / f"decoding-model-{cache_key(payload)[:16]}.pt"


def train_decoding_model(
    options: BenchOptions,
    batches_of_epoch: Callable[[int], Iterable[dict[str, Any]]],
    device: torch.device,
    progress: Callable[[str], None] = lambda message: None,
) -> tuple[Transformer, dict[str, Any]]:
    """Our model after `options.decode_train_steps` fp32 steps over `batches_of_epoch(0)`, `(1)`, ... (loaded from
    the cache when it holds them); with what was done: steps, whether it was cached, seconds, the last losses."""
    run = decoding_run_config(options)
    torch.manual_seed(options.seed)
    model = Transformer(run.model, options.vocab_size, PAD_ID).to(device)
    path = checkpoint_path(options)
    if path.is_file():
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
        return model.eval(), {"steps": options.decode_train_steps, "cached": True, "checkpoint": str(path)}
    progress(f"decoding model: training {options.decode_train_steps} steps (cached afterwards in {path.parent})")
    started = time.process_time()
    model.train()
    optimizer, schedule = make_optimizer(model.parameters(), run)
    losses: list[float] = []

    def forward(batch: dict[str, Any]) -> torch.Tensor:
        logits = model(batch["src"], batch["tgt_in"])
        losses.append(
            float(
                torch.nn.functional.cross_entropy(
                    logits.detach().flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD_ID
                )
            )
        )
        return logits

    step = plain_step(forward, optimizer, schedule, device, run.train.precision, run.train.eps_ls)
    done, epoch = 0, 0
    while done < options.decode_train_steps:
        before = done
        for batch in batches_of_epoch(epoch):
            if done == options.decode_train_steps:
                break
            step(batch)
            done += 1
        if done == before:
            raise RuntimeError("the decoding model's corpus has no training batches")
        epoch += 1
    save_atomically(model.state_dict(), path)
    info = {
        "steps": done,
        "cached": False,
        "checkpoint": str(path),
        "train_cpu_seconds": time.process_time() - started,
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),  # unsmoothed cross-entropy, mean of the last 10 steps
    }
    return model.eval(), info


def decoding_run_config(options: BenchOptions) -> RunConfig:
    """The bench's run, pre-norm, at the tiny preset's rate (lr_scale 0.5) with a warm-up of two fifths of the steps
    (the paper's 4,000 of 100,000 would leave a short run cold)."""
    run = options.run_config()
    return dataclasses.replace(
        run,
        model=dataclasses.replace(run.model, norm_placement="pre"),
        train=dataclasses.replace(  # fp32 at any --precision, so the bf16 and fp32 benches share the checkpoint
            run.train, lr_scale=0.5, warmup_steps=max(1, 2 * options.decode_train_steps // 5), precision="32-true"
        ),
    )


def save_atomically(state: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(handle)
    try:
        torch.save(state, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def output_lengths(outputs: list[list[int]], cap: Optional[list[int]] = None) -> dict[str, float]:
    """Mean output length and the fraction of hypotheses at their cap (no EOS before it), when caps are given."""
    n = max(len(outputs), 1)
    result = {"mean_output_tokens": sum(len(o) for o in outputs) / n}
    if cap is not None:
        result["at_length_cap"] = sum(len(o) >= c for o, c in zip(outputs, cap)) / n
    return result
