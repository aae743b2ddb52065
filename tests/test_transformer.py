"""Numerical checks of the Transformer of section 3: attention, masks, caches, encodings, parameter counts.

Everything runs on tiny dimensions on the CPU; the whole file takes a few seconds.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from lightning_modules import decoding_cache, native, transformer
from lightning_modules.beam_search import beam_search
from lightning_modules.config import FFN, NORM, NORM_PLACEMENT, POSITIONAL, ModelConfig
from lightning_modules.decoding_cache import DecoderCache
from lightning_modules.flops import count_parameters
from lightning_modules.positional import apply_rope, rope_tables, sinusoids
from lightning_modules.transformer import (
    MultiHeadAttention,
    Residual,
    Transformer,
    explicit_attention,
)

PAD = 0
VOCAB = 23


def tiny(**overrides) -> ModelConfig:
    values = dict(N=2, d_model=16, d_ff=24, h=4, P_drop=0.0, max_positions=32)
    values.update(overrides)
    return ModelConfig(**values)


def build(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny(**overrides), VOCAB, PAD).double().eval()
    return model


def tokens(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=g)  # no padding


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-9) -> bool:
    return torch.allclose(a, b, atol=tol, rtol=0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: threads only add overhead (and contend with anything else running)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


GRID = list(itertools.product(POSITIONAL, NORM_PLACEMENT))
GRID_IDS = [f"{p}-{n}" for p, n in GRID]


# --------------------------------------------------------------------------------------------------
# 1. Multi-head attention against a direct computation
# --------------------------------------------------------------------------------------------------


def reference_attention(mha: MultiHeadAttention, x: torch.Tensor, mem: torch.Tensor, key_ok=None, group=None):
    """softmax(Q Kᵀ/√d_k)·V per head with explicit loops, then concat and W_O.

    key_ok [B, L] (True = attend) or None; group(i) -> kv head used by query head i.
    """
    h, d_k, d_v = mha.h, mha.d_k, mha.d_v
    group = group or (lambda i: i)
    Wq, bq = mha.q_proj.weight, mha.q_proj.bias
    Wk, bk = mha.k_proj.weight, mha.k_proj.bias
    Wv, bv = mha.v_proj.weight, mha.v_proj.bias
    Wo, bo = mha.out_proj.weight, mha.out_proj.bias
    B, T, _ = x.shape
    out = torch.empty(B, T, Wo.shape[0], dtype=x.dtype)
    for b in range(B):
        heads = []
        for i in range(h):
            j = group(i)
            Q = x[b] @ Wq[i * d_k : (i + 1) * d_k].T + bq[i * d_k : (i + 1) * d_k]  # [T, d_k]
            K = mem[b] @ Wk[j * d_k : (j + 1) * d_k].T + bk[j * d_k : (j + 1) * d_k]  # [L, d_k]
            V = mem[b] @ Wv[j * d_v : (j + 1) * d_v].T + bv[j * d_v : (j + 1) * d_v]  # [L, d_v]
            scores = Q @ K.T / math.sqrt(d_k)
            if key_ok is not None:
                scores = scores.masked_fill(~key_ok[b][None, :], float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ V)  # [T, d_v]
        out[b] = torch.cat(heads, dim=-1) @ Wo.T + bo
    return out


def module_attention(mha: MultiHeadAttention, x, mem, mask=None):
    q, (k, v) = mha.queries(x), mha.project_kv(mem)
    return mha.attend(q, k, v, mask, causal=False)


def make_mha(seed=0, **overrides) -> MultiHeadAttention:
    torch.manual_seed(seed)
    cfg = tiny(**{"d_model": 12, "h": 3, "d_k": 5, "d_v": 7, **overrides})
    mha = MultiHeadAttention(cfg).double().eval()
    for p in mha.parameters():  # biases are zero-initialised by the Transformer; make them matter here
        nn.init.normal_(p, std=0.5)
    return mha


def test_attention_matches_direct_computation_with_h_dk_not_d_model_and_dk_not_dv():
    mha = make_mha()
    assert mha.h * mha.d_k != 12 and mha.d_k != mha.d_v
    assert mha.q_proj.weight.shape == (3 * 5, 12) and mha.v_proj.weight.shape == (3 * 7, 12)
    assert mha.out_proj.weight.shape == (12, 3 * 7)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 12, generator=g, dtype=torch.float64)
    mem = torch.randn(2, 6, 12, generator=g, dtype=torch.float64)
    assert close(module_attention(mha, x, x), reference_attention(mha, x, x))  # self-attention
    assert close(module_attention(mha, x, mem), reference_attention(mha, x, mem))  # cross-attention


def test_attention_with_padding_mask_matches_direct_computation():
    mha = make_mha(seed=3)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 4, 12, generator=g, dtype=torch.float64)
    mem = torch.randn(3, 6, 12, generator=g, dtype=torch.float64)
    key_ok = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    got = module_attention(mha, x, mem, key_ok[:, None, None, :])
    assert close(got, reference_attention(mha, x, mem, key_ok))
    # ... and the masked keys really are ignored: changing them changes nothing.
    mem2 = mem.clone()
    mem2[~key_ok] = 100.0
    assert close(module_attention(mha, x, mem2, key_ok[:, None, None, :]), got)


def test_grouped_query_attention_shares_kv_heads_across_consecutive_query_heads():
    # h = 6 query heads, 2 kv heads: query heads 0,1,2 use kv head 0 and 3,4,5 use kv head 1,
    # which is torch's enable_gqa convention (key.repeat_interleave(h // g, dim=-3)).
    mha = make_mha(seed=4, d_model=12, h=6, d_k=4, d_v=3, kv_heads=2)
    assert (mha.h, mha.g) == (6, 2)
    assert mha.k_proj.weight.shape == (2 * 4, 12) and mha.v_proj.weight.shape == (2 * 3, 12)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 12, generator=g, dtype=torch.float64)
    mem = torch.randn(2, 5, 12, generator=g, dtype=torch.float64)
    key_ok = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    per_group = 6 // 2
    got = module_attention(mha, x, mem, key_ok[:, None, None, :])
    want = reference_attention(mha, x, mem, key_ok, group=lambda i: i // per_group)
    assert close(got, want)
    # The other plausible convention (heads interleaved over groups, i % g) is a different function.
    interleaved = reference_attention(mha, x, mem, key_ok, group=lambda i: i % 2)
    assert not close(got, interleaved, tol=1e-3)
    # torch's own convention, spelled out: repeat_interleave of the kv heads.
    q, (k, v) = mha.queries(x), mha.project_kv(mem)
    k, v = k.repeat_interleave(per_group, dim=1), v.repeat_interleave(per_group, dim=1)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_ok[:, None, None, :])
    assert close(got, mha.out_proj(plain.transpose(1, 2).reshape(2, 3, 6 * 3)))


# --------------------------------------------------------------------------------------------------
# 2-3. Causality and padding
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional,norm_placement", GRID, ids=GRID_IDS)
def test_decoder_is_causal(positional, norm_placement):
    model = build(positional=positional, norm_placement=norm_placement)
    src, tgt = tokens(2, 5, seed=1), tokens(2, 6, seed=2)
    with torch.no_grad():
        base = model(src, tgt)
        for j in (0, 3, 5):
            changed = tgt.clone()
            changed[:, j] = changed[:, j] % (VOCAB - 1) + 1  # a different non-pad token
            out = model(src, changed)
            assert close(out[:, :j], base[:, :j]), f"future token {j} leaked into earlier positions"
            assert not close(out[:, j], base[:, j], tol=1e-6), "the changed token itself must matter"


@pytest.mark.parametrize("positional,norm_placement", GRID, ids=GRID_IDS)
def test_padding_source_and_target_leaves_real_positions_unchanged(positional, norm_placement):
    model = build(positional=positional, norm_placement=norm_placement)
    src, tgt = tokens(2, 5, seed=3), tokens(2, 4, seed=4)
    pad = lambda t, n: torch.cat([t, torch.full((t.shape[0], n), PAD)], dim=1)  # noqa: E731
    with torch.no_grad():
        base = model(src, tgt)
        memory, _ = model.encode(src)
        memory_padded, mask = model.encode(pad(src, 3))
        assert close(memory_padded[:, :5], memory, 1e-9)
        assert mask.shape == (2, 1, 1, 8) and mask[..., :5].all() and not mask[..., 5:].any()
        assert close(model(pad(src, 3), tgt), base)
        assert close(model(src, pad(tgt, 2))[:, :4], base)
        assert close(model(pad(src, 2), pad(tgt, 3))[:, :4], base)
        # Ragged batch: a short sentence padded inside a batch equals that sentence on its own.
        short_src, short_tgt = tokens(1, 3, seed=5), tokens(1, 2, seed=6)
        alone = model(short_src, short_tgt)
        batch_src = torch.cat([pad(short_src, 2), src], dim=0)
        batch_tgt = torch.cat([pad(short_tgt, 2), tgt], dim=0)
        together = model(batch_src, batch_tgt)
        assert close(together[:1, :2], alone) and close(together[1:], base)


# --------------------------------------------------------------------------------------------------
# 4. Cached incremental decoding
# --------------------------------------------------------------------------------------------------


def decode_in_chunks(model: Transformer, src, tgt, chunks) -> torch.Tensor:
    memory, mask = model.encode(src)
    cache = model.new_cache()
    outs, start = [], 0
    for size in chunks:
        outs.append(model.decode(tgt[:, start : start + size], memory, mask, cache))
        start += size
        assert cache.length == start
    assert start == tgt.shape[1]
    return torch.cat(outs, dim=1)


def ragged_src(seed=7) -> torch.Tensor:
    src = tokens(3, 6, seed=seed)
    src[1, 4:] = PAD  # exercise the source mask in cached cross-attention
    src[2, 2:] = PAD
    return src


CACHE_VARIANTS = [dict(positional=p, norm_placement=n) for p, n in GRID] + [
    dict(ffn="gelu"),
    dict(ffn="swiglu"),
    dict(norm="rmsnorm"),
    dict(norm="rmsnorm", norm_placement="pre"),
    dict(kv_heads=2),
    dict(kv_heads=1, positional="rope", norm_placement="pre"),
    dict(d_k=6, d_v=3, positional="rope"),  # h·d_k ≠ d_model, d_k ≠ d_v
    dict(tie_embeddings=False, positional="learned"),
]


@pytest.mark.parametrize("overrides", CACHE_VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_cached_decoding_equals_full_forward(overrides):
    model = build(**overrides)
    src, tgt = ragged_src(), tokens(3, 7, seed=8)
    with torch.no_grad():
        full = model(src, tgt)
        assert close(decode_in_chunks(model, src, tgt, [1] * 7), full)  # one step at a time
        assert close(decode_in_chunks(model, src, tgt, [3, 1, 2, 1]), full)  # a prefix, then several at once
        assert close(decode_in_chunks(model, src, tgt, [1, 4, 2]), full)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_cache_reorder_equals_decoding_the_reordered_batch(positional):
    model = build(positional=positional, kv_heads=2)
    src, tgt = ragged_src(seed=9), tokens(3, 6, seed=10)
    index = torch.tensor([2, 0, 0, 1])  # one beam per source: sources may repeat or vanish
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = model.new_cache()
        first = model.decode(tgt[:, :3], memory, mask, cache)
        cache.reorder(torch.zeros(4, 1, dtype=torch.long), sources=index)
        assert cache.length == 3
        for layer in cache.layers:
            assert layer.self_k.shape[0] == 4 and layer.cross_v.shape[0] == 4
        memory, mask = memory.index_select(0, index), mask.index_select(0, index)
        r_tgt = tgt.index_select(0, index)
        rest = [model.decode(r_tgt[:, t : t + 1], memory, mask, cache) for t in range(3, 6)]
        want = model(src.index_select(0, index), r_tgt)
        assert close(torch.cat([first.index_select(0, index)] + rest, dim=1), want)


def test_cache_is_filled_once_per_source_and_grows_per_step():
    model = build()
    src, tgt = ragged_src(), tokens(3, 40)
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = model.new_cache(capacity=8)
        assert isinstance(cache, DecoderCache) and len(cache.layers) == 2 and cache.length == 0
        model.decode(tgt[:, :1], memory, mask, cache)
        cross, buffer = cache.layers[0].cross_k, cache.layers[0].self_k
        assert buffer.shape == (3, 8, 1, 4, 4)  # [B, capacity, K, G, d_k], allocated once for `capacity` positions
        model.decode(tgt[:, 1:3], memory, mask, cache)
        assert cache.layers[0].cross_k is cross and cache.layers[0].self_k is buffer  # projected once, written in place
        model.decode(tgt[:, 3:9], memory, mask, cache)  # past the capacity: the buffer grows, keeping what it held
        assert cache.length == 9 and cache.layers[1].self_v.shape == (3, 18, 1, 4, 4)
        full = model(src, tgt[:, :10])
        assert close(model.decode(tgt[:, 9:10], memory, mask, cache), full[:, 9:10])


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(kv_heads=2, positional="rope", norm_placement="pre"), dict(positional="learned", d_k=6, d_v=3)],
    ids=["paper", "gqa-rope-pre", "learned-dkdv"],
)
@pytest.mark.parametrize("kernel", ["sdpa", "explicit", "native"])
def test_beam_cache_equals_decoding_each_beam_history(overrides, kernel, monkeypatch, request):
    """Beam search's use of the cache: K rows per source, beams reordered every step (parents repeat and vanish),
    a source dropped half way. Each step's logits must equal a full forward pass over that beam's whole history.
    The native kernel runs in fp32 (the others in fp64), hence its tolerance."""
    monkeypatch.setattr(transformer, "prefers_explicit_attention", lambda q: kernel == "explicit")
    model = build(**overrides)
    tol, native_calls = 1e-9, []
    if kernel == "native":
        request.getfixturevalue("native_kernels")
        model, tol = model.float(), 2e-5
        kernel_call = native.decode_attention
        monkeypatch.setattr(native, "decode_attention", lambda *args: native_calls.append(1) or kernel_call(*args))
    src, K, steps = ragged_src(seed=11), 3, 7
    g = torch.Generator().manual_seed(12)
    with torch.no_grad():
        memory, mask = model.encode(src)  # once per source: the K beams share it
        cache = model.new_cache(capacity=4)  # small: also grows mid-search
        sources = torch.arange(3)  # original index of each live source
        history = torch.randint(1, VOCAB, (3 * K, 1), generator=g)  # [B*K, t]: every beam starts with its own token
        for step in range(steps):
            logits = model.decode(history[:, -1:], memory, mask, cache)  # [B*K, 1, V]
            want = model.decode(history, memory, mask)[:, -1:]  # uncached: memory per source, K rows each
            assert close(logits, want, tol)
            B = sources.shape[0]
            parents = torch.randint(0, K, (B, K), generator=g)  # [B, K]: beam k continues beam parents[b, k]
            keep = None
            if step == 3:  # the middle source finishes
                keep = torch.tensor([0, 2])
                memory, mask, sources, parents = memory[keep], mask[keep], sources[keep], parents[keep]
            rows = ((keep if keep is not None else torch.arange(B))[:, None] * K + parents).view(-1)
            history = torch.cat([history[rows], torch.randint(1, VOCAB, (rows.shape[0], 1), generator=g)], dim=1)
            cache.reorder(parents, keep)
        assert cache.length == steps and cache.origin.shape == (2, K, steps)
    assert len(native_calls) == (2 * model.cfg.N * steps if kernel == "native" else 0)  # self and cross, every layer


def reference_step_attention(q, k, v, origin, valid):
    """What the native kernel computes, by masking SDPA: q [B*K, H, d_k], k/v [B, G, R, d] -> [B*K, H*d_v]."""
    BK, H, _ = q.shape
    B, G, R, _ = k.shape
    K = BK // B
    if origin is not None:  # beam k sees row p*K + origin[b, k, p]
        L = origin.shape[-1]
        rows = torch.arange(L) * K + origin  # [B, K, L]
        mask = torch.zeros(B, K, R, dtype=torch.bool).scatter_(2, rows, True)
    else:
        mask = torch.zeros(B, K, R, dtype=torch.bool)
        mask[..., : valid.shape[-1]] = valid[:, None, :]
    qq = q.view(B, K, H, -1).transpose(1, 2)  # [B, H, K, d_k]
    out = torch.nn.functional.scaled_dot_product_attention(qq, k, v, attn_mask=mask[:, None], enable_gqa=G != H)
    return out.transpose(1, 2).reshape(BK, -1)


@pytest.mark.parametrize("d_k,d_v", [(16, 16), (32, 32), (6, 3)], ids=["d16", "d32", "generic-d6-d3"])
@pytest.mark.parametrize("K", [1, 3, 5])
@pytest.mark.parametrize("grouped", [False, True], ids=["mha", "gqa"])
def test_native_step_attention_equals_masked_sdpa(d_k, d_v, K, grouped, native_kernels):
    """Self-attention through the origin table (random ancestors, strided cache views) and cross-attention over
    the real source tokens, against SDPA with the equivalent mask."""
    g = torch.Generator().manual_seed(K * 100 + d_k)
    B, H, L, S = 3, 4, 9, 7
    G = 2 if grouped else H
    q = torch.randn(B * K, H, d_k, generator=g)
    buffer_k, buffer_v = torch.randn(B, L + 4, K, G, d_k, generator=g), torch.randn(B, L + 4, K, G, d_v, generator=g)
    k, v = (
        buffer[:, :L].flatten(1, 2).transpose(1, 2) for buffer in (buffer_k, buffer_v)
    )  # [B, G, L*K, d], as the cache
    origin = torch.randint(0, K, (B, K, L), generator=g)
    assert close(native.decode_attention(q, k, v, origin, None), reference_step_attention(q, k, v, origin, None), 1e-5)

    memory_k = torch.randn(B, S, G, d_k, generator=g).transpose(1, 2)  # [B, G, S, d_k], as project_kv returns it
    memory_v = torch.randn(B, S, G, d_v, generator=g).transpose(1, 2)
    valid = torch.rand(B, S, generator=g) > 0.4
    valid[:, 0] = True
    want = reference_step_attention(q, memory_k, memory_v, None, valid)
    assert close(native.decode_attention(q, memory_k, memory_v, None, valid), want, 1e-5)


def test_native_step_attention_splits_sources_across_threads(native_kernels):
    g = torch.Generator().manual_seed(4)
    B, K, H, L = 5, 4, 4, 6
    q, k, v = (
        torch.randn(B * K, H, 16, generator=g),
        torch.randn(B, H, L * K, 16, generator=g),
        torch.randn(B, H, L * K, 16, generator=g),
    )
    origin = torch.randint(0, K, (B, K, L), generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert close(
            native.decode_attention(q, k, v, origin, None), reference_step_attention(q, k, v, origin, None), 1e-5
        )
    finally:
        torch.set_num_threads(threads)


def test_native_step_attention_over_no_key_is_nan_like_softmax(native_kernels):
    q, k, v = torch.randn(2, 2, 16), torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16)
    assert native.decode_attention(q, k, v, None, torch.zeros(1, 3, dtype=torch.bool)).isnan().all()


def test_native_kernel_rejects_what_it_cannot_read(native_kernels):
    q, k, v = torch.randn(2, 4, 16), torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16)
    with pytest.raises(ValueError, match="fp32"):
        native.decode_attention(q.double(), k.double(), v.double(), None, None)
    with pytest.raises(ValueError, match="contiguous"):
        native.decode_attention(q, k.transpose(2, 3).contiguous().transpose(2, 3), v, None, None)
    with pytest.raises(ValueError, match="4 query heads for 3"):
        native.decode_attention(q, torch.randn(1, 3, 3, 16), torch.randn(1, 3, 3, 16), None, None)


def test_native_kernel_only_where_it_applies(native_kernels):
    """fp32 on CPU, no gradient, no autocast, enabled: anything else decodes with PyTorch's attention."""
    x = torch.randn(2, 1, 16)
    with torch.no_grad():
        assert native.usable(x) and not native.usable(x.double())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not native.usable(x)
    assert not native.usable(x)  # gradients on


