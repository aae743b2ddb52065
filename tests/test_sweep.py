"""`ablate sweep`: pure expansion, the plan, skipping finished runs, locks, failures, interruption, and real runs.

Most tests replace the training process with a stand-in (a few lines of Python that write records the way
`ablate train` does) so they test the launcher in well under a second per run; two tests train for real.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from ablations import cli
from ablations.launch import dry_run, local, plan, processes
from ablations.records import RunLock, folder_status, read_config, read_metrics, update_metrics
from ablations.sweep import PROJECT_SCALES, SCALE_HELP, expand, load_scales, load_sweep, scales_for
from lightning_modules.data.generated import write_corpus
from lightning_modules.flops import parameter_count, training_flops

os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent

PAPER_BASE = {
    "N": 1,
    "d_model": 512,
    "d_ff": 2048,
    "h": 8,
    "d_k": 64,
    "d_v": 64,
    "P_drop": 0.1,
    "eps_ls": 0.1,
    "positional": "sinusoidal",
    "train_steps": 100000,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), train_pairs=300, dev_pairs=12, test_pairs=12)


def write_sweep(root: Path, corpus: Path, rows: dict[str, dict], seeds=(0,)) -> Path:
    """A sweep file and a `test` scale beside it: width / 16 (d_model 32, d_k 4), 100000 x 0.00005 = 5 steps."""
    root.mkdir(parents=True, exist_ok=True)
    scales = {
        "test": {
            "description": "seconds per run",
            "width_divisor": 16,
            "steps_scale": 0.00005,
            "settings": {
                "data.dataset": "dir",
                "data.path": str(corpus),
                "data.vocab_size": 96,
                "data.batch_tokens": 512,
                "data.max_tokens": 64,
                "data.cache_dir": str(root / "cache"),
                "train.warmup_steps": 2,
                "train.val_every_steps": 3,
                "train.checkpoint_every_steps": 3,
                "eval.dev_bleu_sentences": 8,
                "model.max_positions": 128,
            },
        }
    }
    (root / "scales.yaml").write_text(yaml.safe_dump(scales))
    sweep = {
        "name": "test",
        "seeds": list(seeds),
        "base": PAPER_BASE,
        "rows": [{"id": row, "group": row, "overrides": overrides} for row, overrides in rows.items()],
    }
    path = root / "test.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


# A stand-in for `ablate train --config C --run-dir D`: records like train_run, behaviour chosen by the row id.
FAKE_TRAIN = r"""
import json, os, signal, sys, time
from ablations.launch.processes import pin_cpus_from_env
from ablations.records import read_config, update_metrics
pin_cpus_from_env()
config, meta = read_config(sys.argv[1])
run_dir, row = sys.argv[2], meta["row"]
update_metrics(run_dir, status="running")
env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ABLATE_CPUS", "CUDA_VISIBLE_DEVICES",
                                      "WANDB_MODE", "ABLATE_RUN_LOCKED")}
with open(os.path.join(run_dir, "child.json"), "w") as f:
    json.dump({"pid": os.getpid(), "start": time.time(), "env": env, "affinity": sorted(os.sched_getaffinity(0))}, f)
print("fake training", row, flush=True)
if row == "crash":
    print("Traceback (most recent call last):\nRuntimeError: the fake run broke", flush=True)
    sys.exit(3)
if row == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
if row == "stop" and not os.environ.get("FAKE_NO_STOP"):
    os.kill(os.getppid(), signal.SIGTERM)  # as if someone stopped the sweep now
    time.sleep(60)
time.sleep(float(os.environ.get("FAKE_SECONDS", "0.3")))
with open(os.path.join(run_dir, "child.json")) as f:
    record = json.load(f)
record["end"] = time.time()
with open(os.path.join(run_dir, "child.json"), "w") as f:
    json.dump(record, f)
