"""A user's files are only ever read: `--data DIR` trains on DIR at every scale and leaves it byte-identical."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablations.sweep import expand, load_sweep, scales_for

ROOT = Path(__file__).resolve().parent.parent
TABLE3 = ROOT / "sweeps" / "table3.yaml"


def user_corpus(root: Path) -> Path:
    words = "the a cat dog sees likes small big red blue house tree runs sleeps".split()
    for split, n in (("train", 120), ("valid", 12), ("test", 12)):
        en = [" ".join(words[(i * k) % len(words)] for k in range(1, 6)) for i in range(n)]
        (root / f"{split}.en").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{split}.en").write_text("\n".join(en) + "\n")
        (root / f"{split}.de").write_text("\n".join(s.upper() for s in en) + "\n")
    return root


def digest(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def ablate(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_CACHE": str(cache), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ablations.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_data_switches_a_generating_scale_to_the_users_corpus(tmp_path):
    sweep = load_sweep(TABLE3)
    tiny = scales_for(TABLE3)["tiny"]
    (spec,) = expand(sweep, tiny, seeds=[0], rows=["base"], sets={"data.path": str(tmp_path)})
    assert spec.config.data.dataset == "dir" and spec.config.data.path == str(tmp_path)
    small = scales_for(TABLE3)["small"]  # a scale that already reads a corpus keeps its dataset
    (spec,) = expand(sweep, small, seeds=[0], rows=["base"], sets={"data.path": str(tmp_path)})
    assert spec.config.data.dataset == "multi30k"
    (spec,) = expand(sweep, tiny, seeds=[0], rows=["base"])
    assert spec.config.data.dataset == "generated" and spec.config.data.path is None


@pytest.mark.slow
def test_every_command_that_reads_a_users_corpus_leaves_it_byte_identical(tmp_path):
    corpus = user_corpus(tmp_path / "mycorpus")
    before = digest(corpus)
    cache, runs = tmp_path / "cache", tmp_path / "runs"
    common = [
        "--data",
        str(corpus),
        "--set",
        "data.vocab_size=48",
        "--set",
        "train.max_steps=2",
        "--set",
        "eval.dev_bleu_sentences=4",
    ]
    out = ablate(
        "sweep",
        str(TABLE3),
        "--scale",
        "tiny",
        "--rows",
        "base",
        "--seeds",
        "1",
        "--dry-run",
        "--out",
        str(runs),
        *common,
        cwd=tmp_path,
        cache=cache,
    )
    assert out.returncode == 0, out.stderr
    out = ablate(
        "train",
        "--sweep",
        str(TABLE3),
        "--row",
        "base",
        "--scale",
        "tiny",
        "--out",
        str(runs),
        *common,
        cwd=tmp_path,
        cache=cache,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (metrics,) = runs.glob("table3/tiny/*/metrics.json")
    config = (metrics.parent / "config.yaml").read_text()
    assert "dataset: dir" in config and str(corpus) in config
    assert digest(corpus) == before
    assert not (cache / "corpus").exists()  # nothing generated: the run read the user's corpus


@pytest.mark.slow
def test_a_missing_corpus_directory_is_an_error_that_names_it_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo_corpus"
    out = ablate(
        "train",
        "--sweep",
        str(TABLE3),
        "--row",
        "base",
        "--scale",
        "tiny",
        "--data",
        str(missing),
        "--set",
        "train.max_steps=1",
        "--out",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        cache=tmp_path / "cache",
    )
    assert out.returncode == 2
    assert str(missing) in out.stderr and "does not exist" in out.stderr
    assert not missing.exists()
