"""The paper's recipe: schedule, smoothed loss, learning, checkpoint averaging and a whole run end to end."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

from ablations.provenance import code_commit, trained_by, worker
from ablations.records import read_config, read_metrics, update_metrics
from ablations.train import train_run
from lightning_modules.beam_search import greedy_search
from lightning_modules.checkpoints import average_checkpoints, step_checkpoints
from lightning_modules.config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
from lightning_modules.data.generated import write_corpus
from lightning_modules.module import TranslationModule, inverse_sqrt_lr, label_smoothed_loss, learning_rate
from lightning_modules.transformer import Transformer

os.environ.setdefault("WANDB_MODE", "disabled")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_code_commit_names_the_commit_and_marks_uncommitted_changes(tmp_path):
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()

    assert code_commit(tmp_path) is None  # not a checkout
    git("init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "bench.md").write_text("generated\n")
    git("add", "model.py", "results/bench.md")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "model")
    head = git("rev-parse", "--short", "HEAD")
    (tmp_path / "notes.txt").write_text("untracked files are not the code\n")
    assert code_commit(tmp_path) == head
    (tmp_path / "results" / "bench.md").write_text("regenerated\n")  # what the code writes is not the code
    assert code_commit(tmp_path) == head
    (tmp_path / "model.py").write_text("x = 2\n")
    assert code_commit(tmp_path) == head + "+dirty"


def test_schedule_equals_the_papers_formula():
    d_model, warmup = 512, 4000
    for step in (1, 10, 1000, 3999, 4000, 4001, 50_000, 100_000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert inverse_sqrt_lr(4000, 512, 4000) == pytest.approx(6.99e-4, rel=1e-3)  # the paper's peak
    assert inverse_sqrt_lr(100, 512, 4000, scale=2.0) == pytest.approx(2 * inverse_sqrt_lr(100, 512, 4000))


def test_the_optimizer_follows_the_schedule_step_by_step():
    config = tiny_run_config(train=TrainConfig(max_steps=10, warmup_steps=4, lr_scale=0.5))
    module = TranslationModule(config, bos_id=2, eos_id=3, pad_id=0)
    setup = module.configure_optimizers()
    optimizer, schedule = setup["optimizer"], setup["lr_scheduler"]["scheduler"]
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for step in range(1, 8):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(inverse_sqrt_lr(step, config.model.d_model, 4, 0.5))
        optimizer.step()
        schedule.step()


def test_the_cooldown_falls_linearly_to_zero_over_the_last_fraction():
    train = TrainConfig(max_steps=1000, warmup_steps=100, lr_scale=0.5, cooldown_fraction=0.2)
    paper = TrainConfig(max_steps=1000, warmup_steps=100, lr_scale=0.5)
    for step in (1, 50, 100, 500, 800):  # warm-up and the paper's decay untouched before the cool-down
        assert learning_rate(step, 64, train) == learning_rate(step, 64, paper) == inverse_sqrt_lr(step, 64, 100, 0.5)
    for step in (801, 900, 1000):
        assert learning_rate(step, 64, train) == pytest.approx(
            inverse_sqrt_lr(step, 64, 100, 0.5) * (1001 - step) / 200
        )
    assert learning_rate(1000, 64, train) < 0.01 * learning_rate(800, 64, train)  # the last step is nearly annealed
    assert learning_rate(1001, 64, train) == 0.0


def test_smoothed_loss_equals_a_direct_computation():
    torch.manual_seed(0)
    V, eps, pad = 7, 0.1, 0
    logits = torch.randn(2, 4, V)
    target = torch.tensor([[3, 4, 5, 0], [1, 2, 0, 0]])
    loss, nll = label_smoothed_loss(logits, target, eps, pad)
    expected_loss = expected_nll = 0.0
    for b in range(2):
        for t in range(4):
            if target[b, t] == pad:
                continue
            p = torch.softmax(logits[b, t].double(), -1)
            q = torch.full((V,), eps / V, dtype=torch.float64)
            q[target[b, t]] += 1 - eps
            expected_loss += float(-(q * p.log()).sum())
            expected_nll += float(-p[target[b, t]].log())
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-5)
    # and it agrees with PyTorch's own label smoothing, which spreads eps the same way
    torch_loss = F.cross_entropy(
        logits.view(-1, V), target.view(-1), ignore_index=pad, label_smoothing=eps, reduction="sum"
    )
    assert loss.item() == pytest.approx(torch_loss.item(), rel=1e-5)


def small_model(vocab_size: int = 16, **overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(N=2, d_model=32, d_ff=64, h=4, P_drop=0.0, max_positions=64)
    cfg.update(overrides)
    return Transformer(ModelConfig(**cfg), vocab_size, 0)


def test_one_batch_fit():
    model = small_model()
    src = torch.randint(4, 16, (8, 6))
    tgt = torch.randint(4, 16, (8, 6))
    tgt_in = torch.cat([torch.full((8, 1), 2), tgt], 1)
    tgt_out = torch.cat([tgt, torch.full((8, 1), 3)], 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(150):
        loss, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, 0.0, 0)
        loss = loss / tgt_out.numel()
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05 * first


def test_a_tiny_model_learns_to_copy():
    model = small_model(vocab_size=12, norm_placement="pre")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(0)
    for _ in range(400):
        seq = torch.randint(4, 12, (32, 5), generator=generator)
        tgt_in = torch.cat([torch.full((32, 1), 2), seq], 1)
        tgt_out = torch.cat([seq, torch.full((32, 1), 3)], 1)
        loss, _ = label_smoothed_loss(model(seq, tgt_in), tgt_out, 0.0, 0)
        optimizer.zero_grad()
        (loss / tgt_out.numel()).backward()
        optimizer.step()
    # 100 held-out sequences of 8^5 possible: an untrained or mis-masked model copies almost none. The bound leaves
    # room for floating point: the same seed copied 17 of 20 on one CPU (AMD, AVX2) and 18+ on another (Intel).
    test = torch.randint(4, 12, (100, 5), generator=torch.Generator().manual_seed(1))
    copies = greedy_search(model, test, bos_id=2, eos_id=3, max_len_offset=2)
    assert sum(c == s for c, s in zip(copies, test.tolist())) >= 90


def test_checkpoint_averaging_is_the_elementwise_mean(tmp_path):
    a, b = small_model(), small_model()
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1.0)
    for step, model in ((100, a), (200, b)):
        torch.save({"state_dict": model.state_dict()}, tmp_path / f"step-{step:07d}.ckpt")
    paths = step_checkpoints(tmp_path)
    assert [p.name for p in paths] == ["step-0000100.ckpt", "step-0000200.ckpt"]
    averaged = average_checkpoints(paths)
    for name, value in a.state_dict().items():
        assert torch.allclose(averaged[name], (value + b.state_dict()[name]) / 2)


def test_ablate_average_never_replaces_a_file_unasked(tmp_path, capsys):
    from ablations import cli

    for step in (100, 200):
        torch.save({"state_dict": small_model().state_dict()}, tmp_path / f"step-{step:07d}.ckpt")
    output = tmp_path / "last.ckpt"
    output.write_bytes(b"a run's resume checkpoint")
    assert cli.main(["average", str(tmp_path), "--last", "2", "--output", str(output)]) == 2
    assert "the file exists" in capsys.readouterr().err and output.read_bytes() == b"a run's resume checkpoint"
    assert cli.main(["average", str(tmp_path), "--last", "2", "--output", str(output), "--force"]) == 0
    assert torch.load(output, weights_only=False)["averaged"] == ["step-0000100.ckpt", "step-0000200.ckpt"]
    assert cli.main(["average", str(tmp_path / "none"), "--output", str(tmp_path / "x.ckpt")]) == 2
    assert "a run shorter than that has only last.ckpt" in capsys.readouterr().err


def test_averaging_rejects_a_corrupted_checkpoint(tmp_path):
    (tmp_path / "step-0000100.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="step-0000100.ckpt"):
        average_checkpoints(step_checkpoints(tmp_path))


def tiny_run_config(corpus: str = "/nonexistent", cache: str = "/tmp", **sections) -> RunConfig:
    model = ModelConfig(N=1, d_model=32, d_ff=64, h=4, max_positions=128)
    data = DataConfig(dataset="dir", path=corpus, vocab_size=96, batch_tokens=512, max_tokens=64, cache_dir=cache)
    train = TrainConfig(max_steps=6, warmup_steps=2, val_every_steps=3, checkpoint_every_steps=3, keep_checkpoints=2)
    evaluation = EvalConfig(dev_bleu_sentences=8, average_last=2)
    values = {"model": model, "data": data, "train": train, "eval": evaluation} | sections
    return RunConfig(**values)


def meta_batch(run_dir):
    return read_config(run_dir / "config.yaml")[1]["batch"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), train_pairs=300, seed=7, dev_pairs=12, test_pairs=12)


def test_a_run_leaves_its_records(corpus, tmp_path):
    config = tiny_run_config(str(corpus), str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    metrics = train_run(config, run_dir, {"sweep": "test", "row": "base"}, progress=False)
    required = (
        "dev_loss",
        "dev_ppl",
        "dev_bleu",
        "test_bleu",
        "dev_bleu_tok",
        "test_bleu_tok",
        "sacrebleu_signature",
        "params",
        "steps",
        "train_tokens",
        "wall_seconds",
        "train_tokens_per_second",
        "seed",
        "status",
    )
    assert all(metrics.get(k) is not None for k in required), {k: metrics.get(k) for k in required}
    assert metrics["status"] == "done" and metrics["steps"] == 6
    # The scores are the last checkpoint's (Table 3's protocol); the average of the last 2 is scored beside them
    # (Table 2's), with its own hypotheses and CSV log.
    assert metrics["averaged_checkpoints"] == 0 and metrics["averaged"]["checkpoints"] == 2
    assert metrics["averaged"]["dev_loss"] != metrics["dev_loss"]
    assert math.exp(metrics["averaged"]["dev_loss"]) == pytest.approx(metrics["averaged"]["dev_ppl"])
    assert len((run_dir / "test.averaged.hyp").read_text().splitlines()) == 12
    assert (run_dir / "logs" / "attempt-1-final-averaged" / "metrics.csv").is_file()
    # How the step was cut: one device, the whole budget, no accumulation; and what a step held.
    assert (metrics["devices"], metrics["device_batch_tokens"], metrics["accumulate_grad_batches"]) == (1, 512, 1)
    assert metrics["tokens_per_step"] == 512 and meta_batch(run_dir)["tokens_per_step"] == 512
    assert metrics["tokens_per_step_measured"] == pytest.approx(metrics["train_tokens"] / 6)
    assert 0 < metrics["src_tokens_per_step_measured"] <= 512
    assert math.exp(metrics["dev_loss"]) == pytest.approx(metrics["dev_ppl"])
    assert "tok:13a" in metrics["sacrebleu_signature"]
    assert json.loads((run_dir / "metrics.json").read_text()) == read_metrics(run_dir)
    loaded, meta = read_config(run_dir / "config.yaml")
    assert loaded == config and meta["row"] == "base"
    assert len((run_dir / "test.hyp").read_text().splitlines()) == 12
    assert [p.name for p in step_checkpoints(run_dir / "checkpoints")] == ["step-0000003.ckpt", "step-0000006.ckpt"]
    rows = (run_dir / "logs" / "attempt-1" / "metrics.csv").read_text().splitlines()
    assert "train/loss" in rows[0] and len(rows) > 3


def test_a_record_names_the_code_each_attempt_started_from_not_the_checkout_at_its_end(corpus, tmp_path, monkeypatch):
    """The checkout moves on while a run trains (a later commit, an edit): the record keeps the commit read when the
    attempt started, the code the process imported; an attempt killed before on other code is named too."""
    import ablations.provenance
    import ablations.train

    checkout = iter(["new5678", "edited+dirty", "edited+dirty"])
    monkeypatch.setattr(ablations.train, "code_commit", lambda: next(checkout))
    monkeypatch.setattr(ablations.provenance, "code_commit", lambda *args: next(checkout))
    run_dir = tmp_path / "run"
    elsewhere = {"device": "cpu", "cpu_model": "another CPU", "torch_threads": 2}
    update_metrics(  # killed before a checkpoint
        run_dir, status="running", attempts=1, attempt_commits=["old1234"], attempt_workers=[elsewhere]
    )
    config = tiny_run_config(str(corpus), str(tmp_path / "cache"), eval=EvalConfig(dev_bleu_sentences=8))
    metrics = train_run(config, run_dir, progress=False)
    assert metrics["status"] == "done" and metrics["attempts"] == 2
    assert metrics["attempt_commits"] == ["old1234", "new5678"]
    assert metrics["attempt_workers"] == [elsewhere, worker()]
    assert {key: metrics[key] for key in worker()} == worker()  # the top level names the last attempt's
    assert metrics["commit"] == "old1234, new5678" and read_metrics(run_dir)["commit"] == metrics["commit"]


def test_trained_by_lists_distinct_commits_in_attempt_order():
    assert trained_by(["a1", "a1", None, "b2", "a1"]) == "a1, b2"
    assert trained_by([None]) is None and trained_by([]) is None


@pytest.mark.slow
def test_the_same_seed_gives_the_same_metrics(corpus, tmp_path):
    config = tiny_run_config(str(corpus), str(tmp_path / "cache"))
    first = train_run(config, tmp_path / "a", progress=False)
    second = train_run(config, tmp_path / "b", progress=False)
    for key in ("dev_loss", "dev_bleu", "test_bleu", "test_bleu_tok", "train_tokens", "params", "steps"):
        assert first[key] == second[key], key
    other = train_run(dataclasses.replace(config, seed=1), tmp_path / "c", progress=False)
    assert other["dev_loss"] != first["dev_loss"]


@pytest.mark.slow
def test_two_runs_in_one_process_log_to_two_wandb_runs(corpus, tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = tiny_run_config(str(corpus), str(tmp_path / "cache"))
    try:
        for seed, name in ((0, "a"), (1, "b")):
            run = dataclasses.replace(config, seed=seed)
            train_run(run, tmp_path / name, progress=False)
            assert wandb.run is None  # finished, not left open for the next run
            (offline,) = (tmp_path / name / "wandb").glob(f"offline-run-*-{run.run_id()}")
            assert (offline / f"run-{run.run_id()}.wandb").stat().st_size > 0
    finally:
        # wandb's service outlives its runs and advertises itself in WANDB_SERVICE, which later tests' training
        # subprocesses would inherit and join.
        wandb.teardown()
        os.environ.pop("WANDB_SERVICE", None)