def test_beam_search_returns_the_same_with_and_without_the_native_kernels(monkeypatch, native_kernels):
    model, src = build(kv_heads=2).float(), ragged_src(seed=5)
    searched = {}
    for enabled in (True, False):
        monkeypatch.setattr(native, "enabled", enabled)
        searched[enabled] = beam_search(model, src, 1, 2, beam_size=4, max_len=12, return_scores=True)
    assert searched[True][0] == searched[False][0]
    assert close(searched[True][1], searched[False][1], 1e-5)


def test_search_keeps_its_cache_buffers_for_the_next_search_in_eval_mode():
    """Reused buffers (no fresh pages) give the same hypotheses; train() lets them go."""
    model = build(kv_heads=2).float()
    src = ragged_src(seed=5)
    first = beam_search(model, src, 1, 2, beam_size=4, max_len=12, return_scores=True)
    kept = decoding_cache.spare_buffers[model]
    assert len(kept) == 2 * model.cfg.N
    addresses = sorted(buffer.data_ptr() for buffer in kept)
    second = beam_search(model, src, 1, 2, beam_size=4, max_len=12, return_scores=True)
    assert second[0] == first[0] and torch.equal(second[1], first[1])
    assert sorted(buffer.data_ptr() for buffer in decoding_cache.spare_buffers[model]) == addresses
    model.train()
    assert model not in decoding_cache.spare_buffers
    beam_search(model, src, 1, 2, beam_size=4, max_len=12)  # searched in training mode: nothing kept
    assert model.training and model not in decoding_cache.spare_buffers


