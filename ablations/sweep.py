"""Sweeps as data: load and validate sweep and scale files, and expand rows x seeds into runs.

A row is stated in the paper's units (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positional,
train_steps). A scale preset maps it to a budget. `expand` is a pure function of (sweep, scale, seeds,
overrides); a run's id is the hash of its resolved config, so the same row, scale and seed is the same run
everywhere and re-running a sweep finds finished runs by id.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from lightning_modules.config import SECTIONS, RunConfig

# Paper-unit names that are not model fields.
ALIASES = {"eps_ls": "train.eps_ls", "train_steps": "train.max_steps"}
WIDTH_FIELDS = ("d_model", "d_ff", "d_k", "d_v")
PAPER_FIGURES = ("ppl", "bleu", "params_m", "f1")  # f1: Table 4's WSJ 23 F1


def is_integer(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _field_names(section: str) -> list[str]:
    return [f.name for f in dataclasses.fields(SECTIONS[section])]


def canonical_key(key: str, where: str) -> str:
    """`d_k` -> `model.d_k`, `eps_ls` -> `train.eps_ls`, `data.vocab_size` stays; unknown keys are errors."""
    if key in ALIASES:
        return ALIASES[key]
    if "." in key:
        section, name = key.split(".", 1)
        if section == "run" and name == "seed":
            return "seed"
        if section not in SECTIONS:
            raise ValueError(f"{where}: unknown section {section!r} in {key!r}; valid sections: {', '.join(SECTIONS)}")
        if name not in _field_names(section):
            raise ValueError(
                f"{where}: unknown field {key!r}; valid {section} fields: {', '.join(_field_names(section))}"
            )
        return key
    if key == "seed":
        return "seed"
    if key in _field_names("model"):
        return f"model.{key}"
    owners = [s for s in SECTIONS if key in _field_names(s)]
    if owners:
        raise ValueError(
            f"{where}: {key!r} is ambiguous or not a model field; write it as "
            + " or ".join(f"{s}.{key}" for s in owners)
        )
    raise ValueError(
        f"{where}: unknown key {key!r}; expected a model field ({', '.join(_field_names('model'))}), "
        f"{', '.join(ALIASES)}, or section.field"
    )


def apply_overrides(values: dict[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return a copy of a RunConfig dict with `overrides` (paper-unit or dotted keys) applied."""
    out = copy.deepcopy(values)
    for key, value in overrides.items():
        target = canonical_key(str(key), where)
        if target == "seed":
            out["seed"] = value
        else:
            section, name = target.split(".")
            out[section][name] = value
    return out


DATA_HELP = (
    "your corpus directory, only ever read: {train,valid,test}.{en,de} (a parsing sweep: train.tree, valid.tree, "
    "test.tree or WSJ's 02-21.tree, 22.tree, 23.tree); sets data.path and, at a scale that would generate its "
    "corpus or treebank, data.dataset=dir (ptb)"
)
# The dataset a corpus path stands for where the scale would generate one: a translation corpus or a treebank.
READ_INSTEAD = {"generated": "dir", "treebank": "ptb"}


def apply_sets(values: dict[str, Any], sets: Mapping[str, Any]) -> dict[str, Any]:
    """`--set` / `--data` applied last, in run units. A corpus path always means "read my corpus there": where the
    scale would generate the built-in corpus (and `--set` names no dataset), the run switches to `dir`; where it
    would generate the built-in treebank, to `ptb`."""
    out = apply_overrides(values, sets, "--set")
    names_dataset = any(canonical_key(str(key), "--set") == "data.dataset" for key in sets)
    if out["data"]["path"] is not None and out["data"]["dataset"] in READ_INSTEAD and not names_dataset:
        out["data"]["dataset"] = READ_INSTEAD[out["data"]["dataset"]]
    return out


def build_config(values: Mapping[str, Any], where: str) -> RunConfig:
    """RunConfig from a dict; errors say where."""
    try:
        return RunConfig.from_dict(values)
    except ValueError as error:
        # Name the field as sweep files write it too: `train.max_steps = None` comes from `train_steps: null`.
        written = [alias for alias, target in ALIASES.items() if str(error).startswith(f"{target} ")]
        hint = f" (written {written[0]} in paper units)" if written else ""
        raise ValueError(f"{where}: {error}{hint}") from None


