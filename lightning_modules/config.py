"""Frozen, typed configs: one per concern, validated at construction.

Field names follow the paper (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls). Every default is the
paper's base model and recipe; anything that deviates from the paper is a named value, off by default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Optional

# Every choice is a Literal; the tuples of its values (for checks and messages) are derived from it.
Positional = Literal["sinusoidal", "learned", "rope", "none"]
NormPlacement = Literal["post", "pre", "deepnorm"]
Norm = Literal["layernorm", "rmsnorm"]
Ffn = Literal["relu", "gelu", "swiglu"]
# Translation corpora, then the parsing datasets (section 6.3): a sentence translated into its linearised tree.
Dataset = Literal["generated", "multi30k", "wmt14-en-de", "dir", "treebank", "ptb"]
MAX_LEXICON_SCALE = 16  # the generator's syllable inventories hold this many lexicons' worth of distinct words
Precision = Literal["32-true", "bf16-mixed", "16-mixed", "bf16-true"]
POSITIONAL = typing.get_args(Positional)
NORM_PLACEMENT = typing.get_args(NormPlacement)
NORM = typing.get_args(Norm)
FFN = typing.get_args(Ffn)
DATASETS = typing.get_args(Dataset)
PARSING_DATASETS = ("treebank", "ptb")  # the built-in treebank (data/generated/) and a Penn Treebank directory
PRECISION = typing.get_args(Precision)


def _fail(owner: str, name: str, value: Any, expected: str) -> None:
    raise ValueError(f"{owner}.{name} = {value!r}: expected {expected}")


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(owner, name, value, "one of " + ", ".join(repr(c) for c in choices))


def _check_positive(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        _fail(owner, name, value, "a positive integer")


def _check_non_negative(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(owner, name, value, "a non-negative integer")


def _check_probability(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        _fail(owner, name, value, "a number in [0, 1)")


def _check_positive_number(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        _fail(owner, name, value, "a positive finite number")


def _check_non_negative_number(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
        _fail(owner, name, value, "a non-negative finite number")


def _floats_as_float(config: Any) -> None:
    """Store ints given for float fields as floats, so that equal configs hash to the same run id."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type in ("float", "Optional[float]") and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(config, f.name, float(value))


@dataclass(frozen=True)
class ModelConfig:
    """The Transformer of section 3. Defaults are the paper's base model.

    The vocabulary is the data's: its size is data.vocab_size, its pad id the tokenizer's (data.PAD_ID); both are
    passed to the Transformer by whoever builds it from a run (see RETIRED_FIELDS for the fields they once were).
    """

    N: int = 6  # layers in the encoder and in the decoder
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: Optional[int] = None  # default d_model // h; independent of d_model / h (Table 3 row B)
    d_v: Optional[int] = None  # default d_model // h
    P_drop: float = 0.1  # residual dropout, also on embedding + position sums
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    positional: Positional = "sinusoidal"
    norm_placement: NormPlacement = "post"
    max_positions: int = 1024
    tie_embeddings: bool = True  # source embedding = target embedding = pre-softmax projection
    scale_embeddings: bool = True  # multiply embeddings by sqrt(d_model)
    # Beyond the paper, off by default.
    norm: Norm = "layernorm"
    ffn: Ffn = "relu"
    kv_heads: Optional[int] = None  # grouped-query attention; default h (plain multi-head)

    def __post_init__(self) -> None:
        own = "model"
        _floats_as_float(self)
        for name in ("N", "d_model", "d_ff", "h", "max_positions"):
            _check_positive(own, name, getattr(self, name))
        for name in ("d_k", "d_v", "kv_heads"):
            if getattr(self, name) is not None:
                _check_positive(own, name, getattr(self, name))
        for name in ("P_drop", "attention_dropout", "activation_dropout"):
            _check_probability(own, name, getattr(self, name))
        _check_choice(own, "positional", self.positional, POSITIONAL)
        _check_choice(own, "norm_placement", self.norm_placement, NORM_PLACEMENT)
        _check_choice(own, "norm", self.norm, NORM)
        _check_choice(own, "ffn", self.ffn, FFN)
        for name in ("tie_embeddings", "scale_embeddings"):
            if not isinstance(getattr(self, name), bool):
                _fail(own, name, getattr(self, name), "true or false")
        if self.d_k is None and self.d_model % self.h:
            _fail(
                own, "d_k", None, f"an explicit value, since d_model ({self.d_model}) is not divisible by h ({self.h})"
            )
        if self.d_v is None and self.d_model % self.h:
            _fail(
                own, "d_v", None, f"an explicit value, since d_model ({self.d_model}) is not divisible by h ({self.h})"
            )
        if self.positional == "rope" and self.head_dim_k % 2:
            _fail(own, "d_k", self.head_dim_k, "an even number with positional='rope' (RoPE rotates pairs)")
        if self.kv_heads is not None and self.h % self.kv_heads:
            _fail(own, "kv_heads", self.kv_heads, f"a divisor of h ({self.h})")

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.h

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.h

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.h


