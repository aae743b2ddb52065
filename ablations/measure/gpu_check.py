"""`ablate gpu-check`: one short, prepared check of a GPU before paper-scale runs are paid for.

It measures, with the bench's instruments (ablations/measure/bench: our training step through a Lightning Trainer as
`ablate train` runs it, our beam search, interleaved rounds and medians, model FLOPs and peak memory):

* bf16 training tokens/s, MFU and peak memory of base and big at the paper's dimensions with a 37,000-piece
  vocabulary, on token-budget batches of synthetic WMT-like lengths, at the paper's 25,000 tokens per device (one
  GPU) and at 3,125 (its share of a step on 8 GPUs);
* beam-4 decoding sentences/s of base (untrained weights: every hypothesis runs to the length cap, source + 50,
  the slowest case);
* a 2-process DDP smoke (NCCL on two GPUs, else gloo on CPU): `ablate train` on 2 ranks and on 1 process with
  the same per-device budget must train steps of the same number of tokens.

Each training entry also records `planned_flops_per_s`: the dry run's FLOP count of a step (training_flops over
the per-device budget) per measured second, the rate `ablate sweep --dry-run` prices GPU-hours at
(ablations/launch/cost.py). `--quick` shrinks every dimension so that it runs on a CPU in a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from lightning_modules.config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID, TokenBudgetBatchSampler, collate_pairs
from lightning_modules.flops import parameter_count, step_flops, training_flops
from lightning_modules.module import TranslationModule
from lightning_modules.transformer import Transformer

from .bench.contenders import decode_ours, lightning_contender
from .bench.options import BenchOptions, machine
from .bench.timing import bf16_peak_flops, interleave, median_seconds, peak_memory_mib, reset_peak_memory, timed

JSON_FILE, MARKDOWN_FILE = "gpu_check.json", "gpu_check.md"
FIRST_ID = 4  # ids below are PAD, UNK, BOS, EOS


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    d_model: int
    d_ff: int
    h: int
    N: int
    P_drop: float


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """What the check measures: the paper's models and batches, or (quick) a CPU-sized stand-in."""

    models: tuple[Model, ...]
    device_tokens: tuple[int, ...]  # per-device budgets per side: one GPU's paper step, and 8 GPUs' share of it
    vocab_size: int
    rounds: int
    timed_batches: int
    decode_sentences: int
    decode_batch_sentences: int
    quick: bool

    @classmethod
    def paper(cls) -> "CheckOptions":
        return cls(
            models=(Model("base", 512, 2048, 8, 6, 0.1), Model("big", 1024, 4096, 16, 6, 0.3)),
            device_tokens=(25_000, 3_125),
            vocab_size=37_000,
            rounds=3,
            timed_batches=8,
            decode_sentences=512,
            decode_batch_sentences=128,
            quick=False,
        )

    @classmethod
    def quick_cpu(cls) -> "CheckOptions":
        return cls(
            models=(Model("base", 32, 64, 4, 1, 0.1), Model("big", 64, 128, 4, 1, 0.3)),
            device_tokens=(1024, 256),
            vocab_size=500,
            rounds=2,
            timed_batches=2,
            decode_sentences=8,
            decode_batch_sentences=8,
            quick=True,
        )


# --------------------------------------------------------------------------------------------------------------
# Synthetic WMT-like batches


