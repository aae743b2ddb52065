"""The bench, phase by phase: data, training contenders, decoders, levers, and the result as one dict."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any, Callable, Optional

import torch

from lightning_modules import native
from lightning_modules.config import ModelConfig, RunConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID, TranslationDataModule
from lightning_modules.flops import step_flops
from lightning_modules.module import TranslationModule, make_optimizer
from lightning_modules.transformer import Transformer, prefers_explicit_attention

from .batches import (
    bucketed_and_unbucketed,
    built_in_corpus,
    collate_seconds,
    decode_sources,
    epoch_batches,
    multi30k_corpus,
    synthetic_decode_sources,
    synthetic_epoch_batches,
    training_batches,
)
from .contenders import (
    MAX_LEN_OFFSET,
    TorchTransformerModel,
    decode_hf,
    decode_ours,
    lever_contender,
    lightning_contender,
    plain_step,
)
from .marian import MARIAN_ATTENTION, hf_from_ours, logit_difference, marian_forward, marian_model
from .options import BenchOptions, machine, require_transformers
from .timing import (
    bf16_peak_flops,
    interleave,
    median_seconds,
    peak_memory_mib,
    ratio,
    reset_peak_memory,
    timed,
    timed_loop,
)
from .trained import output_lengths, train_decoding_model


def measure_levers(
    options: BenchOptions, batches: list[dict[str, Any]], device: torch.device, tokens: int
) -> dict[str, Any]:
    """tokens/s of the default setting and its alternative for each lever; `wins` says whether the lever helps."""
    compute_dtype = torch.bfloat16 if options.precision == "bf16-mixed" else torch.float32
    explicit = prefers_explicit_attention(torch.empty(0, dtype=compute_dtype, device=device))
    chosen, other = ("explicit", "sdpa") if explicit else ("sdpa", "explicit")
    pairs: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
        "attention_kernel": (chosen, {"attention": chosen}, other, {"attention": other}),
        "bf16_autocast": ("bf16-mixed", {"precision": "bf16-mixed"}, "32-true", {"precision": "32-true"}),
        "fused_adam": ("fused", {"fused_adam": True}, "foreach", {"fused_adam": None}),
    }
    if device.type == "cpu" and native.available():
        pairs["native_dropout"] = ("native", {"native_kernels": True}, "torch", {"native_kernels": False})
    if options.compile:
        pairs["torch_compile"] = ("compiled", {"compiled": True}, "eager", {"compiled": False})
    results: dict[str, Any] = {}
    for lever, (on_name, on_kwargs, off_name, off_kwargs) in pairs.items():
        kwargs = {"precision": options.precision}
        contenders = {}
        for name, extra in ((on_name, on_kwargs), (off_name, off_kwargs)):
            contenders[name] = lever_contender(options, batches, device, **{**kwargs, **extra})
        if lever == "torch_compile":
            started = time.perf_counter()
            contenders[on_name]()  # compilation happens here, not in the timed rounds
            results["torch_compile_warmup_s"] = time.perf_counter() - started
        times = interleave(contenders, options.rounds)
        rates = {name: tokens / median_seconds(seconds, options.clock) for name, seconds in times.items()}
        results[lever] = {"tokens_per_s": rates, "speedup": ratio(rates[on_name], rates[off_name])}
    return results


def other_clock_ratios(
    train_times: dict[str, list[dict[str, float]]], decode_times: dict[str, list[dict[str, float]]], clock: str
) -> dict[str, Any]:
    """The five ratios on the other clock, as a cross-check (times, not rates: ratio = their seconds / ours)."""

    def speedup(times: dict[str, list[dict[str, float]]], theirs: str) -> float:
        return ratio(median_seconds(times[theirs], clock), median_seconds(times["ours"], clock))

    return {
        "clock": clock,
        "train_vs_marian": min(speedup(train_times, name) for name in MARIAN_NAMES),
        "train_vs_torch_transformer": speedup(train_times, "torch_transformer"),
        "train_vs_bare_loop": speedup(train_times, "bare_loop"),
        "decode_vs_hf_generate": speedup(decode_times, "hf_generate"),
        "decode_vs_uncached": speedup(decode_times, "uncached"),
    }


def run_bench(options: BenchOptions, progress: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Measure everything once; torch's thread count and determinism flag are restored afterwards."""
    require_transformers()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(options.threads)
    # The Lightning contender's Trainer(deterministic=True), as `ablate train` builds it, sets this flag
    # process-wide; setting it first gives every contender the same kernels from the first round on.
    torch.use_deterministic_algorithms(True)
    try:
        return _run_bench(options, progress)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


