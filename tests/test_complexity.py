"""`ablate complexity`: the exponent fit, counted FLOPs, sequential depth and path length against Table 1's theory."""

from __future__ import annotations

import math
import random

import pytest

from ablations.cli import main
from ablations.measure.complexity import (
    LAYERS,
    PATH_KINDS,
    ComplexityConfig,
    counted_flops,
    fit_exponent,
    path_length,
    sequential_depth,
    theoretical_path,
)


def test_fit_recovers_a_known_exponent_through_noise():
    rng = random.Random(0)
    sizes = [16, 32, 64, 128, 256, 512]
    for exponent in (1.0, 2.0, 0.5):
        values = [3e-6 * n**exponent * (1 + 0.05 * rng.uniform(-1, 1)) for n in sizes]
        assert fit_exponent(sizes, values) == pytest.approx(exponent, abs=0.05)
    with pytest.raises(ValueError, match="two or more"):
        fit_exponent([1], [1.0])
    with pytest.raises(ValueError, match="positive"):
        fit_exponent([1, 2], [0.0, 1.0])


def test_counted_flops_have_the_papers_exponents():
    for layer, (p_n, p_d) in {
        "self-attention": (2, 1),
        "restricted self-attention": (1, 1),
        "recurrent": (1, 2),
        "convolutional": (1, 2),
    }.items():
        assert fit_exponent(
            [64, 128, 256], [counted_flops(layer, n, 32, 15, 3) for n in (64, 128, 256)]
        ) == pytest.approx(p_n)
        assert fit_exponent([16, 32, 64], [counted_flops(layer, 128, d, 15, 3) for d in (16, 32, 64)]) == pytest.approx(
            p_d
        )
    assert counted_flops("self-attention", 10, 4, 3, 3) == 2 * 2 * 10 * 10 * 4


@pytest.mark.parametrize("kind", PATH_KINDS)
def test_measured_path_length_matches_the_structure(kind, one_thread):
    for n in (2, 5, 9, 16, 28):
        assert path_length(kind, n, 4, 5, 3) == theoretical_path(kind, n, 5, 3), (kind, n)


def test_path_length_grows_as_table1_says(one_thread):
    # O(1), O(n/r), O(n), O(log_k n): quadrupling n keeps 1, about quadruples n/r and n, adds one to log_3 n.
    small, large = 20, 80
    assert path_length("self-attention", large, 4, 5, 3) == 1
    assert path_length("restricted self-attention", large, 4, 5, 3) / path_length(
        "restricted self-attention", small, 4, 5, 3
    ) == pytest.approx(4, rel=0.15)
    assert path_length("recurrent", large, 4, 5, 3) == 4 * path_length("recurrent", small, 4, 5, 3)
    assert path_length("convolutional (dilated)", 81, 4, 5, 3) == math.ceil(math.log(81, 3)) == 4


def test_only_the_recurrent_layer_has_sequential_depth_growing_with_n(one_thread):
    for layer in LAYERS:
        depths = [sequential_depth(layer, n, 4, 5, 3) for n in (8, 16, 32)]
        if layer == "recurrent":
            assert depths[2] - depths[1] == 2 * (depths[1] - depths[0]) > 0  # linear in n
        else:
            assert len(set(depths)) == 1, (layer, depths)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"complexity\.r = 4"):
        ComplexityConfig(r=4)
    with pytest.raises(ValueError, match=r"complexity\.ns"):
        ComplexityConfig(ns=(64, 32, 16, 8))
    with pytest.raises(ValueError, match=r"complexity\.ds"):
        ComplexityConfig(ds=(32,), fit_points=1)


def test_quick_command_writes_table1(tmp_path, capsys, one_thread):
    assert main(["complexity", "--quick", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "table1.md").read_text(encoding="utf-8")
    for layer in LAYERS:
        assert f"| {layer} |" in text
    assert "1 thread used" in text and "Measured 20" in text and "O(log_k(n))" in text
    summary = (tmp_path / "table1.csv").read_text(encoding="utf-8").splitlines()
    assert summary[0].startswith("layer,paper_complexity") and summary[0].endswith("measured_at,cpu_model,threads")
    assert len(summary) == 1 + len(LAYERS)
    assert not (tmp_path / "sustained_flops.json").exists()  # a quick run never prices Table 2
    assert "graph depth" in capsys.readouterr().out
    assert text.startswith("# Table 1: per-layer cost, quick (smoke test, not a result)\n")


def test_quick_never_writes_results_by_default(tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    assert main(["complexity", "--quick"]) == 0
    assert (tmp_path / "runs" / "complexity-quick" / "table1.md").is_file()
    assert not (tmp_path / "results").exists()