def wmt_like_lengths(pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Word-piece lengths shaped like WMT14 En-De under a 37k BPE: log-normal sources (median 24, a long right
    tail), targets about 10 % longer, both capped at 254 (+1 for EOS/BOS stays within data.max_tokens 256)."""
    rng = np.random.default_rng(seed)
    src = np.clip(np.rint(rng.lognormal(math.log(24), 0.6, pairs)), 1, 254).astype(np.int64)
    tgt = np.clip(np.rint(src * rng.uniform(0.9, 1.3, pairs)), 1, 254).astype(np.int64)
    return src, tgt


def synthetic_batches(
    budget: int, count: int, vocab_size: int, device: torch.device, seed: int = 0
) -> list[dict[str, Any]]:
    """`count` training batches as TokenBudgetBatchSampler packs them at `budget` tokens per side, of random word
    pieces, moved to `device`."""
    src_len, tgt_len = wmt_like_lengths(max(200_000, 40 * budget // 24), seed)
    sampler = TokenBudgetBatchSampler(src_len + 1, tgt_len + 1, budget, seed=seed)
    rng = np.random.default_rng(seed + 1)
    batches = []
    for indices in sampler.batches(0)[:count]:
        items = [
            (i, rng.integers(FIRST_ID, vocab_size, src_len[i]), rng.integers(FIRST_ID, vocab_size, tgt_len[i]))
            for i in indices
        ]
        batch = collate_pairs(items)
        batches.append({k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
    return batches


# --------------------------------------------------------------------------------------------------------------
# Measurements


def bench_options(model: Model, options: CheckOptions, budget: int, device: torch.device) -> BenchOptions:
    return BenchOptions(
        d_model=model.d_model,
        d_ff=model.d_ff,
        heads=model.h,
        layers=model.N,
        P_drop=model.P_drop,
        vocab_size=options.vocab_size,
        batch_tokens=budget,
        precision="bf16-mixed",
        device=device.type,
    )


def measure_training(model: Model, options: CheckOptions, budget: int, device: torch.device) -> dict[str, Any]:
    """bf16 training of `model` at `budget` tokens per device: the bench's Lightning contender over the rounds."""
    bench = bench_options(model, options, budget, device)
    run = bench.run_config()
    batches = synthetic_batches(budget, options.timed_batches + 1, options.vocab_size, device)
    torch.manual_seed(0)
    module = TranslationModule(run, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID).to(device)
    reset_peak_memory(device)
    rounds = interleave({"ours": lightning_contender(module, batches, bench, device)}, options.rounds)["ours"]
    seconds = median_seconds(rounds, "wall")
    timed_batches = batches[1:]
    steps = len(timed_batches)
    flops = sum(
        step_flops(run.model, options.vocab_size, tuple(b["src"].shape), tuple(b["tgt_in"].shape))
        for b in timed_batches
    )
    peak = bf16_peak_flops(device, None)
    planned = training_flops(run.model, options.vocab_size, float(budget * steps))
    del module
    return {
        "name": model.name if budget == options.device_tokens[0] else f"{model.name}@{budget}",
        "model": dataclasses.asdict(model),
        "params": parameter_count(run.model, options.vocab_size),
        "device_tokens": budget,
        "steps_timed": steps,
        "seconds_per_step": seconds / steps,
        "tokens_per_s": sum(b["n_tgt_tokens"] for b in timed_batches) / seconds,
        "src_tokens_per_s": sum(b["n_src_tokens"] for b in timed_batches) / seconds,
        "model_flops_per_s": flops / seconds,
        "mfu": flops / seconds / peak if peak else None,
        "planned_flops_per_s": planned / seconds,
        "peak_memory_mib": peak_memory_mib(device),
        "batches": [{"src": list(b["src"].shape), "tgt": list(b["tgt_in"].shape)} for b in timed_batches],
    }


def measure_decoding(model: Model, options: CheckOptions, device: torch.device) -> dict[str, Any]:
    """Beam-4 sentences/s of `model` (untrained: every hypothesis runs to the cap) with the bench's decoder."""
    bench = bench_options(model, options, options.device_tokens[0], device)
    cfg = bench.model_config()
    torch.manual_seed(0)
    net = Transformer(cfg, options.vocab_size, PAD_ID).to(device).eval()
    src_len, _ = wmt_like_lengths(options.decode_sentences, seed=7)
    rng = np.random.default_rng(8)
    sources = []
    order = np.argsort(src_len, kind="stable")  # length-sorted batches, as evaluation batches them
    for start in range(0, len(order), options.decode_batch_sentences):
        rows = order[start : start + options.decode_batch_sentences]
        items = [(int(i), rng.integers(FIRST_ID, options.vocab_size, src_len[i]), np.zeros(0, np.int64)) for i in rows]
        sources.append(collate_pairs(items)["src"].to(device))
    decode_ours(net, sources[:1], 4, use_cache=True)  # warm-up: kernels, allocator
    reset_peak_memory(device)
    seconds, outputs = timed(lambda: decode_ours(net, sources, 4, use_cache=True), device)
    return {
        "name": model.name,
        "beam_size": 4,
        "sentences": options.decode_sentences,
        "batch_sentences": options.decode_batch_sentences,
        "sentences_per_s": options.decode_sentences / seconds["wall"],
        "mean_output_tokens": float(np.mean([len(o) for o in outputs])),
        "peak_memory_mib": peak_memory_mib(device),
        "weights": "untrained: every hypothesis runs to the length cap (source + 50), the slowest case",
    }


def ddp_smoke(device: torch.device, work: Path, timeout: float = 300) -> dict[str, Any]:
    """`ablate train` of a 4,096-token step on 2 ranks (accumulating 2 micro-batches of 1,024) against 1 process
    accumulating 4 of the same size: the two must train steps of the same size (measured real tokens per step from
    metrics.json), within 5 %. Not exactly: each world size splits the largest batches to make the epoch's batch
    count divisible by it, which reshuffles their order; on 8,000 pairs over 8 steps that moved it 2 % here."""
    from lightning_modules.data.generated import write_corpus

    from ..records import write_config

    two_gpus = device.type == "cuda" and torch.cuda.device_count() >= 2
    accelerator = "gpu" if two_gpus else "cpu"
    corpus = write_corpus(work / "corpus", train_pairs=8000, dev_pairs=8, test_pairs=8)
    config = RunConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=64, h=4, P_drop=0.0, max_positions=128),
        data=DataConfig(
            dataset="dir",
            path=str(corpus),
            vocab_size=96,
            batch_tokens=4096,
            device_batch_tokens=1024,
            max_tokens=64,
            cache_dir=str(work / "c"),
        ),
        train=TrainConfig(max_steps=8, warmup_steps=2, val_every_steps=100, checkpoint_every_steps=100),
        eval=EvalConfig(beam_size=1, max_len_offset=10, dev_bleu_sentences=4),
    )
    runs = {
        "one_process": (config, ["--accelerator", accelerator]),
        "two_ranks": (config, ["--devices", "2", "--accelerator", accelerator]),
    }
    records: dict[str, Any] = {}
    started = time.perf_counter()
    for name, (run, extra) in runs.items():
        run_dir = work / name
        write_config(run_dir, run, {"sweep": "gpu-check", "row": name})
        argv = [
            sys.executable,
            "-m",
            "ablations.cli",
            "train",
            "--config",
            str(run_dir / "config.yaml"),
            "--run-dir",
            str(run_dir),
            *extra,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ddp_env())
        if proc.returncode != 0:
            return {
                "ok": False,
                "backend": "nccl" if two_gpus else "gloo",
                "failed": name,
                "log_tail": (proc.stdout + proc.stderr)[-3000:],
            }
        records[name] = json.loads((run_dir / "metrics.json").read_text())
    one, two = records["one_process"], records["two_ranks"]
    measured = {name: r["tokens_per_step_measured"] for name, r in records.items()}
    return {
        "ok": abs(measured["two_ranks"] - measured["one_process"]) <= 0.05 * measured["one_process"],
        "backend": "nccl" if two_gpus else "gloo",
        "accelerator": accelerator,
        "tokens_per_step_measured": measured,
        "tokens_per_step_planned": two["tokens_per_step"],
        "plans": {
            name: {k: r[k] for k in ("devices", "device_batch_tokens", "accumulate_grad_batches")}
            for name, r in records.items()
        },
        "same_train_tokens": one["train_tokens"] == two["train_tokens"],
        "seconds": time.perf_counter() - started,
    }


