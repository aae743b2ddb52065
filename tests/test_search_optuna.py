"""`ablate search`: search files, the study shared by worker processes, pruning, failures and the best sweep.

Most tests replace the training process with a stand-in (a few lines of Python that write metrics.json the
way `ablate train` does, with a value derived from the trial's params, and, when asked, report intermediate
values to the study like the Lightning callback) so that a trial takes a fraction of a second. One slow test
trains for real; one runs against PostgreSQL when ABLATE_TEST_POSTGRES_URL is set (.ci/postgres.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from test_sweep import write_sweep as write_test_sweep

from ablations import cli
from ablations.records import read_metrics
from ablations.search import command
from ablations.search.spec import load_search
from ablations.search.study import PRUNED_EXIT, create_study, load_study, open_storage, storage_spec
from ablations.search.trial import OptunaPruning, TrialPruned, optuna_callbacks_from_env
from ablations.sweep import load_sweep, resolve, scales_for
from lightning_modules.data.generated import write_corpus

os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent

# A stand-in for `ablate train --config C --run-dir D`. dev_loss is a function of the params; FAKE_BEHAVIOUR:
# "report" reports loss + 1/step at steps 1..3 through the study and exits 77 when pruned; "crash" exits 3
# when eps_ls > 0.15. With FAKE_RENDEZVOUS=DIR a trial waits (up to a minute) until trials of two workers (its parent
# processes) have started, so that "both workers ran trials" does not depend on how fast the second one starts.
FAKE_TRAIN = r"""
import json, math, os, sys, time
from ablations.records import read_config, update_metrics
config, meta = read_config(sys.argv[1])
run_dir = sys.argv[2]
update_metrics(run_dir, status="running")
p, lr, eps = config.model.P_drop, config.train.lr_scale, config.train.eps_ls
loss = 1.0 + 10 * eps + (p - 0.1) ** 2 + abs(math.log(lr)) + config.train.warmup_steps / 1e4
behaviour = os.environ.get("FAKE_BEHAVIOUR", "")
rendezvous = os.environ.get("FAKE_RENDEZVOUS")
if rendezvous:
    os.makedirs(rendezvous, exist_ok=True)
    open(os.path.join(rendezvous, str(os.getppid())), "w").close()
    deadline = time.time() + 60
    while len(os.listdir(rendezvous)) < 2 and time.time() < deadline:
        time.sleep(0.05)
with open(os.path.join(run_dir, "child.json"), "w") as f:
    json.dump({k: os.environ.get(k) for k in ("ABLATE_OPTUNA_STORAGE", "ABLATE_OPTUNA_STUDY", "ABLATE_OPTUNA_TRIAL",
                                              "OMP_NUM_THREADS")}, f)
if "report" in behaviour:
    from ablations.search.trial import report_and_check, trial_from_env
    trial, monitor = trial_from_env()
    assert monitor == "dev/loss", monitor
    for step in (1, 2, 3):
        if report_and_check(trial, loss + 1.0 / step, step):
            print(f"pruned by optuna at step {step} (dev/loss = {loss + 1.0 / step})", flush=True)
            sys.exit(77)
if "crash" in behaviour and eps > 0.15:
    print("RuntimeError: the fake run broke", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("FAKE_SECONDS", "0.02")))