@dataclass(frozen=True)
class PaperFigures:
    ppl: Optional[float] = None
    bleu: Optional[float] = None
    params_m: Optional[float] = None
    f1: Optional[float] = None


@dataclass(frozen=True)
class Row:
    id: str
    group: str
    overrides: Mapping[str, Any]
    paper: PaperFigures = field(default_factory=PaperFigures)


@dataclass(frozen=True)
class Contrast:
    """A seed-paired difference between two rows that the table reports beside its Δ against the reference: in a
    grid, one factor's effect at each level of the other (rope-deepnorm against rope-pre)."""

    row: str
    against: str

    @property
    def label(self) -> str:
        return f"{self.row} − {self.against}"


@dataclass(frozen=True)
class Sweep:
    name: str
    path: Path
    base: Mapping[str, Any]
    rows: tuple[Row, ...]
    seeds: tuple[int, ...] = (0,)
    description: str = ""
    scales: Optional[Path] = None  # the file's own scale presets (`scales:`), resolved beside it
    # The row every Δ is measured against (`reference:`); "" is the row of group base, else the first.
    reference: str = ""
    contrasts: tuple[Contrast, ...] = ()  # `contrasts:`, pairs of rows the table also compares seed by seed

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise ValueError(f"{self.path}: no row {row_id!r}; rows: {', '.join(r.id for r in self.rows)}")

    def reference_row(self) -> Row:
        """The row the table's Δ, intervals and verdicts are against; `ablate table --rows` always keeps it."""
        if self.reference:
            return self.row(self.reference)
        return next((row for row in self.rows if row.group == "base"), self.rows[0])

    def where(self, row: Row) -> str:
        """How errors name a row: by its place in the file and by its id."""
        return f"{self.path}: rows[{self.rows.index(row)}] ({row.id})"

    def select(self, row_ids: Optional[Iterable[str]]) -> tuple[Row, ...]:
        return self.rows if row_ids is None else tuple(self.row(r) for r in row_ids)


@dataclass(frozen=True)
class Scale:
    name: str
    description: str
    width_divisor: int
    steps_scale: float
    settings: Mapping[str, Any]
    max_steps: Optional[int] = None  # a cap on every row's scaled train steps (None: no cap)
    seeds: Optional[int] = None  # every row's seeds at this scale, 0..seeds-1 (None: the sweep's own list)
    row_seeds: Mapping[str, int] = field(default_factory=dict)  # rows with more (or fewer) seeds: {"base": 5}
    # Settings of named rows at this scale, in run units, applied after the row's overrides and the scale mapping:
    # a protocol the paper gives one row at its own scale (big: 20 checkpoints averaged, 600 steps apart).
    rows: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def seeds_of(self, sweep: "Sweep", row_id: Optional[str] = None) -> tuple[int, ...]:
        """A row's seeds at this scale: its own count, else the scale's, else the sweep's list."""
        count = self.row_seeds.get(row_id, self.seeds) if row_id is not None else self.seeds
        return sweep.seeds if count is None else tuple(range(count))

    def describe_seeds(self, sweep: "Sweep") -> str:
        """The seeds a table at this scale expects, as its header states them."""
        if self.seeds is None and not self.row_seeds:
            return f"seeds {', '.join(map(str, sweep.seeds))}"
        text = f"seeds {_seed_range(self.seeds_of(sweep))} per row at this scale"
        others = [
            f"{row.id} {_seed_range(self.seeds_of(sweep, row.id))}" for row in sweep.rows if row.id in self.row_seeds
        ]
        return text + (f" ({', '.join(others)})" if others else "")

    def steps(self, paper_steps: int) -> int:
        steps = max(1, round(paper_steps * self.steps_scale))
        return steps if self.max_steps is None else min(steps, self.max_steps)

    def describe_steps(self) -> str:
        return f"steps × {self.steps_scale:g}" + ("" if self.max_steps is None else f", at most {self.max_steps:,}")

    def in_paper_units(self, target: str, value: Any) -> Any:
        """A run-unit value of `target` (a canonical key, as `--set` gives it at this scale) in the paper's units:
        widths times the divisor, steps over the step scale; every other key is the same in both."""
        section, _, name = target.partition(".")
        if section == "model" and name in WIDTH_FIELDS and is_integer(value):
            return value * self.width_divisor
        if target == "train.max_steps" and is_integer(value):
            return int(round(value / self.steps_scale))
        return value


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    sweep: str
    row: str
    group: str
    scale: str
    seed: int
    config: RunConfig