update_metrics(run_dir, status="done", dev_ppl=1.0)
"""


@pytest.fixture
def fake_train(monkeypatch):
    monkeypatch.setattr(
        processes,
        "train_command",
        lambda config, run_dir: [sys.executable, "-c", FAKE_TRAIN, str(config), str(run_dir)],
    )
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])


def sweep_args(path: Path, out: Path, *extra: str) -> list[str]:
    return ["sweep", str(path), "--scale", "test", "--out", str(out), *extra]


def folders(out: Path) -> dict[str, Path]:
    """Run folders under out by `<row>-s<seed>`."""
    return (
        {p.name.rsplit("-", 1)[0]: p for p in (out / "test" / "test").iterdir()}
        if (out / "test" / "test").exists()
        else {}
    )


# --------------------------------------------------------------------------------------------------
# Sweep files and expansion
# --------------------------------------------------------------------------------------------------


def test_the_shipped_sweep_files_load():
    grid = load_sweep(ROOT / "sweeps" / "positional_norm.yaml")
    placements = ("post", "deepnorm", "pre")
    assert [r.id for r in grid.rows] == [f"{p}-{n}" for p in ("sin", "learned", "rope", "none") for n in placements]
    assert grid.reference_row().id == "sin-pre"
    assert grid.seeds == (0, 1) and {r.group for r in grid.rows} == {"sinusoidal", "learned", "rope", "none"}
    assert all(r.paper.ppl is None and r.paper.bleu is None and r.paper.params_m is None for r in grid.rows)
    table3 = load_sweep(ROOT / "sweeps" / "table3.yaml")
    assert grid.base == table3.base
    specs = expand(grid, scales_for(grid.path)["tiny"])
    assert len(specs) == 24 and len({s.run_id for s in specs}) == 24
    cells = {(s.config.model.positional, s.config.model.norm_placement) for s in specs}
    assert cells == {(p, n) for p in ("sinusoidal", "learned", "rope", "none") for n in placements}

    smoke = load_sweep(ROOT / "sweeps" / "smoke.yaml")
    assert [r.id for r in smoke.rows] == ["base", "nopos"] and smoke.seeds == (0,)
    base, nopos = expand(smoke, scales_for(smoke.path)["tiny"])
    assert base.config.model.positional == "sinusoidal" and nopos.config.model.positional == "none"


def test_expansion_is_pure_and_stable(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"base": {}, "nopos": {"positional": "none"}}, seeds=(0, 1))
    sweep, scale = load_sweep(path), scales_for(path)["test"]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    first = [(s.row, s.seed, s.run_id) for s in expand(sweep, scale)]
    second = [(s.row, s.seed, s.run_id) for s in expand(load_sweep(path), scales_for(path)["test"])]
    assert first == second and sorted(p.name for p in tmp_path.rglob("*")) == before  # same ids, no files
    assert [(row, seed) for row, seed, _ in first] == [("base", 0), ("base", 1), ("nopos", 0), ("nopos", 1)]
    assert len({run_id for _, _, run_id in first}) == 4  # rows and seeds differ in id
    config = expand(sweep, scale, seeds=[0], rows=["base"])[0].config
    assert (config.model.N, config.model.d_model, config.model.head_dim_k, config.train.max_steps) == (1, 32, 4, 5)
    launch_plan = plan.plan(path, "test", seeds=[0, 1], out=tmp_path / "runs")
    assert [r.spec.run_id for r in launch_plan] == [run_id for _, _, run_id in first]
    assert not (tmp_path / "runs").exists()


def test_a_scale_can_cap_every_rows_steps(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"base": {}, "long": {"train_steps": 300000}})
    scales = yaml.safe_load((tmp_path / "scales.yaml").read_text())
    assert [s.config.train.max_steps for s in expand(load_sweep(path), scales_for(path)["test"])] == [5, 15]
    scales["test"]["max_steps"] = 8
    (tmp_path / "scales.yaml").write_text(yaml.safe_dump(scales))
    assert [s.config.train.max_steps for s in expand(load_sweep(path), scales_for(path)["test"])] == [5, 8]
    assert scales_for(path)["test"].describe_steps() == "steps × 5e-05, at most 8"
    for bad in (0, 2.5, "ten", True):
        scales["test"]["max_steps"] = bad
        (tmp_path / "scales.yaml").write_text(yaml.safe_dump(scales))
        with pytest.raises(ValueError, match=r"test\.max_steps = .*expected a positive integer"):
            scales_for(path)


def test_a_scale_can_give_rows_their_seeds(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"base": {}, "wide": {"d_model": 1024}}, seeds=(0, 1))
    scales = yaml.safe_load((tmp_path / "scales.yaml").read_text())

    def seeds(**kw):
        return [(s.row, s.seed) for s in expand(load_sweep(path), scales_for(path)["test"], **kw)]

    assert seeds() == [("base", 0), ("base", 1), ("wide", 0), ("wide", 1)]  # the sweep's own list
    scales["test"].update(seeds=3, row_seeds={"base": 5, "absent": 2})  # a preset serves sweeps without that row
    (tmp_path / "scales.yaml").write_text(yaml.safe_dump(scales))
    assert seeds() == [("base", s) for s in range(5)] + [("wide", s) for s in range(3)]
    assert seeds(seeds=[7]) == [("base", 7), ("wide", 7)]  # the command's --seeds wins for every row
    assert scales_for(path)["test"].describe_seeds(load_sweep(path)) == "seeds 0–2 per row at this scale (base 0–4)"
    for key, bad in (("seeds", 0), ("seeds", "3"), ("row_seeds", {"base": 0}), ("row_seeds", [5])):
        broken = yaml.safe_load(yaml.safe_dump(scales))
        broken["test"][key] = bad
        (tmp_path / "scales.yaml").write_text(yaml.safe_dump(broken))
        with pytest.raises(ValueError, match=rf"test\.{key}"):
            scales_for(path)


def test_the_scale_help_names_every_project_preset():
    """The help of --scale once named tiny, small and paper only, after converged had been added."""
    for name in load_scales(PROJECT_SCALES):
        assert name in SCALE_HELP, name


def test_a_sweep_names_the_row_its_deltas_are_against(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"post": {"norm_placement": "post"}, "pre": {"norm_placement": "pre"}})
    assert load_sweep(path).reference_row().id == "post"  # no `reference:` and no group base: the first row
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "reference": "pre"}, sort_keys=False))
    assert load_sweep(path).reference_row().id == "pre"
    path.write_text(yaml.safe_dump({**data, "reference": "mid"}, sort_keys=False))
    with pytest.raises(
        ValueError, match=r"test\.yaml: reference = 'mid': expected the id of one of its rows \(post, pre\)"
    ):
        load_sweep(path)


def test_contrasts_name_two_different_rows_each_once(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"post": {"norm_placement": "post"}, "pre": {"norm_placement": "pre"}})
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "contrasts": [{"row": "post", "against": "pre"}]}, sort_keys=False))
    (contrast,) = load_sweep(path).contrasts
    assert (contrast.row, contrast.against, contrast.label) == ("post", "pre", "post − pre")
    bad = {
        r"contrasts\[0\]\.against = 'mid': expected a row id \(post, pre\)": [{"row": "post", "against": "mid"}],
        r"contrasts\[0\] = .*: expected two different rows": [{"row": "pre", "against": "pre"}],
        r"contrasts\[1\] = .*: expected a pair not listed before": [{"row": "post", "against": "pre"}] * 2,
        r"contrasts\[0\] = .*: expected \{row: ROW, against: ROW\}": [{"row": "post", "vs": "pre"}],
        r"contrasts = .*: expected a list": {"row": "post", "against": "pre"},
    }
    for message, contrasts in bad.items():
        path.write_text(yaml.safe_dump({**data, "contrasts": contrasts}, sort_keys=False))
        with pytest.raises(ValueError, match=rf"test\.yaml: {message}"):
            load_sweep(path)


def test_errors_in_a_row_name_its_place_and_id(corpus, tmp_path):
    """Found by CI's fuzzing: an override key '' was reported as `row nopos`, without rows[1]."""
    path = write_sweep(tmp_path, corpus, {"base": {}, "nopos": {"": 1}})
    with pytest.raises(ValueError, match=r"test\.yaml: rows\[1\] \(nopos\): unknown key ''"):
        load_sweep(path)
    path = write_sweep(tmp_path, corpus, {"base": {}, "odd": {"d_model": 520}})
    with pytest.raises(ValueError, match=r"rows\[1\] \(odd\) at scale test: model.d_model = 520 is not divisible"):
        expand(load_sweep(path), scales_for(path)["test"])