update_metrics(run_dir, status="done", dev_loss=loss, dev_ppl=math.exp(loss), dev_bleu=100.0 / loss, steps=3)
"""


def fake_command(config_path: Path, run_dir: Path) -> list[str]:
    """Module-level, so that spawned workers can unpickle it."""
    return [sys.executable, "-c", FAKE_TRAIN, str(config_path), str(run_dir)]


@pytest.fixture
def fake_train(monkeypatch):
    monkeypatch.setattr(command, "train_command", fake_command)
    monkeypatch.setenv(
        "PYTHONPATH",
        str(ROOT) + os.pathsep + str(Path(__file__).parent) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    monkeypatch.setattr("ablations.launch.processes.visible_gpus", lambda: [])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), train_pairs=300, dev_pairs=12, test_pairs=12)


def write_sweep(root: Path, corpus: Path) -> Path:
    """The test sweep of tests/test_sweep.py (d_model 32, 5 steps, seconds per run) with rows base and wide."""
    root.mkdir(parents=True, exist_ok=True)
    return write_test_sweep(root, corpus, {"base": {}, "wide": {"d_ff": 4096}})


PARAMS = {
    "train.warmup_steps": {"type": "int", "low": 2, "high": 40},
    "train.lr_scale": {"type": "float", "low": 0.25, "high": 2.0, "log": True},
    "P_drop": {"type": "float", "low": 0.0, "high": 0.3},
    "eps_ls": {"type": "categorical", "choices": [0.0, 0.1, 0.2]},
}


def write_search(root: Path, corpus: Path, name: str = "s", **fields) -> Path:
    sweep = write_sweep(root / "sweeps", corpus)
    document = {
        "name": name,
        "sweep": sweep.name,
        "row": "base",
        "scale": "test",
        "metric": "dev_loss",
        "budget": 4,
        "pruner": {"type": "median", "n_startup_trials": 1},
        "params": PARAMS,
    }
    document.update(fields)
    document = {k: v for k, v in document.items() if v is not None}
    path = root / "sweeps" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def trials_of(storage: str, name: str) -> list:
    return load_study(storage, name).get_trials(deepcopy=False)


def check_exact(trials: list, n: int) -> None:
    """Exactly n trials, numbered 0..n-1, all finished, each in a run folder of its own."""
    assert len(trials) == n
    assert sorted(t.number for t in trials) == list(range(n))
    assert all(t.state.is_finished() for t in trials)
    folders = [t.user_attrs["run_dir"] for t in trials]
    assert len(set(folders)) == n and all(Path(f).is_dir() for f in folders)
    assert all(Path(f).name.startswith(f"trial-{t.number}-") for t, f in zip(trials, folders))


# --------------------------------------------------------------------------------------------------
# Search files
# --------------------------------------------------------------------------------------------------


def test_the_shipped_search_file_loads():
    search = load_search(ROOT / "sweeps" / "search_tiny.yaml")
    assert (search.sweep.name, search.row.id, search.scale.name) == ("table3", "base", "tiny")
    assert (search.metric, search.direction, search.monitor, search.budget) == ("dev_bleu", "maximize", "dev/bleu", 8)
    assert [p.target for p in search.params] == ["train.warmup_steps", "train.lr_scale", "model.P_drop", "train.eps_ls"]
    config = search.config({"train.warmup_steps": 123, "train.lr_scale": 0.5, "P_drop": 0.05, "eps_ls": 0.0})
    assert (config.train.warmup_steps, config.train.lr_scale, config.model.P_drop, config.train.eps_ls) == (
        123,
        0.5,
        0.05,
        0.0,
    )
    assert config.model.d_model == 64 and config.train.max_steps == 500  # the tiny scale still applies
    small = load_search(ROOT / "sweeps" / "search_tiny.yaml", scale="small", sets={"data.path": "/corpus"})
    assert small.scale.name == "small" and small.config({}).data.path == "/corpus"
    with pytest.raises(ValueError, match="data.path = None: expected a corpus directory"):
        load_search(ROOT / "sweeps" / "search_tiny.yaml", scale="small")  # validated before anything starts
    with pytest.raises(ValueError, match="--set P_drop: params.P_drop searches that field"):
        load_search(ROOT / "sweeps" / "search_tiny.yaml", sets={"P_drop": 0.2})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        (
            {"params": {"train.warmup": {"type": "int", "low": 1, "high": 9}}},
            "params.train.warmup: unknown field 'train.warmup'",
        ),
        ({"params": {"warmup_steps": {"type": "int", "low": 1, "high": 9}}}, "write it as train.warmup_steps"),
        (
            {"params": {"P_drop": {"type": "float", "low": 0.3, "high": 0.3}}},
            "params.P_drop: low = 0.3 must be below high = 0.3",
        ),
        ({"params": {"P_drop": {"type": "normal", "low": 0.0, "high": 0.3}}}, "params.P_drop.type = 'normal'"),
        (
            {"params": {"P_drop": {"type": "float", "low": "0", "high": 0.3}}},
            "params.P_drop.low = '0': expected a finite number",
        ),
        (
            {"params": {"train.warmup_steps": {"type": "int", "low": 1.5, "high": 9}}},
            "params.train.warmup_steps.low = 1.5: expected an integer",
        ),
        (
            {"params": {"train.lr_scale": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}},
            "params.train.lr_scale.low = 0.0: expected a positive number with log",
        ),
        ({"params": {"eps_ls": {"type": "categorical", "choices": []}}}, "params.eps_ls.choices = []"),
        ({"params": {"eps_ls": {"type": "categorical", "choices": [0.1, 0.1]}}}, "a choice appears twice"),
        (
            {"params": {"P_drop": {"type": "float", "low": 0.0, "high": 1.0}}},
            "params.P_drop = 1.0 gives an invalid run config",
        ),
        (
            {"params": {"P_drop": {"type": "float", "low": 0.0, "high": 0.5, "sigma": 1}}},
            "params.P_drop: unknown key 'sigma'",
        ),
        (
            {
                "params": {
                    "P_drop": {"type": "float", "low": 0, "high": 0.2},
                    "model.P_drop": {"type": "float", "low": 0, "high": 0.2},
                }
            },
            "same config field (model.P_drop)",
        ),
        ({"params": {}}, "params = {}"),
        ({"metric": "test_bleu"}, "metric = 'test_bleu'"),
        ({"metric": "dev_loss", "direction": "maximize"}, "direction = 'maximize': expected 'minimize'"),
        ({"row": "nope"}, "row: "),
        ({"scale": "huge"}, "scale = 'huge': unknown"),
        ({"budget": 0}, "budget = 0"),
        ({"pruner": {"type": "hyperband"}}, "pruner.type = 'hyperband'"),
        ({"sweep": "missing.yaml"}, "sweep = 'missing.yaml': no such file"),
    ],
)
def test_bad_search_files_are_rejected_naming_the_field(corpus, tmp_path, fake_train, change, message):
    path = write_search(tmp_path, corpus, **change)
    with pytest.raises(ValueError) as error:
        command.run_search(path, trials=2, out=tmp_path / "out")
    assert message in str(error.value)
    assert not (tmp_path / "out").exists()  # nothing created, nothing trained


def test_bad_command_lines_are_rejected_before_anything_runs(corpus, tmp_path, fake_train):
    path = write_search(tmp_path, corpus)
    for kwargs, message in [
        ({"sampler": "grid"}, "params.train.warmup_steps is of type int"),
        ({"storage": "nowhere"}, "--storage 'nowhere'"),
        ({"workers": 0}, "--workers 0"),
        ({"trials": 0}, "--trials 0"),
        ({"sampler": "cmaes"}, "--sampler 'cmaes'"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            command.run_search(path, out=tmp_path / "out", **{"trials": 2, **kwargs})
    assert not (tmp_path / "out").exists()


def test_storage_strings():
    out = Path("/srv/o")
    assert storage_spec(None, out, "s") == "sqlite:////srv/o/s.db"
    assert storage_spec("journal:/x/s.log", out, "s") == "journal:/x/s.log"
    assert storage_spec("/x/s.journal", out, "s") == "journal:/x/s.journal"
    assert storage_spec("postgresql://u:p@localhost:5432/db", out, "s") == "postgresql://u:p@localhost:5432/db"
    assert storage_spec("sqlite:///rel.db", out, "s") == f"sqlite:///{Path('rel.db').absolute()}"


def test_the_cli_parser():
    parser = argparse.ArgumentParser(prog="ablate")
    cli.add_search_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "search",
            "sweeps/search_tiny.yaml",
            "--trials",
            "3",
            "--workers",
            "2",
            "--storage",
            "x.journal",
            "--sampler",
            "grid",
            "--scale",
            "tiny",
            "--out",
            "o",
            "--set",
            "train.max_steps=50",
            "--data",
            "/d",
        ]
    )
    assert (args.search, args.trials, args.workers, args.storage, args.sampler, args.scale, args.out) == (
        "sweeps/search_tiny.yaml",
        3,
        "2",  # parsed with "auto" by launch.processes.parse_workers when the search starts
        "x.journal",
        "grid",
        "tiny",
        "o",
    )
    assert args.handler is cli.cmd_search and args.set == ["train.max_steps=50"] and args.data == "/d"
    defaults = parser.parse_args(["search", "f.yaml"])
    assert (defaults.trials, defaults.workers, defaults.storage, defaults.sampler, defaults.out) == (
        None,
        "1",
        None,
        "tpe",
        "runs/search",
    )


# --------------------------------------------------------------------------------------------------
# Searches with the stand-in
# --------------------------------------------------------------------------------------------------


def test_two_workers_on_a_journal_file_run_exactly_n_trials(corpus, tmp_path, fake_train, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_RENDEZVOUS", str(tmp_path / "rendezvous"))
    path = write_search(tmp_path, corpus)
    out, journal = tmp_path / "out", tmp_path / "shared" / "s.journal"
    started = time.time()
    assert command.run_search(path, trials=7, storage=str(journal), workers=2, out=out) == 0
    elapsed = time.time() - started
    storage = "journal:" + str(journal)
    trials = trials_of(storage, "s")
    check_exact(trials, 7)
    assert all(t.state == TrialState.COMPLETE for t in trials)
    workers = {t.user_attrs["worker_pid"] for t in trials}
    assert len(workers) == 2  # both workers ran trials
    assert {int(name) for name in os.listdir(tmp_path / "rendezvous")} == workers  # a trial's parent is its worker
    # The trial's config is the row's config with the params applied, and the child got the study's address.
    search = load_search(path)
    for trial in trials:
        run = Path(trial.user_attrs["run_dir"])
        child = json.loads((run / "child.json").read_text())
        assert child["ABLATE_OPTUNA_STORAGE"] == storage and child["ABLATE_OPTUNA_STUDY"] == "s"
        assert int(child["ABLATE_OPTUNA_TRIAL"]) == trial.number and child["OMP_NUM_THREADS"] == "1"
        assert run.name == f"trial-{trial.number}-{search.config(trial.params).run_id()}"
        assert read_metrics(run)["dev_loss"] == pytest.approx(trial.value)
    best = min(trials, key=lambda t: t.value)
    printed = capsys.readouterr().out
    assert f"best: trial {best.number}, dev_loss = {best.value:.6g}" in printed
    assert "7 finished trials (7 complete)" in printed
    check_best_sweep(out / "s_best.yaml", search, best)
    print(f"\n7 stand-in trials with 2 workers on a journal file: {elapsed:.1f} s")

    # Running it again continues the same study: N counts every trial in it.
    assert command.run_search(path, trials=7, storage=str(journal), workers=2, out=out) == 0
    check_exact(trials_of(storage, "s"), 7)
    assert command.run_search(path, trials=9, storage=str(journal), workers=2, out=out) == 0
    check_exact(trials_of(storage, "s"), 9)
    # A different search space in the same study is refused.
    changed = write_search(tmp_path, corpus, params={"P_drop": {"type": "float", "low": 0.0, "high": 0.2}})
    with pytest.raises(ValueError, match="exists with a different params"):
        command.run_search(changed, trials=10, storage=str(journal), out=out)


def check_best_sweep(path: Path, search, best) -> None:
    sweep = load_sweep(path)  # a valid sweep file ...
    assert [r.id for r in sweep.rows] == ["best"] and sweep.name == f"{search.name}_best"
    for key, value in best.params.items():
        assert sweep.base[key] == value  # ... with the best params in the search file's keys
    scale = scales_for(path)[search.scale.name]  # scales.yaml copied beside it
    config = resolve(sweep, sweep.row("best"), scale, search.seed)
    assert config.run_id() == best.user_attrs["run_id"]  # ... that trains exactly the best trial's config


def test_two_workers_on_sqlite_run_exactly_n_trials(corpus, tmp_path, fake_train):
    path = write_search(tmp_path, corpus, name="sq", metric="dev_bleu")
    out = tmp_path / "out"
    assert command.run_search(path, trials=6, workers=2, out=out) == 0
    trials = trials_of(f"sqlite:///{out / 'sq.db'}", "sq")
    check_exact(trials, 6)
    best = max((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    check_best_sweep(out / "sq_best.yaml", load_search(path), best)


@pytest.mark.parametrize("storage", ["sqlite", "journal", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_pruned_trial_is_recorded_pruned(corpus, tmp_path, fake_train, monkeypatch, storage):
    """Grid over eps_ls [0.0, 0.2]: trial 0 completes, trial 1 reports worse values and is pruned at step 1."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "report")
    name = f"s{os.getpid()}_{int(time.time())}" if storage == "postgres" else "s"
    url = {
        "sqlite": None,
        "journal": str(tmp_path / "s.journal"),
        "postgres": os.environ.get("ABLATE_TEST_POSTGRES_URL"),
    }[storage]
    if storage == "postgres" and not url:
        pytest.skip("set ABLATE_TEST_POSTGRES_URL (e.g. from .ci/postgres.sh) to run against PostgreSQL")
    path = write_search(
        tmp_path,
        corpus,
        name=name,
        params={
            "eps_ls": {"type": "categorical", "choices": [0.0, 0.2]},
            "positional": {"type": "categorical", "choices": ["sinusoidal"]},
        },
    )
    out = tmp_path / "out"
    assert (
        command.run_search(path, trials=5, out=out, sampler="grid", storage=url) == 0
    )  # the grid has 2 points: 2 trials
    trials = sorted(trials_of(storage_spec(url, out, name), name), key=lambda t: t.number)
    check_exact(trials, 2)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    assert [t.params["eps_ls"] for t in trials] == [0.0, 0.2]
    assert trials[0].intermediate_values == pytest.approx({1: 2.0002, 2: 1.5002, 3: 1.3335}, abs=1e-3)
    assert list(trials[1].intermediate_values) == [1]  # stopped at the first report
    record = read_metrics(Path(trials[1].user_attrs["run_dir"]))
    assert (
        record["status"] == "failed" and record["pruned"] is True and "pruned by optuna at step 1" in record["reason"]
    )
    assert "pruned by optuna at step 1" in trials[1].user_attrs["reason"]
    assert load_sweep(out / f"{name}_best.yaml").base["eps_ls"] == 0.0
    if storage == "postgres":
        optuna.delete_study(study_name=name, storage=open_storage(url))