def read_yaml(path: Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {error}") from None


def _expect(condition: bool, where: str, expected: str, value: Any) -> None:
    if not condition:
        raise ValueError(f"{where} = {value!r}: expected {expected}")


def _seed_range(seeds: Sequence[int]) -> str:
    return (
        f"{seeds[0]}–{seeds[-1]}"
        if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1))
        else ", ".join(map(str, seeds))
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    value = {} if value is None else value
    _expect(isinstance(value, dict), where, "a mapping", value)
    return value


def read_contrasts(raw: Any, where: str, row_ids: Sequence[str]) -> tuple[Contrast, ...]:
    """`contrasts: [{row: A, against: B}, ...]`: two different rows of the sweep each, no pair twice."""
    raw = [] if raw is None else raw
    _expect(isinstance(raw, list), where, "a list of {row: ROW, against: ROW}", raw)
    contrasts: list[Contrast] = []
    for i, item in enumerate(raw):
        _expect(
            isinstance(item, dict) and set(item) == {"row", "against"},
            f"{where}[{i}]",
            "{row: ROW, against: ROW}",
            item,
        )
        for key in ("row", "against"):
            _expect(item[key] in row_ids, f"{where}[{i}].{key}", "a row id (" + ", ".join(row_ids) + ")", item[key])
        _expect(item["row"] != item["against"], f"{where}[{i}]", "two different rows", item)
        contrast = Contrast(item["row"], item["against"])
        _expect(contrast not in contrasts, f"{where}[{i}]", "a pair not listed before", item)
        contrasts.append(contrast)
    return tuple(contrasts)


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; every row must resolve to a valid config in paper units."""
    path = Path(path)
    data = read_yaml(path)
    _expect(isinstance(data, dict), str(path), "a mapping with name, base, rows", type(data).__name__)
    known = {"name", "description", "base", "rows", "seeds", "scales", "reference", "contrasts"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(known))}")
    name = data.get("name", path.stem)
    _expect(isinstance(name, str) and name, f"{path}: name", "a non-empty string", name)
    seeds = data.get("seeds", [0])
    _expect(
        isinstance(seeds, list)
        and seeds
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds),
        f"{path}: seeds",
        "a non-empty list of non-negative integers",
        seeds,
    )
    base = _mapping(data.get("base"), f"{path}: base")
    raw_rows = data.get("rows")
    _expect(isinstance(raw_rows, list) and raw_rows, f"{path}: rows", "a non-empty list", raw_rows)
    rows, seen = [], set()
    for i, raw in enumerate(raw_rows):
        where = f"{path}: rows[{i}]"
        _expect(isinstance(raw, dict), where, "a mapping with id, group, overrides, paper", raw)
        extra = sorted(set(raw) - {"id", "group", "overrides", "paper"})
        if extra:
            raise ValueError(f"{where}: unknown key {extra[0]!r}; valid keys: group, id, overrides, paper")
        row_id = raw.get("id")
        _expect(isinstance(row_id, str) and row_id, f"{where}.id", "a non-empty string", row_id)
        if row_id in seen:
            raise ValueError(f"{where}.id = {row_id!r}: duplicate row id")
        seen.add(row_id)
        group = raw.get("group", row_id)
        _expect(isinstance(group, str) and group, f"{where}.group", "a non-empty string", group)
        overrides = _mapping(raw.get("overrides"), f"{where}.overrides")
        paper = _mapping(raw.get("paper"), f"{where}.paper")
        for key, value in paper.items():
            _expect(key in PAPER_FIGURES, f"{where}.paper.{key}", "one of " + ", ".join(PAPER_FIGURES), key)
            _expect(
                value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)),
                f"{where}.paper.{key}",
                "a number or null",
                value,
            )
        rows.append(Row(row_id, group, dict(overrides), PaperFigures(**paper)))
    scales = own_scales(path, data)
    reference = data.get("reference", "")
    _expect(
        reference == "" or reference in seen,
        f"{path}: reference",
        "the id of one of its rows (" + ", ".join(row.id for row in rows) + ")",
        reference,
    )
    contrasts = read_contrasts(data.get("contrasts"), f"{path}: contrasts", [row.id for row in rows])
    sweep = Sweep(
        name,
        path,
        dict(base),
        tuple(rows),
        tuple(seeds),
        str(data.get("description", "")),
        scales,
        reference,
        contrasts,
    )
    for row in sweep.rows:
        paper_units(sweep, row)
    return sweep


def load_scales(path: str | Path) -> dict[str, Scale]:
    path = Path(path)
    data = read_yaml(path)
    _expect(isinstance(data, dict) and data, str(path), "a mapping of scale names to presets", data)
    scales = {}
    for name, raw in data.items():
        where = f"{path}: {name}"
        _expect(isinstance(raw, dict), where, "a mapping", raw)
        keys = ("description", "max_steps", "row_seeds", "rows", "seeds", "settings", "steps_scale", "width_divisor")
        extra = sorted(set(raw) - set(keys))
        if extra:
            raise ValueError(f"{where}: unknown key {extra[0]!r}; valid keys: {', '.join(keys)}")
        divisor = raw.get("width_divisor", 1)
        _expect(
            isinstance(divisor, int) and not isinstance(divisor, bool) and divisor >= 1,
            f"{where}.width_divisor",
            "a positive integer",
            divisor,
        )
        steps_scale = raw.get("steps_scale", 1.0)
        _expect(
            isinstance(steps_scale, (int, float)) and not isinstance(steps_scale, bool) and steps_scale > 0,
            f"{where}.steps_scale",
            "a positive number",
            steps_scale,
        )
        max_steps = raw.get("max_steps")
        _expect(
            max_steps is None or (isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps >= 1),
            f"{where}.max_steps",
            "a positive integer (or absent: no cap)",
            max_steps,
        )
        settings = _mapping(raw.get("settings"), f"{where}.settings")
        for key in settings:
            canonical_key(str(key), f"{where}.settings")
        seeds = raw.get("seeds")
        _expect(seeds is None or _count(seeds), f"{where}.seeds", "a positive number of seeds (0..N-1)", seeds)
        row_seeds = _mapping(raw.get("row_seeds"), f"{where}.row_seeds")
        for row_id, count in row_seeds.items():
            _expect(_count(count), f"{where}.row_seeds.{row_id}", "a positive number of seeds (0..N-1)", count)
        rows = _mapping(raw.get("rows"), f"{where}.rows")
        for row, row_settings in rows.items():
            for key in _mapping(row_settings, f"{where}.rows.{row}"):
                canonical_key(str(key), f"{where}.rows.{row}")
        scales[name] = Scale(
            name,
            str(raw.get("description", "")),
            divisor,
            float(steps_scale),
            dict(settings),
            max_steps,
            seeds,
            {str(k): v for k, v in row_seeds.items()},
            {str(row): dict(row_settings) for row, row_settings in rows.items()},
        )
    return scales


SCALES_ENV = "ABLATE_SCALES"  # the `--scales FILE` of a command, set by the CLI (seen by its search workers too)
PROJECT_SCALES = Path(__file__).resolve().parent.parent / "sweeps" / "scales.yaml"  # the project's presets
SCALE_HELP = (
    "scale preset of the sweep's scales.yaml, else sweeps/scales.yaml: tiny (smoke), converged (Table 3 that measures "
    "quality on CPUs), converged_4x (4x its steps and lexicon: base plateaus), small (Multi30k) or paper"
)


def own_scales(path: Path, data: Any) -> Optional[Path]:
    """The presets a sweep file names with `scales: FILE` (a path beside it), checked; None without the key."""
    if not isinstance(data, dict) or data.get("scales") is None:
        return None
    value = data["scales"]
    _expect(isinstance(value, str) and value, f"{path}: scales", "the file name of scale presets beside it", value)
    named = path.parent / value
    if not named.is_file():
        raise ValueError(f"{path}: scales = {value!r}: no such file {named}")
    return named


def scales_path(sweep_path: str | Path) -> Path:
    """Where a sweep's scale presets are: `--scales FILE` (ABLATE_SCALES) when given; else the file the sweep names
    with `scales:` (Table 4's parsing presets: its tiny scale is a treebank's, not the translation corpus'); else the
    `scales.yaml` beside the sweep file; else the project's sweeps/scales.yaml (so a sweep file of one's own may sit
    anywhere)."""
    given = os.environ.get(SCALES_ENV, "").strip()
    if given:
        path = Path(given)
        if not path.is_file():
            raise ValueError(f"--scales {path}: no such file")
        return path
    named = own_scales(Path(sweep_path), read_yaml(Path(sweep_path))) if Path(sweep_path).is_file() else None
    if named is not None:
        return named
    beside = Path(sweep_path).parent / "scales.yaml"
    return beside if beside.is_file() else PROJECT_SCALES


def scales_for(sweep_path: str | Path) -> dict[str, Scale]:
    """The scale presets of a sweep, from scales_path(sweep_path)."""
    return load_scales(scales_path(sweep_path))


def scale_named(sweep_path: str | Path, name: str, where: str = "--scale") -> Scale:
    """The scale preset `name` of the sweep's scales.yaml; an error naming the known ones when there is none."""
    scales = scales_for(sweep_path)
    if name not in scales:
        raise ValueError(f"{where} {name!r}: unknown; scales: {', '.join(scales)}")
    return scales[name]