# --------------------------------------------------------------------------------------------------
# The launcher, with a stand-in for training
# --------------------------------------------------------------------------------------------------


def test_dry_run_trains_nothing_and_lists_every_run(corpus, tmp_path, capsys, monkeypatch):
    path = write_sweep(
        tmp_path,
        corpus,
        {"base": {}, "nopos": {"positional": "none"}, "A1": {"h": 1, "d_k": 512, "d_v": 512}},
        seeds=(0, 1),
    )
    from ablations.launch import cost

    monkeypatch.setattr(cost, "RESULTS", tmp_path / "results")  # no GPU check record: the rate is the assumption
    out = tmp_path / "runs"
    specs = plan.plan(path, "test", out=out)
    done, busy, stale = specs[0].dir, specs[1].dir, specs[2].dir
    update_metrics(done, status="done")
    update_metrics(busy, status="running")
    update_metrics(stale, status="running")
    with RunLock(busy) as lock:
        assert lock.acquire()
        assert cli.main(sweep_args(path, out, "--dry-run")) == 0
        assert folder_status(busy) == "running" and folder_status(stale) == "stale"
    text = capsys.readouterr().out
    for spec in specs:
        assert spec.spec.run_id in text
    assert "done" in text and "running" in text and "stale" in text and "pending" in text
    estimate = dry_run.estimates(specs[0], {})
    config = specs[0].spec.config
    assert estimate.params == parameter_count(config.model, config.data.vocab_size)
    assert estimate.tokens == 5 * 512
    assert estimate.flops == training_flops(config.model, config.data.vocab_size, estimate.tokens)
    assert f"{estimate.flops:.2e}" in text
    assert "GPU-hours" in text and "ASSUMED, not measured" in text
    assert sorted(p.name for p in (out / "test" / "test").iterdir()) == sorted(s.dir.name for s in specs[:3])
    assert not any((s.dir / "config.yaml").exists() for s in specs)  # nothing trained, nothing written


