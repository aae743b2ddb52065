"""The one parameter and FLOP count (lightning_modules/flops.py): a worked example by hand, torch's FLOP counter,
and every caller counting the same way."""

from __future__ import annotations

import pytest
import torch

from lightning_modules.config import ModelConfig
from lightning_modules.data import PAD_ID
from lightning_modules.flops import (
    attention_multiply_adds,
    count_parameters,
    multiply_adds_per_token,
    parameter_count,
    step_flops,
    training_flops,
)
from lightning_modules.transformer import Transformer


def test_counted_flops_worked_example():
    # N=1, d_model 4, d_ff 8, one head of 4, vocabulary 10. Per source token: encoder self-attention 4·(4·4) and
    # feed-forward 4·8 + 8·4, plus the decoder's cross-attention keys and values 2·(4·4): 128 + 32 = 160
    # multiply-adds. Per target token: self-attention 64, cross-attention queries and output 32, feed-forward 64,
    # output projection 4·10: 200. Training on 100 target (and 100 source) tokens: 3 · 2 · 360 · 100.
    model = ModelConfig(N=1, d_model=4, d_ff=8, h=1, d_k=4, d_v=4, max_positions=16)
    assert multiply_adds_per_token(model, 10) == (160, 200)
    assert training_flops(model, 10, 100) == 216_000
    assert training_flops(model, 10, 100, source_tokens=50) == 3 * 2 * (160 * 50 + 200 * 100)


GQA_SWIGLU = {"ffn": "swiglu", "kv_heads": 2, "d_k": 6, "d_v": 3}


@pytest.mark.parametrize("variant", [{}, GQA_SWIGLU], ids=["base", "swiglu-gqa"])
def test_step_flops_match_torch_flop_counter(one_thread, variant):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = ModelConfig(N=2, d_model=16, d_ff=24, h=4, P_drop=0.0, max_positions=64, **variant)
    model = Transformer(cfg, 50, PAD_ID).eval()
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 5))
    # The math backend spells attention out as matmuls, which the counter sees (the fused CPU kernel it does not).
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        model(src, tgt)
    assert step_flops(cfg, 50, (3, 7), (3, 5)) == pytest.approx(3 * counter.get_total_flops(), rel=1e-9)


def test_step_flops_are_the_token_count_plus_attention_products():
    cfg = ModelConfig(N=2, d_model=16, d_ff=24, h=4, d_k=6, d_v=3, max_positions=64)
    B, S, T = 3, 7, 5
    assert attention_multiply_adds(cfg, S, T) == 2 * 4 * (6 + 3) * (S * S + T * T + T * S)
    expected = training_flops(cfg, 50, B * T, source_tokens=B * S) + 3 * 2 * B * attention_multiply_adds(cfg, S, T)
    assert step_flops(cfg, 50, (B, S), (B, T)) == pytest.approx(expected, rel=1e-12)


def test_parameter_count_is_the_built_models():
    cfg = ModelConfig(N=1, d_model=16, d_ff=32, h=2, positional="learned", tie_embeddings=False)
    torch.manual_seed(0)
    assert parameter_count(cfg, 40) == count_parameters(Transformer(cfg, 40, PAD_ID))
    assert parameter_count(cfg, 41) - parameter_count(cfg, 40) == 3 * 16  # untied: three rows more