def test_kernel_builds_in_a_temporary_directory_when_the_cache_is_not_writable(monkeypatch, tmp_path, native_kernels):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("ATTENTION_KERNEL_CACHE", str(blocked / "kernels"))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    native.library.cache_clear()
    try:
        assert native.library() is not None
        assert list((tmp_path / "tmp").glob("attention-ablations-kernels-*/kernels-*.so"))
    finally:
        native.library.cache_clear()


def test_decoding_falls_back_to_pytorch_without_a_compiler(monkeypatch, tmp_path):
    model = build().float()
    src = ragged_src()
    with torch.no_grad():
        memory, mask = model.encode(src)
        want = model.decode(tokens(3, 4), memory, mask)[:, -1:]
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("ATTENTION_KERNEL_CACHE", str(tmp_path / "kernels"))
    native.library.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="native kernels unavailable"):
            assert native.library() is None
        with torch.no_grad():
            cache = model.new_cache()
            for t in range(4):
                got = model.decode(tokens(3, 4)[:, t : t + 1], memory, mask, cache)
        assert close(got, want, 1e-5)
    finally:
        native.library.cache_clear()


def test_decode_rejects_rows_that_are_not_beams_of_the_sources():
    model = build()
    memory, mask = model.encode(ragged_src())
    with pytest.raises(ValueError, match="4 target rows for 3 sources"):
        model.decode(tokens(4, 2), memory, mask)


