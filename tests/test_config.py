"""Config validation: bad values fail at construction with a ValueError naming the field and what is allowed."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import typing

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_modules.config import (
    FFN,
    NORM,
    NORM_PLACEMENT,
    POSITIONAL,
    PRECISION,
    RETIRED_FIELDS,
    DataConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    batch_plan,
    from_dict,
)

MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig)]


@contextlib.contextmanager
def raises_for(field: str, *fragments: str):
    """pytest.raises(ValueError) whose message starts with `field` and contains every fragment."""
    with pytest.raises(ValueError) as info:
        yield info
    message = str(info.value)
    assert message.startswith(field), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# --------------------------------------------------------------------------------------------------
# ModelConfig
# --------------------------------------------------------------------------------------------------


def test_defaults_are_the_paper_base_model():
    cfg = ModelConfig()
    assert (cfg.N, cfg.d_model, cfg.d_ff, cfg.h, cfg.head_dim_k, cfg.head_dim_v) == (6, 512, 2048, 8, 64, 64)
    assert (cfg.P_drop, cfg.positional, cfg.norm_placement, cfg.norm, cfg.ffn) == (
        0.1,
        "sinusoidal",
        "post",
        "layernorm",
        "relu",
    )
    assert cfg.tie_embeddings and cfg.scale_embeddings and cfg.n_kv_heads == 8 and DataConfig().vocab_size == 37000


def test_unknown_positional_lists_the_valid_ones():
    with raises_for("model.positional", "'sinusoidal'", "'learned'", "'rope'", "'none'", "'alibi'"):
        ModelConfig(positional="alibi")


@pytest.mark.parametrize(
    "field,value,choices",
    [("norm_placement", "sandwich", NORM_PLACEMENT), ("norm", "batchnorm", NORM), ("ffn", "tanh", FFN)],
)
def test_unknown_choice_lists_the_valid_ones(field, value, choices):
    with raises_for(f"model.{field}", *[repr(c) for c in choices]):
        ModelConfig(**{field: value})


def test_rope_needs_an_even_d_k():
    with raises_for("model.d_k", "even", "rope"):
        ModelConfig(positional="rope", d_k=63)
    with raises_for("model.d_k", "even"):
        ModelConfig(positional="rope", d_model=24, h=8)  # implied d_k = 3
    assert ModelConfig(positional="rope", d_model=24, h=8, d_k=4).head_dim_k == 4
    assert ModelConfig(positional="sinusoidal", d_k=63).head_dim_k == 63  # odd is fine without RoPE


@pytest.mark.parametrize("field", ["P_drop", "attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("value", [1.0, -0.1, 1.5, float("nan"), "0.1", True])
def test_dropout_outside_zero_one_rejected(field, value):
    with raises_for(f"model.{field}", "[0, 1)"):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("field", ["P_drop", "attention_dropout", "activation_dropout"])
def test_dropout_inside_zero_one_accepted(field):
    for value in (0, 0.0, 0.3, 0.999):
        assert getattr(ModelConfig(**{field: value}), field) == value


@pytest.mark.parametrize("field", ["N", "d_model", "d_ff", "h", "max_positions", "d_k", "d_v", "kv_heads"])
@pytest.mark.parametrize("value", [0, -1, 2.0, "8", True, False])
def test_positive_integers(field, value):
    with raises_for(f"model.{field}", "positive integer"):
        ModelConfig(**{field: value})


def test_n_zero_rejected():
    with raises_for("model.N", "positive integer"):
        ModelConfig(N=0)


def test_d_model_not_divisible_by_h_needs_explicit_head_sizes():
    with raises_for("model.d_k", "d_model (100)", "h (8)"):
        ModelConfig(d_model=100, h=8)
    with raises_for("model.d_v", "d_model (100)", "h (8)"):
        ModelConfig(d_model=100, h=8, d_k=12)
    cfg = ModelConfig(d_model=100, h=8, d_k=12, d_v=13)
    assert (cfg.head_dim_k, cfg.head_dim_v) == (12, 13)


def test_h_times_d_k_need_not_equal_d_model():
    cfg = ModelConfig(h=8, d_k=16, d_v=64, d_model=512)  # Table 3 row B1
    assert (cfg.head_dim_k, cfg.head_dim_v, cfg.h * cfg.head_dim_k) == (16, 64, 128)
    cfg = ModelConfig(h=1, d_k=512, d_v=512)  # row A1
    assert cfg.head_dim_k == 512


def test_kv_heads_must_divide_h():
    with raises_for("model.kv_heads", "divisor of h (8)"):
        ModelConfig(h=8, kv_heads=3)
    with raises_for("model.kv_heads"):
        ModelConfig(h=8, kv_heads=16)
    for g in (1, 2, 4, 8):
        assert ModelConfig(h=8, kv_heads=g).n_kv_heads == g


@pytest.mark.parametrize("field", ["tie_embeddings", "scale_embeddings"])
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_booleans_must_be_booleans(field, value):
    with raises_for(f"model.{field}", "true or false"):
        ModelConfig(**{field: value})


def test_booleans_where_ints_expected():
    for field in ("N", "d_model", "h", "d_k", "kv_heads"):
        with raises_for(f"model.{field}"):
            ModelConfig(**{field: True})


def test_the_choice_tuples_are_the_literals_values():
    hints = typing.get_type_hints(ModelConfig)
    assert POSITIONAL == typing.get_args(hints["positional"]) == ("sinusoidal", "learned", "rope", "none")
    assert (NORM_PLACEMENT, NORM, FFN) == tuple(typing.get_args(hints[n]) for n in ("norm_placement", "norm", "ffn"))
    assert PRECISION == typing.get_args(typing.get_type_hints(TrainConfig)["precision"])
    assert "bf16-mixed" in PRECISION
    assert DataConfig().dataset in typing.get_args(typing.get_type_hints(DataConfig)["dataset"])


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ModelConfig().N = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# from_dict / to_dict / run_id
# --------------------------------------------------------------------------------------------------


def test_from_dict_unknown_field_names_it_and_lists_valid_fields():
    with raises_for("model.d_modle", "unknown field", *MODEL_FIELDS):
        RunConfig.from_dict({"model": {"d_modle": 512}})
    with raises_for("run.optimizer", "unknown field", "model", "data", "train", "eval", "seed"):
        RunConfig.from_dict({"optimizer": "adam"})
    with raises_for("train.lr", "unknown field", "warmup_steps"):
        RunConfig.from_dict({"train": {"lr": 1.0}})


def test_from_dict_checks_types_and_accepts_ints_for_floats():
    cfg = RunConfig.from_dict({"model": {"P_drop": 0, "N": 4.0}, "train": {"lr_scale": 2}})
    assert cfg.model.P_drop == 0.0 and isinstance(cfg.model.P_drop, float)
    assert cfg.model.N == 4 and isinstance(cfg.model.N, int)
    assert cfg.train.lr_scale == 2.0 and isinstance(cfg.train.lr_scale, float)
    with raises_for("model.N", "integer"):
        RunConfig.from_dict({"model": {"N": 4.5}})
    with raises_for("model.N", "integer"):
        RunConfig.from_dict({"model": {"N": "6"}})
    with raises_for("model.P_drop", "number"):
        RunConfig.from_dict({"model": {"P_drop": "0.1"}})
    with raises_for("model.tie_embeddings", "true or false"):
        RunConfig.from_dict({"model": {"tie_embeddings": "yes"}})
    with raises_for("model.d_k", "integer"):
        RunConfig.from_dict({"model": {"d_k": True}})
    with raises_for("data.path", "string"):
        RunConfig.from_dict({"data": {"path": 3}})
    with raises_for("model", "mapping"):
        RunConfig.from_dict({"model": [1, 2]})
    with raises_for("run", "mapping"):
        RunConfig.from_dict("model: {}")  # type: ignore[arg-type]
    assert RunConfig.from_dict({"model": {"d_k": None}}).model.d_k is None


def test_the_vocabulary_and_the_pad_id_are_the_datas():
    # model.vocab_size and model.pad_id are retired: the data holds the vocabulary size, the tokenizer the pad id.
    assert "vocab_size" not in MODEL_FIELDS and "pad_id" not in MODEL_FIELDS
    with pytest.raises(TypeError):
        ModelConfig(vocab_size=1000)  # type: ignore[call-arg]
    with raises_for("model.vocab_size", "unknown field"):  # only a whole run's record may hold a retired field
        from_dict(ModelConfig, {"vocab_size": 1000}, "model")
    # An old record holds them at the one value they could have: it is read, and keeps its run id.
    old = RunConfig.from_dict({"model": {"vocab_size": 1000, "pad_id": 0}, "data": {"vocab_size": 1000}})
    assert old == RunConfig.from_dict({"data": {"vocab_size": 1000}}) and old.data.vocab_size == 1000
    assert "vocab_size" not in old.to_dict()["model"] and "pad_id" not in old.to_dict()["model"]
    # Any other value is an error naming the field and where the fact lives now.
    with raises_for("model.vocab_size", "1000", "data.vocab_size"):
        RunConfig.from_dict({"model": {"vocab_size": 1000}})  # data.vocab_size is 37000
    with raises_for("model.pad_id", "0 or no value", "pad id"):
        RunConfig.from_dict({"model": {"pad_id": 1}})
    with raises_for("model.pad_id"):
        RunConfig.from_dict({"model": {"pad_id": False}})
    with raises_for("model.d_modle", "unknown field"):  # the other fields are still checked
        RunConfig.from_dict({"model": {"pad_id": 0, "d_modle": 512}})


def test_the_retired_pad_id_is_the_tokenizers():
    from lightning_modules.data import PAD_ID

    assert RETIRED_FIELDS["model", "pad_id"].value(RunConfig()) == PAD_ID
    assert RETIRED_FIELDS["model", "vocab_size"].value(RunConfig(data=DataConfig(vocab_size=8000))) == 8000


def test_a_retired_field_is_hashed_at_its_value():
    # What the run id of a config saved before the fields retired hashed: the same dict, the two fields included.
    config = RunConfig(data=DataConfig(vocab_size=2000), seed=3)
    values = config.to_dict()
    values["model"] = {**values["model"], "vocab_size": 2000, "pad_id": 0}
    values["train"] = {**values["train"], "accumulate_grad_batches": 1, "compile": False}
    del values["train"]["cooldown_fraction"]  # added since: hashed only away from its default
    del values["data"]["device_batch_tokens"]
    del values["data"]["generated_lexicon_scale"]
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"))
    assert config.run_id() == hashlib.sha256(blob.encode()).hexdigest()[:12]


def test_round_trip():
    assert RunConfig.from_dict(RunConfig().to_dict()) == RunConfig()
    custom = RunConfig(
        model=ModelConfig(h=8, d_k=16, d_v=64, positional="rope", kv_heads=2, norm="rmsnorm"),
        data=DataConfig(dataset="multi30k", path="/data/m30k", vocab_size=8000),
        train=TrainConfig(max_minutes=30.0, precision="bf16-mixed"),
        eval=EvalConfig(average_last=5, dev_bleu_sentences=200),
        seed=3,
    )
    assert RunConfig.from_dict(custom.to_dict()) == custom
    assert RunConfig.from_dict(custom.to_dict()).run_id() == custom.run_id()


def test_equal_configs_have_equal_run_ids_whatever_the_number_type():
    as_int = RunConfig(model=ModelConfig(P_drop=0), train=TrainConfig(max_minutes=30))
    as_float = RunConfig(model=ModelConfig(P_drop=0.0), train=TrainConfig(max_minutes=30.0))
    assert as_int == as_float
    assert RunConfig.from_dict(as_int.to_dict()).run_id() == as_int.run_id()
    assert as_int.run_id() == as_float.run_id()


def test_a_field_added_since_the_records_leaves_their_run_ids_alone():
    records = sorted(pathlib.Path(__file__).parent.parent.glob("results/records/*/*/config.yaml"))
    assert records
    for path in records:
        config = RunConfig.from_dict(yaml.safe_load(path.read_text())["config"])
        assert config.run_id() == path.parent.name.rsplit("-", 1)[1], path
    cooled = RunConfig(train=TrainConfig(cooldown_fraction=0.2))
    assert cooled.run_id() != RunConfig().run_id()  # set away from its default, the field is part of the identity


def test_run_id_is_stable():
    rid = RunConfig().run_id()
    assert re.fullmatch(r"[0-9a-f]{12}", rid)
    assert RunConfig().run_id() == rid
    assert RunConfig.from_dict({}).run_id() == rid
    # ... across processes too (no dependence on hash randomisation or object identity).
    code = "from lightning_modules.config import RunConfig; print(RunConfig().run_id())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.stdout.strip() == rid


def _alternatives(cls, name: str, value):
    """Candidate different values for a field, most plausible first."""
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return [c for c in args if c != value]
    if value is None:
        inner = args[0]
        return {int: [32, 4, 10, 8000], float: [5.0], str: ["valid", "x"]}[inner]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value * 2, value + 1] if value > 0 else [value + 1]
    if isinstance(value, float):
        return [value / 2, value * 2] if value > 0 else [0.1, 1.0]
    if isinstance(value, str):
        return [value + "x"]
    raise AssertionError(f"no alternative for {cls.__name__}.{name}")


def _every_single_field_change():
    base = RunConfig()
    for section in ("model", "data", "train", "eval"):
        cfg = getattr(base, section)
        for f in dataclasses.fields(cfg):
            for alt in _alternatives(type(cfg), f.name, getattr(cfg, f.name)):
                try:
                    # a path is a corpus to read, so it comes with dataset dir
                    extra = {"dataset": "dir"} if (section, f.name) == ("data", "path") else {}
                    changed = dataclasses.replace(cfg, **{f.name: alt}, **extra)
                    new = dataclasses.replace(base, **{section: changed})
                except ValueError:
                    continue
                yield f"{section}.{f.name}", new
                break
            else:
                raise AssertionError(f"found no valid change of {section}.{f.name}")
    yield "seed", dataclasses.replace(base, seed=1)


def test_run_id_changes_when_any_field_changes():
    base = RunConfig()
    seen = {base.run_id(): "default"}
    changes = list(_every_single_field_change())
    n_fields = sum(len(dataclasses.fields(s)) for s in (ModelConfig, DataConfig, TrainConfig, EvalConfig)) + 1
    assert len(changes) == n_fields
    for where, cfg in changes:
        assert cfg != base, where
        rid = cfg.run_id()
        assert rid not in seen, f"{where} does not change the run id (same as {seen.get(rid)})"
        seen[rid] = where
        assert RunConfig.from_dict(cfg.to_dict()) == cfg, where


# --------------------------------------------------------------------------------------------------
# TrainConfig / DataConfig / EvalConfig
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls,kwargs,field,fragment",
    [
        (TrainConfig, dict(max_steps=0), "train.max_steps", "positive integer"),
        (TrainConfig, dict(max_steps=1.5), "train.max_steps", "positive integer"),
        (TrainConfig, dict(warmup_steps=-1), "train.warmup_steps", "non-negative integer"),
        (TrainConfig, dict(lr_scale=0), "train.lr_scale", "positive finite"),
        (TrainConfig, dict(lr_scale=float("inf")), "train.lr_scale", "positive finite"),
        (TrainConfig, dict(adam_beta1=1.0), "train.adam_beta1", "[0, 1)"),
        (TrainConfig, dict(adam_beta2=-0.5), "train.adam_beta2", "[0, 1)"),
        (TrainConfig, dict(adam_eps=0.0), "train.adam_eps", "positive finite"),
        (TrainConfig, dict(eps_ls=1.0), "train.eps_ls", "[0, 1)"),
        (TrainConfig, dict(weight_decay=-0.01), "train.weight_decay", "non-negative"),
        (TrainConfig, dict(gradient_clip=-1.0), "train.gradient_clip", "non-negative"),
        (TrainConfig, dict(precision="fp8"), "train.precision", "'bf16-mixed'"),
        (TrainConfig, dict(keep_checkpoints=True), "train.keep_checkpoints", "positive integer"),
        (TrainConfig, dict(max_minutes=0), "train.max_minutes", "positive finite"),
        (TrainConfig, dict(max_minutes=float("nan")), "train.max_minutes", "positive finite"),
        (DataConfig, dict(dataset="wmt17"), "data.dataset", "'multi30k'"),
        (DataConfig, dict(dataset="multi30k"), "data.path", "corpus directory"),
        (DataConfig, dict(dataset="dir", path=""), "data.path", "corpus directory"),
        (DataConfig, dict(vocab_size=8, batch_tokens=100, max_tokens=10), "data.vocab_size", "at least 16"),
        (DataConfig, dict(vocab_size=0), "data.vocab_size", "positive integer"),
        (DataConfig, dict(max_tokens=300, batch_tokens=200), "data.batch_tokens", "max_tokens (300)"),
        (DataConfig, dict(num_workers=-1), "data.num_workers", "non-negative integer"),
        (DataConfig, dict(device_batch_tokens=0), "data.device_batch_tokens", "positive integer"),
        (DataConfig, dict(device_batch_tokens=100, max_tokens=256), "data.device_batch_tokens", "max_tokens (256)"),
        (DataConfig, dict(generated_pairs=0), "data.generated_pairs", "positive integer"),
        (EvalConfig, dict(beam_size=0), "eval.beam_size", "positive integer"),
        (EvalConfig, dict(length_penalty=-0.6), "eval.length_penalty", "non-negative"),
        (EvalConfig, dict(length_penalty="0.6"), "eval.length_penalty", "non-negative"),
        (EvalConfig, dict(max_len_offset=-1), "eval.max_len_offset", "non-negative integer"),
        (EvalConfig, dict(average_last=-5), "eval.average_last", "non-negative integer"),
        (EvalConfig, dict(dev_bleu_sentences=0), "eval.dev_bleu_sentences", "positive integer"),
        (EvalConfig, dict(batch_sentences=0), "eval.batch_sentences", "positive integer"),
    ],
    ids=lambda v: v if isinstance(v, str) and "." in v else None,
)
def test_section_invalid_values(cls, kwargs, field, fragment):
    with raises_for(field, fragment):
        cls(**kwargs)


def test_run_seed_non_negative():
    with raises_for("run.seed", "non-negative"):
        RunConfig(seed=-1)


def test_section_valid_values():
    assert TrainConfig().precision == "32-true" and TrainConfig().eps_ls == 0.1
    assert (TrainConfig().adam_beta1, TrainConfig().adam_beta2, TrainConfig().adam_eps) == (0.9, 0.98, 1e-9)
    assert (EvalConfig().beam_size, EvalConfig().length_penalty, EvalConfig().max_len_offset) == (4, 0.6, 50)
    assert DataConfig(dataset="dir", path="/x").path == "/x"
    assert TrainConfig(warmup_steps=0, gradient_clip=1.0, max_minutes=0.5).max_minutes == 0.5


@pytest.mark.parametrize("field", ["weight_decay", "gradient_clip"])
def test_train_numbers_of_the_wrong_type_raise_value_error(field):
    with raises_for(f"train.{field}"):
        TrainConfig(**{field: "0.1"})


def test_from_dict_unknown_keys_of_mixed_types():
    with raises_for("model."):
        RunConfig.from_dict({"model": {1: 2, "foo": 3}})


# --------------------------------------------------------------------------------------------------
# Fuzzing: never anything but a ValueError that names a field
# --------------------------------------------------------------------------------------------------

CHOICES = POSITIONAL + NORM_PLACEMENT + NORM + FFN
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=5000),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 8.0, 64.0, 512.0]),
    st.text(max_size=6),
    st.sampled_from(CHOICES),
    st.lists(st.integers(0, 9), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
VALID = {  # mostly-valid values, so that the fuzz builds configs as well as rejecting them
    "N": st.integers(1, 8),
    "d_model": st.sampled_from([8, 12, 16, 512]),
    "d_ff": st.integers(1, 4096),
    "h": st.sampled_from([1, 2, 3, 4, 8]),
    "d_k": st.one_of(st.none(), st.sampled_from([2, 3, 4, 8, 64])),
    "d_v": st.one_of(st.none(), st.sampled_from([1, 3, 4, 64])),
    "P_drop": st.floats(0.0, 0.99),
    "attention_dropout": st.floats(0.0, 0.99),
    "activation_dropout": st.sampled_from([0, 0.0, 0.5]),
    "positional": st.sampled_from(POSITIONAL),
    "norm_placement": st.sampled_from(NORM_PLACEMENT),
    "max_positions": st.integers(1, 4096),
    "tie_embeddings": st.booleans(),
    "scale_embeddings": st.booleans(),
    "norm": st.sampled_from(NORM),
    "ffn": st.sampled_from(FFN),
    "kv_heads": st.one_of(st.none(), st.sampled_from([1, 2, 4])),
}
assert set(VALID) == set(MODEL_FIELDS)
MODEL_DICTS = st.sets(st.sampled_from(MODEL_FIELDS), max_size=10).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.one_of(VALID[k], VALID[k], VALID[k], ANY_VALUE) for k in sorted(keys)})
)
FIELD_PREFIX = re.compile(r"^model\.(" + "|".join(map(re.escape, MODEL_FIELDS)) + r")\b")
SECTION_FIELDS = {
    name: [f.name for f in dataclasses.fields(cls)]
    for name, cls in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig), ("eval", EvalConfig))
}
ANY_SECTION_PREFIX = re.compile(
    r"^(" + "|".join(rf"{s}\.({'|'.join(fs)})\b" for s, fs in SECTION_FIELDS.items()) + r"|run\.seed\b)"
)


def _assert_builds_or_names_a_field(build, values, prefix=FIELD_PREFIX):
    try:
        build(values)
    except ValueError as error:
        assert prefix.match(str(error)), f"{values!r}: {error}"


FUZZ = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@FUZZ
@given(MODEL_DICTS)
def test_fuzz_model_from_dict(values):
    _assert_builds_or_names_a_field(lambda v: from_dict(ModelConfig, v, "model"), values)


@FUZZ
@given(MODEL_DICTS)
def test_fuzz_model_direct_construction(values):
    _assert_builds_or_names_a_field(lambda v: ModelConfig(**v), values)


@FUZZ
@given(MODEL_DICTS)
def test_fuzz_run_from_dict(values):
    _assert_builds_or_names_a_field(lambda v: RunConfig.from_dict({"model": v}), values)


@FUZZ
@given(
    st.fixed_dictionaries(
        {},
        optional={
            section: st.dictionaries(st.sampled_from(fields), ANY_VALUE, max_size=4)
            for section, fields in SECTION_FIELDS.items()
            if section != "model"
        }
        | {"seed": ANY_VALUE},
    )
)
def test_fuzz_other_sections_from_dict(values):
    _assert_builds_or_names_a_field(RunConfig.from_dict, values, ANY_SECTION_PREFIX)


def test_a_step_is_batch_tokens_over_all_devices():
    """data.batch_tokens is per side per optimiser step over every device and micro-batch: with G devices each takes
    its share; under a per-device cap, accumulation makes up the step."""
    paper = DataConfig(batch_tokens=25000)
    assert batch_plan(paper, 1).to_dict() == {
        "devices": 1,
        "device_batch_tokens": 25000,
        "accumulate_grad_batches": 1,
        "tokens_per_step": 25000,
    }
    eight, sixteen = batch_plan(paper, 8), batch_plan(paper, 16)
    assert (eight.device_tokens, eight.accumulation, eight.tokens_per_step) == (3125, 1, 25000)
    assert (sixteen.device_tokens, sixteen.accumulation, sixteen.tokens_per_step) == (1562, 1, 24992)
    capped = DataConfig(batch_tokens=25000, device_batch_tokens=8000)
    one = batch_plan(capped, 1)  # one GPU holding 8,000 tokens a micro-batch: 4 micro-batches of 6,250
    assert (one.device_tokens, one.accumulation, one.tokens_per_step) == (6250, 4, 25000)
    assert one.device_tokens <= 8000
    two = batch_plan(capped, 2)
    assert (two.device_tokens, two.accumulation) == (6250, 2)
    assert batch_plan(capped, 8).accumulation == 1  # 3,125 a device is within the cap
    with raises_for("data.batch_tokens", "max_tokens (256)", "over 128 device(s)"):
        batch_plan(DataConfig(batch_tokens=25000, max_tokens=256), 128)
    with raises_for("batch_plan.devices", "positive integer"):
        batch_plan(paper, 0)


def test_retired_step_fields_keep_old_records_readable():
    old = RunConfig().to_dict()
    old["train"] = {**old["train"], "accumulate_grad_batches": 1, "compile": False}
    assert RunConfig.from_dict(old) == RunConfig()
    with raises_for("train.accumulate_grad_batches", "data.device_batch_tokens"):
        RunConfig.from_dict({"train": {"accumulate_grad_batches": 2}})
    with raises_for("train.compile", "torch.compile"):
        RunConfig.from_dict({"train": {"compile": True}})
    with raises_for("train.accumulate_grad_batches"):
        RunConfig.from_dict({"train": {"accumulate_grad_batches": True}})
    # The cap enters the run id only when set.
    assert RunConfig(data=DataConfig(device_batch_tokens=None)).run_id() == RunConfig().run_id()
    assert RunConfig(data=DataConfig(device_batch_tokens=8000)).run_id() != RunConfig().run_id()
