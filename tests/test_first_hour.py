"""The first-hour fixes of issue 17: `--workers auto` and the dry run's expected wall time, final metrics at the
trained step, a done run left alone, files with the user's umask, a bounded `ablate sync`, masked storage URLs,
an empty corpus named, `params --scale` with the scale's vocabulary, `--scales FILE`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from test_sweep import write_sweep

from ablations.launch import dry_run, local, processes
from ablations.launch.plan import plan
from ablations.records import write_config

os.environ.setdefault("WANDB_MODE", "disabled")


def test_workers_auto_is_one_run_per_core_on_cpu_and_several_per_gpu_for_small_models(monkeypatch):
    monkeypatch.setattr(processes, "available_cores", lambda: [0, 1, 2])
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    assert processes.auto_workers(829_000) == 3
    assert [s.threads for s in processes.make_slots(3, cores=[0, 1, 2], gpus=[])] == [1, 1, 1]
    monkeypatch.setattr(processes, "available_cores", lambda: list(range(16)))
    monkeypatch.setattr(processes, "visible_gpus", lambda: ["0"])
    assert processes.auto_workers(829_000) == 4  # under 10M parameters: 4 share the GPU
    assert processes.auto_workers(60_000_000) == 2
    assert processes.auto_workers(213_000_000) == 1
    assert processes.auto_workers(None) == 1
    assert processes.parse_workers("auto") == "auto" and processes.parse_workers("3") == 3
    with pytest.raises(ValueError, match="positive integer or auto"):
        processes.parse_workers("0")


def test_a_sweep_without_workers_uses_every_core_on_cpu_and_every_gpu_with_gpus(monkeypatch):
    monkeypatch.setattr(processes, "available_cores", lambda: list(range(16)))
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    assert processes.default_workers() == 16  # one single-thread run per core, as --workers auto
    assert [len(slot.cores) for slot in processes.make_slots(processes.default_workers())] == [1] * 16
    monkeypatch.setattr(processes, "visible_gpus", lambda: ["0", "1", "2", "3", "4", "5", "6", "7"])
    assert processes.default_workers() == 8 and processes.default_workers(gpus_per_run=8) == 1


def test_the_dry_run_prints_the_expected_wall_time_from_measured_runs(tmp_path, capsys, monkeypatch):
    path = write_sweep(tmp_path / "sweep", tmp_path / "corpus", {"base": {}, "N2": {"model.N": 2}})
    out = tmp_path / "runs"
    monkeypatch.setattr(processes, "available_cores", lambda: [0, 1])
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    empty = tmp_path / "no-records"
    monkeypatch.setattr(dry_run, "RECORDS", empty)
    monkeypatch.setattr(dry_run.measured_costs, "__defaults__", (empty,))
    assert local.run_sweep(path, "test", workers="auto", out=out, dry_run=True) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "2 worker(s), 1 thread(s)" in text and "no measured cost" in text
    runs = plan(path, "test", out=out)
    done = runs[0]
    done.dir.mkdir(parents=True)
    write_config(done.dir, done.spec.config, {})
    steps = done.spec.config.train.max_steps
    (done.dir / "metrics.json").write_text(
        json.dumps({"status": "done", "wall_seconds": 100.0, "steps": steps, "run_id": done.spec.run_id})
    )
    costs = dry_run.measured_costs(out, empty)
    assert dry_run.run_cost(done, costs) == 100.0
    assert dry_run.run_cost(runs[1], costs) is None
    # the same row under another step count: its measured seconds scaled by the steps
    twin = plan(path, "test", out=out, sets={"train.max_steps": 2 * steps})[0]
    assert dry_run.run_cost(twin, costs) == pytest.approx(200.0)
    # a twin of the run's own length prices it as measured, whichever record was read last: a row's 600-step timing
    # probe and its full runs each price their own length (the probe scaled up would count its fixed costs 5x)
    probe = plan(path, "test", out=out, sets={"train.max_steps": steps // 2, "model.P_drop": 0.2})[0]
    probe.dir.mkdir(parents=True)
    write_config(probe.dir, probe.spec.config, {})
    (probe.dir / "metrics.json").write_text(
        json.dumps({"status": "done", "wall_seconds": 80.0, "steps": steps // 2, "run_id": probe.spec.run_id})
    )
    costs = dry_run.measured_costs(out, empty)
    assert dry_run.run_cost(plan(path, "test", out=out, sets={"model.P_drop": 0.2})[0], costs) == 100.0
    assert dry_run.run_cost(plan(path, "test", out=out, sets={"train.max_steps": steps // 2})[0], costs) == 80.0
    assert dry_run.run_cost(twin, costs) == pytest.approx(200.0)  # scaled from the longest twin, not the probe
    shutil.rmtree(probe.dir)
    costs = dry_run.measured_costs(out, empty)
    # ...but not under another precision: emulated bf16 costs ~10x fp32 on a CPU without it, so that twin prices nothing
    other = "bf16-mixed" if done.spec.config.train.precision != "bf16-mixed" else "32-true"
    assert dry_run.run_cost(plan(path, "test", out=out, sets={"train.precision": other})[0], costs) is None
    assert dry_run.expected_wall([100.0, 60.0, 50.0], 2) == 110.0
    assert dry_run.expected_wall([100.0, 60.0, 50.0], 2, order="cheapest") == 150.0  # 50 then 100 on one worker
    assert (
        local.run_sweep(path, "test", workers="auto", out=out, dry_run=True, sets={"train.max_steps": 2 * steps}) == 0
    )
    text = " ".join(capsys.readouterr().out.split())
    assert "expected wall time ≈ 3m20s on 2 worker(s)" in text and "no measured cost for 1 more run(s)" in text
    # A resumed run: wall_seconds are its last attempt's (converged D1-s2: 878 s after a restart at step 1,800),
    # train_seconds carry over the resume (1,945 s); the cost was priced at the last attempt alone.
    (done.dir / "metrics.json").write_text(
        json.dumps(
            {
                "status": "done",
                "attempts": 2,
                "wall_seconds": 878.0,
                "train_seconds": 1945.0,
                "steps": steps,
                "run_id": done.spec.run_id,
            }
        )
    )
    assert dry_run.run_cost(done, dry_run.measured_costs(out, empty)) == 1945.0
    # the unmeasured N2 guessed from its FLOPs at the measured twin's seconds per FLOP (N 2 against the sweep's 1)
    rows = {
        row["run_id"]: row
        for row in dry_run.plan_rows(plan(path, "test", out=out, sets={"train.max_steps": 2 * steps}), 1, [])
    }
    twin_n2 = plan(path, "test", out=out, sets={"train.max_steps": 2 * steps})[1]
    guess = 200.0 * rows[twin_n2.spec.run_id]["flops"] / rows[twin.spec.run_id]["flops"]
    assert 200.0 < guess < 600.0
    assert "with the 1 unmeasured run(s) guessed from their FLOPs" in text
    assert "by the median seconds per FLOP of 1 measured run(s)" in text  # one row cannot tell the fit's terms apart
    wall = dry_run.duration(dry_run.expected_wall([200.0, guess], 2))
    assert f"≈ {wall} on 2 worker(s), {dry_run.duration(200.0 + guess)} of worker time" in text
    # a selection of only unmeasured rows is still priced, by the fit over the whole sweep's measured runs
    assert local.run_sweep(path, "test", rows=["N2"], workers="auto", out=out, dry_run=True) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "no measured cost (none of the 1 runs" in text
    assert "with the 1 unmeasured run(s) guessed from their FLOPs" in text and "of 1 measured run(s)" in text


def test_the_dry_run_prices_runs_only_from_runs_measured_on_the_same_kind_of_worker(tmp_path, capsys, monkeypatch):
    path = write_sweep(tmp_path / "sweep", tmp_path / "corpus", {"base": {}, "N2": {"model.N": 2}})
    out, empty = tmp_path / "runs", tmp_path / "no-records"
    monkeypatch.setattr(processes, "available_cores", lambda: [0, 1])
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    monkeypatch.setattr(dry_run.measured_costs, "__defaults__", (empty,))
    done = plan(path, "test", out=out)[0]
    done.dir.mkdir(parents=True)
    write_config(done.dir, done.spec.config, {})
    steps = done.spec.config.train.max_steps
    record = {"status": "done", "wall_seconds": 100.0, "steps": steps, "run_id": done.spec.run_id}
    (done.dir / "metrics.json").write_text(json.dumps({**record, "device": "cpu", "torch_threads": 2}))
    twin = plan(path, "test", out=out, sets={"train.max_steps": 2 * steps})[0]
    costs = dry_run.measured_costs(out, empty)
    two_threads, one_thread = ("cpu", 2), ("cpu", 1)
    assert dry_run.run_cost(twin, costs, two_threads) == pytest.approx(200.0)
    # a run on two threads says nothing of one on a single thread, nor of one on a GPU
    assert dry_run.run_cost(twin, costs, one_thread) is None
    assert dry_run.run_cost(twin, costs, ("NVIDIA H200", None)) is None
    assert dry_run.wall_guess([twin], costs, lambda run: 1e12, one_thread) is None
    assert dry_run.wall_guess([twin], costs, lambda run: 1e12, two_threads) is not None
    assert dry_run.planned_worker(processes.make_slots(2)) == one_thread
    assert dry_run.planned_worker(processes.make_slots(1)) == two_threads
    assert local.run_sweep(path, "test", workers=2, out=out, dry_run=True, sets={"train.max_steps": 2 * steps}) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "no measured cost (none of the 2 runs to train has finished before on a worker like these: cpu, 1 thread)"
        in text
    )
    assert local.run_sweep(path, "test", workers=1, out=out, dry_run=True, sets={"train.max_steps": 2 * steps}) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "expected wall time ≈ 3m20s on 1 worker(s), from the measured seconds of finished runs on workers like these (cpu, 2 threads;"
        in text
    )
    # a run resumed on another kind of worker measured neither's cost
    attempts = [{"device": "cpu", "torch_threads": 2}, {"device": "cpu", "torch_threads": 1}]
    resumed = {**record, "device": "cpu", "torch_threads": 1, "attempt_workers": attempts}
    (done.dir / "metrics.json").write_text(json.dumps(resumed))
    costs = dry_run.measured_costs(out, empty)
    assert dry_run.run_cost(twin, costs, one_thread) is None and dry_run.run_cost(twin, costs, two_threads) is None
    # a record older than the fields prices any worker's runs
    (done.dir / "metrics.json").write_text(json.dumps(record))
    assert dry_run.run_cost(twin, dry_run.measured_costs(out, empty), one_thread) == pytest.approx(200.0)
    # a published record's folder is `<sweep>_<scale>`, which does not split where both hold "_"
    # (table3_converged_4x): its meta names the sweep, scale and row
    spec = done.spec
    published = tmp_path / "records" / f"{spec.sweep}_{spec.scale}_x" / f"{spec.row}-s0-{spec.run_id}"
    published.mkdir(parents=True)
    write_config(published, spec.config, {"sweep": spec.sweep, "scale": spec.scale, "row": spec.row})
    (published / "metrics.json").write_text(json.dumps({**record, "run_id": "elsewhere"}))
    assert dry_run.run_cost(twin, dry_run.measured_costs(tmp_path / "nothing", tmp_path / "records")) == 200.0


def test_the_wall_guess_fits_a_per_flop_and_a_per_layer_step_cost_when_the_runs_tell_them_apart():
    from ablations.launch.cost import fit_wall_guess

    assert fit_wall_guess([]) is None
    # made by 5 s per TFLOP + 80 ms per layer-step: a narrow deep row, base, a wide one and a shallow one
    truth = [(2.2e13, 18_000), (5.5e13, 18_000), (1.5e14, 18_000), (2.2e13, 6_000)]
    guess = fit_wall_guess([(flops, layers, 5e-12 * flops + 0.08 * layers) for flops, layers in truth])
    assert guess.seconds_per_flop == pytest.approx(5e-12) and guess.seconds_per_layer_step == pytest.approx(0.08)
    assert guess.seconds(6.4e14, 54_000) == pytest.approx(5e-12 * 6.4e14 + 0.08 * 54_000)
    assert "fit over 4 measured run(s)" in guess.basis and "at most 0%" in guess.basis
    # one row, or rows whose FLOPs are proportional to their layer-steps, cannot tell the terms apart: the median
    # seconds per FLOP alone, as before the fit
    for measured in ([(5.5e13, 18_000, 2_000.0), (5.5e13, 18_000, 2_200.0)], [(1e13, 10, 100.0), (2e13, 20, 300.0)]):
        only_flops = fit_wall_guess(measured)
        assert only_flops.seconds_per_layer_step == 0.0 and "median" in only_flops.basis
    assert fit_wall_guess([(1e13, 10, 100.0), (2e13, 20, 300.0)]).seconds_per_flop == pytest.approx(1.5e-11)
    # a negative term (here: more FLOPs, less time) is no cost model either
    assert fit_wall_guess([(1e13, 10, 300.0), (3e13, 10, 100.0)]).seconds_per_layer_step == 0.0


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One test-sized run (5 steps), trained in this process: its folder, config, meta and record."""
    from ablations.train import train_run
    from lightning_modules.data.generated import write_corpus

    root = tmp_path_factory.mktemp("trained")
    corpus = write_corpus(root / "corpus", train_pairs=300, dev_pairs=12, test_pairs=12)
    path = write_sweep(root / "sweep", corpus, {"base": {}})
    (run,) = plan(path, "test", out=root / "runs")
    old = os.umask(0o022)
    try:
        metrics = train_run(run.spec.config, run.dir, run.meta, progress=False)
    finally:
        os.umask(old)
    return path, run, metrics