@dataclass(frozen=True)
class DataConfig:
    """Which corpus, which splits, and how it is cut into word pieces and batches."""

    dataset: Dataset = "generated"
    # A corpus (or, for dataset=ptb, treebank) directory to read; the built-in corpus and treebank never use it
    # (they live in the cache).
    path: Optional[str] = None
    src_lang: str = "en"
    tgt_lang: str = "de"
    train_split: str = "train"
    dev_split: Optional[str] = None  # None: the first of valid, val, dev that exists
    test_split: Optional[str] = None  # None: test, or the dataset's named test set
    vocab_size: int = 37000  # joint BPE vocabulary: the model's too (its embeddings and output projection)
    max_tokens: int = 256  # longer training pairs (in word pieces) are skipped and counted
    # Per side, per optimiser step, summed over every device and accumulated micro-batch (the paper: ~25k source +
    # 25k target tokens a step on 8 GPUs), so 1 GPU, 8 GPUs and 2 nodes x 8 GPUs train the same recipe: see BatchPlan.
    batch_tokens: int = 25000
    # The most one device holds in a micro-batch, per side (a memory cap); None: batch_tokens / devices. Below that,
    # gradient accumulation makes up the step (BatchPlan.accumulation).
    device_batch_tokens: Optional[int] = None
    generated_pairs: int = 50000  # size of the built-in corpus' training split (dataset=treebank: training trees)
    generated_seed: int = 1234  # the built-in corpus' (and treebank's) seed
    # Content words of the built-in corpus times k (nouns, verbs, adjectives, adverbs, compounds, ambiguous words):
    # each word is seen k times less often, so a small model no longer learns the whole lexicon. 1 = the paper-free
    # default corpus; the `converged` scale raises it (sweeps/scales.yaml says why).
    generated_lexicon_scale: int = 1
    num_workers: int = 0
    cache_dir: Optional[str] = None  # where tokenizers and encoded corpora are cached

    def __post_init__(self) -> None:
        own = "data"
        _floats_as_float(self)
        _check_choice(own, "dataset", self.dataset, DATASETS)
        if self.dataset in ("multi30k", "dir") and not self.path:
            _fail(own, "path", self.path, f"a corpus directory for dataset={self.dataset!r}")
        if self.dataset == "ptb" and not self.path:
            _fail(
                own,
                "path",
                self.path,
                "a directory of bracketed trees for dataset='ptb' (WSJ 02-21 / 22 / 23; --data DIR sets it)",
            )
        if self.dataset == "treebank" and self.path:
            _fail(
                own,
                "path",
                self.path,
                "no path for dataset='treebank' (the built-in treebank lives in the cache, data.cache_dir); "
                "to parse the treebank in that directory, set data.dataset=ptb, as --data does",
            )
        if self.dataset == "generated" and self.path:
            # A path names a corpus to read; the built-in corpus is written only to the cache, so a user's files
            # are never replaced by it.
            _fail(
                own,
                "path",
                self.path,
                "no path for dataset='generated' (it lives in the cache, data.cache_dir); "
                "to train on the corpus in that directory, set data.dataset=dir, as --data does",
            )
        for name in ("vocab_size", "max_tokens", "batch_tokens", "generated_pairs"):
            _check_positive(own, name, getattr(self, name))
        _check_non_negative(own, "num_workers", self.num_workers)
        scale = self.generated_lexicon_scale
        if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= MAX_LEXICON_SCALE:
            _fail(own, "generated_lexicon_scale", scale, f"an int from 1 to {MAX_LEXICON_SCALE}")
        if self.device_batch_tokens is not None:
            _check_positive(own, "device_batch_tokens", self.device_batch_tokens)
            if self.device_batch_tokens < self.max_tokens:
                _fail(
                    own,
                    "device_batch_tokens",
                    self.device_batch_tokens,
                    f"at least max_tokens ({self.max_tokens}) so every pair fits a device's batch",
                )
        if self.vocab_size < 16:
            _fail(own, "vocab_size", self.vocab_size, "at least 16 (4 special ids plus word pieces)")
        if self.batch_tokens < self.max_tokens:
            _fail(
                own,
                "batch_tokens",
                self.batch_tokens,
                f"at least max_tokens ({self.max_tokens}) so every pair fits a batch",
            )

    @property
    def task(self) -> str:
        """``parsing`` for the treebanks (source: the words, target: the linearised tree), else ``translation``."""
        return "parsing" if self.dataset in PARSING_DATASETS else "translation"