@pytest.mark.parametrize("case", ["pad mask", "causal", "grouped", "one query"])
def test_explicit_attention_equals_sdpa(case):
    g = torch.Generator().manual_seed(3)
    B, H, T, L, d = 3, 4, 5, 5, 8
    G = 2 if case == "grouped" else H
    T = 1 if case == "one query" else T
    q, k, v = (torch.randn(B, n, t, d, generator=g) for n, t in ((H, T), (G, L), (G, L)))
    mask = None if case == "causal" else torch.rand(B, 1, 1, L, generator=g) > 0.3
    if mask is not None:
        mask[:, ..., 0] = True  # every query sees a key
    causal = case == "causal"
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=G != H
    )
    assert close(explicit_attention(q, k, v, mask, causal, 0.0), want, tol=1e-6)


def test_bf16_autocast_on_cpu_takes_the_explicit_path_and_stays_close(monkeypatch):
    model = build(kv_heads=2).float().train()
    src, tgt = ragged_src(), tokens(3, 7, seed=8)
    with torch.no_grad():
        want = model.eval()(src, tgt)
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: pytest.fail("SDPA in bf16 on CPU")
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(src, tgt)
        model.train()(src, tgt).float().sum().backward()
    assert got.dtype == torch.bfloat16 and (got.float() - want).abs().max() < 0.05 * want.abs().max()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# --------------------------------------------------------------------------------------------------
