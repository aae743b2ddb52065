"""Fault injection: kills, damaged checkpoints, NaN losses, crashes, a full disk, an unreachable wandb server,
concurrent writers and fuzzed input. None of it may lose a finished result or end in a bare traceback.

Marked `reliability` (part of `make test`); the session's terminal summary prints what was injected and survived,
what was fuzzed and rejected cleanly, and how many records were lost (conftest.ReliabilityTally).

Training here is test-sized (d_model 32, one layer each side, tens of steps, one thread) so that every test takes
seconds. Runs that must be killed run as `ablate train` subprocesses; a small driver (PAUSE_DRIVER) adds a callback
that stops the process at a chosen step, so the test kills it from outside at a known point, mid-epoch, instead
of racing a fast training loop.
"""

from __future__ import annotations

import ast
import csv
import errno
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sweep import FAKE_TRAIN, folders, sweep_args, write_sweep

from ablations import cli
from ablations.launch import plan, processes
from ablations.records import lock_holder, read_metrics, update_metrics, write_config
from ablations.train import train_run
from lightning_modules.checkpoints import checkpoint_problem, step_checkpoints
from lightning_modules.config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
from lightning_modules.data import CorpusError, check_corpus, resolve_splits
from lightning_modules.data.generated import write_corpus

os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.reliability, pytest.mark.usefixtures("one_thread")]

# `ablate train` that stops (sleeps) at the end of step RELIABILITY_PAUSE_STEP, after writing its pid to
# RELIABILITY_MARKER, so that the test can SIGKILL it there. Only runs whose row is RELIABILITY_PAUSE_ROW pause
# (all runs when it is unset). The product is untouched: the callback goes in where `ablate search` adds its own.
PAUSE_DRIVER = r"""
import os, sys, time
import lightning.pytorch as pl
from ablations import cli

class Pause(pl.Callback):
    def __init__(self, step, marker):
        self.step, self.marker = step, marker

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            with open(self.marker, "w") as handle:
                handle.write(str(os.getpid()))
            time.sleep(600)

def callbacks():
    row = os.environ.get("RELIABILITY_PAUSE_ROW")
    if row and f"/{row}-s" not in sys.argv[sys.argv.index("--run-dir") + 1]:
        return []
    return [Pause(int(os.environ["RELIABILITY_PAUSE_STEP"]), os.environ["RELIABILITY_MARKER"])]

cli.train_callbacks = callbacks
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """300 generated pairs (213 within 64 word pieces: 17 batches of 512 tokens per epoch), 12 dev, 12 test."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), train_pairs=300, dev_pairs=12, test_pairs=12)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def run_config(corpus: Path, cache: Path, **train) -> RunConfig:
    """A run of seconds: P_drop 0.1 (so dropout's RNG matters), a checkpoint every 4 steps, validation every 5,
    short decoding (an untrained model's hypotheses run to the length limit)."""
    model = ModelConfig(N=1, d_model=32, d_ff=64, h=4, max_positions=128)
    data = DataConfig(
        dataset="dir", path=str(corpus), vocab_size=96, batch_tokens=512, max_tokens=64, cache_dir=str(cache)
    )
    values = dict(max_steps=12, warmup_steps=4, val_every_steps=5, checkpoint_every_steps=4, keep_checkpoints=3) | train
    evaluation = EvalConfig(beam_size=2, max_len_offset=10, dev_bleu_sentences=4, average_last=1)
    return RunConfig(model=model, data=data, train=TrainConfig(**values), eval=evaluation)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    env.pop("ABLATE_RUN_LOCKED", None)
    return env | extra


def train_argv(run_dir: Path, driver: bool = False) -> list[str]:
    head = [sys.executable, "-c", PAUSE_DRIVER] if driver else [sys.executable, "-m", "ablations.cli"]
    return head + ["train", "--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir)]


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None, f"exited with {process.returncode} before {path.name} appeared"
        assert time.time() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)
    time.sleep(0.05)  # the pid is written and the file closed right after it is created


def sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def csv_rows(run_dir: Path) -> dict[tuple[int, str], dict[str, str]]:
    """Logged rows of every attempt, by (step, kind): a later attempt's row replaces an earlier one's."""
    rows: dict[tuple[int, str], dict[str, str]] = {}
    for attempt in sorted((run_dir / "logs").glob("attempt-[0-9]"), key=lambda p: int(p.name.split("-")[1])):
        with open(attempt / "metrics.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                values = {k: v for k, v in row.items() if v not in ("", None) and k != "train/tokens_per_s"}
                kind = "dev" if "dev/loss" in values else "train"
                rows[(int(row["step"]), kind)] = values
    return rows


COMPARED = (
    "dev_loss",
    "dev_ppl",
    "dev_bleu",
    "dev_bleu_tok",
    "test_loss",
    "test_bleu",
    "test_bleu_tok",
    "train_tokens",
    "steps",
)


def assert_same_results(got: dict, expected: dict) -> None:
    """Bit-exact: the same floats, not merely close ones."""
    assert {k: got[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}


@pytest.fixture(scope="module")
def reference(corpus, cache, tmp_path_factory) -> dict:
    """Uninterrupted runs to compare interrupted ones with, trained on first use: {max_steps: (metrics, run dir)}."""
    done: dict[int, tuple[dict, Path]] = {}

    def get(max_steps: int) -> tuple[dict, Path]:
        if max_steps not in done:
            run_dir = tmp_path_factory.mktemp(f"reference-{max_steps}")
            config = run_config(corpus, cache, max_steps=max_steps)
            done[max_steps] = (train_run(config, run_dir, {"row": "reference"}, progress=False), run_dir)
        return done[max_steps]

    return get


# --------------------------------------------------------------------------------------------------
# SIGKILL mid-epoch, then resume: the same result as a run never interrupted
# --------------------------------------------------------------------------------------------------


def test_sigkill_mid_epoch_then_resume_is_bit_exact(corpus, cache, reference, reliability, tmp_path):
    """Killed at step 22 (epoch 2 started at step 18; last checkpoint at step 20, mid-epoch), resumed: the metrics,
    the CSV curve (every logged step, every value) and the wandb run id equal those of an uninterrupted run."""
    expected, expected_dir = reference(30)
    config = run_config(corpus, cache, max_steps=30)
    run_dir = tmp_path / "run"
    write_config(run_dir, config, {"row": "killed"})
    marker = tmp_path / "paused"
    env = child_env(WANDB_MODE="offline", RELIABILITY_PAUSE_STEP="22", RELIABILITY_MARKER=str(marker))
    with reliability.fault("SIGKILL mid-epoch"):
        process = subprocess.Popen(
            train_argv(run_dir, driver=True), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(marker, process)
            assert (run_dir / "checkpoints" / "step-0000020.ckpt").exists()
            sigkill(process.pid)
        finally:
            process.kill()
            process.communicate()
        assert process.returncode == -signal.SIGKILL
        assert read_metrics(run_dir)["status"] == "running"  # killed: nobody could record anything

        resumed = subprocess.run(
            train_argv(run_dir),
            cwd=ROOT,
            env=child_env(WANDB_MODE="offline"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        record = read_metrics(run_dir)
        assert record["status"] == "done" and record["attempts"] == 2, record
        assert_same_results(record, expected)
        assert (run_dir / "test.hyp").read_text() == (expected_dir / "test.hyp").read_text()

        # The curve: attempt 1 logged steps 5..20, attempt 2 from 25; together exactly the uninterrupted curve.
        second = (run_dir / "logs" / "attempt-2" / "metrics.csv").read_text().splitlines()
        assert int(second[1].split(",")[second[0].split(",").index("step")]) > 20  # resumed, not restarted
        got, want = csv_rows(run_dir), csv_rows(expected_dir)
        assert sorted(got) == sorted(want) and len(want) >= 10
        for key, row in want.items():
            assert {k: v for k, v in got[key].items() if k != "epoch"} == {
                k: v for k, v in row.items() if k != "epoch"
            }, key

        # wandb: one offline run per attempt, all under the run id, so syncing resumes one run instead of adding one.
        ids = [path.name.rsplit("-", 1)[1] for path in (run_dir / "wandb").glob("offline-run-*")]
        assert sorted(ids) == [config.run_id()] * 2, ids
    reliability.records(expected=1, found=int(record["status"] == "done"))


# `ablate train` that holds at the end of step RELIABILITY_PAUSE_STEP, after writing its pid to RELIABILITY_MARKER,
# until the test removes the marker: the test signals it there, at a known point, and lets it go on.
HOLD_DRIVER = r"""
import os, sys, time
import lightning.pytorch as pl
from ablations import cli

class Hold(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == int(os.environ["RELIABILITY_PAUSE_STEP"]):
            marker = os.environ["RELIABILITY_MARKER"]
            with open(marker, "w") as handle:
                handle.write(str(os.getpid()))
            while os.path.exists(marker):
                time.sleep(0.02)

cli.train_callbacks = lambda: [Hold()]
sys.exit(cli.main(sys.argv[1:]))
"""

# A SLURM job's environment as srun gives one task (Lightning then takes the run for a SLURM job), with an
# `scontrol` on PATH that writes its arguments to SCONTROL_LOG instead of requeueing anything.
FAKE_SCONTROL = '#!/bin/sh\necho "$@" >> "$SCONTROL_LOG"\n'


def slurm_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "ablate", "SLURM_NTASKS": "1", "SLURM_NNODES": "1"}
    ranks = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "1"}
    return job | ranks | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SCONTROL_LOG": str(tmp_path / "scontrol.log")}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1 under SLURM"])
def test_a_preemption_signal_checkpoints_the_step_and_the_resumed_run_is_bit_exact(
    signum, corpus, cache, reference, reliability, tmp_path
):
    """Signalled during step 22 (the last periodic checkpoint is step 20): the run finishes that step, writes
    last.ckpt at step 23 (the first step's end after the signal), records the stop and exits with 128 + the signal.
    Under SLURM, SIGUSR1 (`--signal`'s warning) also requeues the job with scontrol. Resumed, it trains steps 24..30
    only and ends bit-exactly where an uninterrupted run does: no step lost, none trained twice."""
    expected, expected_dir = reference(30)
    config = run_config(corpus, cache, max_steps=30)
    run_dir = tmp_path / "run"
    write_config(run_dir, config, {"row": "preempted"})
    marker = tmp_path / "holding"
    slurm = slurm_env(tmp_path) if signum == signal.SIGUSR1 else {}
    env = child_env(RELIABILITY_PAUSE_STEP="22", RELIABILITY_MARKER=str(marker), **slurm)
    with reliability.fault(f"{signal.Signals(signum).name} mid-epoch"):
        head = [sys.executable, "-c", HOLD_DRIVER]
        argv = head + ["train", "--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir)]
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_for(marker, process)
            os.kill(process.pid, signum)
            marker.unlink()
            output, _ = process.communicate(timeout=120)
        finally:
            process.kill()
        assert process.returncode == cli.PREEMPTED_EXIT + signum, output.decode()[-3000:]
        record = read_metrics(run_dir)
        assert record["status"] == "running"  # resumable: the folder reads stale
        assert [(p["signal"], p["step"]) for p in record["preemptions"]] == [(signal.Signals(signum).name, 23)]
        saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        assert saved["global_step"] == 23
        if slurm:
            assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
            assert not list(run_dir.glob("hpc_ckpt_*.ckpt"))  # Lightning's own requeue checkpoint is off

        resumed = subprocess.run(train_argv(run_dir), cwd=ROOT, env=child_env(), capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        record = read_metrics(run_dir)
        assert record["status"] == "done" and record["attempts"] == 2, record
        assert_same_results(record, expected)
        assert (run_dir / "test.hyp").read_text() == (expected_dir / "test.hyp").read_text()
        got, want = csv_rows(run_dir), csv_rows(expected_dir)
        assert sorted(got) == sorted(want)
        for key, row in want.items():
            assert {k: v for k, v in got[key].items() if k != "epoch"} == {
                k: v for k, v in row.items() if k != "epoch"
            }, key
    reliability.records(expected=1, found=int(record["status"] == "done"))


# --------------------------------------------------------------------------------------------------
# The sweep runner killed mid-sweep; a diverging run; rerun
# --------------------------------------------------------------------------------------------------


def test_sweep_killed_mid_run_reruns_to_completion_without_loss_or_duplicates(corpus, reliability, tmp_path, capsys):
    """`ablate sweep` (one worker) and its training process are SIGKILLed while the third run trains (after the first
    finished and the second diverged, the sweep going on). The rerun resumes the killed run from its checkpoint,
    leaves the finished two alone, and every run has exactly one folder and one final record."""
    rows = {"base": {}, "unstable": {"train.lr_scale": 1e12}, "nopos": {"positional": "none"}}
    path = write_sweep(tmp_path, corpus, rows)
    out = tmp_path / "runs"
    sets = [
        "--set",
        "train.max_steps=8",
        "--set",
        "train.checkpoint_every_steps=4",
        "--set",
        "eval.beam_size=1",
        "--set",
        "eval.max_len_offset=5",
    ]
    marker = tmp_path / "paused"
    driver = (
        f"from ablations import cli\nfrom ablations.launch import processes\n"
        f"processes.train_command = lambda config, run_dir: [{sys.executable!r}, '-c', {PAUSE_DRIVER!r}, 'train', "
        f"'--config', str(config), '--run-dir', str(run_dir)]\n"
        f"raise SystemExit(cli.main({sweep_args(path, out, '--workers', '1', *sets)!r}))\n"
    )
    env = child_env(RELIABILITY_PAUSE_ROW="nopos", RELIABILITY_PAUSE_STEP="6", RELIABILITY_MARKER=str(marker))
    with reliability.fault("SIGKILL sweep runner"):
        sweeper = subprocess.Popen(
            [sys.executable, "-c", driver], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(marker, sweeper)
            trainer_pid = int(marker.read_text())
            sigkill(sweeper.pid)  # the runner first, then its training process: nothing is left to record anything
            sigkill(trainer_pid)
            sweeper.wait()
        finally:
            sweeper.kill()
            log = sweeper.communicate()[0].decode(errors="replace")
        runs = folders(out)
        assert read_metrics(runs["base-s0"])["status"] == "done", log
        unstable = read_metrics(runs["unstable-s0"])
        assert (
            unstable["status"] == "diverged" and unstable["diverged_step"] >= 1 and "nan" in unstable["reason"].lower()
        ), unstable
        assert read_metrics(runs["nopos-s0"])["status"] == "running"  # stale: its process is gone
        before = {
            name: (run / "metrics.json").read_bytes()
            for name, run in runs.items()
            if name in ("base-s0", "unstable-s0")
        }

        deadline = time.time() + 30
        while lock_holder(runs["nopos-s0"]) is not None:  # the kernel releases the killed trainer's lock
            assert time.time() < deadline, "the killed trainer's lock is still held"
            time.sleep(0.05)
        assert cli.main(sweep_args(path, out, "--workers", "1", *sets)) == 1  # 1: one run diverged
        text = capsys.readouterr().out
        assert "skipping 2 finished run(s): done 1, diverged 1" in text and "1 launched" in text, text
        runs = folders(out)
        assert sorted(runs) == ["base-s0", "nopos-s0", "unstable-s0"]
        assert len(list((out / "test" / "test").iterdir())) == 3  # no second folder for any run
        for name in ("base-s0", "unstable-s0"):
            assert (runs[name] / "metrics.json").read_bytes() == before[name], name  # untouched by the rerun
        nopos = read_metrics(runs["nopos-s0"])
        assert nopos["status"] == "done" and nopos["attempts"] == 2 and nopos["steps"] == 8, nopos
        second = (runs["nopos-s0"] / "logs" / "attempt-2" / "metrics.csv").read_text().splitlines()
        assert int(second[1].split(",")[second[0].split(",").index("step")]) > 4  # resumed from step 4, not from 0
    finished = sum(read_metrics(run)["status"] in ("done", "diverged") for run in runs.values())
    assert reliability.records(expected=len(rows), found=finished) == 0


def test_a_non_finite_loss_stops_the_run_as_diverged_at_its_step(corpus, cache, reliability, tmp_path, monkeypatch):
    """The loss turns NaN at training step 7: the run stops there, records `diverged` with the step, and its last
    checkpoint (step 4) holds finite weights."""
    import lightning_modules.module as module

    real = module.label_smoothed_loss
    calls = {"train": 0}

    def poisoned(logits, target, eps, pad_id):
        loss, nll = real(logits, target, eps, pad_id)
        if torch.is_grad_enabled():  # training steps only; evaluation runs under no_grad
            calls["train"] += 1
            if calls["train"] >= 7:
                return loss * float("nan"), nll
        return loss, nll

    monkeypatch.setattr(module, "label_smoothed_loss", poisoned)
    with reliability.fault("NaN loss"):
        record = train_run(run_config(corpus, cache), tmp_path / "run", progress=False)
        assert record["status"] == "diverged" and record["diverged_step"] == 7 and record["steps"] == 6, record
        assert record["reason"] == "training loss nan at step 7"
        assert read_metrics(tmp_path / "run") == record
        state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
        assert state["global_step"] == 4 and all(torch.isfinite(v).all() for v in state["state_dict"].values())


def test_a_crash_in_training_is_recorded_as_failed_with_its_log_tail(corpus, cache, reliability, tmp_path, monkeypatch):
    import lightning.pytorch as pl

    class Crash(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                raise RuntimeError("injected crash at step 3")

    with reliability.fault("crash in training"):
        with pytest.raises(RuntimeError, match="injected crash"):
            train_run(run_config(corpus, cache), tmp_path / "run", progress=False, callbacks=[Crash()])
        record = read_metrics(tmp_path / "run")
        assert record["status"] == "failed" and record["reason"] == "RuntimeError: injected crash at step 3", record
        assert record["log_tail"][-1] == "RuntimeError: injected crash at step 3" and any(
            "Traceback" in line for line in record["log_tail"]
        )


def test_the_launcher_records_crashed_and_killed_processes_and_goes_on(
    corpus, reliability, tmp_path, monkeypatch, capsys
):
    """Training processes that exit with an error and that die of SIGKILL (stand-ins, as in test_sweep)."""
    monkeypatch.setattr(
        processes,
        "train_command",
        lambda config, run_dir: [sys.executable, "-c", FAKE_TRAIN, str(config), str(run_dir)],
    )
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    path = write_sweep(tmp_path, corpus, {"crash": {}, "killed": {"positional": "none"}, "base": {"P_drop": 0.2}})
    out = tmp_path / "runs"
    with reliability.fault("crashed process"), reliability.fault("killed process"):
        assert cli.main(sweep_args(path, out, "--workers", "2")) == 1
        runs = folders(out)
        crash, killed = read_metrics(runs["crash-s0"]), read_metrics(runs["killed-s0"])
        assert (
            crash["status"] == "failed"
            and crash["reason"] == "exit code 3"
            and "RuntimeError: the fake run broke" in crash["log_tail"]
        )
        assert killed["status"] == "failed" and killed["reason"] == "killed by signal SIGKILL" and killed["log_tail"]
        assert read_metrics(runs["base-s0"])["status"] == "done"
        assert "failed: crash-s0" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# Damaged checkpoints, a full disk
# --------------------------------------------------------------------------------------------------


def interrupted_run(corpus: Path, cache: Path, run_dir: Path, at_step: int) -> RunConfig:
    """A 12-step run that crashes right after step `at_step`, leaving its checkpoints behind."""
    import lightning.pytorch as pl

    class Stop(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == at_step:
                raise RuntimeError(f"stopped at step {at_step}")

    config = run_config(corpus, cache)
    with pytest.raises(RuntimeError, match="stopped at step"):
        train_run(config, run_dir, progress=False, callbacks=[Stop()])
    return config


def damage_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_flip(path: Path) -> None:
    """One flipped byte inside the weights: the file still opens as a zip archive, only its checksum tells."""
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


class Payload:
    """A pickle that would run a command when loaded without weights_only."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("damage", ["truncated last", "flipped byte in last and step-8", "all damaged or malicious"])
def test_a_damaged_checkpoint_is_detected_and_the_run_falls_back(
    corpus, cache, reference, reliability, tmp_path, monkeypatch, damage
):
    """Checkpoints at steps 4 and 8 (and last = 8); the run stops at step 10. Damaged last.ckpt: resume from step 8;
    damaged 8 too: from step 4; nothing whole (or a malicious pickle): from scratch with a warning. Each way the
    run ends bit-identical to an uninterrupted one, and no damaged file is used (or executed) again."""
    import lightning.pytorch as pl

    expected, _ = reference(12)
    run_dir = tmp_path / "run"
    marker = tmp_path / "executed"
    with reliability.fault(f"damaged checkpoint ({damage})"):
        interrupted_run(corpus, cache, run_dir, at_step=10)
        checkpoints = run_dir / "checkpoints"
        assert [p.name for p in step_checkpoints(checkpoints)] == ["step-0000004.ckpt", "step-0000008.ckpt"]
        last, step4, step8 = (
            checkpoints / "last.ckpt",
            checkpoints / "step-0000004.ckpt",
            checkpoints / "step-0000008.ckpt",
        )
        if damage == "truncated last":
            damage_truncate(last)
            damaged, resumed_from = [last], "step-0000008.ckpt"
        elif damage == "flipped byte in last and step-8":
            damage_flip(last)
            damage_flip(step8)
            damaged, resumed_from = [last, step8], "step-0000004.ckpt"
        else:
            last.write_bytes(pickle.dumps(Payload(marker)))
            damage_truncate(step8)
            damage_flip(step4)
            damaged, resumed_from = [last, step8, step4], None
        assert all(checkpoint_problem(p) for p in damaged)

        resumed: list = []
        fit = pl.Trainer.fit

        def spy(self, *args, ckpt_path=None, **kwargs):
            resumed.append(ckpt_path)
            return fit(self, *args, ckpt_path=ckpt_path, **kwargs)

        monkeypatch.setattr(pl.Trainer, "fit", spy)
        record = train_run(run_config(corpus, cache), run_dir, progress=False)
        assert resumed == [str(checkpoints / resumed_from) if resumed_from else None]
        assert record["status"] == "done" and record["attempts"] == 2, record
        assert_same_results(record, expected)
        assert not marker.exists()  # the malicious pickle was never executed
        warnings = record["checkpoint_warnings"]
        assert len(warnings) == len(damaged) + 1 and all(f"{p.name} is damaged" in " ".join(warnings) for p in damaged)
        assert warnings[-1] == (
            f"resuming from {resumed_from}" if resumed_from else "no whole checkpoint left: training from scratch"
        )
        assert all((checkpoints / f"{p.name}.corrupt").exists() for p in damaged)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds the file behind a descriptor through /proc")
def test_disk_full_while_saving_a_checkpoint_fails_cleanly_and_keeps_the_previous_one(
    corpus, cache, reference, reliability, tmp_path, monkeypatch
):
    """ENOSPC when the step-8 checkpoint is flushed to disk: the run is recorded failed with the reason, the step-4
    checkpoints are whole, no temporary file is left, and a rerun resumes from step 4 to the uninterrupted result."""
    expected, _ = reference(12)
    run_dir = tmp_path / "run"
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if ".step-0000008.ckpt." in name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    with reliability.fault("disk full during checkpoint"):
        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", full_disk)
            with pytest.raises(OSError, match="No space left on device"):
                train_run(run_config(corpus, cache), run_dir, progress=False)
        record = read_metrics(run_dir)
        assert record["status"] == "failed" and "No space left on device" in record["reason"], record
        checkpoints = run_dir / "checkpoints"
        assert sorted(p.name for p in checkpoints.iterdir()) == ["last.ckpt", "step-0000004.ckpt"]  # no temporary file
        for path in checkpoints.iterdir():
            assert checkpoint_problem(path) is None
            assert torch.load(path, weights_only=True)["global_step"] == 4

        again = train_run(run_config(corpus, cache), run_dir, progress=False)
        assert (
            again["status"] == "done" and again["attempts"] == 2 and "reason" not in {k for k, v in again.items() if v}
        )
        assert_same_results(again, expected)
    reliability.records(expected=1, found=int(again["status"] == "done"))


# --------------------------------------------------------------------------------------------------
# wandb online without a server
# --------------------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the socket is: connections are refused


FALLBACK = re.compile(r"wandb online: (.*); logging offline instead after ([0-9.]+) s")


def test_wandb_online_with_no_server_trains_offline_at_once(corpus, cache, reliability, tmp_path):
    """WANDB_MODE=online, nothing listening at WANDB_BASE_URL: the run starts training at once, logging offline under
    its run id (one wandb run when synced), and finishes `done`."""
    config = run_config(corpus, cache, max_steps=4)
    run_dir = tmp_path / "run"
    write_config(run_dir, config, {"row": "online"})
    env = child_env(WANDB_MODE="online", WANDB_BASE_URL=f"http://127.0.0.1:{closed_port()}", WANDB_API_KEY="x" * 40)
    with reliability.fault("wandb server unreachable"):
        result = subprocess.run(
            train_argv(run_dir), cwd=ROOT, env=no_proxy(env), capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-3000:]
        found = FALLBACK.search(result.stderr)
        assert found and "unreachable" in found.group(1), result.stderr[-3000:]
        assert float(found.group(2)) < 3
        assert read_metrics(run_dir)["status"] == "done"
        assert [p.name.rsplit("-", 1)[1] for p in (run_dir / "wandb").glob("offline-run-*")] == [config.run_id()]
    reliability.note(f"wandb online, nothing listening: logging offline after {float(found.group(2)):.1f} s")


SILENT_SERVER = r"""
import sys
from pathlib import Path
from ablations.tracking import wandb_logger
from lightning_modules.config import RunConfig
config = RunConfig()
logger = wandb_logger(Path(sys.argv[1]), config, {"row": "silent"}, "online")
run = logger.experiment
print(run.settings.mode, run.id)
run.finish()
"""


def test_wandb_online_with_a_silent_server_falls_back_after_the_init_timeout(reliability, tmp_path):
    """A server that accepts connections and never answers: wandb.init gives up after its short timeout, the failed
    run's wandb service is shut down, and the same run id logs offline."""
    from ablations.tracking import INIT_TIMEOUT_SECONDS

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # connections queue in the backlog and are never answered
    env = child_env(
        WANDB_MODE="online", WANDB_BASE_URL=f"http://127.0.0.1:{listener.getsockname()[1]}", WANDB_API_KEY="x" * 40
    )
    with reliability.fault("wandb server silent"):
        try:
            result = subprocess.run(
                [sys.executable, "-c", SILENT_SERVER, str(tmp_path)],
                cwd=ROOT,
                env=no_proxy(env),
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            listener.close()
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["offline", RunConfig().run_id()]
        found = FALLBACK.search(result.stderr)
        assert found, result.stderr[-3000:]
        # init_timeout bounds the wait for the server; starting and stopping wandb's service adds a few seconds more
        # (much more on a loaded machine)
        assert INIT_TIMEOUT_SECONDS <= float(found.group(2)) < INIT_TIMEOUT_SECONDS + 30
    reliability.note(
        f"wandb online, silent server: logging offline after {float(found.group(2)):.1f} s "
        f"(init_timeout {INIT_TIMEOUT_SECONDS:g} s)"
    )


def no_proxy(env: dict[str, str]) -> dict[str, str]:
    """Without proxy variables: the TCP probe is only made when no proxy stands between."""
    return {k: v for k, v in env.items() if k.lower() not in ("https_proxy", "http_proxy", "all_proxy")}


# --------------------------------------------------------------------------------------------------
# Concurrent writers, atomic records
# --------------------------------------------------------------------------------------------------

WRITER = r"""
import sys
from ablations.records import update_metrics
shared, own, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(count):
    update_metrics(shared, status="running", **{f"w{worker}_{i}": i, "payload": "x" * (i * 97 % 4000)})
    update_metrics(own, status="running" if i + 1 < count else "done", step=i)
"""


def test_concurrent_writers_never_corrupt_or_lose_a_record(tmp_path, reliability):
    """Six processes update one shared record and one each of their own while a reader parses them continuously:
    every read parses, no update is lost, no temporary file is left behind."""
    workers, count = 6, 40
    sweep = tmp_path / "sweep"
    shared = sweep / "shared"
    update_metrics(shared, status="pending")
    bad_reads: list[str] = []
    reads = {"n": 0}
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for path in sweep.glob("*/metrics.json"):
                try:
                    json.loads(path.read_text())
                    reads["n"] += 1
                except (ValueError, FileNotFoundError) as error:
                    bad_reads.append(f"{path}: {error}")

    thread = threading.Thread(target=reader)
    with reliability.fault("concurrent writers"):
        thread.start()
        try:
            writers = [
                subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(shared), str(sweep / f"own-{w}"), str(w), str(count)],
                    cwd=ROOT,
                    env=child_env(),
                )
                for w in range(workers)
            ]
            assert [p.wait(timeout=120) for p in writers] == [0] * workers
        finally:
            stop.set()
            thread.join()
        assert not bad_reads and reads["n"] > 0, bad_reads[:3]
        record = read_metrics(shared)
        missing = [f"w{w}_{i}" for w in range(workers) for i in range(count) if record.get(f"w{w}_{i}") != i]
        own = [read_metrics(sweep / f"own-{w}") for w in range(workers)]
        assert all(r["status"] == "done" and r["step"] == count - 1 for r in own)
        assert not list(sweep.rglob("*.tmp"))
    lost = reliability.records(expected=workers * count + workers, found=workers * count - len(missing) + len(own))
    assert lost == 0, missing[:5]


# --------------------------------------------------------------------------------------------------
# Safe loading, no shell
# --------------------------------------------------------------------------------------------------

SOURCES = sorted([*(ROOT / "ablations").glob("*.py"), *(ROOT / "lightning_modules").glob("*.py")])


def unsafe_calls(path: Path) -> list[str]:
    """Calls that could run code from a file or a string: shell=True, os.system/popen, yaml.load, torch.load without
    weights_only=True, pickle.load(s)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        where = f"{path.name}:{node.lineno} {name}"
        if isinstance(keywords.get("shell"), ast.Constant) and keywords["shell"].value is not False:
            found.append(f"{where}(shell=...)")
        if name in (
            "os.system",
            "os.popen",
            "yaml.load",
            "yaml.unsafe_load",
            "yaml.full_load",
            "pickle.load",
            "pickle.loads",
            "subprocess.getoutput",
            "subprocess.getstatusoutput",
        ):
            found.append(where)
        if name == "torch.load" and not (
            isinstance(keywords.get("weights_only"), ast.Constant) and keywords["weights_only"].value is True
        ):
            found.append(f"{where} without weights_only=True")
    return found


def test_no_unsafe_loading_and_no_shell_in_the_code(tmp_path):
    assert len(SOURCES) > 10
    assert [call for path in SOURCES for call in unsafe_calls(path)] == []
    # The scanner itself finds what it looks for.
    probe = tmp_path / "unsafe.py"
    probe.write_text(
        "import os, torch, subprocess, yaml\nsubprocess.run('ls', shell=True)\nos.system('ls')\n"
        "torch.load('x')\ntorch.load('x', weights_only=False)\nyaml.load('a')\n"
    )
    assert len(unsafe_calls(probe)) == 5


def test_unsafe_yaml_and_shell_metacharacters_are_inert(corpus, reliability, tmp_path, monkeypatch):
    """A config with a python/object tag is rejected without running it; a sweep whose output folder name is full
    of shell syntax trains normally, because commands are argv lists."""
    marker = tmp_path / "executed"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f"run_id: x\nconfig: !!python/object/apply:os.system ['touch {marker}']\n")
    with reliability.fault("unsafe YAML tag"):
        assert cli.main(["train", "--config", str(evil), "--print-config"]) == 2
        assert not marker.exists()
    monkeypatch.setattr(
        processes,
        "train_command",
        lambda config, run_dir: [sys.executable, "-c", FAKE_TRAIN, str(config), str(run_dir)],
    )
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    path = write_sweep(tmp_path, corpus, {"base": {}})
    out = tmp_path / f"runs; touch {marker} $(touch {marker}) `touch {marker}` '\""
    with reliability.fault("shell metacharacters in paths"):
        assert cli.main(sweep_args(path, out)) == 0
        assert not marker.exists()
        assert read_metrics(folders(out)["base-s0"])["status"] == "done"


# --------------------------------------------------------------------------------------------------
# Fuzzed input: configs, sweep files, corpora
# --------------------------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
VALID = run_config(Path("/nonexistent"), Path("/tmp")).to_dict()


@st.composite
def config_mutations(draw):
    """A valid resolved config with one thing changed: a field's value, an unknown field, or a section's type."""
    document = json.loads(json.dumps(VALID))
    section = draw(st.sampled_from(["model", "data", "train", "eval"]))
    kind = draw(st.sampled_from(["value", "value", "value", "unknown field", "section type"]))
    if kind == "value":
        field = draw(st.sampled_from(sorted(document[section])))
        document[section][field] = draw(ODD_VALUES)
        return document, field
    if kind == "unknown field":
        field = draw(
            st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10).filter(lambda f: f not in document[section])
        )
        document[section][field] = draw(ODD_VALUES)
        return document, field
    document[section] = draw(st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))
    return document, section


def rejects_cleanly(argv: list[str], field: str, capsys) -> bool:
    """True if the CLI accepted the input, False if it refused it with exit code 2 and a message naming `field`."""
    code = cli.main(argv)
    err = capsys.readouterr().err
    if code == 0:
        return True
    assert code == 2 and err.startswith(f"ablate {argv[0]}: error: ") and "Traceback" not in err, err
    assert field in err, f"the message does not name {field!r}: {err}"
    return False


@FUZZ
@given(mutation=config_mutations())
def test_fuzzed_configs_are_accepted_or_rejected_naming_the_field(mutation, tmp_path, reliability, capsys):
    document, field = mutation
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"run_id": "x", "config": document}))
    reliability.fuzz(
        "config", lambda: rejects_cleanly(["train", "--config", str(path), "--print-config"], field, capsys)
    )


@FUZZ
@given(
    text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))),
    raw=st.binary(max_size=64),
)
def test_fuzzed_config_files_never_end_in_a_traceback(text, raw, tmp_path, reliability, capsys):
    """Arbitrary text, and arbitrary bytes (invalid UTF-8 included), as a config file: a message naming the file."""
    path = tmp_path / "config.yaml"
    for content in (text.encode("utf-8", errors="surrogatepass"), raw):
        path.write_bytes(content)
        reliability.fuzz(
            "config file",
            lambda: rejects_cleanly(["train", "--config", str(path), "--print-config"], str(path), capsys),
        )


SWEEP_KEYS = ["name", "seeds", "base", "rows", "description"]
ROW_KEYS = ["id", "group", "overrides", "paper"]


@st.composite
def sweep_mutations(draw, corpus: Path, root: Path):
    """A valid sweep file (test_sweep's) with one thing changed, and the name the error must contain."""
    path = write_sweep(root, corpus, {"base": {}, "nopos": {"positional": "none"}})
    document = yaml.safe_load(path.read_text())
    kind = draw(
        st.sampled_from(["top", "row", "override", "override value", "base value", "unknown top", "unknown row"])
    )
    if kind == "top":
        key = draw(st.sampled_from(SWEEP_KEYS))
        document[key] = draw(ODD_VALUES)
        name = key
    elif kind == "row":
        key = draw(st.sampled_from(ROW_KEYS))
        document["rows"][1][key] = draw(ODD_VALUES)
        name = "rows[1]"
    elif kind == "override":
        key = draw(st.text("abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=12))
        document["rows"][1]["overrides"][key] = draw(ODD_VALUES)
        name = key
    elif kind == "override value":
        key = draw(
            st.sampled_from(
                ["N", "d_model", "h", "d_k", "P_drop", "eps_ls", "positional", "train_steps", "train.warmup_steps"]
            )
        )
        document["rows"][1]["overrides"][key] = draw(ODD_VALUES)
        name = key.split(".")[-1]
    elif kind == "base value":
        key = draw(st.sampled_from(sorted(document["base"])))
        document["base"][key] = draw(ODD_VALUES)
        name = key
    elif kind == "unknown top":
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(lambda k: k not in SWEEP_KEYS))
        document[name] = 1
    else:
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(lambda k: k not in ROW_KEYS))
        document["rows"][0][name] = 1
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, name


def test_fuzzed_sweep_files_are_accepted_or_rejected_naming_the_field(corpus, tmp_path, reliability, capsys):
    @FUZZ
    @given(mutation=sweep_mutations(corpus, tmp_path / "fuzz"))
    def check(mutation):
        path, name = mutation
        out = tmp_path / "runs"

        def plan_ok() -> bool:
            try:
                plan.plan(path, "test", out=out)
            except ValueError as error:
                assert str(error).startswith(str(path)) or "--scale" in str(error), error
                assert name in str(error), f"the message does not name {name!r}: {error}"
                return False
            return True

        reliability.fuzz("sweep file", plan_ok)

    check()


@st.composite
def corpus_files(draw):
    """Training source and target lines: ordinary, empty, over-long, with invalid UTF-8, and unequal in number."""
    line = st.one_of(
        st.sampled_from(["ta kat sav", "de Hund sieht", "a b c d", "x"]),
        st.just(""),
        st.just("   "),
        st.integers(1001, 3000).map(lambda n: "w" * n),
        st.binary(min_size=1, max_size=12),
    )
    n = draw(st.integers(0, 12))
    src = draw(st.lists(line, min_size=n, max_size=n))
    tgt = draw(st.lists(line, min_size=n, max_size=n))
    if draw(st.booleans()):  # one side longer (new lists: hypothesis may share the drawn ones)
        extra = draw(st.lists(line, min_size=1, max_size=3))
        src, tgt = (src + extra, tgt) if draw(st.booleans()) else (src, tgt + extra)
    return src, tgt


def encode_lines(lines: list) -> bytes:
    return b"".join((line if isinstance(line, bytes) else line.encode()).replace(b"\n", b" ") + b"\n" for line in lines)


def test_fuzzed_corpora_give_clear_errors_or_counted_skips(tmp_path, reliability):
    for split in ("valid", "test"):
        (tmp_path / f"{split}.en").write_text("a b\n")
        (tmp_path / f"{split}.de").write_text("c d\n")

    @FUZZ
    @given(files=corpus_files())
    def check(files):
        src, tgt = files
        src_bytes, tgt_bytes = encode_lines(src), encode_lines(tgt)
        (tmp_path / "train.en").write_bytes(src_bytes)
        (tmp_path / "train.de").write_bytes(tgt_bytes)

        def scan() -> bool:
            try:
                report = check_corpus(resolve_splits(tmp_path, "en", "de")).splits["train"]
            except CorpusError as error:
                message = str(error)
                assert "train" in message, message
                decoded = [
                    text.decode("utf-8", errors="strict") if _utf8(text) else None for text in (src_bytes, tgt_bytes)
                ]
                if any(not raw.strip() for raw in (src_bytes, tgt_bytes)):  # a blank file is named first
                    assert "is empty" in message or "holds only whitespace" in message, message
                elif None in decoded:
                    assert "invalid UTF-8 at line" in message or "line counts differ" in message, message
                elif len(src) != len(tgt):
                    assert f"has {len(src)} lines" in message and f"has {len(tgt)} lines" in message, message
                else:
                    assert "no usable pairs" in message, message
                return False
            # Accepted: every number in the report is what the files hold.
            pairs = (
                [(s if isinstance(s, str) else s.decode()).strip() for s in src],
                [(t if isinstance(t, str) else t.decode()).strip() for t in tgt],
            )
            pairs = list(zip(*pairs))
            assert len(src) == len(tgt) and report.lines == len(pairs)
            assert report.empty_src == sum(not s for s, _ in pairs) and report.empty_tgt == sum(not t for _, t in pairs)
            assert (
                report.skipped_empty == sum(not s or not t for s, t in pairs)
                and report.kept == len(pairs) - report.skipped_empty
            )
            assert report.long_src == sum(len(s) > 1000 for s, _ in pairs) and report.long_tgt == sum(
                len(t) > 1000 for _, t in pairs
            )
            assert report.kept > 0
            return True

        reliability.fuzz("corpus", scan)

    check()


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_a_corrupted_record_is_reported_by_file_not_as_a_traceback(tmp_path, reliability):
    run_dir = tmp_path / "run"
    update_metrics(run_dir, status="done", dev_bleu=1.0)
    (run_dir / "metrics.json").write_bytes(b'{"status": "do')
    with reliability.fault("corrupted record"):
        with pytest.raises(ValueError, match=r"metrics\.json: not a valid JSON record"):
            read_metrics(run_dir)