def test_final_metrics_are_logged_at_the_trained_step(trained):
    import csv

    _, run, metrics = trained
    assert metrics["status"] == "done" and metrics["steps"] == run.spec.config.train.max_steps
    (final,) = (run.dir / "logs").glob("attempt-*-final/metrics.csv")
    rows = list(csv.DictReader(final.open()))
    assert rows and {int(row["step"]) for row in rows} == {metrics["steps"]}
    assert any(row.get("test/loss") for row in rows) and any(row.get("dev/loss") for row in rows)


def test_rerunning_a_done_run_changes_nothing_unless_forced(trained, capsys):
    from ablations import cli

    _, run, metrics = trained
    before = (run.dir / "metrics.json").read_bytes()
    mtime = (run.dir / "metrics.json").stat().st_mtime_ns
    argv = ["train", "--config", str(run.dir / "config.yaml"), "--run-dir", str(run.dir)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert f"run {run.spec.run_id} is done" in captured.err and "--force re-evaluates" in captured.err
    assert json.loads(captured.out)["wall_seconds"] == metrics["wall_seconds"]
    assert (run.dir / "metrics.json").read_bytes() == before
    assert (run.dir / "metrics.json").stat().st_mtime_ns == mtime
    assert not list((run.dir / "logs").glob("attempt-2*"))  # no second evaluation
    assert cli.main(argv + ["--force"]) == 0
    assert "is done" not in capsys.readouterr().err
    assert list((run.dir / "logs").glob("attempt-2-final"))  # evaluated again


def test_files_are_written_with_the_users_umask(trained, tmp_path, monkeypatch):
    import stat

    from lightning_modules import atomic
    from lightning_modules.atomic import write_atomic

    _, run, _ = trained  # trained under umask 022
    for path in [run.dir / "metrics.json", run.dir / "config.yaml", *(run.dir / "checkpoints").glob("*.ckpt")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert list((run.dir / "checkpoints").glob("*.ckpt"))
    monkeypatch.setattr(atomic, "process_umask", lambda: 0o077)
    write_atomic(tmp_path / "private.txt", "x")
    assert stat.S_IMODE((tmp_path / "private.txt").stat().st_mode) == 0o600


def test_sync_bounds_its_whole_wait_on_a_server_that_never_answers(tmp_path, monkeypatch, capsys, silent_server):
    """A local socket (127.0.0.1) that accepts and never answers: the first run's upload uses what is left of the
    sync's --timeout, times out, and the other runs are not tried (they would wait as long each)."""
    import sys
    import time

    from ablations import sync

    port = silent_server
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    # `wandb sync` stood in for by a client that connects and waits for an answer that never comes
    client = f"import socket; socket.create_connection(('127.0.0.1', {port})).recv(1)"
    monkeypatch.setattr(sync, "wandb_command", lambda: [sys.executable, "-c", client])
    for i in range(3):
        offline = tmp_path / "s" / "t" / f"r{i}-s0-{i:04d}" / "wandb" / f"offline-run-20260101_000000-{i:04d}"
        offline.mkdir(parents=True)
        (offline / f"run-{i:04d}.wandb").write_bytes(b"")
    started = time.monotonic()
    assert sync.sync_runs(tmp_path, timeout=3) == 1
    assert time.monotonic() - started < 10  # not 3 x 3 s
    out = capsys.readouterr().out
    assert "timed out after" in out and "0 synced, 1 failed, 2 not tried (a run timed out)" in out
    with pytest.raises(ValueError, match="--timeout"):
        sync.sync_runs(tmp_path, timeout=0)


def test_storage_passwords_are_masked_wherever_they_are_shown(tmp_path, capsys):
    from ablations.search import command
    from ablations.search.study import mask_url, redact

    url = "postgresql://user:secret@host/db"
    assert mask_url(url) == "postgresql://user:***@host/db"
    assert mask_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert mask_url("journal:/tmp/s.journal") == "journal:/tmp/s.journal"
    assert "secret" not in redact(f"could not connect to {url} (password secret)", url)
    search = Path(__file__).resolve().parent.parent / "sweeps" / "search_tiny.yaml"
    # 127.0.0.1:9 (discard): nothing answers, the connection is refused at once
    with pytest.raises(ValueError) as raised:
        command.run_search(search, trials=1, storage="postgresql://user:secret@127.0.0.1:9/db", out=tmp_path)
    captured = capsys.readouterr()
    assert "secret" not in str(raised.value) and "secret" not in captured.out + captured.err
    assert "user:***@127.0.0.1:9/db" in str(raised.value)


@pytest.mark.parametrize("content", [b"", b"  \n\t\n\n"])
def test_an_empty_or_blank_corpus_file_is_named_before_bpe_training(tmp_path, content):
    from lightning_modules.data.corpus import CorpusError, check_corpus, resolve_splits
    from lightning_modules.data.tokenizer import load_or_train_tokenizer

    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.en").write_text("a house\n")
        (tmp_path / f"{split}.de").write_text("ein Haus\n")
    (tmp_path / "train.de").write_bytes(content)
    with pytest.raises(CorpusError, match=f"tokenizer training file {tmp_path / 'train.de'} (is empty|holds only)"):
        load_or_train_tokenizer([tmp_path / "train.en", tmp_path / "train.de"], 32, tmp_path / "cache")
    assert not (tmp_path / "cache" / "tokenizers").exists() or not any((tmp_path / "cache" / "tokenizers").iterdir())
    splits = resolve_splits(tmp_path, "en", "de")
    with pytest.raises(CorpusError, match=str(tmp_path / "train.de")):
        check_corpus(splits)


def test_params_at_a_scale_counts_with_the_scales_own_vocabulary():
    from ablations.params import parameter_table
    from ablations.sweep import expand, load_sweep, scale_named

    sweep_path = str(Path(__file__).resolve().parent.parent / "sweeps" / "table3.yaml")
    tiny = {row["row"]: row for row in parameter_table(sweep_path, scale="tiny")}
    (spec,) = expand(load_sweep(sweep_path), scale_named(sweep_path, "tiny"), seeds=[0], rows=["A1"])
    assert tiny["A1"]["vocab"] == spec.config.data.vocab_size != 37000
    record = json.loads(
        (Path(sweep_path).parent.parent / "results/records/table3_tiny/A1-s0-45a1d1dede0e/metrics.json").read_text()
    )
    assert tiny["A1"]["params"] == record["params"]  # what the tiny run itself counted
    assert parameter_table(sweep_path)[0]["vocab"] == 37000  # paper units: the paper's vocabulary
    assert parameter_table(sweep_path, vocab_size=37000, scale="tiny")[0]["vocab"] == 37000  # given explicitly


def test_scales_file_for_a_sweep_of_ones_own(tmp_path, capsys):
    import yaml

    from ablations import cli
    from ablations.sweep import SCALES_ENV, scales_path

    own = tmp_path / "own"
    path = write_sweep(tmp_path / "sweep", tmp_path / "corpus", {"base": {}})
    scales = tmp_path / "elsewhere" / "presets.yaml"
    scales.parent.mkdir()
    (path.parent / "scales.yaml").rename(scales)  # the sweep file alone, its presets elsewhere
    own.mkdir()
    path = path.rename(own / "mine.yaml")
    assert scales_path(path) == Path(cli.__file__).resolve().parent.parent / "sweeps" / "scales.yaml"  # the project's
    assert cli.main(["params", str(path), "--scale", "test", "--json"]) == 2  # not a project preset
    assert "unknown" in capsys.readouterr().err
    assert cli.main(["params", str(path), "--scale", "test", "--scales", str(scales), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["d_model"] == 32 and row["vocab"] == 96  # the test scale of presets.yaml
    assert SCALES_ENV not in os.environ  # restored after the command
    argv = ["sweep", str(path), "--scale", "test", "--scales", str(scales), "--dry-run", "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 0
    assert "1 pending" in capsys.readouterr().out
    assert (
        cli.main(
            ["train", "--sweep", str(path), "--row", "base", "--scale", "test", "--scales", str(scales)]
            + ["--print-config"]
        )
        == 0
    )
    assert yaml.safe_load(capsys.readouterr().out)["config"]["model"]["d_model"] == 32
    assert cli.main(["params", str(path), "--scale", "test", "--scales", str(tmp_path / "none.yaml")]) == 2
    assert f"--scales {tmp_path / 'none.yaml'}: no such file" in capsys.readouterr().err


def test_the_dry_runs_wall_time_leaves_out_runs_that_take_a_published_record(tmp_path, capsys, monkeypatch):
    sweep = Path(__file__).resolve().parent.parent / "sweeps" / "table3.yaml"
    monkeypatch.setattr(processes, "available_cores", lambda: [0, 1])
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    out = tmp_path / "runs"
    assert local.run_sweep(sweep, "tiny", rows=["A1"], workers="auto", out=out, dry_run=True) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "are published under results/records/" in text and "expected wall time: 0s (nothing to train" in text
    assert local.run_sweep(sweep, "tiny", rows=["A1"], workers="auto", out=out, dry_run=True, reuse=False) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "expected wall time ≈" in text  # the published A1 records' measured wall_seconds


def test_each_table_scores_by_its_own_protocol_at_paper_scale(capsys):
    """Table 3's rows are single models (the last checkpoint); Table 2's base and big also score the average of the
    paper's last 5 and 20 ten-minute checkpoints, all of them kept; --print-config says which figure is which."""
    from ablations import cli
    from ablations.sweep import expand, load_sweep, scale_named

    sweep_path = str(Path(__file__).resolve().parent.parent / "sweeps" / "table3.yaml")
    specs = {s.row: s.config for s in expand(load_sweep(sweep_path), scale_named(sweep_path, "paper"), seeds=[0])}
    assert {row for row, config in specs.items() if config.eval.average_last} == {"base", "big"}
    base, big = specs["base"], specs["big"]
    assert (base.eval.average_last, big.eval.average_last) == (5, 20)
    assert base.train.keep_checkpoints >= 5 and big.train.keep_checkpoints >= 20
    assert (base.train.checkpoint_every_steps, big.train.checkpoint_every_steps) == (1500, 600)  # 10 minutes each
    for row, average in (("A1", None), ("base", "last 5 checkpoints, 1,500 steps"), ("big", "last 20 checkpoints")):
        assert cli.main(["train", "--sweep", sweep_path, "--row", row, "--scale", "paper", "--print-config"]) == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        assert printed["scored"]["figures"].startswith("the last checkpoint, no averaging")
        assert (average is None) == ("averaged" not in printed["scored"])
        if average:
            assert average in printed["scored"]["averaged"] and "Table 2" in printed["scored"]["averaged"]


def test_runs_asking_for_bf16_on_a_cpu_that_only_emulates_it_are_warned_before_they_train(
    tmp_path, capsys, monkeypatch
):
    """Emulated bf16 trains many times slower than fp32 (README): the sweep says so, and how to train in fp32."""
    from lightning_modules import cpuinfo

    path = write_sweep(tmp_path / "sweep", tmp_path / "corpus", {"base": {}, "N2": {"model.N": 2}})
    monkeypatch.setattr(processes, "available_cores", lambda: [0])
    monkeypatch.setattr(processes, "visible_gpus", lambda: [])
    monkeypatch.setattr(cpuinfo, "native_bf16", lambda: False)

    def warned(**kwargs) -> str:
        assert local.run_sweep(path, "test", workers=1, out=tmp_path / "runs", dry_run=True, **kwargs) == 0
        return " ".join(capsys.readouterr().err.split())

    bf16 = {"train.precision": "bf16-mixed"}
    text = warned(sets=bf16)
    assert "2 run(s) train with train.precision=bf16-mixed on a CPU without native bf16" in text
    assert "--set train.precision=32-true" in text
    done = plan(path, "test", out=tmp_path / "runs", sets=bf16)[0]  # a finished run trains no more
    done.dir.mkdir(parents=True)
    (done.dir / "metrics.json").write_text(json.dumps({"status": "done", "run_id": done.spec.run_id}))
    assert "1 run(s) train with train.precision=bf16-mixed" in warned(sets=bf16)
    assert "bf16" not in warned()  # fp32, the default
    monkeypatch.setattr(cpuinfo, "native_bf16", lambda: True)
    assert "bf16" not in warned(sets=bf16)
    monkeypatch.setattr(cpuinfo, "native_bf16", lambda: False)
    monkeypatch.setattr(processes, "visible_gpus", lambda: ["0"])
    assert "bf16" not in warned(sets=bf16)  # the runs train on the GPU
    assert processes.emulated_bf16_warning(["bf16-mixed"], on_gpu=False) is not None
    assert processes.emulated_bf16_warning(["bf16-mixed"], on_gpu=True) is None


def test_native_bf16_reads_the_cpu_flags(monkeypatch):
    from lightning_modules import cpuinfo

    for flags, native in (("fpu avx2 fma", False), ("avx512f avx512_bf16", True), ("amx_tile amx_bf16", True)):
        monkeypatch.setattr(cpuinfo, "cpu_field", lambda name, flags=flags: flags if name == "flags" else None)
        assert cpuinfo.native_bf16() is native