@dataclass(frozen=True)
class BatchPlan:
    """How one optimiser step of `data.batch_tokens` per side is cut over `devices` (all nodes' GPUs or CPU ranks).

    Each device takes `device_tokens` per side per micro-batch and `accumulation` micro-batches make a step, so a step
    is `tokens_per_step` = devices x accumulation x device_tokens <= data.batch_tokens (the remainder of the division,
    fewer than devices x accumulation tokens, is dropped). Every rank packs the same global list of batches at
    `device_tokens` and takes every `devices`-th, so a step on 8 devices holds the same batches as 8 accumulated
    micro-batches on one.
    """

    devices: int
    device_tokens: int
    accumulation: int

    @property
    def tokens_per_step(self) -> int:
        return self.devices * self.accumulation * self.device_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "devices": self.devices,
            "device_batch_tokens": self.device_tokens,
            "accumulate_grad_batches": self.accumulation,
            "tokens_per_step": self.tokens_per_step,
        }


def batch_plan(data: "DataConfig", devices: int) -> BatchPlan:
    """The per-device budget and accumulation that make `data.batch_tokens` per step on `devices` devices.

    Without `data.device_batch_tokens` each device takes batch_tokens / devices and nothing accumulates; with it, the
    fewest micro-batches that keep a device within its cap. Raises ValueError naming the field when a device's share
    would be under data.max_tokens (a pair of that length could fit no batch)."""
    _check_positive("batch_plan", "devices", devices)
    share = data.batch_tokens // devices
    cap = data.device_batch_tokens
    accumulation = 1 if cap is None or share <= cap else -(-share // cap)
    device_tokens = data.batch_tokens // (devices * accumulation)
    if device_tokens < data.max_tokens:
        _fail(
            "data",
            "batch_tokens",
            data.batch_tokens,
            f"at least max_tokens ({data.max_tokens}) per device and micro-batch: over {devices} device(s)"
            + (f" and {accumulation} micro-batches" if accumulation > 1 else "")
            + f" a device gets {device_tokens}; raise data.batch_tokens or lower data.max_tokens",
        )
    return BatchPlan(devices, device_tokens, accumulation)


@dataclass(frozen=True)
class TrainConfig:
    """The paper's recipe: Adam(0.9, 0.98, 1e-9), inverse-square-root warm-up, label smoothing."""

    max_steps: int = 100_000
    warmup_steps: int = 4000
    lr_scale: float = 1.0  # multiplies d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    # Deviation, off by default (the paper's rate never decays to zero): the rate falls linearly to zero over the
    # last cooldown_fraction of max_steps, so a budget far shorter than the paper's ends annealed.
    cooldown_fraction: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    eps_ls: float = 0.1  # label smoothing
    gradient_clip: float = 0.0  # 0: off, as in the paper
    precision: Precision = "32-true"
    val_every_steps: int = 1000
    checkpoint_every_steps: int = 1000
    keep_checkpoints: int = 5
    max_minutes: Optional[float] = None  # stop training after this wall time, then evaluate

    def __post_init__(self) -> None:
        own = "train"
        _floats_as_float(self)
        for name in (
            "max_steps",
            "val_every_steps",
            "checkpoint_every_steps",
            "keep_checkpoints",
        ):
            _check_positive(own, name, getattr(self, name))
        _check_non_negative(own, "warmup_steps", self.warmup_steps)
        _check_positive_number(own, "lr_scale", self.lr_scale)
        if not 0.0 <= self.cooldown_fraction <= 1.0:
            _fail(
                own, "cooldown_fraction", self.cooldown_fraction, "a fraction of max_steps in [0, 1] (0: no cool-down)"
            )
        _check_probability(own, "adam_beta1", self.adam_beta1)
        _check_probability(own, "adam_beta2", self.adam_beta2)
        _check_positive_number(own, "adam_eps", self.adam_eps)
        _check_probability(own, "eps_ls", self.eps_ls)
        _check_non_negative_number(own, "weight_decay", self.weight_decay)
        _check_non_negative_number(own, "gradient_clip", self.gradient_clip)
        _check_choice(own, "precision", self.precision, PRECISION)
        if self.max_minutes is not None:
            _check_positive_number(own, "max_minutes", self.max_minutes)


@dataclass(frozen=True)
class EvalConfig:
    """Decoding and scoring as in section 6: beam 4, GNMT length penalty 0.6, max length = source + 50."""

    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_offset: int = 50
    # k > 1: also score the average of the last k checkpoints, beside the last checkpoint's scores (Table 2's
    # protocol: 5 for base, 20 for big; Table 3 scores the last checkpoint, never averaged).
    average_last: int = 0
    dev_bleu_sentences: Optional[int] = None  # decode only the first n dev sentences during training
    batch_sentences: int = 128

    def __post_init__(self) -> None:
        own = "eval"
        _floats_as_float(self)
        _check_positive(own, "beam_size", self.beam_size)
        _check_non_negative(own, "max_len_offset", self.max_len_offset)
        _check_non_negative(own, "average_last", self.average_last)
        _check_positive(own, "batch_sentences", self.batch_sentences)
        if self.dev_bleu_sentences is not None:
            _check_positive(own, "dev_bleu_sentences", self.dev_bleu_sentences)
        _check_non_negative_number(own, "length_penalty", self.length_penalty)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one run. Its hash is the run's identity."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        _check_non_negative("run", "seed", self.seed)
        if self.eval.average_last > self.train.keep_checkpoints:
            _fail(
                "eval",
                "average_last",
                self.eval.average_last,
                f"at most train.keep_checkpoints ({self.train.keep_checkpoints}): only that many are kept to average",
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RunConfig":
        return from_dict(cls, values, "run")

    def run_id(self) -> str:
        """A short, stable hash of the resolved config: the same run gets the same id everywhere.

        Fields added after records were published enter the hash only when set away from their default, so
        adding a knob does not rename every finished run; retired fields enter it at the one value they now have,
        so removing one does not either."""
        values = self.to_dict()
        for section, name in FIELDS_ADDED_SINCE_RECORDS:
            if values[section][name] == getattr(SECTIONS[section](), name):
                del values[section][name]
        for (section, name), retired in RETIRED_FIELDS.items():
            values[section][name] = retired.value(self)
        blob = json.dumps(values, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "eval": EvalConfig}
FIELDS_ADDED_SINCE_RECORDS = (
    ("train", "cooldown_fraction"),
    ("data", "generated_lexicon_scale"),
    ("data", "device_batch_tokens"),
)


@dataclass(frozen=True)
class RetiredField:
    """A field the config held when records were published, now one fact stored elsewhere: `value` is the value
    it always has (the run id still hashes it, so the records keep their ids), `why` says where it lives now."""

    value: Callable[[RunConfig], Any]
    why: str


RETIRED_FIELDS = {
    ("model", "vocab_size"): RetiredField(
        lambda run: run.data.vocab_size, "the vocabulary is the data's: set data.vocab_size"
    ),
    # 0: the tokenizer's pad id (lightning_modules.data.PAD_ID; a test checks the two agree). The data always padded
    # with it, so a record's model.pad_id could only ever mean this value.
    ("model", "pad_id"): RetiredField(lambda run: 0, "the data pads with the tokenizer's pad id (0)"),
    # Every published record accumulated 1 micro-batch: data.batch_tokens was then per device, and with one device a
    # step was one batch. The step's size is now data.batch_tokens over all devices, and accumulation follows from
    # the device count and data.device_batch_tokens (BatchPlan).
    ("train", "accumulate_grad_batches"): RetiredField(
        lambda run: 1, "derived from data.batch_tokens, the devices and data.device_batch_tokens"
    ),
    # Nothing ever read it: training never compiled. Every record holds false.
    ("train", "compile"): RetiredField(lambda run: False, "training does not use torch.compile"),
}


def _pop_retired(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """A RunConfig mapping without its retired fields, and those fields' values (an old record holds them)."""
    kept = dict(values)
    given: dict[tuple[str, str], Any] = {}
    for section, name in RETIRED_FIELDS:
        if isinstance(kept.get(section), Mapping) and name in kept[section]:
            kept[section] = {key: value for key, value in kept[section].items() if key != name}
            given[section, name] = values[section][name]
    return kept, given


def _check_retired(config: RunConfig, given: Mapping[tuple[str, str], Any]) -> None:
    for (section, name), value in given.items():
        retired = RETIRED_FIELDS[section, name]
        expected = retired.value(config)
        if type(value) is not type(expected) or value != expected:  # True is not the 1 an int field held
            _fail(section, name, value, f"{expected!r} or no value: it is no longer a config field ({retired.why})")


def _coerce(owner: str, name: str, hint: Any, value: Any) -> Any:
    """Check a plain (YAML/JSON) value against a field's type hint; ints are accepted for floats."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(owner, name, inner, value)
    if origin is Literal:
        return value  # the dataclass names the valid choices itself
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(owner, name, value, "a number")
        return float(value)
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(owner, name, value, "an integer")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            _fail(owner, name, value, "true or false")
        return value
    if hint is str:
        if not isinstance(value, str):
            _fail(owner, name, value, "a string")
        return value
    return value


def from_dict(cls: type, values: Mapping[str, Any], owner: str) -> Any:
    """Build a config dataclass from plain data, naming the unknown or ill-typed field."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{owner}: expected a mapping of fields, got {type(values).__name__}")
    if cls is RunConfig:
        values, retired = _pop_retired(values)
        config = _from_fields(cls, values, owner)
        _check_retired(config, retired)
        return config
    return _from_fields(cls, values, owner)


def _from_fields(cls: type, values: Mapping[str, Any], owner: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names), key=str)
    if unknown:
        raise ValueError(f"{owner}.{unknown[0]}: unknown field; valid fields: {', '.join(names)}")
    kwargs = {}
    for name, value in values.items():
        if name in SECTIONS and cls is RunConfig:
            kwargs[name] = from_dict(SECTIONS[name], value, name)
        else:
            kwargs[name] = _coerce(owner, name, hints[name], value)
    return cls(**kwargs)
