import itertools
import math

import pytest
import torch
from torch import nn

from lightning_modules.beam_search import beam_search, greedy_search
from lightning_modules.config import ModelConfig
from lightning_modules.transformer import Transformer

PAD, BOS, EOS = 0, 1, 2
CONTENT = (3, 4, 5, 6)  # the tokens a hypothesis may contain (PAD and BOS are never generated)
ALPHA = 0.6


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(seed: int, std: float = 0.5, **overrides) -> Transformer:
    """A tiny random model; weights drawn with a large std so that its distributions depend on the prefix."""
    with torch.random.fork_rng():  # leave the global generator as it was
        torch.manual_seed(seed)
        model = Transformer(ModelConfig(N=1, d_model=16, d_ff=32, h=2, P_drop=0.0, **overrides), 7, PAD)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, std)
    return model.eval()


class HashLM(nn.Module):
    """A stand-in for the Transformer with the same decoding API whose next-token distribution is an arbitrary
    (random-table) function of the source and the whole prefix, with an EOS bonus growing with the length.
    Unlike a tiny random Transformer (which mostly says EOS at once or never), its best hypotheses have varied
    lengths and sentences of a batch finish at different steps, so the search bookkeeping is exercised."""

    P = 10007

    class Cache:
        def __init__(self):
            self.state, self.length = None, 0

        def reorder(self, parents, sources=None):  # the Transformer's DecoderCache API: parents [B', K] within a source
            state = self.state.view(-1, parents.shape[1])
            if sources is not None:
                state = state.index_select(0, sources)
            self.state = state.gather(1, parents).view(-1)

    def __init__(self, seed: int, vocab_size: int = 8, temperature: float = 2.0, eos_slope: float = 0.8):
        super().__init__()
        self.vocab_size, self.pad_id, self.max_length = vocab_size, PAD, None  # what beam search reads of a model
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("table", torch.randn(self.P, vocab_size, generator=g) * temperature)
        self.eos_slope = eos_slope

    def encode(self, src):
        weights = torch.arange(1, src.shape[1] + 1)
        src_hash = (src * weights * 97).sum(1) % self.P  # pads are 0: padding does not change the hash
        memory = src_hash.float()[:, None, None].expand(-1, src.shape[1], 1)
        return memory, (src != self.pad_id)[:, None, None, :]

    def new_cache(self, capacity: int = 16):
        return self.Cache()

    def _logits(self, state, position):
        logits = self.table[state].clone()
        logits[:, EOS] += self.eos_slope * position - 2.5
        return logits

    def decode(self, tgt, memory, src_mask, cache=None):
        # tgt [B*K, T]: K rows (beams) per source of memory [B, S, 1], as in Transformer.decode
        if cache is not None and cache.state is not None:
            state = cache.state
        else:
            state = memory[:, 0, 0].long().repeat_interleave(tgt.shape[0] // memory.shape[0])
        offset = cache.length if cache is not None else 0
        out = []
        for i in range(tgt.shape[1]):
            state = (state * 131 + tgt[:, i] + 7) % self.P
            out.append(self._logits(state, offset + i))
        if cache is not None:
            cache.state, cache.length = state, offset + tgt.shape[1]
        return torch.stack(out, dim=1)

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, *self.encode(src))


def lp(length):
    return ((5.0 + length) / 6.0) ** ALPHA


@torch.no_grad()
def scores_of(model, src_row: torch.Tensor, hyps: list[list[int]], alpha: float = ALPHA) -> torch.Tensor:
    """Length-penalised log P(hyp + EOS | src) by teacher forcing, for one source row [S]."""
    T = max(len(h) for h in hyps) + 1
    tgt_in = torch.tensor([[BOS] + h + [PAD] * (T - 1 - len(h)) for h in hyps])
    tgt_out = torch.tensor([h + [EOS] + [PAD] * (T - 1 - len(h)) for h in hyps])
    n = torch.tensor([len(h) + 1 for h in hyps])
    logp = model(src_row[None].expand(len(hyps), -1), tgt_in).float().log_softmax(-1)
    logp = logp.gather(2, tgt_out[:, :, None])[:, :, 0]
    logp = logp.masked_fill(torch.arange(T)[None] >= n[:, None], 0.0).sum(1)
    return logp / ((5.0 + n) / 6.0) ** alpha