RUN_STEPS = "run_steps"  # steps in run units: not multiplied by the scale's steps_scale (train_steps is)


def without_run_steps(values: Mapping[str, Any], where: str) -> tuple[dict[str, Any], Optional[int]]:
    """`values` without `run_steps`, and its value: a positive integer of optimiser steps at every scale."""
    rest = {key: value for key, value in values.items() if key != RUN_STEPS}
    steps = values.get(RUN_STEPS)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"{where}: {RUN_STEPS} = {steps!r}: expected a positive integer (optimiser steps, run units)")
    if steps is not None and "train_steps" in values:
        raise ValueError(f"{where}: give train_steps (paper units) or {RUN_STEPS} (run units), not both")
    return rest, steps


def paper_units(sweep: Sweep, row: Row, scale: Optional[Scale] = None, sets: Mapping[str, Any] = {}) -> RunConfig:
    """The row exactly as the paper states it (full dimensions), validated; with `sets` (`--set`, run units at
    `scale`) brought back to the paper's units and applied last: the row as its runs trained, in the paper's units."""
    base, _ = without_run_steps(sweep.base, f"{sweep.path}: base")
    overrides, _ = without_run_steps(row.overrides, sweep.where(row))
    values = apply_overrides(RunConfig().to_dict(), base, f"{sweep.path}: base")
    values = apply_overrides(values, overrides, sweep.where(row))
    if sets:
        if scale is None:
            raise ValueError(
                f"{sweep.where(row)}: --set values are in run units, so bringing them back needs the scale"
            )
        in_paper = {key: scale.in_paper_units(canonical_key(str(key), "--set"), value) for key, value in sets.items()}
        values = apply_sets(values, in_paper)
    return build_config(values, sweep.where(row))


