"""The measurement helpers of `ablate bench`: what they compute must be right before their figures mean anything."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from ablations.measure.bench import batches, contenders, marian, options, report, run, timing, trained
from ablations.measure.bench.options import BenchOptions
from ablations.provenance import code_commit
from lightning_modules import native
from lightning_modules.config import ModelConfig
from lightning_modules.data import BOS_ID, EOS_ID, PAD_ID, TokenBudgetBatchSampler
from lightning_modules.transformer import Transformer


def test_padding_efficiency_counts_real_over_padded_tokens():
    # One batch of lengths (2, 4) / (3, 3): real 2+4+3+3 = 12, padded 2*4 + 2*3 = 14.
    sampler = TokenBudgetBatchSampler([2, 4], [3, 3], max_tokens=100, shuffle=False)
    assert batches.padding_efficiency(sampler) == pytest.approx(12 / 14)


def test_bucketing_pads_less_than_random_order():
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 60, size=2000)
    padding = batches.bucketed_and_unbucketed(lengths, lengths + 1, batch_tokens=512)
    assert padding["bucketed"] > 0.95 > padding["unbucketed"]


def test_ratio_is_ours_over_theirs_for_rates():
    assert timing.ratio(300.0, 100.0) == 3.0
    assert timing.ratio(1.0, 0.0) == float("inf")


def test_interleave_runs_contenders_in_turn_each_round():
    calls = []

    def contender(name):
        def measure():
            calls.append(name)
            return {"wall": float(len(calls)), "cpu": 0.0}

        return measure

    times = timing.interleave({"a": contender("a"), "b": contender("b")}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert timing.median_seconds(times["a"], "wall") == 3.0  # rounds at 1, 3, 5


def test_options_name_the_bad_field():
    with pytest.raises(ValueError, match="bench.rounds"):
        BenchOptions(rounds=0)
    with pytest.raises(ValueError, match="bench.precision"):
        BenchOptions(precision="fp8")
    with pytest.raises(ValueError, match="bench.clock"):
        BenchOptions(clock="cycles")
    assert BenchOptions.quick().rounds < BenchOptions().rounds


def test_dims_choose_the_model_and_batch_and_the_command_line_says_so():
    assert BenchOptions.at("small") == BenchOptions()  # the defaults are the small preset's widths
    base = BenchOptions.at("base", quick=True, device="cpu")
    assert (base.d_model, base.d_ff, base.heads, base.layers, base.batch_tokens) == (512, 2048, 8, 6, 25_000)
    assert (base.vocab_size, base.synthetic) == (37_000, True)  # the paper's vocabulary, on synthetic batches
    assert not BenchOptions.at("small").synthetic
    assert base.rounds == BenchOptions.quick().rounds and base.model_config().head_dim_k == 64
    with pytest.raises(ValueError, match="bench dims = 'big'"):
        BenchOptions.at("big")
    from ablations.cli import bench_command_line, build_parser

    args = build_parser().parse_args(["bench", "--dims", "base", "--device", "cuda", "--json"])
    assert (
        bench_command_line(args) == "OMP_NUM_THREADS=1 ablate bench --dims base --threads 1 --device cuda --clock wall"
    )


def test_the_attention_lever_forces_each_kernel_and_restores_the_choice(one_thread, monkeypatch):
    from lightning_modules import transformer

    model = Transformer(ModelConfig(N=1, d_model=16, d_ff=32, h=2), 50, PAD_ID).eval()
    other = Transformer(ModelConfig(N=1, d_model=16, d_ff=32, h=2), 50, PAD_ID).eval()
    src = torch.randint(4, 50, (2, 5))
    calls = []
    explicit = transformer.explicit_attention
    monkeypatch.setattr(transformer, "explicit_attention", lambda *a: calls.append("explicit") or explicit(*a))
    with torch.no_grad():
        want = model(src, src)
        forced = contenders.use_attention_kernel(model, "explicit")(src, src)
        assert calls and torch.allclose(forced, want, atol=1e-5)
        calls.clear()
        other(src, src)
        assert not calls  # only the model it was set on is forced
        contenders.use_attention_kernel(model, "default")(src, src)
        assert not calls  # fp32 on CPU: SDPA again
        with torch.autocast("cpu", dtype=torch.bfloat16):
            contenders.use_attention_kernel(model, "sdpa")(src, src)
            assert not calls
            contenders.use_attention_kernel(model, "default")(src, src)
            assert calls  # bf16 on CPU: explicit matmuls, chosen per call
    with pytest.raises(ValueError, match="attention kernel 'flash'"):
        contenders.use_attention_kernel(model, "flash")


def test_default_precision_is_bf16_only_where_the_hardware_has_it(monkeypatch):
    assert options.default_precision("cuda") == "bf16-mixed"
    monkeypatch.setattr(options, "cpu_info", lambda: ("a CPU", True))
    assert options.default_precision("cpu") == "bf16-mixed"
    monkeypatch.setattr(options, "cpu_info", lambda: ("a CPU", False))
    assert options.default_precision("cpu") == "32-true"


def test_half_split_order_maps_marian_sinusoids_to_ours():
    from lightning_modules.positional import sinusoids

    ours = sinusoids(20, 8)
    half_split = torch.cat([ours[:, 0::2], ours[:, 1::2]], dim=1)  # Marian: all sines, then all cosines
    assert torch.equal(ours[:, marian.half_split_order(8)], half_split)


def _small_model(seed: int = 0, norm_placement: str = "post") -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(N=2, d_model=16, d_ff=32, h=4, P_drop=0.0, max_positions=64, norm_placement=norm_placement)
    model = Transformer(cfg, 40, PAD_ID).eval()
    with torch.no_grad():  # norms away from their (1, 0) init, so that a norm copied to the wrong place shows
        for name, tensor in model.named_parameters():
            if "norm" in name:
                tensor.add_(0.3 * torch.randn_like(tensor))
    return model


def _sources() -> torch.Tensor:
    src = torch.randint(4, 40, (5, 6))
    src[:, -1] = EOS_ID
    src[3, 3:] = PAD_ID
    return src


def test_marian_holds_our_weights_and_computes_our_logits(one_thread):
    pytest.importorskip("transformers")
    model = _small_model()
    hf = marian.marian_from_ours(model)
    src = _sources()
    tgt_in = torch.cat([torch.full((5, 1), BOS_ID), torch.randint(4, 40, (5, 4))], dim=1)
    assert marian.logit_difference(model, hf, src, tgt_in) < 1e-4


def test_m2m100_holds_a_pre_norm_model_and_computes_its_logits(one_thread):
    pytest.importorskip("transformers")
    model = _small_model(norm_placement="pre")
    hf = marian.hf_from_ours(model)
    assert type(hf).__name__ == "M2M100ForConditionalGeneration"
    src = _sources()
    tgt_in = torch.cat([torch.full((5, 1), BOS_ID), torch.randint(4, 40, (5, 4))], dim=1)
    assert marian.logit_difference(model, hf, src, tgt_in) < 1e-4
    # the final norms are copied: without them the logits differ
    with torch.no_grad():
        hf.model.decoder.layer_norm.weight.fill_(1.0)
    assert marian.logit_difference(model, hf, src, tgt_in) > 1e-3


def test_hf_generate_decodes_a_pre_norm_model_as_ours_does(one_thread):
    pytest.importorskip("transformers")
    model = _small_model(seed=1, norm_placement="pre")
    sources = [_sources()]
    ours = contenders.decode_ours(model, sources, beam_size=4, use_cache=True)
    assert contenders.decode_hf(marian.hf_from_ours(model), sources, beam_size=4) == ours


def test_marian_is_built_with_the_attention_asked_for():
    pytest.importorskip("transformers")
    cfg = ModelConfig(N=1, d_model=16, d_ff=32, h=2)
    for attention in marian.MARIAN_ATTENTION:
        assert marian.marian_model(cfg, 50, attention).config._attn_implementation == attention
    with pytest.raises(ValueError, match="'flash'"):
        marian.marian_model(cfg, 50, "flash")


def test_marian_copy_refuses_what_marian_cannot_express():
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    pre_norm = Transformer(ModelConfig(N=1, d_model=16, d_ff=32, h=4, norm_placement="pre"), 40, PAD_ID)
    with pytest.raises(ValueError, match="post-norm"):
        marian.marian_from_ours(pre_norm)
    post_norm = Transformer(ModelConfig(N=1, d_model=16, d_ff=32, h=4), 40, PAD_ID)
    with pytest.raises(ValueError, match="pre-norm"):
        marian.m2m100_from_ours(post_norm)


def test_cached_and_uncached_decoding_agree_and_hf_decodes_the_same_model(one_thread):
    pytest.importorskip("transformers")
    model = _small_model(seed=1)
    sources = [_sources()]
    cached = contenders.decode_ours(model, sources, beam_size=4, use_cache=True)
    assert cached == contenders.decode_ours(model, sources, beam_size=4, use_cache=False)
    hf = contenders.decode_hf(marian.marian_from_ours(model), sources, beam_size=4)
    assert len(hf) == len(cached)
    assert all(PAD_ID not in out and BOS_ID not in out and EOS_ID not in out for out in hf)
    # Untrained, some hypotheses run to the cap: the same cap on both sides (L tokens, then only EOS)
    longest = int((sources[0] != PAD_ID).sum(dim=1).max())
    assert any(len(out) == longest + contenders.MAX_LEN_OFFSET for out in cached)
    assert hf == cached


def _tiny_trained_options(**overrides) -> BenchOptions:
    settings = dict(
        d_model=32,
        d_ff=64,
        heads=2,
        layers=1,
        P_drop=0.0,
        vocab_size=120,
        batch_tokens=512,
        corpus_pairs=400,
        decode_sentences=24,
        decode_batch_sentences=12,
        decode_train_steps=120,
    )
    settings.update(overrides)
    return BenchOptions(**settings)


def test_the_decoding_model_is_trained_once_then_loaded_from_the_cache(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    quick = _tiny_trained_options(decode_train_steps=3)
    data = batches.built_in_corpus(quick)
    device = torch.device("cpu")
    first, info = trained.train_decoding_model(quick, batches.epoch_batches(data, device), device)
    assert not info["cached"] and info["steps"] == 3
    torch.manual_seed(quick.seed)
    fresh = Transformer(quick.model_config(), quick.vocab_size, PAD_ID)
    assert any(not torch.equal(a, b) for a, b in zip(first.state_dict().values(), fresh.state_dict().values()))
    again, info = trained.train_decoding_model(quick, lambda epoch: iter(()), device)  # no batches needed
    assert info["cached"]
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    other = trained.checkpoint_path(_tiny_trained_options(decode_train_steps=4))
    assert other != trained.checkpoint_path(quick)  # another run is another checkpoint
    # the weights train in fp32 whatever precision is timed: the bf16 and fp32 benches decode one checkpoint
    assert trained.checkpoint_path(dataclasses.replace(quick, precision="bf16-mixed")) == trained.checkpoint_path(
        dataclasses.replace(quick, precision="32-true")
    )


def test_synthetic_batches_and_sources_span_the_whole_vocabulary():
    synthetic = BenchOptions(
        vocab_size=37_000, synthetic=True, batch_tokens=2048, decode_sentences=10, decode_batch_sentences=4
    )
    sources = batches.synthetic_decode_sources(synthetic, torch.device("cpu"))
    assert [len(s) for s in sources] == [4, 4, 2]
    real = torch.cat([s[s != PAD_ID] for s in sources])
    assert int(real.max()) < 37_000 and int(real.max()) > 2000  # pieces beyond the built-in BPE's 2,000
    epochs = batches.synthetic_epoch_batches(dataclasses.replace(synthetic, decode_train_steps=2), torch.device("cpu"))
    first, second = epochs(0), epochs(1)
    assert len(first) == 2 and all(b["n_tgt_tokens"] > 0 for b in first)
    assert not torch.equal(first[0]["src"], second[0]["src"])  # each epoch draws other pieces


@pytest.mark.slow
def test_a_trained_model_stops_at_eos_and_hf_generate_returns_our_hypotheses(tmp_path, monkeypatch, one_thread):
    pytest.importorskip("transformers")
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    quick = _tiny_trained_options()
    data = batches.built_in_corpus(quick)
    device = torch.device("cpu")
    model, _ = trained.train_decoding_model(quick, batches.epoch_batches(data, device), device)
    sources = batches.decode_sources(data, quick, device)
    ours = contenders.decode_ours(model, sources, quick.beam_size, use_cache=True)
    theirs = contenders.decode_hf(marian.hf_from_ours(model), sources, quick.beam_size)
    caps = [int((s != PAD_ID).sum(dim=1).max()) + contenders.MAX_LEN_OFFSET for s in sources for _ in range(len(s))]
    lengths = trained.output_lengths(ours, caps)
    # Most outputs end at EOS and they are not empty; an untrained model runs every one to the cap. One sentence in
    # 24 looping to the cap is float noise across CPUs (one CI run gave 1 of 24 where earlier runs gave none).
    assert lengths["at_length_cap"] <= 0.125 and lengths["mean_output_tokens"] > 1
    assert sum(a == b for a, b in zip(ours, theirs)) / len(ours) >= 0.95


@pytest.mark.slow
def test_bench_end_to_end_reports_every_key(tmp_path, monkeypatch, one_thread):
    pytest.importorskip("transformers")
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    quick = BenchOptions.quick(
        d_model=16,
        d_ff=32,
        heads=2,
        layers=1,
        vocab_size=120,
        batch_tokens=256,
        corpus_pairs=400,
        rounds=2,
        decode_sentences=6,
        decode_batch_sentences=3,
        levers=True,
    )
    result = run.run_bench(quick)
    for key in report.RATIO_KEYS:
        assert result[key] > 0
    # Marian timed with both of HF's attention kernels; the headline ratio is against the faster
    assert set(result["train_tokens_per_s"]) >= {"marian_sdpa", "marian_eager"}
    assert result["train_vs_marian"] == min(result["train_vs_marian_sdpa"], result["train_vs_marian_eager"])
    assert set(result["padding_efficiency"]) == {"generated"}
    assert 0 < result["padding_efficiency"]["generated"] <= 1
    assert result["decode"]["cached_equals_uncached"]
    assert result["decode"]["max_logit_difference_vs_hf"] < 1e-4
    assert {"attention_kernel", "bf16_autocast", "fused_adam"} <= set(result["levers"])
    if (
        native.available()
    ):  # the decoding lever: same outputs (checked inside), timed beside PyTorch's attention and topk
        assert result["decode"]["native_kernels"] and result["levers"]["decode_native_kernels"]["speedup"] > 0
        assert result["levers"]["native_dropout"]["speedup"] > 0  # training's dropout noise, timed beside torch's
    assert json.loads(report.json_dumps(result))["train_vs_marian"] == pytest.approx(result["train_vs_marian"])
    markdown = report.to_markdown(result, "ablate bench --quick")
    assert "train_vs_marian" in markdown and "ablate bench --quick" in markdown
    assert result["machine"]["commit"] == code_commit() and f"commit {code_commit() or 'unknown'}" in markdown
    assert ("decode_native_kernels" in markdown) == result["decode"]["native_kernels"]


def test_cli_names_a_missing_multi30k_directory(tmp_path, capsys):
    from ablations.cli import main

    assert main(["bench", "--quick", "--multi30k", str(tmp_path / "absent")]) == 2
    assert "--multi30k" in capsys.readouterr().err


def test_the_bench_says_which_presets_train_in_bf16_as_scales_yaml_does():
    from ablations.measure.bench import report
    from ablations.sweep import PROJECT_SCALES, load_scales

    on, off = report.bf16_defaults().split(" (")[0].split("; ")
    for name, scale in load_scales(PROJECT_SCALES).items():
        side = on if scale.settings.get("train.precision") == "bf16-mixed" else off
        assert name in side.split(": ")[1].split(", "), (name, side)