Rounds = dict[str, list[dict[str, float]]]  # contender -> per round, seconds on each clock
MARIAN_NAMES = tuple(f"marian_{attention}" for attention in MARIAN_ATTENTION)


def _run_bench(options: BenchOptions, progress: Callable[[str], None]) -> dict[str, Any]:
    device = torch.device(options.device)
    started = time.perf_counter()
    load_before = os.getloadavg()
    run = options.run_config()
    clock = options.clock

    data: Optional[TranslationDataModule] = None
    if options.synthetic:  # a vocabulary the built-in corpus cannot have (--dims base: 37k)
        from ..gpu_check import synthetic_batches, wmt_like_lengths

        progress(f"data: synthetic WMT-like batches, vocabulary {options.vocab_size:,}")
        batches = synthetic_batches(
            options.batch_tokens, options.timed_batches + 1, options.vocab_size, device, options.seed
        )
        src_len, tgt_len = wmt_like_lengths(200_000, options.seed)
        padding = {"synthetic": bucketed_and_unbucketed(src_len + 1, tgt_len + 1, options.batch_tokens, options.seed)}
    else:
        progress("data: built-in corpus")
        data = built_in_corpus(options)
        batches = training_batches(data, options.timed_batches + 1, device)
        padding = padding_of_corpora(options, data, progress)
    timed_tokens = sum(b["n_tgt_tokens"] for b in batches[1:])

    progress("training: ours (Lightning), bare loop, Marian (SDPA and eager attention), torch.nn.Transformer")
    peak: dict[str, float] = {}
    train_times = time_training(options, run, batches, device, peak)
    train_rate = {name: timed_tokens / median_seconds(seconds, clock) for name, seconds in train_times.items()}
    flops = sum(
        step_flops(run.model, run.data.vocab_size, tuple(b["src"].shape), tuple(b["tgt_in"].shape)) for b in batches[1:]
    )
    peak_flops = bf16_peak_flops(device, options.peak_tflops)
    achieved = {name: flops / median_seconds(seconds, clock) for name, seconds in train_times.items()}

    progress("decoding: cached, uncached, HF generate")
    decoding = time_decoding(options, run.model, data, batches[0], device, peak, progress)
    decode_seconds, outputs, native_kernels = decoding["seconds"], decoding["outputs"], decoding["native_kernels"]
    n_sentences = decoding["sentences"]
    decode_rate = {name: n_sentences / median_seconds(seconds, clock) for name, seconds in decode_seconds.items()}

    levers: dict[str, Any] = {}
    if options.levers:
        progress("levers")
        levers = measure_levers(options, batches, device, timed_tokens)
    if native_kernels:
        levers["decode_native_kernels"] = {
            "sentences_per_s": {"native": decode_rate["ours"], "pytorch": decode_rate["ours_without_native_kernels"]},
            "speedup": ratio(decode_rate["ours"], decode_rate["ours_without_native_kernels"]),
        }
    if data is not None:  # synthetic batches are collated up front, not as training would
        levers["collate_ms_per_batch"] = collate_seconds(data, 20) * 1e3
    levers["step_ms_ours"] = 1e3 * median_seconds(train_times["ours"], clock) / options.timed_batches
    levers["length_bucketing"] = padding

    same_as_hf = sum(a == b for a, b in zip(outputs["ours"], outputs["hf_generate"])) / max(n_sentences, 1)
    return {
        "train_vs_marian": ratio(train_rate["ours"], max(train_rate[name] for name in MARIAN_NAMES)),
        **{f"train_vs_{name}": ratio(train_rate["ours"], train_rate[name]) for name in MARIAN_NAMES},
        "train_vs_torch_transformer": ratio(train_rate["ours"], train_rate["torch_transformer"]),
        "train_vs_bare_loop": ratio(train_rate["ours"], train_rate["bare_loop"]),
        "decode_vs_hf_generate": ratio(decode_rate["ours"], decode_rate["hf_generate"]),
        "decode_vs_uncached": ratio(decode_rate["ours"], decode_rate["uncached"]),
        "padding_efficiency": {corpus: values["bucketed"] for corpus, values in padding.items()},
        "clock": clock,
        "other_clock_ratios": other_clock_ratios(train_times, decode_seconds, "cpu" if clock == "wall" else "wall"),
        "train_tokens_per_s": train_rate,
        "train_seconds": train_times,
        "decode_sentences_per_s": decode_rate,
        "decode_seconds": decode_seconds,
        "decode": {
            "sentences": n_sentences,
            "beam_size": options.beam_size,
            "length_penalty": 0.0,
            "mean_output_tokens": statistics.mean(len(o) for o in outputs["ours"]) if n_sentences else 0.0,
            "at_length_cap": decoding["lengths"]["ours"].get("at_length_cap", 0.0),
            "hf_mean_output_tokens": decoding["lengths"]["hf_generate"]["mean_output_tokens"],
            "hf_at_length_cap": decoding["lengths"]["hf_generate"].get("at_length_cap", 0.0),
            "model": decoding["model"],
            "cached_equals_uncached": True,
            "same_output_as_hf": same_as_hf,
            "differing_sentences": differing(outputs["ours"], outputs["hf_generate"]),
            "native_kernels": native_kernels,
            "max_logit_difference_vs_hf": decoding["max_logit_difference"],
        },
        "model_flops_per_s": achieved,
        "mfu_vs_bf16_peak": {name: value / peak_flops for name, value in achieved.items()} if peak_flops else None,
        "peak_memory_mib": peak,
        "peak_memory_scope": "per contender (torch.cuda.max_memory_allocated)"
        if device.type == "cuda"
        else "process peak RSS so far (CPU has no per-contender allocator statistics)",
        "levers": levers,
        "batches": [
            {"src": list(b["src"].shape), "tgt": list(b["tgt_in"].shape), "tgt_tokens": b["n_tgt_tokens"]}
            for b in batches
        ],
        "options": dataclasses.asdict(options),
        "machine": {**machine(), "load_average_before": list(load_before)},
        "seconds": time.perf_counter() - started,
    }