def resolve(sweep: Sweep, row: Row, scale: Scale, seed: int, sets: Mapping[str, Any] = {}) -> RunConfig:
    """Preset settings, then the sweep's base and the row (paper units), then the scale mapping, then `sets`."""
    where = f"{sweep.where(row)} at scale {scale.name}"
    values = apply_overrides(RunConfig().to_dict(), scale.settings, f"scale {scale.name}")
    base, base_run_steps = without_run_steps(sweep.base, f"{sweep.path}: base")
    overrides, row_run_steps = without_run_steps(row.overrides, where)
    values = apply_overrides(values, base, f"{sweep.path}: base")
    values = apply_overrides(values, overrides, where)
    model = values["model"]
    for name in WIDTH_FIELDS:
        if model[name] is None:
            continue
        if model[name] % scale.width_divisor:
            raise ValueError(
                f"{where}: model.{name} = {model[name]} is not divisible by width_divisor {scale.width_divisor}"
            )
        model[name] //= scale.width_divisor
    values["train"]["max_steps"] = scale.steps(values["train"]["max_steps"])
    run_steps = row_run_steps if row_run_steps is not None else base_run_steps
    if run_steps is not None and not (row_run_steps is None and "train_steps" in row.overrides):
        values["train"]["max_steps"] = run_steps
    values = apply_overrides(values, scale.rows.get(row.id, {}), f"scale {scale.name}, row {row.id}")
    values["seed"] = seed
    return build_config(apply_sets(values, sets), where)