def exhaustive_best(model, src_row, max_len: int, content=CONTENT) -> tuple[list[int], float]:
    hyps = [list(s) for n in range(max_len + 1) for s in itertools.product(content, repeat=n)]
    scores = scores_of(model, src_row, hyps)
    i = int(scores.argmax())
    return hyps[i], float(scores[i])


# Tiny random Transformers (the real decoder and cache) and HashLMs (varied lengths, staggered finishes).
MODELS = [("transformer", seed) for seed in range(3)] + [("hash", seed) for seed in range(4)]


def make(kind: str, seed: int):
    return tiny_model(seed) if kind == "transformer" else HashLM(seed)


def random_src(seed: int, rows: int, cols: int, vocab: int) -> torch.Tensor:
    """Rows of different lengths: row i keeps cols - (i % cols) tokens, the rest is padding."""
    src = torch.randint(3, vocab, (rows, cols), generator=torch.Generator().manual_seed(seed))
    for i in range(rows):
        src[i, cols - (i % cols) :] = PAD
    return src


def content_of(model):
    return tuple(range(3, model.vocab_size))


@pytest.mark.parametrize("kind,seed", MODELS)
def test_large_beam_equals_exhaustive_search(kind, seed):
    model = make(kind, seed)
    content = content_of(model)
    max_len = 4 if len(content) <= 4 else 3
    src = random_src(seed, 4, 3, model.vocab_size)
    K = len(content) ** max_len  # every prefix of every length stays in the beam
    hyps, scores = beam_search(
        model, src, BOS, EOS, beam_size=K, length_penalty=ALPHA, max_len=max_len, return_scores=True
    )
    for b in range(src.shape[0]):
        best, best_score = exhaustive_best(model, src[b], max_len, content)
        assert hyps[b] == best
        assert float(scores[b]) == pytest.approx(best_score, abs=1e-4)


@pytest.mark.parametrize("kind,seed", MODELS)
def test_returned_scores_are_the_teacher_forced_scores(kind, seed):
    model = make(kind, seed)
    src = random_src(seed, 4, 5, model.vocab_size)
    hyps, scores = beam_search(model, src, BOS, EOS, 4, ALPHA, max_len_offset=3, return_scores=True)
    for b in range(src.shape[0]):
        assert float(scores[b]) == pytest.approx(float(scores_of(model, src[b], [hyps[b]])[0]), abs=1e-4)


@pytest.mark.parametrize("kind,seed", MODELS)
def test_bound_stop_is_exact_and_count_stop_not_better(kind, seed):
    model = make(kind, seed)
    src = random_src(seed, 6, 5, model.vocab_size)
    full = beam_search(model, src, BOS, EOS, 4, ALPHA, 6, stop="none", return_scores=True)
    bound = beam_search(model, src, BOS, EOS, 4, ALPHA, 6, stop="bound", return_scores=True)
    count = beam_search(model, src, BOS, EOS, 4, ALPHA, 6, stop="count", return_scores=True)
    assert bound[0] == full[0]
    torch.testing.assert_close(bound[1], full[1])
    assert torch.all(count[1] <= full[1] + 1e-6)