def differing(ours: list[list[int]], theirs: list[list[int]], keep: int = 5) -> list[dict[str, Any]]:
    """The first `keep` sentences whose outputs differ: index, both outputs' lengths and where they first part."""
    found = []
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            first = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            found.append({"sentence": i, "ours_tokens": len(a), "hf_tokens": len(b), "first_difference": first})
            if len(found) == keep:
                break
    return found


def padding_of_corpora(
    options: BenchOptions, data: TranslationDataModule, progress: Callable[[str], None]
) -> dict[str, dict[str, float]]:
    """Padding efficiency, bucketed and not, of the built-in corpus and (with --multi30k) of Multi30k."""
    ls, lt = data.dataset("train").lengths()
    padding: dict[str, Any] = {"generated": bucketed_and_unbucketed(ls, lt, options.batch_tokens, options.seed)}
    if options.multi30k:
        progress("data: Multi30k")
        m30k = multi30k_corpus(options.multi30k, options.batch_tokens, options.seed)
        padding["multi30k"] = bucketed_and_unbucketed(
            *m30k.dataset("train").lengths(), options.batch_tokens, options.seed
        )
    return padding


def with_peak(
    name: str, measure: Callable[[], dict[str, float]], device: torch.device, peak: dict[str, float]
) -> Callable[[], dict[str, float]]:
    """`measure`, recording the peak memory of its rounds under `name` in `peak`."""

    def wrapped() -> dict[str, float]:
        reset_peak_memory(device)
        seconds = measure()
        peak[name] = max(peak.get(name, 0.0), peak_memory_mib(device))
        return seconds

    return wrapped