def expand(
    sweep: Sweep,
    scale: Scale,
    seeds: Optional[Sequence[int]] = None,
    rows: Optional[Iterable[str]] = None,
    sets: Mapping[str, Any] = {},
) -> list[RunSpec]:
    """Rows x seeds -> runs, in row order then seed order. Pure: no files are touched. `seeds` (the command's
    --seeds) applies to every row; without it each row has its seeds at this scale (Scale.seeds_of)."""
    specs = []
    for row in sweep.select(rows):
        for seed in seeds if seeds is not None else scale.seeds_of(sweep, row.id):
            config = resolve(sweep, row, scale, seed, sets)
            specs.append(RunSpec(config.run_id(), sweep.name, row.id, row.group, scale.name, seed, config))
    return specs


def parse_id_list(text: str, flag: str) -> list[str]:
    """`--rows A1,B2`: the ids in order; empty items and repeats are errors naming the flag."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{flag} {text!r}: expected a comma-separated list")
    if len(set(items)) != len(items):
        raise ValueError(f"{flag} {text!r}: an item appears twice")
    return items


def command_sets(args: Any) -> dict[str, Any]:
    """A command's `--set KEY=VALUE` and `--data DIR`, as overrides applied last, in run units (apply_sets)."""
    sets = parse_sets(args.set or [])
    if args.data:
        sets["data.path"] = args.data
    return sets


def selected_seeds(args: Any) -> Optional[tuple[int, ...]]:
    """`--seeds N` (0..N-1) or `--seed-list S,S`, checked; None for the sweep's own seeds."""
    if getattr(args, "seeds", None) is not None:
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: expected a positive number of seeds (0..N-1)")
        return tuple(range(args.seeds))
    if getattr(args, "seed_list", None):
        try:
            seeds = tuple(int(s) for s in parse_id_list(args.seed_list, "--seed-list"))
        except ValueError as error:
            raise ValueError(f"--seed-list {args.seed_list!r}: expected integers like 0,1 ({error})") from None
        if any(s < 0 for s in seeds):
            raise ValueError(f"--seed-list {args.seed_list!r}: seeds are non-negative")
        return seeds
    return None


def add_selection_arguments(parser: Any, rows_help: str, set_help: str) -> None:
    """--rows, --seeds / --seed-list, --set and --data: how `ablate sweep` and `ablate table` select runs."""
    parser.add_argument("--rows", help=rows_help)
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, metavar="N", help="the first N seeds, 0..N-1 (default: the sweep's seeds)")
    seeds.add_argument("--seed-list", metavar="S,S", help="explicit seeds, e.g. 0,1")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    parser.add_argument("--data", help=DATA_HELP)


def add_scales_argument(parser: Any) -> None:
    """--scales FILE, for every command that resolves a scale preset."""
    parser.add_argument(
        "--scales",
        metavar="FILE",
        help="scale presets file (default: the scales.yaml beside the sweep file, else the project's sweeps/scales.yaml)",
    )


def parse_sets(pairs: Iterable[str]) -> dict[str, Any]:
    """`--set key=value` pairs; values are parsed as YAML scalars (1e-3, true, null, rope)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set {pair!r}: expected key=value, e.g. --set model.positional=rope")
        key, value = pair.split("=", 1)
        out[key.strip()] = _scalar(value)
    return out


def _scalar(text: str) -> Any:
    value = yaml.safe_load(text)
    if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
        try:
            return float(value)
        except ValueError:
            pass
    return value