class ScriptedLM(HashLM):
    """Next-token log-probabilities by position only: first EOS (-1.0) or 3 (-0.46); then 4 (-1.2) or another
    content token (-1.75 each); then 3 for free until EOS becomes certain at position 12. The best hypothesis
    is 3 4 3 ... 3 (12 tokens, (-0.46 - 1.2) / lp(13) = -0.86), better than the empty one (-1.0 / lp(1)); a
    stopping bound that ignored the growing length penalty would stop after two steps with the empty one."""

    def _logits(self, state, position):
        logits = torch.full((state.shape[0], self.vocab_size), -30.0)
        if position == 0:
            logits[:, EOS], logits[:, 3] = -1.0, math.log1p(-math.exp(-1.0))
        elif position == 1:
            logits[:, 3:] = math.log1p(-math.exp(-1.2)) - math.log(self.vocab_size - 4)
            logits[:, 4] = -1.2
        elif position < 12:
            logits[:, 3] = 0.0
        else:
            logits[:, EOS] = 0.0
        return logits


def test_bound_stop_accounts_for_the_growing_length_penalty():
    model = ScriptedLM(0)
    src = torch.tensor([[3, 4, 5, 6, 7]])
    best = [3, 4] + [3] * 10
    full = beam_search(model, src, BOS, EOS, 2, ALPHA, 20, stop="none", return_scores=True)
    assert full[0] == [best]
    assert float(full[1][0]) == pytest.approx((math.log1p(-math.exp(-1.0)) - 1.2) / lp(13), abs=1e-4)
    assert float(full[1][0]) > -1.0 / lp(1)
    assert beam_search(model, src, BOS, EOS, 2, ALPHA, 20, stop="bound") == [best]


def test_bound_stop_saves_steps():
    class Counting(HashLM):
        calls = 0

        def decode(self, *args, **kwargs):
            Counting.calls += 1
            return super().decode(*args, **kwargs)

    model = Counting(0, eos_slope=2.0)
    src = random_src(0, 8, 5, model.vocab_size)
    beam_search(model, src, BOS, EOS, 4, ALPHA, 50, stop="none")
    full_steps, Counting.calls = Counting.calls, 0
    beam_search(model, src, BOS, EOS, 4, ALPHA, 50, stop="bound")
    assert full_steps == 5 + 50 + 1 and Counting.calls < full_steps / 2


@pytest.mark.parametrize("kind,seed", MODELS)
def test_beam4_scores_at_least_greedy(kind, seed):
    model = make(kind, seed)
    src = random_src(seed, 6, 4, model.vocab_size)
    beam = beam_search(model, src, BOS, EOS, 4, ALPHA, max_len_offset=4)
    greedy = greedy_search(model, src, BOS, EOS, max_len_offset=4)
    for b in range(src.shape[0]):
        s_beam, s_greedy = scores_of(model, src[b], [beam[b], greedy[b]])
        assert s_beam >= s_greedy - 1e-5


@pytest.mark.parametrize(
    "overrides",
    [
        dict(positional="sinusoidal"),
        dict(positional="rope"),
        dict(positional="learned"),
        dict(norm_placement="pre", kv_heads=1),
        dict(tie_embeddings=False, ffn="swiglu"),
    ],
)
def test_cached_equals_uncached_transformer(overrides):
    model = tiny_model(1, **overrides)
    src = torch.tensor([[3, 4, 5, 6, 3, 4], [4, 4, 6, PAD, PAD, PAD], [6, 5, PAD, PAD, PAD, PAD]])
    for K, stop in [(4, "bound"), (3, "count"), (1, "count")]:
        cached = beam_search(model, src, BOS, EOS, K, ALPHA, 8, stop=stop, return_scores=True)
        uncached = beam_search(model, src, BOS, EOS, K, ALPHA, 8, stop=stop, use_cache=False, return_scores=True)
        assert cached[0] == uncached[0]
        torch.testing.assert_close(cached[1], uncached[1], atol=1e-4, rtol=1e-4)


def test_cached_equals_uncached_staggered_finishes():
    model = HashLM(1)
    src = random_src(1, 8, 6, model.vocab_size)
    for K in (1, 4):
        cached = beam_search(model, src, BOS, EOS, K, ALPHA, 8, return_scores=True)
        uncached = beam_search(model, src, BOS, EOS, K, ALPHA, 8, use_cache=False, return_scores=True)
        assert cached[0] == uncached[0]
        torch.testing.assert_close(cached[1], uncached[1])