def ddp_env() -> dict[str, str]:
    import os

    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        env.pop(key, None)
    return env


def run_check(
    options: CheckOptions, device: torch.device, progress: Callable[[str], None] = lambda message: None
) -> dict[str, Any]:
    started = time.perf_counter()
    training = []
    for model in options.models:
        for budget in options.device_tokens:
            progress(f"training {model.name} at {budget:,} tokens per device")
            training.append(measure_training(model, options, budget, device))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    progress("decoding base, beam 4")
    decoding = measure_decoding(options.models[0], options, device)
    progress("DDP smoke: 2 processes")
    with tempfile.TemporaryDirectory() as work:
        ddp = ddp_smoke(device, Path(work))
    return {
        "device": device.type,
        "quick": options.quick,
        "precision": "bf16-mixed",
        "vocab_size": options.vocab_size,
        "training": training,
        "decoding": decoding,
        "ddp": ddp,
        "machine": machine(),
        "seconds": time.perf_counter() - started,
    }


# --------------------------------------------------------------------------------------------------------------
# Report


def percent(value: Optional[float]) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def to_markdown(result: dict[str, Any], command: str) -> str:
    m = result["machine"]
    lines = [
        "# GPU check" + (" (quick: CPU-sized dimensions, a smoke test, not a result)" if result["quick"] else ""),
        "",
        f"- command: `{command}`",
        f"- device: {result['device']} ({m.get('gpu') or m.get('cpu')}); torch {m['torch']}, lightning "
        f"{m['lightning']}; commit {m['commit']}",
        f"- {result['precision']} training through a Lightning Trainer as `ablate train` runs it (deterministic), "
        f"vocabulary {result['vocab_size']:,}, token-budget batches of synthetic WMT-like lengths; medians of "
        f"interleaved rounds; took {result['seconds']:.0f} s",
        "",
        "| model | params | tokens/device | s/step | target tokens/s | MFU | peak memory (MiB) | planned FLOP/s |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in result["training"]:
        lines.append(
            f"| {t['name']} | {t['params'] / 1e6:.1f}M | {t['device_tokens']:,} | {t['seconds_per_step']:.4f} | "
            f"{t['tokens_per_s']:,.0f} | {percent(t['mfu'])} | {t['peak_memory_mib']:,.0f} | "
            f"{t['planned_flops_per_s']:.3g} |"
        )
    d = result["decoding"]
    lines += [
        "",
        f"Decoding ({d['name']}, beam {d['beam_size']}, {d['sentences']} sentences in batches of "
        f"{d['batch_sentences']}): **{d['sentences_per_s']:,.1f} sentences/s**, mean output {d['mean_output_tokens']:.1f} "
        f"tokens, peak memory {d['peak_memory_mib']:,.0f} MiB; {d['weights']}.",
        "",
    ]
    ddp = result["ddp"]
    if "tokens_per_step_measured" in ddp:
        lines.append(
            f"DDP smoke ({ddp['backend']}, 2 ranks accumulating 2 micro-batches against 1 process accumulating 4, "
            "1,024 tokens each): "
            f"{'**ok**' if ddp['ok'] else '**FAILED**'}; tokens per step measured "
            + ", ".join(f"{k} {v:,.1f}" for k, v in ddp["tokens_per_step_measured"].items())
            + f" (planned budget {ddp['tokens_per_step_planned']:,})."
        )
    else:
        lines.append(f"DDP smoke ({ddp['backend']}): **FAILED** in {ddp['failed']}:\n\n```\n{ddp['log_tail']}\n```")
    lines += [
        "",
        "MFU counts the weight matrices and attention products of each padded batch (3 × forward) against the "
        "GPU's dense bf16 peak. Planned FLOP/s is the dry run's count of a step (3 × forward of the weight "
        "matrices over the per-device budget) per measured second: `ablate sweep --dry-run` prices GPU-hours at it.",
    ]
    return "\n".join(lines) + "\n"


def cmd_gpu_check(args: argparse.Namespace) -> int:
    device_name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    if device_name == "cpu" and not args.quick:
        raise ValueError("--device cpu: only with --quick (the paper's dimensions are for a GPU)")
    options = CheckOptions.quick_cpu() if args.quick else CheckOptions.paper()
    out = Path(args.out or ("runs/gpu-check-quick" if args.quick else "results"))
    result = run_check(
        options, torch.device(device_name), lambda m: print(f"[gpu-check] {m}", file=sys.stderr, flush=True)
    )
    out.mkdir(parents=True, exist_ok=True)
    command = "ablate gpu-check" + (" --quick" if args.quick else "") + f" --device {device_name} --out {out}"
    from ..records import write_atomic

    write_atomic(out / JSON_FILE, json.dumps(result, indent=2) + "\n")
    write_atomic(out / MARKDOWN_FILE, to_markdown(result, command))
    print(f"wrote {out / JSON_FILE} and {out / MARKDOWN_FILE}")
    return 0 if result["ddp"]["ok"] else 1


def add_gpu_check_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "gpu-check",
        help="a few minutes on one GPU: bf16 tokens/s and MFU of base and big at paper size, beam-4 decoding, a DDP smoke",
        description="Measure, before paying for paper-scale runs: bf16 training tokens/s, MFU and peak memory of base "
        "and big at the paper's dimensions (37k vocabulary) on paper-sized batches of WMT-like lengths, at 25,000 and "
        "3,125 tokens per device; beam-4 decoding sentences/s; and a 2-process DDP smoke that checks tokens per step. "
        "Writes gpu_check.json and gpu_check.md under --out; `ablate sweep --dry-run` prices GPU-hours from "
        "results/gpu_check.json.",
    )
    parser.add_argument(
        "--out", help="folder for gpu_check.{json,md} (default: results; with --quick runs/gpu-check-quick)"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available (cpu needs --quick)")
    parser.add_argument("--quick", action="store_true", help="CPU-sized dimensions: a smoke test of the check itself")
    parser.set_defaults(handler=cmd_gpu_check)