def test_a_cpu_dry_run_says_its_gpu_hours_and_gpu_wall_time_are_for_gpus(corpus, tmp_path, capsys):
    """Planning GPU runs from a laptop keeps the GPU figures, marked as not this machine's: its wall time is the
    measured-cost guess (a GPU wall time of 0.002 h once read as the two CPU workers')."""
    runs = plan.plan(write_sweep(tmp_path, corpus, {"base": {}}), "test", out=tmp_path / "runs")
    for gpus, marked in (([], True), (["0"], False)):
        dry_run.print_plan(runs, tmp_path / "runs", processes.make_slots(2, cores=[0, 1], gpus=gpus))
        text = " ".join(capsys.readouterr().out.split())
        assert "on 2 worker(s) of 1 GPU(s) ≈" in text
        assert ("On GPUs, not these CPU workers: GPU-hours ≈" in text) is marked


def test_the_json_dry_run_plans_the_same_step_on_any_device_count(corpus, tmp_path, capsys, monkeypatch):
    """A step is data.batch_tokens over all devices: the planned tokens and FLOPs of a run do not grow with the
    devices; each device's share and the GPU-hours at a measured rate (a GPU check record) are printed per run."""
    from ablations.launch import cost

    path = write_sweep(tmp_path, corpus, {"base": {}, "big": {"d_model": 1024, "d_ff": 4096, "h": 16}})
    out = tmp_path / "runs"
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(cost, "RESULTS", results)
    plans = {}
    for devices, nodes in ((1, 1), (2, 1), (2, 2)):
        argv = sweep_args(path, out, "--dry-run", "--json", "--gpus-per-run", str(devices), "--nodes", str(nodes))
        assert cli.main(argv) == 0
        plans[devices * nodes] = json.loads(capsys.readouterr().out)
    for world, document in plans.items():
        base = document["runs"][0]
        assert (base["devices"], base["device_batch_tokens"], base["tokens_per_step"]) == (world, 512 // world, 512)
        assert base["train_tokens"] == 5 * 512 and base["flops"] == plans[1]["runs"][0]["flops"]
        assert document["basis"] == [cost.ASSUMED.basis]
        assert base["gpu_hours"] == pytest.approx(base["flops"] / cost.ASSUMED.flops_per_s / 3600)
        assert base["wall_hours"] == pytest.approx(base["gpu_hours"] / world)
    # With a GPU check record, the rate of the nearest measured model and per-device batch.
    measured = {
        "device": "cuda",
        "quick": False,
        "machine": {"gpu": "NVIDIA H200"},
        "training": [
            {"name": "base", "params": 60e6, "device_tokens": 25000, "planned_flops_per_s": 4e14},
            {"name": "base-8gpu-share", "params": 60e6, "device_tokens": 128, "planned_flops_per_s": 1e14},
        ],
    }
    (results / cost.GPU_CHECK_FILE).write_text(json.dumps(measured))
    assert cli.main(sweep_args(path, out, "--dry-run", "--json", "--gpus-per-run", "4")) == 0
    document = json.loads(capsys.readouterr().out)
    base = document["runs"][0]
    assert base["basis"].startswith("measured:") and "base-8gpu-share" in base["basis"]
    assert base["gpu_hours"] == pytest.approx(base["flops"] / 1e14 / 3600)
    assert document["total"]["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] for r in document["runs"]))
    # Below the smallest measured batch a step is no faster: 64 tokens per device cost the 128-token step's time.
    assert cli.main(sweep_args(path, out, "--dry-run", "--json", "--gpus-per-run", "8")) == 0
    base = json.loads(capsys.readouterr().out)["runs"][0]
    assert base["device_batch_tokens"] == 64 and "priced at that measured step time" in base["basis"]
    assert base["gpu_hours"] == pytest.approx(base["flops"] / (1e14 * 64 / 128) / 3600)
    # A device count that leaves a device less than max_tokens (64) is refused, naming the field.
    assert cli.main(sweep_args(path, out, "--dry-run", "--gpus-per-run", "16")) == 2
    assert "data.batch_tokens" in capsys.readouterr().err
    # Several nodes need SLURM to train; the local launcher refuses them.
    assert cli.main(sweep_args(path, out, "--nodes", "2")) == 2
    assert "--launcher slurm" in capsys.readouterr().err


def test_runs_two_at_a_time_then_skips_finished_runs(corpus, tmp_path, fake_train, capsys):
    path = write_sweep(tmp_path, corpus, {"base": {}, "nopos": {"positional": "none"}}, seeds=(0, 1))
    out = tmp_path / "runs"
    assert cli.main(sweep_args(path, out, "--workers", "2")) == 0
    runs = folders(out)
    assert sorted(runs) == ["base-s0", "base-s1", "nopos-s0", "nopos-s1"]
    children = {}
    for name, run_dir in runs.items():
        assert read_metrics(run_dir)["status"] == "done"
        config, meta = read_config(run_dir / "config.yaml")
        assert meta["row"] == name.split("-s")[0] and config.run_id() == run_dir.name.rsplit("-", 1)[1]
        assert "fake training" in (run_dir / "train.log").read_text()
        children[name] = json.loads((run_dir / "child.json").read_text())
    cores = processes.available_cores()
    for child in children.values():
        env = child["env"]
        assert (
            env["OMP_NUM_THREADS"]
            == env["MKL_NUM_THREADS"]
            == str(min(max(1, len(cores) // 2), int(os.environ.get("OMP_NUM_THREADS", "99"))))
        )
        assert env["WANDB_MODE"] == os.environ["WANDB_MODE"] and env["CUDA_VISIBLE_DEVICES"] is None
        assert child["affinity"] == [int(c) for c in env["ABLATE_CPUS"].split(",")]
    # never more than two at once
    events = sorted([(c["start"], 1) for c in children.values()] + [(c["end"], -1) for c in children.values()])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 2
    lines = capsys.readouterr().out.splitlines()
    assert sum("started" in line for line in lines) == 4 and "4 done" in lines[-1]

    logs = {name: (d / "train.log").read_text() for name, d in runs.items()}
    assert cli.main(sweep_args(path, out, "--workers", "2")) == 0  # again: nothing to do
    assert {name: (d / "train.log").read_text() for name, d in runs.items()} == logs
    text = capsys.readouterr().out
    assert "started" not in text and "0 launched" in text and "skipping 4 finished" in text


def test_a_run_done_in_another_sweep_is_reused_not_retrained(corpus, tmp_path, fake_train, capsys):
    out = tmp_path / "runs"
    first = write_sweep(tmp_path, corpus, {"base": {}})
    assert cli.main(sweep_args(first, out)) == 0
    (done_dir,) = folders(out).values()

    def another_sweep(name: str, rows: dict) -> Path:  # beside the first: same scales, same corpus cache
        document = yaml.safe_load(first.read_text())
        document.update(name=name, rows=[{"id": row, "group": row, "overrides": o} for row, o in rows.items()])
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        return tmp_path / f"{name}.yaml"

    second = another_sweep("other", {"same": {}, "nopos": {"positional": "none"}})
    assert cli.main(["sweep", str(second), "--scale", "test", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    other = {p.name.rsplit("-", 1)[0]: p for p in (out / "other" / "test").iterdir()}
    same, nopos = other["same-s0"], other["nopos-s0"]
    assert same.name.endswith(done_dir.name.rsplit("-", 1)[1]) and f"reuses the finished run {done_dir}" in text
    record = read_metrics(same)
    assert record["reused_from"] == str(done_dir) and record["status"] == "done"
    assert {k: v for k, v in record.items() if k != "reused_from"} == read_metrics(done_dir)
    assert read_config(same / "config.yaml")[1]["row"] == "same" and not (same / "train.log").exists()  # never trained
    assert "fake training" in (nopos / "train.log").read_text() and "reused_from" not in read_metrics(nopos)
    third = another_sweep("third", {"again": {}})
    assert cli.main(["sweep", str(third), "--scale", "test", "--out", str(out), "--no-reuse"]) == 0
    (again,) = (out / "third" / "test").iterdir()
    assert "fake training" in (again / "train.log").read_text() and "reused_from" not in read_metrics(again)
    fourth = another_sweep("fourth", {"x": {}})  # its first twin (sorted) is other's reused record
    assert cli.main(["sweep", str(fourth), "--scale", "test", "--out", str(out)]) == 0
    (x,) = (out / "fourth" / "test").iterdir()
    assert read_metrics(x)["reused_from"] == str(done_dir)  # a chain names the run that trained


def test_failures_are_recorded_and_the_others_finish(corpus, tmp_path, fake_train, capsys):
    path = write_sweep(tmp_path, corpus, {"crash": {}, "base": {}, "killed": {}, "nopos": {"positional": "none"}})
    out = tmp_path / "runs"
    assert cli.main(sweep_args(path, out, "--workers", "2")) == 1
    runs = folders(out)
    assert read_metrics(runs["base-s0"])["status"] == read_metrics(runs["nopos-s0"])["status"] == "done"
    crash, killed = read_metrics(runs["crash-s0"]), read_metrics(runs["killed-s0"])
    assert crash["status"] == "failed" and crash["reason"] == "exit code 3"
    assert any("the fake run broke" in line for line in crash["log_tail"]) and len(crash["log_tail"]) <= 40
    assert killed["status"] == "failed" and killed["reason"] == "killed by signal SIGKILL"
    assert any("fake training killed" in line for line in killed["log_tail"])
    report = capsys.readouterr().out
    assert "failed: crash-s0" in report and "failed: killed-s0" in report

    # Failed runs are not rerun unless asked; then they get a fresh attempt (the stale reason is cleared).
    assert cli.main(sweep_args(path, out, "--rows", "crash,base")) == 1
    assert "started" not in capsys.readouterr().out
    before = (runs["crash-s0"] / "train.log").read_text().splitlines().count("fake training crash")
    assert cli.main(sweep_args(path, out, "--rows", "crash,base", "--retry-failed")) == 1
    assert (runs["crash-s0"] / "train.log").read_text().splitlines().count("fake training crash") == before + 1
    assert read_metrics(runs["crash-s0"])["reason"] == "exit code 3"
    assert read_metrics(runs["base-s0"])["status"] == "done"


def test_a_run_locked_elsewhere_is_skipped(corpus, tmp_path, fake_train, capsys):
    path = write_sweep(tmp_path, corpus, {"base": {}, "nopos": {"positional": "none"}})
    out = tmp_path / "runs"
    busy = plan.plan(path, "test", rows=["base"], out=out)[0].dir
    busy.mkdir(parents=True)
    with open(busy / ".lock", "w") as handle:  # another sweep (or `ablate train`) holds this run
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write("the other sweep\n")
        handle.flush()
        assert cli.main(sweep_args(path, out, "--workers", "2")) == 1  # not every run is done
        assert not (busy / "train.log").exists() and read_metrics(busy) is None
        assert read_metrics(folders(out)["nopos-s0"])["status"] == "done"
        assert "running elsewhere" in capsys.readouterr().out
        # `ablate train` on the same folder refuses too
        assert (
            cli.main(["train", "--config", str(folders(out)["nopos-s0"] / "config.yaml"), "--run-dir", str(busy)]) == 2
        )
        assert "being trained elsewhere" in capsys.readouterr().err
    assert cli.main(sweep_args(path, out)) == 0  # released: now it runs
    assert read_metrics(busy)["status"] == "done"


def test_sigterm_stops_the_children_and_they_resume(corpus, tmp_path, fake_train, capsys, monkeypatch):
    path = write_sweep(tmp_path, corpus, {"stop": {}, "base": {}})
    out = tmp_path / "runs"
    started = time.time()
    code = local.run_sweep(path, "test", workers=2, out=out, grace=10)
    assert code == 128 + signal.SIGTERM and time.time() - started < 10  # the child died at once on SIGTERM
    run = folders(out)["stop-s0"]
    pid = json.loads((run / "child.json").read_text())["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert read_metrics(run)["status"] == "running" and folder_status(run) == "stale"
    assert "stopped" in capsys.readouterr().out
    monkeypatch.setenv("FAKE_NO_STOP", "1")
    assert local.run_sweep(path, "test", workers=2, out=out) == 0  # the stale run resumes
    assert "resumed" in capsys.readouterr().out and read_metrics(run)["status"] == "done"


def test_slots_share_cores_and_gpus(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    slots = processes.make_slots(2, cores=range(8), gpus=["0", "1", "2"])
    assert [(s.cores, s.threads, s.gpu) for s in slots] == [((0, 1, 2, 3), 4, "0"), ((4, 5, 6, 7), 4, "1")]
    slots = processes.make_slots(3, cores=[0, 1], gpus=[])
    assert [(s.cores, s.threads, s.gpu) for s in slots] == [((0,), 1, None), ((1,), 1, None), ((0,), 1, None)]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert processes.make_slots(1, cores=range(8), gpus=["3"])[0].threads == 2
    env = processes.child_env(processes.make_slots(1, cores=range(8), gpus=["3"])[0], {"ABLATE_RUN_LOCKED": "/r"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["ABLATE_CPUS"] == "0,1,2,3,4,5,6,7"
    assert env["ABLATE_RUN_LOCKED"] == "/r"


def test_the_live_view_renders(corpus, tmp_path):
    import io

    from rich.console import Console

    path = write_sweep(tmp_path, corpus, {"base": {}})
    runs = plan.plan(path, "test", out=tmp_path / "runs")
    launcher = local.Launcher(runs, processes.make_slots(1, cores=[0], gpus=[]))
    runs[0].state, runs[0].started = "running", time.time() - 65
    # One finished run of the same cost took 185 s: this one, 65 s in, has 120 s left.
    launcher.finished_flops, launcher.finished_seconds = launcher.flops[id(runs[0])], 185.0
    buffer = io.StringIO()
    view = local.View(launcher, live=True, console=Console(file=buffer, force_terminal=True, width=120))
    with view:
        view.event(runs[0], "started")
    text = buffer.getvalue()
    assert "base-s0" in text and "1 running" in text and "ETA 2m00s" in text and "1m05s" in text


def test_costliest_runs_start_first_unless_asked_for_the_cheapest_and_the_eta_weighs_runs_by_cost(corpus, tmp_path):
    path = write_sweep(tmp_path, corpus, {"base": {}, "wide": {"d_model": 1024, "d_ff": 4096}, "deep": {"N": 8}})
    runs = plan.plan(path, "test", out=tmp_path / "runs")
    launcher = local.Launcher(runs, processes.make_slots(2, cores=[0, 1], gpus=[]))
    order = [run.spec.row for run in launcher.ordered(runs)]
    costs = [launcher.flops[id(run)] for run in launcher.ordered(runs)]
    assert costs == sorted(costs, reverse=True) and order[-1] == "base"
    cheapest_first = local.Launcher(runs, processes.make_slots(2, cores=[0, 1], gpus=[]), order="cheapest")
    assert [run.spec.row for run in cheapest_first.ordered(runs)] == order[::-1]  # --order cheapest
    with pytest.raises(ValueError, match="--order 'fast': expected longest or cheapest"):
        local.Launcher(runs, processes.make_slots(1, cores=[0], gpus=[]), order="fast")
    cheapest, costliest = min(costs), max(costs)
    launcher.finished_flops, launcher.finished_seconds = cheapest, 10.0  # 10 s per `cheapest` FLOPs
    assert launcher.eta() == pytest.approx(10.0 * sum(costs) / cheapest / 2)
    assert costliest > 1.5 * cheapest


def test_cli_rejects_bad_selections(corpus, tmp_path, capsys):
    path = write_sweep(tmp_path, corpus, {"base": {}})
    assert cli.main(sweep_args(path, tmp_path, "--rows", "nope", "--dry-run")) == 2
    assert "no row 'nope'" in capsys.readouterr().err
    assert cli.main(sweep_args(path, tmp_path, "--seed-list", "0,x", "--dry-run")) == 2
    assert cli.main(sweep_args(path, tmp_path, "--seeds", "0", "--dry-run")) == 2
    assert cli.main(["sweep", str(path), "--scale", "huge", "--dry-run"]) == 2
    assert "unknown; scales: test" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(sweep_args(path, tmp_path, "--seeds", "2", "--seed-list", "0"))


# --------------------------------------------------------------------------------------------------
# Failures inside training, and real runs
# --------------------------------------------------------------------------------------------------


def test_train_run_records_an_exception(corpus, tmp_path):
    from ablations.train import train_run

    path = write_sweep(
        tmp_path, corpus, {"broken": {"data.dataset": "dir", "data.path": str(tmp_path / "nonexistent")}}
    )
    (spec,) = expand(load_sweep(path), scales_for(path)["test"])
    with pytest.raises(ValueError, match="does not exist"):
        train_run(spec.config, tmp_path / "run", {"row": "broken"}, progress=False)
    record = read_metrics(tmp_path / "run")
    assert (
        record["status"] == "failed"
        and record["reason"].startswith("CorpusError: ")
        and "does not exist" in record["reason"]
    )
    assert record["log_tail"][0].startswith("Traceback") or any("Traceback" in line for line in record["log_tail"])
    assert "CorpusError" in record["log_tail"][-1] and record["attempts"] == 1


@pytest.mark.slow
def test_a_real_sweep_finishes_records_a_crash_and_skips_finished_runs(corpus, tmp_path, capsys):
    """Real `ablate train` processes: two rows train to `done` with 2 workers while a third crashes in training."""
    path = write_sweep(
        tmp_path,
        corpus,
        {"broken": {"data.dataset": "dir", "data.path": "/nonexistent"}, "base": {}, "nopos": {"positional": "none"}},
    )
    out = tmp_path / "runs"
    assert cli.main(sweep_args(path, out, "--workers", "2")) == 1  # not all done: exit code 1
    runs = folders(out)
    assert sorted(runs) == ["base-s0", "broken-s0", "nopos-s0"]
    for name in ("base-s0", "nopos-s0"):
        record = read_metrics(runs[name])
        assert record["status"] == "done" and record["steps"] == 5 and record["attempts"] == 1, record
        assert (runs[name] / "checkpoints" / "last.ckpt").exists() and (runs[name] / "test.hyp").exists()
        assert '"status": "done"' in (runs[name] / "train.log").read_text()
    broken = read_metrics(runs["broken-s0"])
    assert broken["status"] == "failed" and broken["exit"] == "exit code 2"
    assert broken["reason"].startswith("CorpusError: data.path = '/nonexistent'") and broken["reason"].endswith(
        "(exit code 2)"
    )
    assert any("CorpusError" in line for line in broken["log_tail"])
    assert "does not exist" in (runs["broken-s0"] / "train.log").read_text()
    assert "failed: broken-s0" in capsys.readouterr().out

    # The two good rows as a sweep of their own: all done, so nothing is launched and the exit code is 0.
    assert cli.main(sweep_args(path, out, "--rows", "base,nopos", "--workers", "2")) == 0
    assert "0 launched" in capsys.readouterr().out
    assert all(read_metrics(runs[name])["attempts"] == 1 for name in ("base-s0", "nopos-s0"))


def test_run_steps_are_run_units_at_every_scale_and_train_steps_paper_units(tmp_path, corpus):
    path = write_sweep(tmp_path, corpus, {"base": {}, "short": {"run_steps": 7}, "paper": {"train_steps": 200000}})
    sweep = load_sweep(path)
    specs = {s.row: s.config.train.max_steps for s in expand(sweep, scales_for(path)["test"])}
    assert specs == {"base": 5, "short": 7, "paper": 10}  # steps_scale 0.00005: 100000 -> 5, 200000 -> 10
    with pytest.raises(ValueError, match="run_steps = 0: expected a positive integer"):
        load_sweep(write_sweep(tmp_path / "bad", corpus, {"x": {"run_steps": 0}}))
    with pytest.raises(ValueError, match="train_steps .* or run_steps .*, not both"):
        load_sweep(write_sweep(tmp_path / "both", corpus, {"x": {"run_steps": 3, "train_steps": 10}}))