# 5-6. Position encodings
# --------------------------------------------------------------------------------------------------


def paper_pe(pos: int, k: int, d_model: int) -> float:
    i = k // 2
    angle = pos / 10000 ** (2 * i / d_model)
    return math.sin(angle) if k % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [8, 7, 512, 33])
def test_sinusoids_follow_the_paper_formula_interleaved(d_model):
    table = sinusoids(1000, d_model)
    assert table.shape == (1000, d_model)
    for pos in (0, 1, 2, 17, 999):
        for k in sorted({0, 1, 2, 3, d_model // 2, d_model - 2, d_model - 1}):
            assert table[pos, k].item() == pytest.approx(paper_pe(pos, k, d_model), abs=1e-6), (pos, k)
    assert torch.equal(table[0, 0::2], torch.zeros(len(range(0, d_model, 2))))  # sin(0)
    assert torch.equal(table[0, 1::2], torch.ones(d_model // 2))  # cos(0)


def test_model_adds_the_sinusoid_table():
    model = Transformer(tiny(max_positions=20), VOCAB, PAD)
    table = model.src_positions.table
    assert model.tgt_positions is model.src_positions  # one table for both sides
    assert torch.equal(table, sinusoids(20, 16))
    assert table[5, 3].item() == pytest.approx(paper_pe(5, 3, 16), abs=1e-6)


def test_rope_score_depends_only_on_the_offset():
    head_dim = 8
    cos, sin = rope_tables(64, head_dim)
    g = torch.Generator().manual_seed(11)
    q = torch.randn(1, 1, 1, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, head_dim, generator=g, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        qm = apply_rope(q, cos[m : m + 1].double(), sin[m : m + 1].double())
        kn = apply_rope(k, cos[n : n + 1].double(), sin[n : n + 1].double())
        return (qm * kn).sum().item()

    for m, n in [(0, 0), (3, 1), (1, 3), (10, 2)]:
        for c in (1, 5, 40):
            assert score(m + c, n + c) == pytest.approx(score(m, n), abs=1e-5), (m, n, c)
    assert score(3, 1) != pytest.approx(score(4, 1), abs=1e-3)  # and it does depend on the offset
    assert score(0, 0) == pytest.approx((q * k).sum().item(), abs=1e-12)  # position 0 is the identity


def test_rope_is_a_rotation_of_pairs_i_and_i_plus_half():
    head_dim, P = 6, 16
    cos, sin = rope_tables(P, head_dim)
    for pos in (0, 1, 7, 15):
        for i in range(head_dim // 2):
            angle = pos * 10000.0 ** (-2 * i / head_dim)
            for col in (i, i + head_dim // 2):
                assert cos[pos, col].item() == pytest.approx(math.cos(angle), abs=1e-6)
                assert sin[pos, col].item() == pytest.approx(math.sin(angle), abs=1e-6)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, P, head_dim, generator=g)
    y = apply_rope(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # norm preserved
    # Each pair (x_i, x_{i+half}) is rotated by its own angle: check one pair explicitly.
    pos, i, half = 5, 1, head_dim // 2
    a = pos * 10000.0 ** (-2 * i / head_dim)
    x0, x1 = x[0, 0, pos, i].item(), x[0, 0, pos, i + half].item()
    assert y[0, 0, pos, i].item() == pytest.approx(x0 * math.cos(a) - x1 * math.sin(a), abs=1e-5)
    assert y[0, 0, pos, i + half].item() == pytest.approx(x1 * math.cos(a) + x0 * math.sin(a), abs=1e-5)


def test_rope_model_encoder_is_invariant_to_a_position_shift():
    # With RoPE and no absolute positions, attention depends only on relative offsets, so encoding
    # with the rotation tables shifted by c positions gives the same memory.
    model = build(positional="rope", norm_placement="pre")
    src = tokens(2, 5, seed=13)
    with torch.no_grad():
        memory, _ = model.encode(src)
        model.rope.cos, model.rope.sin = model.rope.cos[7:], model.rope.sin[7:]  # every position shifted by 7
        shifted, _ = model.encode(src)
    assert torch.allclose(shifted, memory, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# 7. Forward and backward for every variant
# --------------------------------------------------------------------------------------------------

VARIANTS = list(itertools.product(POSITIONAL, NORM_PLACEMENT, NORM, FFN, (None, 2)))


@pytest.mark.parametrize(
    "positional,norm_placement,norm,ffn,kv_heads", VARIANTS, ids=["-".join(map(str, v)) for v in VARIANTS]
)
def test_forward_backward_every_variant(positional, norm_placement, norm, ffn, kv_heads):
    torch.manual_seed(0)
    cfg = tiny(
        positional=positional,
        norm_placement=norm_placement,
        norm=norm,
        ffn=ffn,
        kv_heads=kv_heads,
        P_drop=0.1,
        attention_dropout=0.1,
        activation_dropout=0.1,
        N=1,
    )
    model = Transformer(cfg, VOCAB, PAD).train()
    src, tgt = ragged_src(), tokens(3, 5)
    logits = model(src, tgt)
    assert logits.shape == (3, 5, VOCAB) and torch.isfinite(logits).all()
    nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    grad = model.src_embed.weight.grad
    used = torch.unique(torch.cat([src.flatten(), tgt.flatten()]))
    assert (grad[used[used != PAD]].abs().sum(-1) > 0).all()


def test_gradients_reach_both_untied_embeddings_through_the_stacks():
    model = build(tie_embeddings=False)
    src, tgt = tokens(2, 4, seed=14), tokens(2, 3, seed=15)
    model(src, tgt).sum().backward()
    for table, ids in ((model.src_embed, src), (model.tgt_embed, tgt)):
        assert (table.weight.grad[ids.unique()].abs().sum(-1) > 0).all()
        unused = torch.ones(VOCAB, dtype=torch.bool)
        unused[ids.unique()] = False
        assert not table.weight.grad[unused].any()


# --------------------------------------------------------------------------------------------------
# 8. Embeddings
# --------------------------------------------------------------------------------------------------


def test_embeddings_are_tied_by_default_and_untied_on_request():
    assert ModelConfig().tie_embeddings
    tied = Transformer(tiny(), VOCAB, PAD)
    assert tied.src_embed.weight is tied.tgt_embed.weight is tied.out_proj.weight
    untied = Transformer(tiny(tie_embeddings=False), VOCAB, PAD)
    w = [untied.src_embed.weight, untied.tgt_embed.weight, untied.out_proj.weight]
    assert len({id(t) for t in w}) == 3 and len({t.data_ptr() for t in w}) == 3
    assert count_parameters(untied) - count_parameters(tied) == 2 * VOCAB * 16
    assert tied.src_embed.weight[PAD].abs().sum() == 0  # pad row starts at zero


def test_the_pad_id_is_the_one_the_data_gives():
    model = Transformer(tiny(), VOCAB, 5)
    assert model.pad_id == 5 and model.src_embed.padding_idx == 5 and model.src_embed.weight[5].abs().sum() == 0
    _, mask = model.encode(torch.tensor([[1, 2, 5, 5], [3, 4, 6, 7]]))
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, True, True, True]]
    out = beam_search(model.eval(), torch.tensor([[1, 2, 5, 5]]), 2, 3, 2, 0.6, 3)
    assert 5 not in out[0]  # never generated


@pytest.mark.parametrize("scale", [True, False])
def test_encoder_input_is_scaled_embedding_plus_sinusoids(scale):
    model = build(scale_embeddings=scale)
    src = tokens(2, 5, seed=16)
    seen = {}
    model.encoder[0].register_forward_pre_hook(lambda mod, args: seen.__setitem__("x", args[0]))
    model.decoder[0].register_forward_pre_hook(lambda mod, args: seen.__setitem__("y", args[0]))
    with torch.no_grad():
        model(src, src[:, :3])
    pe = torch.tensor([[paper_pe(p, k, 16) for k in range(16)] for p in range(5)], dtype=torch.float64)
    factor = math.sqrt(16) if scale else 1.0
    assert torch.allclose(seen["x"], model.src_embed.weight[src] * factor + pe, atol=1e-6)
    assert torch.allclose(seen["y"], model.tgt_embed.weight[src[:, :3]] * factor + pe[:3], atol=1e-6)
    assert torch.allclose(model._embed(src, model.src_embed, model.src_positions, 0), seen["x"], atol=0)


def test_learned_positions_are_added_per_side():
    model = build(positional="learned")
    src = tokens(2, 4, seed=17)
    with torch.no_grad():
        x = model._embed(src, model.src_embed, model.src_positions, 2)
    want = model.src_embed.weight[src] * 4.0 + model.src_positions.weight[2:6]
    assert torch.allclose(x, want, atol=1e-12)
    assert model.src_positions.weight is not model.tgt_positions.weight


def test_positions_beyond_max_positions_are_rejected():
    model = build(max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        model(tokens(1, 9), tokens(1, 2))
    build(max_positions=8, positional="none")(tokens(1, 9), tokens(1, 2))  # no table, no limit


# --------------------------------------------------------------------------------------------------
# 9-10. Parameter counts and norm placement
# --------------------------------------------------------------------------------------------------


def expected_parameters(cfg: ModelConfig, vocab_size: int = VOCAB) -> int:
    """Hand count: embeddings + per layer attention projections (with biases) + FFN + norms."""
    D, F, h, g, dk, dv = cfg.d_model, cfg.d_ff, cfg.h, cfg.n_kv_heads, cfg.head_dim_k, cfg.head_dim_v
    attention = (D * h * dk + h * dk) + (D * g * dk + g * dk) + (D * g * dv + g * dv) + (h * dv * D + D)
    hidden = 2 * F if cfg.ffn == "swiglu" else F
    ffn = (D * hidden + hidden) + (F * D + D)
    norm = D if cfg.norm == "rmsnorm" else 2 * D
    encoder = cfg.N * (attention + ffn + 2 * norm)
    decoder = cfg.N * (2 * attention + ffn + 3 * norm)
    embeddings = vocab_size * D * (1 if cfg.tie_embeddings else 3)
    positions = 2 * cfg.max_positions * D if cfg.positional == "learned" else 0
    final_norms = 2 * norm if cfg.norm_placement == "pre" else 0
    return embeddings + encoder + decoder + positions + final_norms


def test_base_model_counts_about_63_1_million():
    with torch.device("meta"):
        model = Transformer(ModelConfig(), 37000, PAD)
    n = count_parameters(model)
    assert n == expected_parameters(ModelConfig(), 37000) == 63_082_496
    assert n / 1e6 == pytest.approx(63.1, abs=0.05)  # the paper prints 65 (see reference/paper.md)


# Table 3 rows with a printed count: (N, d_model, d_ff, h, d_k, d_v, params ×10⁶).
TABLE3 = {
    "base": (6, 512, 2048, 8, 64, 64, 65),
    "B1": (6, 512, 2048, 8, 16, 64, 58),
    "B2": (6, 512, 2048, 8, 32, 64, 60),
    "C1": (2, 512, 2048, 8, 64, 64, 36),
    "C2": (4, 512, 2048, 8, 64, 64, 50),
    "C3": (8, 512, 2048, 8, 64, 64, 80),
    "C4": (6, 256, 2048, 8, 32, 32, 28),
    "C5": (6, 1024, 2048, 8, 128, 128, 168),
    "C6": (6, 512, 1024, 8, 64, 64, 53),
    "C7": (6, 512, 4096, 8, 64, 64, 90),
    "big": (6, 1024, 4096, 16, 64, 64, 213),
}


def test_table3_parameter_counts_match_the_paper_with_its_effective_vocabulary():
    # With the real 37k vocabulary every row lands within ~4M of the paper (never compare for equality);
    # the printed counts fit an effective vocabulary near 41k for the base family and 36k for "big".
    for row, (N, D, F, h, dk, dv, paper) in TABLE3.items():
        for vocab, tol in ((37000, 4.5), (36000 if row == "big" else 41000, 0.6)):
            cfg = ModelConfig(N=N, d_model=D, d_ff=F, h=h, d_k=dk, d_v=dv)
            with torch.device("meta"):
                n = count_parameters(Transformer(cfg, vocab, PAD))
            assert n == expected_parameters(cfg, vocab), row
            assert abs(n / 1e6 - paper) <= tol, (row, vocab, n)


def test_small_config_exact_hand_count():
    # V=23, D=16, d_ff=24, h=4, d_k=6, d_v=3, N=2, post-norm, tied, sinusoidal.
    cfg = tiny(d_k=6, d_v=3)
    attention = (16 * 24 + 24) + (16 * 24 + 24) + (16 * 12 + 12) + (12 * 16 + 16)  # W_Q, W_K, W_V, W_O
    ffn = (16 * 24 + 24) + (24 * 16 + 16)
    layer_norm = 2 * 16
    total = 23 * 16 + 2 * (attention + ffn + 2 * layer_norm) + 2 * (2 * attention + ffn + 3 * layer_norm)
    assert count_parameters(Transformer(cfg, VOCAB, PAD)) == total == 11288


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(d_k=6, d_v=3),
        dict(d_k=2, d_v=10, kv_heads=2),
        dict(kv_heads=1),
        dict(ffn="swiglu"),
        dict(ffn="gelu", norm="rmsnorm"),
        dict(norm_placement="pre"),
        dict(norm_placement="pre", norm="rmsnorm"),
        dict(tie_embeddings=False),
        dict(positional="learned"),
        dict(positional="rope"),
        dict(positional="none", N=3, h=2),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default",
)
def test_parameter_count_formula(overrides):
    cfg = tiny(**overrides)
    assert count_parameters(Transformer(cfg, VOCAB, PAD)) == expected_parameters(cfg)


def test_post_norm_is_default_and_pre_norm_adds_final_norms():
    assert ModelConfig().norm_placement == "post"
    post = Transformer(tiny(), VOCAB, PAD)
    assert isinstance(post.encoder_norm, nn.Identity) and isinstance(post.decoder_norm, nn.Identity)
    pre = Transformer(tiny(norm_placement="pre"), VOCAB, PAD)
    assert isinstance(pre.encoder_norm, nn.LayerNorm) and isinstance(pre.decoder_norm, nn.LayerNorm)
    assert count_parameters(pre) - count_parameters(post) == 2 * 2 * 16
    pre_rms = Transformer(tiny(norm_placement="pre", norm="rmsnorm"), VOCAB, PAD)
    assert isinstance(pre_rms.encoder_norm, nn.RMSNorm) and isinstance(pre_rms.decoder_norm, nn.RMSNorm)


def test_learned_positions_add_two_tables():
    for P in (8, 32):
        base = count_parameters(Transformer(tiny(max_positions=P), VOCAB, PAD))
        learned = count_parameters(Transformer(tiny(max_positions=P, positional="learned"), VOCAB, PAD))
        assert learned - base == 2 * P * 16
        for other in ("rope", "none"):
            assert count_parameters(Transformer(tiny(max_positions=P, positional=other), VOCAB, PAD)) == base


@pytest.mark.parametrize("pre", [False, True])
def test_residual_sublayer_placement(pre):
    cfg = tiny(norm_placement="pre" if pre else "post")
    res = Residual(cfg).double()
    nn.init.normal_(res.norm.weight)
    nn.init.normal_(res.norm.bias)
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    f = lambda y: 2 * y + 1  # noqa: E731
    ln = lambda y: nn.functional.layer_norm(y, (16,), res.norm.weight, res.norm.bias)  # noqa: E731
    want = x + f(ln(x)) if pre else ln(x + f(x))  # pre: x + f(LN(x)); post (paper): LN(x + f(x))
    assert torch.allclose(res(x, f), want, atol=1e-12)


# --------------------------------------------------------------------------------------------------
# Dropout's noise, drawn natively on CPU (native.dropout_noise; kernels/dropout.cpp)


def bound(p: float, n: int) -> float:
    """Five standard deviations of a rate p estimated over n draws."""
    return 5 * (p * (1 - p) / n) ** 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_native_dropout_noise_is_zero_at_rate_p_else_the_scale(dtype, p, native_kernels):
    torch.manual_seed(0)
    noise = native_kernels.dropout_noise(torch.empty(1_000_001, dtype=dtype), p)  # odd: the last value drawn alone
    assert noise.dtype == dtype and noise.shape == (1_000_001,)
    assert set(noise.unique().tolist()) == {0.0, torch.tensor(1 / (1 - p), dtype=dtype).item()}
    dropped = noise == 0
    assert abs(dropped.double().mean().item() - p) < bound(p, noise.numel())
    half = noise.numel() // 2  # one 64-bit draw serves element i of each half: the two must be independent
    for a, b in ((dropped[:half], dropped[half : 2 * half]), (dropped[:-1], dropped[1:])):
        assert abs((a & b).double().mean().item() - p * p) < bound(p * p, a.numel())


def test_native_dropout_noise_follows_torch_seed_and_not_the_thread_count(native_kernels):
    like = torch.empty(300_000)  # past the size where the kernel splits its work across threads
    torch.manual_seed(3)
    draws = [native_kernels.dropout_noise(like, 0.1) for _ in range(8)]
    first = draws[0]
    assert len({tuple(d.nonzero().flatten()[:64].tolist()) for d in draws}) == 8  # a fresh draw per call
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.manual_seed(3)
        assert torch.equal(native_kernels.dropout_noise(like, 0.1), first)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="fp32 or bf16"):
        native_kernels.dropout_noise(like.double(), 0.1)
    with pytest.raises(ValueError, match="0 < p < 1"):
        native_kernels.dropout_noise(like, 1.0)


@pytest.mark.parametrize("kernels", [True, False], ids=["native", "torch"])
def test_dropout_scales_what_it_keeps_and_passes_gradients_through_the_same_mask(kernels, monkeypatch, request):
    if kernels:
        request.getfixturevalue("native_kernels")
    monkeypatch.setattr(native, "enabled", kernels)
    x = torch.randn(64, 33, requires_grad=True)
    assert transformer.dropout(x, 0.25, training=False) is x and transformer.dropout(x, 0.0, training=True) is x
    y = transformer.dropout(x, 0.25, training=True)
    y.sum().backward()
    assert set(x.grad.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    assert torch.equal(y, x * x.grad)  # dropped where the gradient is 0; kept ones scaled by 1 / (1 - p)
    assert abs((x.grad == 0).double().mean().item() - 0.25) < bound(0.25, x.numel())


def test_deepnorm_is_post_norm_over_alpha_x_with_deepnets_constants_and_init():
    from lightning_modules.transformer import Residual, deepnorm_constants

    cfg = ModelConfig(N=6, d_model=64, d_ff=256, h=8, norm_placement="deepnorm", P_drop=0.0)
    alpha_e, beta_e, alpha_d, beta_d = deepnorm_constants(cfg)
    # DeepNet (Wang et al. 2022), encoder-decoder with N = M = 6
    assert alpha_e == pytest.approx(0.81 * 7776 ** (1 / 16)) and beta_e == pytest.approx(0.87 * 7776 ** (-1 / 16))
    assert alpha_d == pytest.approx(18**0.25) and beta_d == pytest.approx(72**-0.25)
    torch.manual_seed(0)
    model = Transformer(cfg, 100, 0)
    assert model.encoder[0].attn_res.alpha == alpha_e and model.decoder[0].ffn_res.alpha == alpha_d
    w1 = model.encoder[0].ffn.w1.weight  # Xavier normal, std sqrt(2 / (fan_in + fan_out)), times beta
    assert w1.std().item() == pytest.approx(beta_e * math.sqrt(2 / (64 + 256)), rel=0.05)
    q = model.decoder[0].self_attn.q_proj.weight  # queries and keys keep gain 1
    assert q.std().item() == pytest.approx(math.sqrt(2 / 128), rel=0.05)
    residual = Residual(cfg, alpha=2.0).eval()
    x = torch.randn(2, 3, 64)
    assert torch.allclose(residual(x, lambda y: y * 0.5), residual.norm(2.0 * x + 0.5 * x))
    assert model(torch.randint(4, 100, (2, 5)), torch.randint(4, 100, (2, 4))).shape == (2, 4, 100)
