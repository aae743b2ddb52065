"""`ablate sweep --launcher slurm` (submitit; tested with its local executor), DDP inside a run, `ablate sync`.

Trainings here are test-sized (d_model 32, a few steps). The DDP test starts 2 CPU processes (gloo) through
`ablate train --devices 2` in a subprocess with a timeout: `strategy="ddp"` re-executes the command line, so it
must never run inside the pytest process.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
from test_sweep import folders, sweep_args, write_sweep

from ablations import cli, sync
from ablations.launch import plan, processes, slurm
from ablations.records import RunLock, lock_holder, read_config, read_metrics, update_metrics
from lightning_modules.data.generated import write_corpus

os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), train_pairs=300, dev_pairs=12, test_pairs=12)


def slurm_args(path: Path, out: Path, *extra: str) -> list[str]:
    return sweep_args(
        path,
        out,
        "--launcher",
        "slurm",
        "--slurm-cluster",
        "local",
        "--slurm-time",
        "10",
        "--slurm-gpus-per-node",
        "0",
        *extra,
    )


def submissions(out: Path) -> list[Path]:
    return sorted((out / slurm.SUBMITIT_FOLDER).rglob("*_submitted.pkl"))


# --------------------------------------------------------------------------------------------------
# SLURM launcher (submitit's local executor stands in for SLURM)
# --------------------------------------------------------------------------------------------------


def test_slurm_launcher_trains_a_job_array_and_a_rerun_submits_nothing(corpus, tmp_path, capsys):
    path = write_sweep(tmp_path, corpus, {"base": {}, "nopos": {"positional": "none"}})
    out = tmp_path / "runs"
    assert cli.main(slurm_args(path, out, "--wait")) == 0
    text = capsys.readouterr().out
    assert "submitted 2 run(s)" in text and "2 done" in text, text
    runs = folders(out)
    assert sorted(runs) == ["base-s0", "nopos-s0"]
    for run_dir in runs.values():
        record = read_metrics(run_dir)
        assert record["status"] == "done" and record["steps"] == 5 and record["attempts"] == 1, record
        assert (
            record["submitit_cluster"] == "local" and record["submitit_job"] and Path(record["submitit_log"]).exists()
        )
        assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / "test.hyp").exists()
        config, meta = read_config(run_dir / "config.yaml")
        assert config.run_id() == run_dir.name.rsplit("-", 1)[1]
    # the same folders the local launcher uses
    assert sorted(r.dir for r in plan.plan(path, "test", out=out)) == sorted(runs.values())
    before = submissions(out)
    assert len(before) == 2

    assert cli.main(slurm_args(path, out)) == 0  # everything done: nothing is submitted
    text = capsys.readouterr().out
    assert "nothing to submit" in text and "skipping 2 finished" in text and "submitted" not in text
    assert submissions(out) == before


def test_a_failing_job_is_recorded_with_wait(corpus, tmp_path, capsys):
    path = write_sweep(
        tmp_path, corpus, {"broken": {"data.dataset": "dir", "data.path": str(tmp_path / "nonexistent")}}
    )
    out = tmp_path / "runs"
    assert cli.main(slurm_args(path, out, "--wait")) == 1
    record = read_metrics(folders(out)["broken-s0"])
    assert record["status"] == "failed" and "does not exist" in record["reason"], record
    assert "failed: broken-s0" in capsys.readouterr().out


def test_queued_runs_are_not_submitted_twice(corpus, tmp_path, capsys):
    path = write_sweep(
        tmp_path, corpus, {"base": {}, "nopos": {"positional": "none"}, "A1": {"h": 1, "d_k": 512, "d_v": 512}}
    )
    out = tmp_path / "runs"
    queued, done, busy = (run.dir for run in plan.plan(path, "test", out=out))
    update_metrics(queued, status="pending", submitit_job=str(os.getpid()), submitit_cluster="local")  # an alive job
    update_metrics(done, status="done")
    with RunLock(busy) as lock:  # trained elsewhere right now
        assert lock.acquire()
        lock.note("someone else\n")
        assert cli.main(slurm_args(path, out)) == 0
    text = capsys.readouterr().out
    assert (
        "nothing to submit" in text
        and f"queued as job {os.getpid()}" in text
        and "running elsewhere (lock held: someone else)" in text
    )
    assert submissions(out) == []


@pytest.mark.slow
def test_a_preempted_job_requeues_and_resumes_from_its_last_checkpoint(corpus, tmp_path):
    """USR2 (submitit's preemption signal) mid-training: the step under way ends with a checkpoint, then
    TrainJob.checkpoint resubmits and the rerun resumes."""
    import signal as signals

    path = write_sweep(tmp_path, corpus, {"base": {}})
    out = tmp_path / "runs"
    sets = {"train.max_steps": 200, "train.checkpoint_every_steps": 10, "train.val_every_steps": 1000}
    runs = plan.plan(path, "test", out=out, sets=sets)
    todo = plan.select(runs)
    executor = slurm.make_executor(
        out / slurm.SUBMITIT_FOLDER, slurm.SlurmOptions(time_min=10, gpus_per_run=0, cluster="local"), "t"
    )
    (job,) = executor.map_array(slurm.TrainJob(1, "cpu"), [str(todo[0].dir)])
    run_dir = todo[0].dir
    deadline = time.time() + 120
    while not (run_dir / "checkpoints" / "last.ckpt").exists():  # wait for a first checkpoint
        assert time.time() < deadline and not job.done(), job.done() and job.stderr()
        time.sleep(0.2)
    holder = lock_holder(run_dir)
    pid = int(holder.split(" pid ")[1].split()[0])
    os.kill(pid, signals.SIGUSR2)
    deadline = time.time() + 240
    while not job.done():
        assert time.time() < deadline, "the requeued job did not finish"
        time.sleep(0.5)
    assert job.result() == "done"
    record = read_metrics(run_dir)
    assert record["status"] == "done" and record["attempts"] == 2 and record["steps"] == 200, record
    assert [stop["signal"] for stop in record["preemptions"]] == ["SIGUSR2"]
    assert "Requeued" in Path(job.paths.stdout).read_text()
    second = (run_dir / "logs" / "attempt-2" / "metrics.csv").read_text().splitlines()
    first_step = int(second[1].split(",")[second[0].split(",").index("step")])
    assert 0 < first_step < 200  # it went on from a checkpoint, not from scratch


def test_the_job_is_picklable_and_checkpoints_as_a_resubmission():
    import submitit

    job = slurm.TrainJob(devices=2, accelerator="cpu")
    again = pickle.loads(pickle.dumps(job))
    assert (again.devices, again.accelerator) == (2, "cpu")
    delayed = job.checkpoint("/some/run")
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.function is job and delayed.args == ("/some/run",)


def test_executor_parameters(tmp_path, monkeypatch):
    """The sbatch script submitit would write (a stand-in `srun` on PATH makes submitit take this for SLURM)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    options = slurm.SlurmOptions(partition="gpu", time_min=90, gpus_per_run=4, cpus_per_task=8, array_parallelism=3)
    executor = slurm.make_executor(tmp_path / "submitit", options, "ablate-test")
    assert executor.cluster == "slurm"
    params = executor._executor.parameters
    assert params["gpus_per_node"] == 4 and params["ntasks_per_node"] == 4  # one SLURM task (DDP rank) per GPU
    assert params["time"] == 90 and params["partition"] == "gpu" and params["cpus_per_task"] == 8
    assert params["array_parallelism"] == 3 and params["signal_delay_s"] == options.signal_delay_s
    text = executor._executor._make_submission_file_text("python -m x", "uid")
    for line in (
        "--gpus-per-node=4",
        "--ntasks-per-node=4",
        "--partition=gpu",
        "--time=90",
        f"--signal=USR2@{options.signal_delay_s}",
    ):
        assert line in text, text


def test_slurm_cli_errors(corpus, tmp_path, capsys):
    path = write_sweep(tmp_path, corpus, {"base": {}})
    out = tmp_path / "runs"
    assert cli.main(sweep_args(path, out, "--wait")) == 2
    assert "--wait: only with --launcher slurm" in capsys.readouterr().err
    assert cli.main(sweep_args(path, out, "--slurm-partition", "gpu")) == 2
    assert "--slurm-partition: only with --launcher slurm" in capsys.readouterr().err
    assert cli.main(sweep_args(path, out, "--launcher", "slurm", "--workers", "2")) == 2
    assert "--slurm-array-parallelism" in capsys.readouterr().err
    assert (
        cli.main(sweep_args(path, out, "--launcher", "slurm", "--gpus-per-run", "2", "--slurm-gpus-per-node", "4")) == 2
    )
    assert "disagree" in capsys.readouterr().err
    assert cli.main(sweep_args(path, out, "--launcher", "slurm", "--order", "cheapest")) == 2
    assert "only the local launcher orders runs" in capsys.readouterr().err
    if not any(Path(d, "srun").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        assert cli.main(sweep_args(path, out, "--launcher", "slurm")) == 2  # no SLURM on this machine: a clear error
        assert "no SLURM found" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# DDP inside a run
# --------------------------------------------------------------------------------------------------


def test_slots_with_several_gpus_per_run(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    slots = processes.make_slots(2, cores=range(8), gpus=["0", "1", "2", "3"], gpus_per_run=2)
    assert [(s.gpu, s.devices, s.threads) for s in slots] == [("0,1", 2, 4), ("2,3", 2, 4)]
    argv = processes.slot_command(slots[0], Path("c.yaml"), Path("r"))
    assert argv[-2:] == ["--devices", "2"]
    cpu = processes.make_slots(1, cores=range(4), gpus=[], gpus_per_run=2)[0]
    assert (cpu.gpu, cpu.devices, cpu.threads) == (None, 2, 2)  # two CPU processes share the slot's 4 cores
    assert processes.slot_command(cpu, Path("c.yaml"), Path("r"))[-4:] == ["--devices", "2", "--accelerator", "cpu"]
    assert processes.slot_command(processes.make_slots(1, cores=[0], gpus=[])[0], Path("c.yaml"), Path("r"))[-2:] == [
        "--run-dir",
        "r",
    ]
    with pytest.raises(ValueError, match="only 1 GPU"):
        processes.make_slots(1, cores=[0], gpus=["0"], gpus_per_run=2)


def fake_process(proc: Path, pid: int, argv: list[str], env: dict[str, str], cores: Optional[str] = None) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in argv) + b"\0")
    (proc / str(pid) / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    if cores is not None:
        (proc / str(pid) / "status").write_text(f"Name:\tpython3\nCpus_allowed_list:\t{cores}\nVoluntary:\t1\n")


def test_a_sweep_beside_running_trainers_is_warned_that_it_oversubscribes_the_cores(tmp_path, monkeypatch):
    """Two sweeps side by side each pin their runs to the same cores; the second hears so before it starts."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the slots' threads: their share of the cores, uncapped
    python = "/venv/bin/python"
    fake_process(
        tmp_path, 101, [python, "-m", "ablations.cli", "train", "--config", "c.yaml"], {"OMP_NUM_THREADS": "2"}, "0-1,3"
    )
    fake_process(tmp_path, 102, [python, "/venv/bin/ablate", "train", "--config", "c.yaml"], {"HOME": "/root"})
    fake_process(tmp_path, 103, [python, "/venv/bin/ablate", "sweep", "sweeps/table3.yaml"], {"OMP_NUM_THREADS": "1"})
    fake_process(tmp_path, 104, [python, "-m", "pytest", "tests/test_train.py"], {"OMP_NUM_THREADS": "1"})
    (tmp_path / "self").mkdir()  # /proc's non-process entries are not read
    every = os.cpu_count()
    assert processes.training_processes(tmp_path) == {  # no OMP_NUM_THREADS or no Cpus_allowed_list: every core
        101: processes.TrainingProcess(2, frozenset({0, 1, 3})),
        102: processes.TrainingProcess(every, frozenset(range(every))),
    }

    def on(*cores: int, threads: int = 1) -> processes.TrainingProcess:
        return processes.TrainingProcess(threads, frozenset(cores))

    two = processes.make_slots(2, cores=[0, 1], gpus=[])
    warning = processes.oversubscription_warning(two, cores=[0, 1], running={101: on(0, 1)})
    assert warning and "pid 101" in warning and "3 on 2 core(s)" in warning
    assert processes.oversubscription_warning(two, cores=[0, 1], running={}) is None
    assert processes.oversubscription_warning(two[:1], cores=[0, 1], running={101: on(1)}) is None  # 1 + 1 fit on 2
    four = processes.make_slots(2, cores=range(4), gpus=[])
    assert processes.oversubscription_warning(four, cores=range(4), running={101: on(3)}) is not None  # 2 × 2 + 1
    on_gpus = processes.make_slots(2, cores=[0, 1], gpus=["0", "1"])
    assert processes.oversubscription_warning(on_gpus, cores=[0, 1], running={101: on(0, 1, threads=2)}) is None

    # Sweeps pinned to disjoint cores (`taskset -c 0 ablate sweep ...` beside `taskset -c 1 ...`) do not meet; a
    # process on several cores counts with the threads it can put on ours.
    one = processes.make_slots(1, cores=[0], gpus=[])
    assert processes.oversubscription_warning(one, cores=[0], running={101: on(1)}) is None
    assert processes.oversubscription_warning(one, cores=[0], running={101: on(0)}) is not None
    assert processes.oversubscription_warning(two[:1], cores=[0, 1], running={101: on(1, 2, 3, threads=4)}) is None


def test_core_lists_and_thread_counts_parse_as_linux_and_openmp_write_them():
    assert processes.core_list("0-3,6") == frozenset({0, 1, 2, 3, 6})
    assert processes.core_list("5\n") == frozenset({5})
    assert processes.thread_count(" 4 ") == 4
    assert processes.thread_count("0") is None and processes.thread_count("") is None
    assert processes.thread_count("4,2") is None  # a nested OpenMP list: not one count


def test_rank_detection(monkeypatch):
    from ablations.train import is_rank_zero

    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert not is_rank_zero()


def train_cli(config: Path, run_dir: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "ablations.cli", "train", "--config", str(config), "--run-dir", str(run_dir), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def set_args(values: dict) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def base_config(tmp_path: Path, corpus: Path, dropout: bool = False) -> Path:
    """config.yaml of the test sweep's base row (d_model 32), dropout off (`dropout`: on): each rank draws masks of
    its own, a single process from one stream, so only without dropout can their losses agree."""
    from ablations.records import write_config

    path = write_sweep(tmp_path, corpus, {"base": {"P_drop": 0.0 if not dropout else 0.1}})
    (run,) = plan.plan(path, "test", out=tmp_path / "runs")
    write_config(tmp_path / "base", run.spec.config, run.meta)
    return tmp_path / "base" / "config.yaml"


def trained(tmp_path: Path, config: Path, commands: dict[str, list[str]], steps: int) -> dict[str, dict]:
    """Each command's run (`ablate train` in a subprocess), checked done after `steps` steps: its record."""
    records = {}
    for name, extra in commands.items():
        proc = train_cli(config, tmp_path / name, *extra)
        assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        records[name] = read_metrics(tmp_path / name)
        assert records[name]["status"] == "done" and records[name]["steps"] == steps, records[name]
    return records


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_matches_one_process(corpus, tmp_path):
    """A step of B tokens on 2 ranks (B/2 each) against 1 process with the same step, two ways.

    Exact: 1 process whose device holds at most B/2 (`data.device_batch_tokens`), so it accumulates 2 micro-batches
    of B/2. The sampler builds the same global list of batches for both (the list has an even length, so the 2-rank
    split adds no batch) and deals batches 2k, 2k+1 to ranks 0, 1 — the two batches the single process accumulates
    for step k. DDP averages the two gradients, Lightning divides each accumulated loss by 2: the same update, up to
    float summation order.

    1 process with B tokens in one batch: the token-budget sampler packs other batches, so only close, not equal.
    """
    from lightning_modules.data import TokenBudgetBatchSampler, TranslationDataModule

    budget, steps = 512, 6
    config_path = base_config(tmp_path, corpus)
    common = {"train.max_steps": steps, "train.val_every_steps": 100, "train.checkpoint_every_steps": 3}
    common["data.batch_tokens"] = budget

    # precondition of the exact comparison: an even number of batches, so world size 2 splits none
    config, _ = read_config(config_path)
    capped = dataclasses.replace(config.data, batch_tokens=budget, device_batch_tokens=budget // 2)
    data = TranslationDataModule(capped, seed=config.seed, max_positions=config.model.max_positions)
    data.prepare_data()
    data.setup("fit")
    one = data.train_sampler(0, 1)
    assert data.batch_plan(1).accumulation == 2 and one.max_tokens == budget // 2
    uncapped = TranslationDataModule(
        dataclasses.replace(capped, device_batch_tokens=None),
        seed=config.seed,
        max_positions=config.model.max_positions,
    )
    uncapped.setup("fit")
    two = [uncapped.train_sampler(r, 2) for r in (0, 1)]
    assert isinstance(one, TokenBudgetBatchSampler) and len(one.global_batches(0)) % 2 == 0
    assert len(one.global_batches(0)) >= 2 * steps  # the 6 steps stay within the first epoch
    assert [b.tolist() for b in one.global_batches(0)] == [b.tolist() for b in two[0].global_batches(0)]
    assert one.batches(0)[0::2] == two[0].batches(0) and one.batches(0)[1::2] == two[1].batches(0)

    records = trained(
        tmp_path,
        config_path,
        {
            "ddp": set_args(common) + ["--devices", "2", "--accelerator", "cpu"],
            "accumulate": set_args(common | {"data.device_batch_tokens": budget // 2}) + ["--accelerator", "cpu"],
            "one_batch": set_args(common) + ["--accelerator", "cpu"],
        },
        steps,
    )
    ddp, acc, whole = records["ddp"], records["accumulate"], records["one_batch"]
    print(json.dumps({name: {k: r[k] for k in ("dev_loss", "train_tokens", "devices")} for name, r in records.items()}))
    assert ddp["devices"] == 2 and ddp["attempts"] == 1  # rank 1 wrote no record, nor a second attempt
    assert (ddp["device_batch_tokens"], ddp["accumulate_grad_batches"]) == (budget // 2, 1)
    assert (acc["device_batch_tokens"], acc["accumulate_grad_batches"]) == (budget // 2, 2)
    assert ddp["train_tokens"] == acc["train_tokens"]  # tokens summed over the ranks
    assert ddp["train_src_tokens"] == acc["train_src_tokens"]
    assert abs(ddp["dev_loss"] - acc["dev_loss"]) <= 1e-4 * abs(acc["dev_loss"])
    assert abs(ddp["test_loss"] - acc["test_loss"]) <= 1e-4 * abs(acc["test_loss"])
    assert abs(ddp["dev_loss"] - whole["dev_loss"]) <= 0.05 * abs(whole["dev_loss"])
    # one checkpoint set, written by rank 0
    assert (tmp_path / "ddp" / "checkpoints" / "last.ckpt").exists()
    assert not list((tmp_path / "ddp").glob("metrics.json.*"))


# `ablate train` with a probe: per rank, a digest of the initial weights (in `setup`, before DDP broadcasts rank 0's),
# of a dropout mask from the native kernel and one from torch's (drawn on a fork of the RNG, so training is untouched)
# at the start of training, and of the RNG state at its end, to PROBE_DIR/<run>-rank<r>.json. A file, not `-c`:
# Lightning's DDP re-executes the script for rank 1.
DROPOUT_PROBE = r"""
import hashlib, json, os, sys
import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from ablations import cli
from lightning_modules import native, transformer

def digest(tensor):
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().tobytes()).hexdigest()[:16]

class Probe(pl.Callback):
    def setup(self, trainer, pl_module, stage):
        self.seen = {"weights": digest(torch.cat([p.flatten() for p in pl_module.parameters()]))}

    def on_train_start(self, trainer, pl_module):
        with torch.random.fork_rng(devices=[]):
            ones = torch.ones(4096)
            self.seen |= {"native": digest(transformer.dropout(ones, 0.5, True)), "torch": digest(F.dropout(ones, 0.5))}
        self.seen["native_available"] = native.available()

    def on_train_end(self, trainer, pl_module):
        self.seen["rng_end"] = digest(torch.get_rng_state())
        run = os.path.basename(sys.argv[sys.argv.index("--run-dir") + 1])
        with open(os.path.join(os.environ["PROBE_DIR"], f"{run}-rank{trainer.global_rank}.json"), "w") as handle:
            json.dump(self.seen, handle)

cli.train_callbacks = lambda: [Probe()]
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ddp_ranks_draw_their_own_dropout_masks_from_the_same_weights_and_resume_them(corpus, tmp_path):
    """2 gloo ranks: the same initial weights, different dropout masks (native kernel and torch's), different streams
    to the end. A copy of the run resumed from its step-4 checkpoint ends with each rank's stream where the
    uninterrupted run's ended (each rank's state is checkpointed, not only rank 0's), with the same dev loss."""
    config_path = base_config(tmp_path, corpus, dropout=True)
    driver, probes = tmp_path / "probe.py", tmp_path / "probes"
    driver.write_text(DROPOUT_PROBE)
    probes.mkdir()
    sets = {"train.max_steps": 8, "train.checkpoint_every_steps": 4, "train.val_every_steps": 100}
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", PROBE_DIR=str(probes))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        env.pop(key, None)

    def train(run_dir: Path) -> dict:
        argv = [sys.executable, str(driver), "train", "--config", str(config_path), "--run-dir", str(run_dir)]
        argv += set_args(sets) + ["--devices", "2", "--accelerator", "cpu"]
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        record = read_metrics(run_dir)
        assert record["status"] == "done" and record["steps"] == 8, record
        return record

    whole = train(tmp_path / "whole")
    (tmp_path / "resumed" / "checkpoints").mkdir(parents=True)
    shutil.copy(
        tmp_path / "whole" / "checkpoints" / "step-0000004.ckpt", tmp_path / "resumed" / "checkpoints" / "last.ckpt"
    )
    resumed = train(tmp_path / "resumed")
    seen = {path.stem: json.loads(path.read_text()) for path in probes.glob("*.json")}
    first, second = seen["whole-rank0"], seen["whole-rank1"]
    assert first["native_available"]  # the native kernel's noise is among the masks compared
    assert first["weights"] == second["weights"]
    assert first["native"] != second["native"] and first["torch"] != second["torch"]
    assert first["rng_end"] != second["rng_end"]
    assert seen["resumed-rank0"]["rng_end"] == first["rng_end"]
    assert seen["resumed-rank1"]["rng_end"] == second["rng_end"]
    assert resumed["dev_loss"] == whole["dev_loss"]


# `ablate train` noting, per rank, the dev sentences it decoded itself in the validation (a callback's epoch-end hook
# runs before the module's, which gathers them), to PROBE_DIR/rank<r>.
SHARE_PROBE = r"""
import json, os, sys
import lightning.pytorch as pl
from ablations import cli

class Shares(pl.Callback):
    def on_validation_epoch_end(self, trainer, pl_module):
        with open(os.path.join(os.environ["PROBE_DIR"], f"rank{trainer.global_rank}"), "w") as handle:
            json.dump(sorted(pl_module._hypotheses), handle)

cli.train_callbacks = lambda: [Shares()]
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_validation_split_over_two_ranks_scores_as_one_rank(corpus, tmp_path):
    """The one validation (at the last step) runs on 2 gloo ranks, each decoding its share of the dev set; the final
    evaluation of the same weights runs on rank 0 alone. Same BLEU and chrF (every hypothesis gathered, none twice:
    BLEU is only scored when all are there) and the same dev loss up to summation order."""
    config_path = base_config(tmp_path, corpus)
    steps = 4
    sets = {"train.max_steps": steps, "train.val_every_steps": steps, "eval.dev_bleu_sentences": "null"}
    driver, shares = tmp_path / "shares.py", tmp_path / "shares"
    driver.write_text(SHARE_PROBE)
    shares.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", PROBE_DIR=str(shares))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    argv = [sys.executable, str(driver), "train", "--config", str(config_path), "--run-dir", str(tmp_path / "ddp")]
    proc = subprocess.run(
        argv + set_args(sets) + ["--devices", "2", "--accelerator", "cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    record = read_metrics(tmp_path / "ddp")
    assert record["status"] == "done", record
    decoded = {path.name: set(json.loads(path.read_text())) for path in shares.iterdir()}
    assert sorted(decoded) == ["rank0", "rank1"] and all(decoded.values())
    assert not decoded["rank0"] & decoded["rank1"]  # each dev sentence decoded on one rank
    assert decoded["rank0"] | decoded["rank1"] == set(range(12))  # the whole dev set (12 pairs)
    with open(tmp_path / "ddp" / "logs" / "attempt-1" / "metrics.csv", newline="") as handle:
        (validated,) = [row for row in csv.DictReader(handle) if row.get("dev/loss")]
    # logged values are float32: equal to that precision
    assert float(validated["dev/chrf"]) == pytest.approx(record["dev_chrf"], rel=1e-6) and record["dev_chrf"] > 0
    assert float(validated["dev/bleu"]) == pytest.approx(record["dev_bleu"], rel=1e-6, abs=1e-9)
    assert float(validated["dev/loss"]) == pytest.approx(record["dev_loss"], rel=1e-6)


@pytest.mark.slow
def test_a_step_holds_the_same_tokens_on_one_two_and_four_ranks(tmp_path):
    """data.batch_tokens is a step's budget over every rank: 1 process, 2 and 4 gloo ranks train steps of the same
    size (measured: real tokens per optimiser step, from metrics.json), within 5 %.

    Four ways to cut a 4,096-token step: 1 process in one batch; at the same per-device budget of 1,024, 1 process
    accumulating 4 micro-batches, 2 ranks accumulating 2, and 4 ranks. Equal only up to packing: a batch of 4,096
    packs other pairs than four of 1,024, and each world size splits the largest batches to make the epoch's batch
    count divisible by it, which reshuffles the order."""
    # Enough pairs that a 4,096-token batch spans no wider a range of lengths than a 1,024-token one (on 2,000 pairs
    # it spans several word pieces and pads 8 % more): then only the packing differs.
    corpus = write_corpus(tmp_path / "corpus", train_pairs=8000, dev_pairs=8, test_pairs=8)
    steps = 8
    config = base_config(tmp_path, corpus)
    common = {
        "train.max_steps": steps,
        "train.val_every_steps": 100,
        "train.checkpoint_every_steps": 100,
        "data.batch_tokens": 4096,
    }
    cap = set_args(common | {"data.device_batch_tokens": 1024})
    records = trained(
        tmp_path,
        config,
        {
            "one": set_args(common) + ["--accelerator", "cpu"],
            "one_accumulating": cap + ["--accelerator", "cpu"],
            "two": cap + ["--devices", "2", "--accelerator", "cpu"],
            "four": set_args(common) + ["--devices", "4", "--accelerator", "cpu"],
        },
        steps,
    )
    plans = {n: (r["devices"], r["device_batch_tokens"], r["accumulate_grad_batches"]) for n, r in records.items()}
    assert plans == {"one": (1, 4096, 1), "one_accumulating": (1, 1024, 4), "two": (2, 1024, 2), "four": (4, 1024, 1)}
    measured = {name: r["tokens_per_step_measured"] for name, r in records.items()}
    src = {name: r["src_tokens_per_step_measured"] for name, r in records.items()}
    print(json.dumps({"tgt": measured, "src": src}))
    assert all(r["tokens_per_step"] == 4096 for r in records.values())
    for name in ("one_accumulating", "two", "four"):
        assert abs(measured[name] - measured["one"]) <= 0.05 * measured["one"], measured
        assert abs(src[name] - src["one"]) <= 0.05 * src["one"], src
    assert 0.5 * 4096 < measured["one"] <= 4096  # real tokens: the padded budget bounds them


@pytest.mark.slow
def test_the_local_launcher_trains_a_run_on_two_cpu_processes(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    path = write_sweep(tmp_path, corpus, {"base": {}})
    out = tmp_path / "runs"
    assert cli.main(sweep_args(path, out, "--gpus-per-run", "2")) == 0
    run_dir = folders(out)["base-s0"]
    record = read_metrics(run_dir)
    assert record["status"] == "done" and record["devices"] == 2 and record["steps"] == 5 and record["attempts"] == 1, (
        record
    )
    assert "--devices 2 --accelerator cpu" in (run_dir / "train.log").read_text()


# --------------------------------------------------------------------------------------------------
# ablate sync
# --------------------------------------------------------------------------------------------------


def fake_offline_run(run_dir: Path, run_id: str, synced: bool = False) -> Path:
    offline = run_dir / "wandb" / f"offline-run-20260101_000000-{run_id}"
    offline.mkdir(parents=True)
    (offline / f"run-{run_id}.wandb").write_bytes(b"")
    if synced:
        (offline / f"run-{run_id}.wandb.synced").write_text("")
    return offline


def test_sync_skips_synced_runs_and_fails_fast_without_a_server(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("WANDB_MODE", "offline")
    fake_offline_run(tmp_path / "sweep" / "tiny" / "a-s0-aaaa", "aaaa", synced=True)
    assert cli.main(["sync", str(tmp_path)]) == 0  # all synced: nothing to do, no server needed
    assert "1 synced already" in capsys.readouterr().out
    todo = fake_offline_run(tmp_path / "sweep" / "tiny" / "b-s0-bbbb", "bbbb")
    assert cli.main(["sync", str(tmp_path), "--dry-run"]) == 0
    assert f"would sync {todo}" in capsys.readouterr().out
    started = time.time()
    assert cli.main(["sync", str(tmp_path)]) == 1
    assert time.time() - started < 10
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9 cannot be reached" in err and "nothing synced" in err
    assert cli.main(["sync", str(tmp_path / "missing")]) == 2


def test_sync_skips_a_run_still_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    run = tmp_path / "s" / "t" / "c-s0-cccc"
    fake_offline_run(run, "cccc")
    with RunLock(run) as lock:
        assert lock.acquire()
        assert cli.main(["sync", str(tmp_path)]) == 0
    assert "1 still training (skipped), 0 to sync" in capsys.readouterr().out


def test_a_synced_run_records_its_wandb_address(tmp_path, monkeypatch, capsys):
    """`wandb sync` replaced by a script that prints what wandb prints and leaves wandb's marker."""
    run_dir = tmp_path / "sweep" / "tiny" / "b-s0-bbbb"
    offline = fake_offline_run(run_dir, "bbbb")
    update_metrics(run_dir, status="done", dev_bleu=12.5)
    fake = tmp_path / "fake_wandb.py"
    fake.write_text(
        "import pathlib, sys\n"
        "run = pathlib.Path(sys.argv[2])\n"
        "print(f'Syncing: http://wandb.test/team/attention-ablations/runs/bbbb ... done.')\n"
        "for f in run.glob('*.wandb'): f.with_suffix('.wandb.synced').write_text('')\n"
    )
    monkeypatch.setattr(sync, "wandb_command", lambda: [sys.executable, str(fake)])
    monkeypatch.setattr(sync, "probe", lambda url, timeout: None)
    assert sync.sync_runs(tmp_path) == 0
    assert "http://wandb.test/team/attention-ablations/runs/bbbb" in capsys.readouterr().out
    record = read_metrics(run_dir)
    assert record["wandb_url"] == "http://wandb.test/team/attention-ablations/runs/bbbb" and record["dev_bleu"] == 12.5
    assert sync.is_synced(offline)


def test_sync_times_out_on_a_server_that_never_answers(tmp_path, monkeypatch, capsys, silent_server):
    """A server that accepts connections and never answers: each `wandb sync` is stopped after its timeout."""
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent_server}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run_dir = tmp_path / "s" / "t" / "d-s0-dddd"
    run_dir.mkdir(parents=True)
    make = (
        "import wandb; r = wandb.init(project='p', id='dddd', dir=%r, mode='offline'); r.log({'x': 1}); r.finish()"
        % str(run_dir)
    )
    subprocess.run(
        [sys.executable, "-c", make],
        check=True,
        timeout=60,
        capture_output=True,
        env=dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true"),
    )
    (run,) = sync.offline_runs(tmp_path)
    started = time.time()
    assert sync.sync_runs(tmp_path, timeout=5) == 1
    assert time.time() - started < 30
    out = capsys.readouterr().out
    # The run gets what is left of the 5 s after listing and probing: "4.99 s" on a loaded machine.
    assert f"FAILED {run}" in out and "0 synced, 1 failed" in out
    assert re.search(r"timed out after (5|4\.\d+) s", out), out
    assert not sync.is_synced(run)
