"""The search file: its schema, validated in full (every parameter's bounds included) before anything runs."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from ..sweep import (
    Row,
    Scale,
    Sweep,
    canonical_key,
    is_integer,
    load_sweep,
    read_yaml,
    resolve,
    scale_named,
    scales_for,
)

METRICS = {  # metrics.json key -> (direction, metric the LightningModule logs at each validation)
    "dev_bleu": ("maximize", "dev/bleu"),
    "dev_loss": ("minimize", "dev/loss"),
    "dev_ppl": ("minimize", "dev/ppl"),
    "dev_f1": ("maximize", "dev/f1"),  # parsing: labelled bracket F1 (EVALB)
}

FILE_KEYS = (
    "name",
    "description",
    "sweep",
    "row",
    "scale",
    "seed",
    "metric",
    "direction",
    "budget",
    "pruner",
    "sampler_seed",
    "params",
)

DIST_KEYS = {
    "float": ("type", "low", "high", "log", "step"),
    "int": ("type", "low", "high", "log", "step"),
    "categorical": ("type", "choices"),
}

PRUNERS = {
    "median": ("type", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"),
    "none": ("type",),
}


@dataclass(frozen=True)
class Param:
    key: str  # as written in the search file (also the optuna parameter name)
    target: str  # canonical key, e.g. model.P_drop
    spec: Mapping[str, Any]  # the validated distribution, plain data

    def distribution(self):
        import optuna.distributions as d

        kind = self.spec["type"]
        if kind == "float":
            return d.FloatDistribution(
                self.spec["low"], self.spec["high"], log=self.spec.get("log", False), step=self.spec.get("step")
            )
        if kind == "int":
            return d.IntDistribution(
                self.spec["low"], self.spec["high"], log=self.spec.get("log", False), step=self.spec.get("step", 1)
            )
        return d.CategoricalDistribution(list(self.spec["choices"]))

    def corners(self) -> list[Any]:
        return (
            list(self.spec["choices"]) if self.spec["type"] == "categorical" else [self.spec["low"], self.spec["high"]]
        )


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


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
    check = is_integer if kind == "int" else is_number
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
        if key in raw and not (
            is_integer(raw[key]) and raw[key] >= (1 if key in ("interval_steps", "n_min_trials") else 0)
        ):
            _fail(
                f"{where}.{key}",
                raw[key],
                "a non-negative integer" if key in ("n_startup_trials", "n_warmup_steps") else "a positive integer",
            )
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
        raise ValueError(
            f"{path}: sweep = {data['sweep']!r}: no such file (looked beside the search file and in {Path.cwd()})"
        )
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
    if not (is_integer(seed) and seed >= 0):
        _fail(f"{path}: seed", seed, "a non-negative integer")
    metric = data.get("metric")
    if metric not in METRICS:
        _fail(f"{path}: metric", metric, "one of " + ", ".join(f"{m} ({d})" for m, (d, _) in METRICS.items()))
    direction = data.get("direction", METRICS[metric][0])
    if direction != METRICS[metric][0]:
        _fail(f"{path}: direction", direction, f"{METRICS[metric][0]!r} for metric {metric}")
    budget = data.get("budget")
    if budget is not None and not (is_integer(budget) and budget >= 1):
        _fail(f"{path}: budget", budget, "a positive integer (trials)")
    sampler_seed = data.get("sampler_seed", 0)
    if not (is_integer(sampler_seed) and sampler_seed >= 0):
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
    search = Search(
        path,
        name,
        str(data.get("description", "")),
        sweep,
        row,
        scale_preset,
        seed,
        metric,
        direction,
        budget,
        pruner,
        sampler_seed,
        tuple(params),
        sets,
    )
    try:
        search.config({})
    except ValueError as error:
        raise ValueError(f"{path}: the base row does not resolve: {error}") from None
    for param in search.params:  # every bound / choice must make a valid run, the others at the base's values
        for value in param.corners():
            try:
                search.config({param.key: value})
            except ValueError as error:
                raise ValueError(
                    f"{path}: params.{param.key} = {value!r} gives an invalid run config: {error}"
                ) from None
    return search