def time_training(
    options: BenchOptions, run: RunConfig, batches: list[dict[str, Any]], device: torch.device, peak: dict[str, float]
) -> Rounds:
    """The training contenders (Marian twice: with HF's SDPA attention and with its eager one), each from the same
    seed, interleaved over the rounds."""
    cfg = run.model
    torch.manual_seed(options.seed)
    module = TranslationModule(run, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID).to(device)
    torch.manual_seed(options.seed)
    bare = Transformer(cfg, options.vocab_size, PAD_ID).to(device).train()
    bare_optimizer, bare_schedule = make_optimizer(bare.parameters(), run)
    marians = {}
    for attention in MARIAN_ATTENTION:  # both of HF's kernels: the ratio is against the faster (train_vs_marian)
        torch.manual_seed(options.seed)
        marian = marian_model(cfg, options.vocab_size, attention).to(device).train()
        marians[f"marian_{attention}"] = (marian, *make_optimizer(marian.parameters(), run))
    torch.manual_seed(options.seed)
    torch_tf = TorchTransformerModel(cfg, options.vocab_size).to(device).train()
    torch_optimizer, torch_schedule = make_optimizer(torch_tf.parameters(), run)

    def loop(forward: Callable[[dict[str, Any]], Any], optimizer, schedule) -> Callable[[], dict[str, float]]:
        return lambda: timed_loop(
            plain_step(forward, optimizer, schedule, device, options.precision, run.train.eps_ls), batches, device
        )

    train_steps = {
        "ours": lightning_contender(module, batches, options, device),
        "bare_loop": loop(lambda b: bare(b["src"], b["tgt_in"]), bare_optimizer, bare_schedule),
        **{name: loop(marian_forward(model), *optimizer) for name, (model, *optimizer) in marians.items()},
        "torch_transformer": loop(lambda b: torch_tf(b["src"], b["tgt_in"]), torch_optimizer, torch_schedule),
    }
    return interleave({name: with_peak(name, fn, device, peak) for name, fn in train_steps.items()}, options.rounds)


def time_decoding(
    options: BenchOptions,
    cfg: ModelConfig,
    data: Optional[TranslationDataModule],
    probe: dict[str, Any],
    device: torch.device,
    peak: dict[str, float],
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Our cached and uncached beam search (on `data`'s dev sentences, or synthetic sources when it is None) and HF generate on our weights (and, where the native kernels build, our
    cached search without them), interleaved; outputs checked to agree. Peak memory under `decode_<name>`."""
    # A trained model (a short run on the bench's corpus, cached: trained.py), so hypotheses end with EOS at about
    # the references' lengths, as a real model's do, and not at the length cap. The same weights for all three
    # (copied into HF's pre-norm M2M100 for HF generate); outputs are compared.
    epochs = synthetic_epoch_batches(options, device) if data is None else epoch_batches(data, device)
    model, training = train_decoding_model(options, epochs, device, progress)
    hf = hf_from_ours(model)
    sources = synthetic_decode_sources(options, device) if data is None else decode_sources(data, options, device)
    max_logit_difference = logit_difference(model, hf, probe["src"], probe["tgt_in"])

    def ours_without_native_kernels() -> list[list[int]]:
        with native.switched(False):
            return decode_ours(model, sources, options.beam_size, use_cache=True)

    native_kernels = device.type == "cpu" and native.available()  # built here, before the timed rounds
    decoders = {
        "ours": lambda: decode_ours(model, sources, options.beam_size, use_cache=True),
        "uncached": lambda: decode_ours(model, sources, options.beam_size, use_cache=False),
        "hf_generate": lambda: decode_hf(hf, sources, options.beam_size),
    }
    if native_kernels:  # the lever: the same cached decoder with PyTorch's attention and torch.topk
        decoders["ours_without_native_kernels"] = ours_without_native_kernels
    decode_seconds: Rounds = {name: [] for name in decoders}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(options.decode_rounds):
        for name, fn in decoders.items():
            reset_peak_memory(device)
            seconds, outputs[name] = timed(fn, device)
            decode_seconds[name].append(seconds)
            peak[f"decode_{name}"] = max(peak.get(f"decode_{name}", 0.0), peak_memory_mib(device))
    if outputs["ours"] != outputs["uncached"]:
        raise RuntimeError("cached and uncached beam search returned different outputs: the key/value cache is wrong")
    if native_kernels and outputs["ours"] != outputs["ours_without_native_kernels"]:
        raise RuntimeError("beam search returned different outputs with the native decoding kernels and without them")
    longest = [int((src != PAD_ID).sum(dim=1).max()) for src in sources]
    caps = [n + MAX_LEN_OFFSET for n, src in zip(longest, sources) for _ in range(src.shape[0])]
    return {
        "seconds": decode_seconds,
        "outputs": outputs,
        "model": training,
        "lengths": {name: output_lengths(outputs[name], caps) for name in ("ours", "hf_generate")},
        "native_kernels": native_kernels,
        "sentences": sum(src.shape[0] for src in sources),
        "max_logit_difference": max_logit_difference,
    }