@pytest.mark.parametrize("kind,seed", MODELS)
def test_batched_equals_one_by_one(kind, seed):
    model = make(kind, seed)
    src = random_src(seed, 6, 7, model.vocab_size)
    for K in (1, 4):
        together = beam_search(model, src, BOS, EOS, K, ALPHA, max_len_offset=5)
        alone = [beam_search(model, row[row != PAD][None], BOS, EOS, K, ALPHA, max_len_offset=5)[0] for row in src]
        assert together == alone
    lengths = {len(h) for h in together}
    if kind == "hash":
        assert len(lengths) > 2  # the batch's sentences finish at different steps


def test_max_length_respected():
    model = tiny_model(0)  # this model likes long repetitive outputs
    rows = [[3, 4, 5, 6, 3, 4, 5], [4, 4, 6], [6]]
    src = torch.tensor([r + [PAD] * (7 - len(r)) for r in rows])
    for offset in (0, 2, 5):
        for K in (1, 4):
            out = beam_search(model, src, BOS, EOS, K, ALPHA, max_len_offset=offset)
            for r, hyp in zip(rows, out):
                assert len(hyp) <= len(r) + offset
                assert all(t in CONTENT for t in hyp)
            assert any(len(hyp) == len(r) + offset for r, hyp in zip(rows, out))
    out = beam_search(model, src, BOS, EOS, 4, ALPHA, max_len_offset=50, max_len=2)
    assert max(len(h) for h in out) == 2
    zero = beam_search(model, src, BOS, EOS, 4, ALPHA, max_len_offset=0, max_len=0)
    assert zero == [[], [], []]
    # The model's positions cap the length as well (BOS takes position 0).
    short = tiny_model(0, max_positions=6)
    out = beam_search(short, src[:, :3], BOS, EOS, 4, ALPHA, max_len_offset=50)
    assert max(len(h) for h in out) == 5 and all(len(h) <= 5 for h in out)


@pytest.mark.parametrize("kind,seed", MODELS)
@torch.no_grad()
def test_greedy_equals_argmax_loop(kind, seed):
    model = make(kind, seed)
    src = random_src(seed, 5, 5, model.vocab_size)
    offset = 4
    out = greedy_search(model, src, BOS, EOS, max_len_offset=offset)
    for row, hyp in zip(src, out):
        row = row[row != PAD]
        prefix = [BOS]
        while len(prefix) - 1 < len(row) + offset:
            logits = model(row[None], torch.tensor([prefix]))[0, -1]
            logits[[PAD, BOS]] = float("-inf")
            token = int(logits.argmax())
            if token == EOS:
                break
            prefix.append(token)
        assert hyp == prefix[1:]


def test_restores_training_mode():
    model = tiny_model(0)
    model.train()
    src = torch.tensor([[3, 4, 5]])
    a = beam_search(model, src, BOS, EOS, 4, ALPHA, 3)
    assert model.training
    assert a == beam_search(model.eval(), src, BOS, EOS, 4, ALPHA, 3)


def test_bad_arguments():
    model = HashLM(0)
    with pytest.raises(ValueError):
        beam_search(model, torch.tensor([[3]]), BOS, EOS, 0)
    with pytest.raises(ValueError):
        beam_search(model, torch.tensor([[3]]), BOS, EOS, 4, stop="never")
    assert beam_search(model, torch.empty(0, 3, dtype=torch.long), BOS, EOS) == []


def reference_candidates(logp, scores, banned, eos_id, only_eos, n):
    """What native.beam_candidates returns, by sorting: logp + scores with the banned tokens at -inf (all but EOS
    where only_eos), flattened to [B, K*V]; a stable sort puts the lower index first among equal values."""
    B, K, V = logp.shape
    cand = logp.clone()
    cand[:, :, banned] = -math.inf
    if only_eos is not None:
        cand[only_eos] = torch.where(torch.arange(V) == eos_id, cand[only_eos], -math.inf)
    cand = (cand + scores[:, :, None]).view(B, K * V)
    values, indices = cand.sort(dim=1, descending=True, stable=True)
    return values[:, :n], indices[:, :n]