def test_failed_trials_are_recorded_and_counted(corpus, tmp_path, fake_train, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "crash")
    path = write_search(tmp_path, corpus, params={"eps_ls": {"type": "categorical", "choices": [0.0, 0.1, 0.2]}})
    out = tmp_path / "out"
    assert command.run_search(path, trials=3, out=out, sampler="grid", workers=2) == 0
    trials = sorted(trials_of(f"sqlite:///{out / 's.db'}", "s"), key=lambda t: t.params["eps_ls"])
    check_exact(trials, 3)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert trials[2].user_attrs["reason"] == "exit code 3"
    record = read_metrics(Path(trials[2].user_attrs["run_dir"]))
    assert record["status"] == "failed" and any("the fake run broke" in line for line in record["log_tail"])
    assert "3 finished trials (2 complete, 1 fail)" in capsys.readouterr().out


def test_a_trial_whose_worker_is_gone_is_failed_when_a_search_starts(corpus, tmp_path, fake_train):
    path = write_search(tmp_path, corpus)
    out = tmp_path / "out"
    search = load_search(path)
    storage = storage_spec(None, out, "s")
    study = create_study(search, storage, "tpe")
    orphan = study.ask(search.distributions())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan.set_user_attr("host", __import__("socket").gethostname())
    orphan.set_user_attr("worker_pid", dead.pid)
    assert command.run_search(path, trials=3, out=out) == 0
    trials = sorted(trials_of(storage, "s"), key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert trials[0].user_attrs["reason"].startswith("stale")


def test_the_lightning_callback_reports_at_the_global_step_and_stops_a_pruned_trial():
    study = optuna.create_study(direction="minimize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    first = study.ask()
    first.report(1.0, 10)
    study.tell(first, 1.0)
    callback = OptunaPruning(study.ask(), "dev/loss")
    broadcasts = []
    strategy = SimpleNamespace(broadcast=lambda value: broadcasts.append(value) or value)

    def trainer(step, value, sanity=False):
        import torch

        return SimpleNamespace(
            sanity_checking=sanity,
            is_global_zero=True,
            global_step=step,
            strategy=strategy,
            callback_metrics={} if value is None else {"dev/loss": torch.tensor(value)},
        )

    callback.on_validation_end(trainer(0, 9.0, sanity=True), None)  # sanity check: nothing reported
    callback.on_validation_end(trainer(5, 3.0), None)  # no other trial reported at step 5: kept
    callback.on_validation_end(trainer(7, None), None)  # metric missing: nothing reported, no stop
    with pytest.raises(TrialPruned) as stopped:
        callback.on_validation_end(trainer(10, 5.0), None)  # its best (3.0) is worse than trial 0 at step 10 (1.0)
    assert stopped.value.code == PRUNED_EXIT and isinstance(stopped.value, SystemExit)
    assert not isinstance(stopped.value, Exception)  # train_run's `except Exception` does not record it as failed
    assert callback.trial.study.trials[1].intermediate_values == {5: 3.0, 10: 5.0}
    assert broadcasts == [False, False, True]
    assert optuna_callbacks_from_env({}) == []


# --------------------------------------------------------------------------------------------------
# Real training, PostgreSQL
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_search_of_two_trials_one_pruned(corpus, tmp_path, monkeypatch, capsys):
    """Real training (5 steps, validation at step 3): a grid of lr_scale 1.0 then 0.01; the second trial learns
    almost nothing by step 3, worse than the first there, and the median pruner stops it (exit 77)."""
    monkeypatch.setattr("ablations.launch.processes.visible_gpus", lambda: [])
    path = write_search(
        tmp_path,
        corpus,
        name="real",
        metric="dev_loss",
        params={"train.lr_scale": {"type": "categorical", "choices": [1.0, 0.01]}},
    )
    out = tmp_path / "out"
    started = time.time()
    assert command.run_search(path, trials=2, out=out, sampler="grid") == 0
    elapsed = time.time() - started
    trials = sorted(trials_of(f"sqlite:///{out / 'real.db'}", "real"), key=lambda t: t.number)
    check_exact(trials, 2)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    done = read_metrics(Path(trials[0].user_attrs["run_dir"]))
    assert done["status"] == "done" and done["steps"] == 5 and done["dev_loss"] == pytest.approx(trials[0].value)
    assert 3 in trials[0].intermediate_values  # reported at the validation of step 3
    assert (
        list(trials[1].intermediate_values) == [3]
        and trials[1].intermediate_values[3] > trials[0].intermediate_values[3]
    )
    pruned = read_metrics(Path(trials[1].user_attrs["run_dir"]))
    assert pruned["status"] == "failed" and pruned["pruned"] and "pruned by optuna at step 3" in pruned["reason"]
    assert not (Path(trials[1].user_attrs["run_dir"]) / "test.hyp").exists()  # stopped before the final evaluation
    check_best_sweep(out / "real_best.yaml", load_search(path), trials[0])
    print(
        f"\n2 real trials: {elapsed:.1f} s; intermediate values {[t.intermediate_values for t in trials]}; "
        f"final {trials[0].value:.4f}"
    )


@pytest.mark.postgres
def test_two_workers_on_postgresql(corpus, tmp_path, fake_train, monkeypatch):
    url = os.environ.get("ABLATE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set ABLATE_TEST_POSTGRES_URL (e.g. from .ci/postgres.sh) to run against PostgreSQL")
    monkeypatch.setenv("FAKE_RENDEZVOUS", str(tmp_path / "rendezvous"))  # both workers start a trial, however slow
    name = f"pg{os.getpid()}_{int(time.time())}"  # a fresh study each time
    path = write_search(tmp_path, corpus, name=name)
    started = time.time()
    assert command.run_search(path, trials=8, storage=url, workers=2, out=tmp_path / "out") == 0
    elapsed = time.time() - started
    trials = trials_of(url, name)
    check_exact(trials, 8)
    assert all(t.state == TrialState.COMPLETE for t in trials)
    workers = {t.user_attrs["worker_pid"] for t in trials}
    assert len(workers) == 2 and {int(name) for name in os.listdir(tmp_path / "rendezvous")} == workers
    print(f"\n8 stand-in trials with 2 workers on PostgreSQL: {elapsed:.1f} s")
    optuna.delete_study(study_name=name, storage=open_storage(url))
