"""`ablate search`: hyperparameter search with optuna around one sweep row, each trial a training process.

A search file (YAML, data) names a sweep and its base row, a scale, the metric and the parameters to search:

    name: tiny_search
    sweep: table3.yaml            # relative to this file's folder, else to the current folder
    row: base
    scale: tiny
    metric: dev_bleu              # dev_bleu (maximize), dev_loss or dev_ppl (minimize)
    direction: maximize           # optional; must agree with the metric
    budget: 8                     # trials, unless --trials says otherwise
    pruner: {type: median, n_startup_trials: 2, n_warmup_steps: 0}   # or {type: none}
    params:
      train.warmup_steps: {type: int, low: 50, high: 400}
      train.lr_scale: {type: float, low: 0.25, high: 2.0, log: true}
      P_drop: {type: float, low: 0.0, high: 0.3}
      positional: {type: categorical, choices: [sinusoidal, rope]}

Parameter keys are what `ablations.sweep.canonical_key` accepts; their values are in the run's own units (they
apply last, after the scale preset, like `ablate train --set`). Everything is validated, the bounds of every
parameter included (each must give a valid run config), before a study is created or anything trains.

How a search runs:

* The study is created once, by the command itself, before any worker starts (two workers creating a fresh
  sqlite study at once crash). Storage: `sqlite:///<out>/<name>.db` by default; `journal:PATH` or a path
  ending in `.journal` is an append-only `JournalStorage` file (for shared filesystems); any other URL
  (`postgresql://...`) is an SQLAlchemy URL for `RDBStorage`. The pruner is not stored by optuna: its spec
  is kept in the study's user attributes and every process that loads the study (workers, training
  processes) builds the same pruner from it.
* `--workers K` starts K worker processes (multiprocessing spawn); each loops: ask a trial, resolve its run
  config (`ablations.sweep.resolve(sweep, row, scale, seed, sets=params)`), train it as a subprocess
  (`python -m ablations.cli train --config C --run-dir <out>/<name>/trial-<n>-<run id>`), and tell the result.
  Counting and asking happen under a file lock (`<out>/.<name>.lock`), so the study ends with exactly N
  trials, none lost or duplicated, and no two asks run at once (optuna's RDB storage numbers a new trial by
  counting the rows before it, which two concurrent transactions on PostgreSQL may each do without seeing the
  other's row). The lock covers the workers of every search sharing `<out>` (one host, or a filesystem
  with working flock); workers on other hosts sharing only a database are not counted under it.
* The training process gets `ABLATE_OPTUNA_STORAGE`, `ABLATE_OPTUNA_STUDY` and `ABLATE_OPTUNA_TRIAL` (the
  trial id); `optuna_callbacks_from_env()` turns them into a Lightning callback that reports the monitored
  dev metric (`dev/bleu`, `dev/loss`, `dev/ppl`) at each validation with the global step as the step, and
  when the pruner says so stops training with exit code 77 (`PRUNED_EXIT`).
* Exit 77 -> the trial is told PRUNED; exit 0 with a `done` record and a finite metric -> COMPLETE with the
  metric from `<run>/metrics.json`; anything else (a crash, a kill, divergence) -> FAIL, the reason kept in
  the trial's user attributes and the run's metrics.json.
* Samplers: TPE (`--sampler tpe`, seeded with `sampler_seed` + the worker's index, constant liar so that
  parallel workers spread out), or `--sampler grid`: every combination of the (categorical only) choices is
  enqueued once, in product order, and workers pop them (optuna's GridSampler run by two workers in parallel
  duplicated a point); `--trials` larger than the grid runs the grid.
* Ctrl-C / SIGTERM: each worker stops its training process and tells its trial FAIL ("interrupted"); the
  command exits 130. Finished trials of every state count toward N when the search is run again.
* At the end: the best trial is printed and `<out>/<name>_best.yaml` written, a sweep file whose `base` is
  the sweep's base, the row's overrides and the best parameters (keys that a scale rescales are converted
  back to paper units), with one row `best`; `scales.yaml` is copied beside it when there is none, so that
  `ablate sweep <out>/<name>_best.yaml --scale S` trains exactly the best trial's config (checked by run id).

Running the same command again continues the study (N counts every trial in it). A trial left RUNNING by a
worker of this host that no longer exists is marked FAIL (stale) when a search starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import itertools
import json
import math
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import yaml

from .records import CONFIG_FILE, read_metrics, update_metrics, write_atomic, write_config
from .sweep import (DATA_HELP, WIDTH_FIELDS, Row, Scale, Sweep, canonical_key, load_sweep, read_yaml, resolve,
                    scale_named, scales_for)

STORAGE_ENV = "ABLATE_OPTUNA_STORAGE"
STUDY_ENV = "ABLATE_OPTUNA_STUDY"
TRIAL_ENV = "ABLATE_OPTUNA_TRIAL"
PRUNED_EXIT = 77
LOG_FILE = "train.log"
GRACE_SECONDS = 20.0
METRICS = {  # metrics.json key -> (direction, metric the LightningModule logs at each validation)
    "dev_bleu": ("maximize", "dev/bleu"),
    "dev_loss": ("minimize", "dev/loss"),
    "dev_ppl": ("minimize", "dev/ppl"),
}
FILE_KEYS = ("name", "description", "sweep", "row", "scale", "seed", "metric", "direction", "budget", "pruner",
             "sampler_seed", "params")
DIST_KEYS = {"float": ("type", "low", "high", "log", "step"), "int": ("type", "low", "high", "log", "step"),
             "categorical": ("type", "choices")}
PRUNERS = {"median": ("type", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"),
           "none": ("type",)}
ATTR = "ablate."  # prefix of the study's user attributes written here


# --------------------------------------------------------------------------------------------------
# The search file
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    key: str  # as written in the search file (also the optuna parameter name)
    target: str  # canonical key, e.g. model.P_drop
    spec: Mapping[str, Any]  # the validated distribution, plain data

    def distribution(self):
        import optuna.distributions as d

        kind = self.spec["type"]
        if kind == "float":
            return d.FloatDistribution(self.spec["low"], self.spec["high"], log=self.spec.get("log", False), step=self.spec.get("step"))
        if kind == "int":
            return d.IntDistribution(self.spec["low"], self.spec["high"], log=self.spec.get("log", False), step=self.spec.get("step", 1))
        return d.CategoricalDistribution(list(self.spec["choices"]))

    def corners(self) -> list[Any]:
        return list(self.spec["choices"]) if self.spec["type"] == "categorical" else [self.spec["low"], self.spec["high"]]


@dataclass(frozen=True)
class Search:
    path: Path
    name: str
    description: str
    sweep: Sweep
    row: Row
    scale: Scale
    seed: int
    metric: str
    direction: str
    budget: Optional[int]
    pruner: Mapping[str, Any]
    sampler_seed: int
    params: tuple[Param, ...]
    sets: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # --set / --data: fixed in every trial

    @property
    def monitor(self) -> str:
        return METRICS[self.metric][1]

    def distributions(self) -> dict[str, Any]:
        return {p.key: p.distribution() for p in self.params}

    def config(self, params: Mapping[str, Any]):
        return resolve(self.sweep, self.row, self.scale, self.seed, sets={**self.sets, **params})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(where: str, value: Any, expected: str) -> None:
    raise ValueError(f"{where} = {value!r}: expected {expected}")


def _validate_param(key: str, raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        _fail(where, raw, "a mapping like {type: float, low: 0.0, high: 0.3} or {type: categorical, choices: [...]}")
    kind = raw.get("type")
    if kind not in DIST_KEYS:
        _fail(f"{where}.type", kind, "one of " + ", ".join(DIST_KEYS))
    extra = sorted(set(raw) - set(DIST_KEYS[kind]), key=str)
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r} for type {kind}; valid keys: {', '.join(DIST_KEYS[kind])}")
    spec = dict(raw)
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            _fail(f"{where}.choices", choices, "a non-empty list")
        for i, choice in enumerate(choices):
            if not (choice is None or isinstance(choice, (bool, int, float, str))):
                _fail(f"{where}.choices[{i}]", choice, "a number, string, boolean or null")
        if len({json.dumps(c) for c in choices}) != len(choices):
            raise ValueError(f"{where}.choices = {choices!r}: a choice appears twice")
        return spec
    check = _integer if kind == "int" else _number
    expected = "an integer" if kind == "int" else "a finite number"
    for bound in ("low", "high"):
        if bound not in raw:
            raise ValueError(f"{where}: missing {bound!r} (type {kind} needs low and high)")
        if not check(raw[bound]):
            _fail(f"{where}.{bound}", raw[bound], expected)
    if not raw["low"] < raw["high"]:
        raise ValueError(f"{where}: low = {raw['low']!r} must be below high = {raw['high']!r}")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        _fail(f"{where}.log", log, "true or false")
    if log and raw["low"] <= 0:
        _fail(f"{where}.low", raw["low"], "a positive number with log: true")
    if "step" in raw:
        step = raw["step"]
        if not (check(step) and step > 0):
            _fail(f"{where}.step", step, f"a positive {'integer' if kind == 'int' else 'number'}")
        if log:
            raise ValueError(f"{where}: step and log: true cannot be combined")
    if kind == "float":
        spec["low"], spec["high"] = float(raw["low"]), float(raw["high"])
        if "step" in raw:
            spec["step"] = float(raw["step"])
    return spec


def _validate_pruner(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {"type": "median"}
    if not isinstance(raw, dict):
        _fail(where, raw, "a mapping like {type: median, n_startup_trials: 2} or {type: none}")
    kind = raw.get("type", "median")
    if kind not in PRUNERS:
        _fail(f"{where}.type", kind, "one of " + ", ".join(PRUNERS))
    extra = sorted(set(raw) - set(PRUNERS[kind]), key=str)
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r} for type {kind}; valid keys: {', '.join(PRUNERS[kind])}")
    for key in PRUNERS[kind][1:]:
        if key in raw and not (_integer(raw[key]) and raw[key] >= (1 if key in ("interval_steps", "n_min_trials") else 0)):
            _fail(f"{where}.{key}", raw[key], "a non-negative integer" if key in ("n_startup_trials", "n_warmup_steps") else "a positive integer")
    return {"type": kind, **{k: v for k, v in raw.items() if k != "type"}}


def _sweep_path(value: str, search_path: Path) -> Path:
    path = Path(value)
    if path.is_absolute():
        return path
    beside = search_path.parent / path
    return beside if beside.exists() else path


def load_search(path: str | Path, scale: Optional[str] = None, sets: Optional[Mapping[str, Any]] = None) -> Search:
    """Read and validate a search file; every parameter's bounds (or choices) must give a valid run config."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        _fail(str(path), type(data).__name__, "a mapping with name, sweep, row, scale, metric, params")
    unknown = sorted(set(data) - set(FILE_KEYS), key=str)
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; valid keys: {', '.join(FILE_KEYS)}")
    name = data.get("name", path.stem)
    if not (isinstance(name, str) and name and all(c.isalnum() or c in "-_." for c in name)):
        _fail(f"{path}: name", name, "a non-empty name of letters, digits, '-', '_' or '.'")
    if not isinstance(data.get("sweep"), str):
        _fail(f"{path}: sweep", data.get("sweep"), "the path of a sweep file, e.g. sweeps/table3.yaml")
    sweep_path = _sweep_path(data["sweep"], path)
    if not sweep_path.exists():
        raise ValueError(f"{path}: sweep = {data['sweep']!r}: no such file (looked beside the search file and in {Path.cwd()})")
    sweep = load_sweep(sweep_path)
    row_id = data.get("row", sweep.rows[0].id)
    if not isinstance(row_id, str):
        _fail(f"{path}: row", row_id, "a row id of the sweep")
    try:
        row = sweep.row(row_id)
    except ValueError as error:
        raise ValueError(f"{path}: row: {error}") from None
    scale_name = scale or data.get("scale")
    if scale_name is None:
        known = ", ".join(scales_for(sweep_path))
        raise ValueError(f"{path}: no scale: set `scale:` in the file or pass --scale ({known})")
    scale_preset = scale_named(sweep_path, scale_name, f"{'--scale' if scale else f'{path}: scale'} =")
    seed = data.get("seed", sweep.seeds[0])
    if not (_integer(seed) and seed >= 0):
        _fail(f"{path}: seed", seed, "a non-negative integer")
    metric = data.get("metric")
    if metric not in METRICS:
        _fail(f"{path}: metric", metric, "one of " + ", ".join(f"{m} ({d})" for m, (d, _) in METRICS.items()))
    direction = data.get("direction", METRICS[metric][0])
    if direction != METRICS[metric][0]:
        _fail(f"{path}: direction", direction, f"{METRICS[metric][0]!r} for metric {metric}")
    budget = data.get("budget")
    if budget is not None and not (_integer(budget) and budget >= 1):
        _fail(f"{path}: budget", budget, "a positive integer (trials)")
    sampler_seed = data.get("sampler_seed", 0)
    if not (_integer(sampler_seed) and sampler_seed >= 0):
        _fail(f"{path}: sampler_seed", sampler_seed, "a non-negative integer")
    pruner = _validate_pruner(data.get("pruner"), f"{path}: pruner")
    raw_params = data.get("params")
    if not isinstance(raw_params, dict) or not raw_params:
        _fail(f"{path}: params", raw_params, "a non-empty mapping of config keys to distributions")
    params, targets = [], {}
    for key, raw in raw_params.items():
        where = f"{path}: params.{key}"
        if not isinstance(key, str):
            _fail(where, key, "a config key such as train.warmup_steps or P_drop")
        target = canonical_key(key, where)
        if target == "seed":
            raise ValueError(f"{where}: the seed is not a searchable parameter (set `seed:` instead)")
        if target in targets:
            raise ValueError(f"{where}: same config field ({target}) as params.{targets[target]}")
        targets[target] = key
        params.append(Param(key, target, _validate_param(key, raw, where)))
    sets = dict(sets or {})
    for key in sets:
        target = canonical_key(str(key), f"--set {key}")
        if target in targets:
            raise ValueError(f"--set {key}: params.{targets[target]} searches that field; do not fix it too")
    search = Search(path, name, str(data.get("description", "")), sweep, row, scale_preset, seed, metric,
                    direction, budget, pruner, sampler_seed, tuple(params), sets)
    try:
        search.config({})
    except ValueError as error:
        raise ValueError(f"{path}: the base row does not resolve: {error}") from None
    for param in search.params:  # every bound / choice must make a valid run, the others at the base's values
        for value in param.corners():
            try:
                search.config({param.key: value})
            except ValueError as error:
                raise ValueError(f"{path}: params.{param.key} = {value!r} gives an invalid run config: {error}") from None
    return search