def assert_same_candidates(got, want):
    (values, indices), (want_values, want_indices) = got, want
    assert torch.equal(values, want_values)
    finite = values.isfinite()
    assert torch.equal(indices[finite], want_indices[finite])
    # Places without a finite candidate hold -inf with distinct valid indices (a dead beam's continuation).
    for row in indices:
        assert len(set(row.tolist())) == row.numel()


@pytest.mark.parametrize("K", [1, 3, 4, 5])
@pytest.mark.parametrize("V", [7, 40, 2003])
def test_native_candidates_equal_sorting(K, V, native_kernels):
    """Vocabularies below, across and well past the kernel's 16-token vector blocks; beams dead from the start
    (step 0: only beam 0 is live); sources at their length limit (only EOS); ties between tokens and beams."""
    g = torch.Generator().manual_seed(K * 1000 + V)
    B = 6
    logp = torch.randn(B, K, V, generator=g).log_softmax(-1)
    logp[1, :, : V // 2] = logp[1, :, :1]  # many equal values within a beam
    logp[2] = logp[2, :1]  # every beam the same: equal values across beams
    scores = torch.randn(B, K, generator=g) * 3
    scores[0, 1:] = -math.inf
    scores[2] = 0.0
    banned = torch.tensor([0, 1])
    only_eos = torch.tensor([False, False, False, True, False, True])
    for limit in (None, only_eos):
        for n in {1, 2 * K, min(K * V, 3 * K + 1)}:
            got = native_kernels.beam_candidates(logp, scores, banned, EOS, limit, n)
            assert_same_candidates(got, reference_candidates(logp, scores, banned, EOS, limit, n))


def test_native_candidates_with_fewer_finite_candidates_than_places(native_kernels):
    logp = torch.full((2, 2, 5), -math.inf)
    logp[0, 0, 3] = -1.0
    logp[1, 1, 4] = -2.0
    scores = torch.tensor([[0.0, -math.inf], [-1.0, -3.0]])
    got = native_kernels.beam_candidates(logp, scores, torch.tensor([0, 1]), EOS, None, 4)
    assert_same_candidates(got, reference_candidates(logp, scores, torch.tensor([0, 1]), EOS, None, 4))
    assert got[0][:, 0].tolist() == [-1.0, -5.0] and got[0][:, 1:].isinf().all()


def test_native_candidates_reject_what_they_cannot_read(native_kernels):
    logp, scores, banned = torch.randn(2, 3, 9), torch.randn(2, 3), torch.tensor([0])
    for bad in (
        dict(logp=logp.double()),
        dict(logp=logp.transpose(0, 1).contiguous().transpose(0, 1)),
        dict(scores=scores[:, :2]),
        dict(n=28),
        dict(n=0),
        dict(eos_id=9),
    ):
        arguments = dict(logp=logp, scores=scores, banned=banned, eos_id=EOS, only_eos=None, n=6) | bad
        with pytest.raises(ValueError, match="beam_candidates"):
            native_kernels.beam_candidates(**arguments)


@pytest.mark.parametrize("seed", range(3))
def test_search_equals_with_and_without_native_candidates(seed, monkeypatch, native_kernels):
    """The whole search (finishes, staggered stops, length limits) with the kernel's candidates and torch.topk's;
    a vocabulary of 40 crosses the kernel's vector blocks."""
    model = HashLM(seed, vocab_size=40)
    src = random_src(seed, 8, 6, model.vocab_size)
    searched = {}
    for enabled in (True, False):
        monkeypatch.setattr(native_kernels, "enabled", enabled)
        searched[enabled] = beam_search(model, src, BOS, EOS, 4, ALPHA, 6, return_scores=True)
    assert searched[True][0] == searched[False][0]
    assert torch.equal(searched[True][1], searched[False][1])
