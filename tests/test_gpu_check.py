"""`ablate gpu-check --device cpu --quick`: the GPU check runs end to end on a CPU before any GPU sees it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ablations import cli
from ablations.launch import cost
from ablations.measure import gpu_check

os.environ.setdefault("WANDB_MODE", "disabled")


def test_synthetic_batches_are_wmt_like_and_within_the_budget():
    src, tgt = gpu_check.wmt_like_lengths(50_000)
    assert 22 <= np.median(src) <= 26 and src.max() <= 254 and tgt.min() >= 1
    assert 1.0 < tgt.mean() / src.mean() < 1.25  # German targets run longer
    import torch

    batches = gpu_check.synthetic_batches(3125, 4, 37000, torch.device("cpu"))
    assert len(batches) == 4
    for batch in batches:
        for side in ("src", "tgt_in"):
            rows, length = batch[side].shape
            assert rows * length <= 3125
        assert int(batch["src"].max()) < 37000


@pytest.mark.slow
def test_the_quick_check_writes_its_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "check"
    assert cli.main(["gpu-check", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    result = json.loads((out / gpu_check.JSON_FILE).read_text())
    assert result["device"] == "cpu" and result["quick"] is True
    names = [entry["name"] for entry in result["training"]]
    assert names == ["base", "base@256", "big", "big@256"]
    for entry in result["training"]:
        assert entry["tokens_per_s"] > 0 and entry["planned_flops_per_s"] > 0 and entry["mfu"] is None
        assert all(b["src"][0] * b["src"][1] <= entry["device_tokens"] for b in entry["batches"])
    assert result["decoding"]["sentences_per_s"] > 0 and result["decoding"]["beam_size"] == 4
    ddp = result["ddp"]
    assert ddp["ok"] and ddp["backend"] == "gloo", ddp
    assert ddp["plans"] == {
        "one_process": {"devices": 1, "device_batch_tokens": 1024, "accumulate_grad_batches": 4},
        "two_ranks": {"devices": 2, "device_batch_tokens": 1024, "accumulate_grad_batches": 2},
    }
    text = (out / gpu_check.MARKDOWN_FILE).read_text()
    assert "quick" in text and "DDP smoke (gloo" in text and "**ok**" in text
    # A CPU smoke test of the check prices nothing: the dry run keeps its stated assumption.
    assert cost.read_measurements(out) == []


def test_the_check_refuses_paper_dimensions_on_a_cpu(tmp_path, capsys):
    assert cli.main(["gpu-check", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "--quick" in capsys.readouterr().err