# --------------------------------------------------------------------------------------------------
# Storage, sampler, pruner, study
# --------------------------------------------------------------------------------------------------


def storage_spec(storage: Optional[str], out: Path, name: str) -> str:
    """A normalised storage string: `journal:/abs/path` or an SQLAlchemy URL (sqlite paths made absolute)."""
    if not storage:
        return f"sqlite:///{(Path(out) / f'{name}.db').absolute()}"
    if storage.startswith("journal:"):
        return "journal:" + str(Path(storage[len("journal:"):]).absolute())
    if storage.endswith(".journal") and "://" not in storage:
        return "journal:" + str(Path(storage).absolute())
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////") and storage != "sqlite:///:memory:":
        return "sqlite:///" + str(Path(storage[len("sqlite:///"):]).absolute())
    if "://" in storage:
        return storage
    raise ValueError(f"--storage {storage!r}: expected an SQLAlchemy URL (sqlite:///F.db, postgresql://...), "
                     "journal:PATH or a PATH ending in .journal")


def open_storage(spec: str):
    import optuna

    if spec.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        path = Path(spec[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if spec.startswith("sqlite:"):
        Path(spec[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        # Several processes write (workers, training processes reporting): wait for the lock, not fail at once.
        return optuna.storages.RDBStorage(spec, engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.storages.RDBStorage(postgres_driver(spec), engine_kwargs={"pool_pre_ping": True})


def postgres_driver(url: str) -> str:
    """`postgresql://` with the driver that is installed: SQLAlchemy 2.1 defaults to psycopg (3), many installs
    have psycopg2 (psycopg2-binary). An explicit `postgresql+driver://` is kept."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def make_pruner(spec: Mapping[str, Any]):
    import optuna

    if spec.get("type") == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(**{k: v for k, v in spec.items() if k != "type"})


def make_sampler(kind: str, seed: int):
    import optuna

    if kind == "grid":
        # Every grid trial is enqueued with all its params (enqueue_grid), so the sampler is never consulted;
        # optuna's GridSampler itself duplicated a point with two workers, and raises on a one-point grid
        # when trials are enqueued.
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials running in other workers count as bad guesses, so parallel workers spread out.
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def grid_space(search: Search) -> dict[str, list]:
    bad = [p.key for p in search.params if p.spec["type"] != "categorical"]
    if bad:
        raise ValueError(f"--sampler grid searches categorical params only (explicit lists); "
                         f"params.{bad[0]} is of type {search.params[[p.key for p in search.params].index(bad[0])].spec['type']}")
    return {p.key: list(p.spec["choices"]) for p in search.params}


def load_study(spec: str, name: str, sampler=None):
    """Load a study with the pruner its creator stored (optuna does not store pruners)."""
    import optuna

    storage = open_storage(spec)
    plain = optuna.load_study(study_name=name, storage=storage)
    pruner = make_pruner(plain.user_attrs.get(ATTR + "pruner", {"type": "median"}))
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def _identity(search: Search, sampler: str) -> dict[str, Any]:
    """What must not change when a study is continued."""
    return {"params": {p.key: dict(p.spec) for p in search.params}, "metric": search.metric,
            "sweep": search.sweep.name, "row": search.row.id, "scale": search.scale.name, "seed": search.seed,
            "sampler": sampler, "sets": {str(k): v for k, v in search.sets.items()}}


def create_study(search: Search, spec: str, sampler: str):
    """Create the study (or continue it after checking it is the same search); only the command does this."""
    import optuna

    storage = open_storage(spec)
    study = optuna.create_study(study_name=search.name, storage=storage, direction=search.direction,
                                pruner=make_pruner(search.pruner), load_if_exists=True)
    if study.direction.name.lower() != search.direction:
        raise ValueError(f"study {search.name!r} in {spec} exists with direction {study.direction.name.lower()}, "
                         f"not {search.direction}; use another name or --storage")
    identity = _identity(search, sampler)
    previous = study.user_attrs.get(ATTR + "identity")
    if previous is not None and previous != identity:
        changed = sorted(k for k in identity if previous.get(k) != identity.get(k))
        raise ValueError(f"study {search.name!r} in {spec} exists with a different {', '.join(changed)}; "
                         "use another name or --storage to start a new study")
    if previous is None:
        study.set_user_attr(ATTR + "identity", identity)
        study.set_user_attr(ATTR + "pruner", dict(search.pruner))
        study.set_user_attr(ATTR + "monitor", search.monitor)
        study.set_user_attr(ATTR + "search_file", str(search.path))
    return study


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_stale_trials(study) -> list[int]:
    """RUNNING trials whose worker ran on this host and is gone: FAIL (so that the trial count is right)."""
    import optuna
    from optuna.trial import TrialState

    failed = []
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if attrs.get("host") == host and isinstance(attrs.get("worker_pid"), int) and not _pid_alive(attrs["worker_pid"]):
            try:
                optuna.trial.Trial(study, trial._trial_id).set_user_attr("reason", f"stale: its worker (pid {attrs['worker_pid']}) is gone")
                study.tell(trial.number, state=TrialState.FAIL)
                failed.append(trial.number)
            except Exception as error:  # finished meanwhile
                print(f"could not mark stale trial {trial.number} failed: {error}", file=sys.stderr)
    return failed


def enqueue_grid(study, search: Search, trials: int) -> int:
    """Grid search: enqueue the grid points (product order) not yet in the study, up to `trials` trials in all.

    Enqueued (WAITING) trials are popped atomically by `ask`, so parallel workers never run a point twice (a
    GridSampler with two workers did). Returns how many trials the study can hold in all (at most the grid).
    """
    space = grid_space(search)
    keys = list(space)
    points = [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]
    existing = study.get_trials(deepcopy=False)
    seen = [t.system_attrs.get("fixed_params") or t.params for t in existing]
    remaining = [p for p in points if p not in seen]
    allowed = min(trials, len(existing) + len(remaining))
    for point in remaining[: max(0, allowed - len(existing))]:
        study.enqueue_trial(point)
    return allowed


# --------------------------------------------------------------------------------------------------
# Training side: the Lightning callback
# --------------------------------------------------------------------------------------------------


class TrialPruned(SystemExit):
    """Raised in the training process when the pruner stops a trial: not an Exception, so train_run does not
    record it as a failure; Lightning tears down and re-raises it, and the process exits with PRUNED_EXIT."""

    def __init__(self, message: str) -> None:
        super().__init__(PRUNED_EXIT)
        self.message = message


def report_and_check(trial, value: float, step: int) -> bool:
    """Report an intermediate value; whether the pruner stops the trial. Non-finite values are not reported."""
    if math.isfinite(value):
        with warnings.catch_warnings():  # a resumed run re-validates a step it reported already: ignored
            warnings.simplefilter("ignore")
            trial.report(value, step)
    return trial.should_prune()


_CALLBACK_CLASS: Optional[type] = None


def __getattr__(name: str) -> Any:
    """`OptunaPruning` is built on first use, so that workers need not import Lightning (and torch)."""
    if name == "OptunaPruning":
        return _pruning_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _pruning_class() -> type:
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is not None:
        return _CALLBACK_CLASS
    from lightning.pytorch.callbacks import Callback

    class OptunaPruning(Callback):
        """Reports `monitor` after each validation (step = global step) and stops a pruned trial (exit 77).

        optuna_integration's PyTorchLightningPruningCallback reports with step = epoch, and training here is
        step-based (several validations per epoch on a large corpus, or many epochs per validation on a small
        one), and it raises optuna.TrialPruned, an Exception that train_run would record as a failure; hence this
        small callback. Under DDP rank 0 reports and decides, and the decision is broadcast.
        """

        def __init__(self, trial, monitor: str) -> None:
            super().__init__()
            self.trial = trial
            self.monitor = monitor
            self.warned = False

        def on_validation_end(self, trainer, pl_module) -> None:
            if trainer.sanity_checking:
                return
            prune, value = False, None
            if trainer.is_global_zero:
                metric = trainer.callback_metrics.get(self.monitor)
                if metric is None:
                    if not self.warned:
                        print(f"optuna: {self.monitor!r} was not logged at this validation; nothing reported", file=sys.stderr)
                        self.warned = True
                else:
                    value = float(metric)
                    try:
                        prune = report_and_check(self.trial, value, trainer.global_step)
                    except Exception as error:  # an unreachable storage must not stop training
                        print(f"optuna: could not report to the study: {type(error).__name__}: {error}", file=sys.stderr)
            prune = bool(trainer.strategy.broadcast(prune))
            if prune:
                message = f"pruned by optuna at step {trainer.global_step} ({self.monitor} = {value})"
                print(message, file=sys.stderr, flush=True)
                raise TrialPruned(message)

    _CALLBACK_CLASS = OptunaPruning
    return OptunaPruning


def trial_from_env(environ: Optional[Mapping[str, str]] = None):
    """(trial, monitored metric) of a training process started by `ablate search`; None otherwise."""
    environ = os.environ if environ is None else environ
    spec, name, trial_id = environ.get(STORAGE_ENV), environ.get(STUDY_ENV), environ.get(TRIAL_ENV)
    if not (spec and name and trial_id):
        return None
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(spec, name, sampler=optuna.samplers.RandomSampler())  # the stored pruner, no sampling here
    return optuna.trial.Trial(study, int(trial_id)), study.user_attrs.get(ATTR + "monitor", "dev/loss")


def optuna_callbacks_from_env(environ: Optional[Mapping[str, str]] = None) -> list:
    """The pruning callback of a trial started by `ablate search`; [] when not started by it."""
    found = trial_from_env(environ)
    if found is None:
        return []
    trial, monitor = found
    return [_pruning_class()(trial, monitor)]


# --------------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------------


def train_command(config_path: Path, run_dir: Path) -> list[str]:
    """The training process of one trial (an argv list: no shell)."""
    return [sys.executable, "-m", "ablations.cli", "train", "--config", str(config_path), "--run-dir", str(run_dir)]


@dataclass(frozen=True)
class WorkerPlan:
    search_path: str
    scale: str
    storage: str
    out: str
    trials: int
    sampler: str
    index: int
    threads: int
    cores: tuple[int, ...]
    gpu: Optional[str]
    sets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    command: Callable[[Path, Path], list[str]] = train_command
    trial_timeout: Optional[float] = None


class AskLock:
    """An exclusive flock on `<out>/.<name>.lock` around counting and asking: exactly N trials, no duplicates."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: Optional[int] = None

    def __enter__(self) -> "AskLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _say(index: int, text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] worker {index}: {text}", flush=True)


def _child_env(plan: WorkerPlan, trial_id: int, name: str) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(plan.threads)
    if sys.platform.startswith("linux") and plan.cores:
        env["ABLATE_CPUS"] = ",".join(str(c) for c in plan.cores)
    if plan.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = plan.gpu
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    env[STORAGE_ENV], env[STUDY_ENV], env[TRIAL_ENV] = plan.storage, name, str(trial_id)
    return env


def _stop_process(process: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        text = path.read_bytes()[-32768:].decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [row for row in text.replace("\r", "\n").split("\n") if row.strip()][-lines:]


def run_trial(search: Search, study, trial, plan: WorkerPlan) -> tuple[str, Optional[float], str]:
    """Train one asked trial in a subprocess; returns (state, value, note). Tells nothing."""
    params = dict(trial.params)
    config = search.config(params)
    run_id = config.run_id()
    run_dir = (Path(plan.out) / search.name / f"trial-{trial.number}-{run_id}").absolute()
    meta = {"sweep": search.name, "row": f"trial-{trial.number}", "group": search.row.id, "scale": search.scale.name,
            "run_id": run_id, "search": search.name, "base_sweep": search.sweep.name, "base_row": search.row.id,
            "trial": trial.number, "params": params}
    write_config(run_dir, config, meta)
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("run_id", run_id)
    argv = plan.command(run_dir / CONFIG_FILE, run_dir)
    with open(run_dir / LOG_FILE, "ab") as log:
        log.write(f"\n=== ablate search {search.name} trial {trial.number} worker {plan.index} pid {os.getpid()} "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=_child_env(plan, trial._trial_id, search.name), start_new_session=True)
        try:
            code = process.wait(timeout=plan.trial_timeout)
        except subprocess.TimeoutExpired:
            _stop_process(process)
            code = None
        except BaseException:  # interrupted: stop the training before leaving
            _stop_process(process)
            raise
    record = read_metrics(run_dir) or {}
    if code == PRUNED_EXIT:
        note = next((line for line in reversed(_tail(run_dir / LOG_FILE)) if line.startswith("pruned by optuna")), "pruned by optuna")
        update_metrics(run_dir, status="failed", reason=note, pruned=True, failed_at=time.time())
        return "pruned", None, note
    value = record.get(search.metric)
    if code == 0 and record.get("status") == "done" and _number(value):
        for key in ("dev_loss", "dev_ppl", "dev_bleu", "test_bleu", "steps", "wall_seconds"):
            if record.get(key) is not None:
                trial.set_user_attr(key, record[key])
        return "complete", float(value), f"{search.metric} = {value:.4g}"
    if code is None:
        reason = f"timed out after {plan.trial_timeout:g} s"
    elif code < 0:
        reason = f"killed by signal {-code}"
    elif record.get("status") == "diverged":
        reason = "diverged (dev loss not finite)"
    elif code == 0:
        reason = f"exit code 0 but status {record.get('status')!r} and {search.metric} = {value!r}"
    else:
        reason = record.get("reason") or f"exit code {code}"
    if record.get("status") not in ("failed", "diverged"):
        update_metrics(run_dir, status="failed", reason=reason, log_tail=_tail(run_dir / LOG_FILE), failed_at=time.time())
    return "fail", None, reason


def _tell(study, trial, state: str, value: Optional[float], note: str) -> None:
    from optuna.trial import TrialState

    if state != "complete":
        trial.set_user_attr("reason", note[:500])
    if state == "complete":
        study.tell(trial, value)
    else:
        study.tell(trial, state=TrialState.PRUNED if state == "pruned" else TrialState.FAIL)


def worker_loop(plan: WorkerPlan) -> int:
    """One worker: ask (under the lock, while fewer than N trials exist), train, tell; repeat. Trials run."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
    try:
        return _worker_loop(plan)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _worker_loop(plan: WorkerPlan) -> int:
    from optuna.trial import TrialState

    search = load_search(plan.search_path, plan.scale, plan.sets)
    # Each worker its own sampler seed: equal seeds would draw the same startup trials in every worker.
    study = load_study(plan.storage, search.name, sampler=make_sampler(plan.sampler, search.sampler_seed + plan.index))
    distributions = search.distributions()
    lock = AskLock(Path(plan.out) / f".{search.name}.lock")
    ran = 0
    while True:
        with lock:
            started = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
            if started >= plan.trials:
                break
            trial = study.ask(distributions)
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("worker_pid", os.getpid())
        _say(plan.index, f"trial {trial.number} started: {json.dumps(trial.params)}")
        try:
            state, value, note = run_trial(search, study, trial, plan)
        except KeyboardInterrupt:
            _tell(study, trial, "fail", None, "interrupted")
            _say(plan.index, f"trial {trial.number} interrupted (FAIL)")
            raise
        except Exception as error:  # e.g. the run folder cannot be written: fail the trial, not the worker
            state, value, note = "fail", None, f"{type(error).__name__}: {error}"
        _tell(study, trial, state, value, note)
        ran += 1
        _say(plan.index, f"trial {trial.number} {state.upper()}: {note}")
    return ran


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _worker_main(plan: WorkerPlan) -> None:
    try:
        worker_loop(plan)
    except KeyboardInterrupt:
        sys.exit(130)


# --------------------------------------------------------------------------------------------------
# The best trial as a sweep file
# --------------------------------------------------------------------------------------------------


def _paper_units(search: Search, target: str, value: Any) -> Any:
    """A run-unit value of a key that `resolve` rescales, in the sweep's paper units."""
    section, name = target.split(".")
    if section == "model" and name in WIDTH_FIELDS and _integer(value):
        return value * search.scale.width_divisor
    if target == "train.max_steps" and _integer(value):
        return int(round(value / search.scale.steps_scale))
    return value


def best_sweep(search: Search, params: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep document: the sweep's base, the row's overrides and the best params (paper units), row `best`."""
    base = {}
    for layer in (search.sweep.base, search.row.overrides):
        for key, value in layer.items():
            target = canonical_key(str(key), "base")
            for existing in [k for k in base if canonical_key(str(k), "base") == target]:
                del base[existing]
            base[key] = value
    for key, value in {**search.sets, **params}.items():
        for existing in [k for k in base if canonical_key(str(k), "base") == canonical_key(str(key), "params")]:
            del base[existing]
        base[key] = _paper_units(search, canonical_key(str(key), "params"), value)
    return {
        "name": f"{search.name}_best",
        "description": f"Best trial of search {search.name}: {search.sweep.name} row {search.row.id} at scale "
                       f"{search.scale.name}, searched {', '.join(params)}",
        "seeds": list(search.sweep.seeds),
        "base": base,
        "rows": [{"id": "best", "group": "best", "overrides": {}}],
    }


def write_best(search: Search, study, out: Path) -> Optional[Path]:
    try:
        best = study.best_trial
    except ValueError:
        return None
    document = best_sweep(search, best.params)
    path = Path(out) / f"{search.name}_best.yaml"
    header = (f"# Written by `ablate search` from trial {best.number} of study {search.name!r}: "
              f"{search.metric} = {best.value:.6g} ({search.direction}).\n"
              f"# Params (run units at scale {search.scale.name}): {json.dumps(best.params)}\n"
              f"# Train it: ablate sweep {path} --scale {search.scale.name}\n")
    write_atomic(path, header + yaml.safe_dump(document, sort_keys=False))
    scales_src = search.sweep.path.parent / "scales.yaml"
    scales_dst = path.parent / "scales.yaml"
    if not scales_dst.exists():
        shutil.copyfile(scales_src, scales_dst)
    elif scales_dst.read_bytes() != scales_src.read_bytes():
        print(f"note: {scales_dst} differs from {scales_src}; `ablate sweep {path}` uses the former", file=sys.stderr)
    # The sweep file must train exactly the best trial's config.
    sweep = load_sweep(path)
    scales = scales_for(path)
    if search.scale.name in scales:
        again = resolve(sweep, sweep.row("best"), scales[search.scale.name], search.seed)
        expected = best.user_attrs.get("run_id") or search.config(best.params).run_id()
        if again.run_id() != expected:
            print(f"warning: {path} at scale {search.scale.name} resolves to run {again.run_id()}, not the best "
                  f"trial's {expected} (a value did not convert to paper units exactly)", file=sys.stderr)
    return path


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------


def summary(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts


def run_search(search_path: str | Path, trials: Optional[int] = None, storage: Optional[str] = None,
               workers: int = 1, scale: Optional[str] = None, out: str | Path = "runs/search", sampler: str = "tpe",
               trial_timeout: Optional[float] = None, sets: Optional[Mapping[str, Any]] = None) -> int:
    """`ablate search`: 0 when the study holds N finished trials and a best one; 1 otherwise; 130 if stopped."""
    import optuna
    from optuna.trial import TrialState

    from .launch.processes import make_slots

    if sampler not in ("tpe", "grid"):
        raise ValueError(f"--sampler {sampler!r}: expected tpe or grid")
    if workers < 1:
        raise ValueError(f"--workers {workers}: expected a positive integer")
    search = load_search(search_path, scale, sets)
    trials = trials if trials is not None else search.budget
    if trials is None or trials < 1:
        raise ValueError(f"--trials {trials}: expected a positive number of trials (or `budget:` in {search_path})")
    if sampler == "grid":
        grid_space(search)
    out = Path(out).absolute()
    spec = storage_spec(storage, out, search.name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    study = create_study(search, spec, sampler)
    with AskLock(out / f".{search.name}.lock"):
        stale = fail_stale_trials(study)
        if sampler == "grid":
            allowed = enqueue_grid(study, search, trials)
            if allowed < trials:
                print(f"the grid has room for {allowed} trials in all; running {allowed}, not {trials}", flush=True)
                trials = allowed
    if stale:
        print(f"marked stale trial(s) {', '.join(map(str, stale))} failed (their worker is gone)", flush=True)
    before = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
    print(f"search {search.name}: {search.sweep.name} row {search.row.id} at scale {search.scale.name}, "
          f"{search.metric} ({search.direction}), {trials} trials ({before} already in the study), {workers} worker(s), "
          f"sampler {sampler}, storage {spec}", flush=True)
    slots = make_slots(workers)
    plans = [WorkerPlan(str(search.path), search.scale.name, spec, str(out), trials, sampler, s.index, s.threads,
                        tuple(s.cores), s.gpu, dict(search.sets), train_command, trial_timeout) for s in slots]
    stopped = False
    if workers == 1:
        try:
            worker_loop(plans[0])
        except KeyboardInterrupt:
            stopped = True
    else:
        context = multiprocessing.get_context("spawn")
        processes = [context.Process(target=_worker_main, args=(plan,), name=f"ablate-search-worker-{plan.index}") for plan in plans]
        previous = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
        try:
            for process in processes:
                process.start()
            for process in processes:
                process.join()
        except KeyboardInterrupt:
            stopped = True
            for process in processes:
                if process.is_alive():
                    process.terminate()  # SIGTERM: the worker stops its training and fails its trial
            for process in processes:
                process.join(GRACE_SECONDS + 10)
                if process.is_alive():
                    process.kill()
                    process.join()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        crashed = [p.name for p in processes if p.exitcode not in (0, 130, -signal.SIGTERM)]
        if crashed:
            print(f"worker(s) {', '.join(crashed)} ended abnormally", file=sys.stderr)
    study = load_study(spec, search.name)
    with AskLock(out / f".{search.name}.lock"):
        fail_stale_trials(study)  # a worker that died mid-trial
    counts = summary(study)
    finished = sum(counts.get(s, 0) for s in ("COMPLETE", "PRUNED", "FAIL"))
    print(f"search {search.name}: {finished} finished trials ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})", flush=True)
    path = write_best(search, study, out)
    if path is None:
        print("no trial completed: no best trial", flush=True)
    else:
        best = study.best_trial
        print(f"best: trial {best.number}, {search.metric} = {best.value:.6g}, params {json.dumps(best.params)}", flush=True)
        print(f"      run {best.user_attrs.get('run_dir')}", flush=True)
        print(f"      sweep file: {path} (ablate sweep {path} --scale {search.scale.name})", flush=True)
    if stopped:
        return 130
    return 0 if path is not None and finished >= trials else 1


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def cmd_search(args: argparse.Namespace) -> int:
    from .sweep import parse_sets

    sets = parse_sets(args.set or [])
    if args.data:
        sets["data.path"] = args.data
    return run_search(args.search, trials=args.trials, storage=args.storage, workers=args.workers, scale=args.scale,
                      out=args.out, sampler=args.sampler, trial_timeout=args.trial_timeout, sets=sets)


def add_search_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "search", help="hyperparameter search (optuna) around a sweep row; each trial is a training process",
        description="Search the parameters of a search file (e.g. sweeps/search_tiny.yaml) with optuna: K worker "
        "processes share one study, each trial trains in a process of its own and may be pruned at a validation. "
        "Ends with exactly N trials in the study, prints the best and writes <out>/<name>_best.yaml, a sweep file.",
    )
    parser.add_argument("search", help="search file, e.g. sweeps/search_tiny.yaml")
    parser.add_argument("--trials", type=int, metavar="N", help="trials in the study in all (default: the file's budget)")
    parser.add_argument("--storage", help="sqlite:///F.db, postgresql://..., journal:PATH or PATH.journal "
                        "(default: sqlite:///<out>/<name>.db)")
    parser.add_argument("--workers", type=int, default=1, metavar="K", help="trials at a time, each a worker process (default 1)")
    parser.add_argument("--scale", help="scale preset (default: the file's scale)")
    parser.add_argument("--out", default="runs/search", help="where the study, trial runs and best sweep go (default: runs/search)")
    parser.add_argument("--sampler", choices=("tpe", "grid"), default="tpe",
                        help="tpe (seeded, default) or grid (every combination of categorical choices, enqueued)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="fixed in every trial, e.g. --set train.max_steps=300")
    parser.add_argument("--data", help=DATA_HELP)
    parser.add_argument("--trial-timeout", type=float, metavar="SECONDS", help="stop and fail a trial that trains longer")
    parser.set_defaults(handler=cmd_search)
