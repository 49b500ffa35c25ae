"""The one source of truth for a NeoBERT architecture: a plain dataclass.

It accepts exactly the fields of the released ``config.json`` (see ``docs/model.md``) plus our
architecture switches. The transformers config (:class:`neobert.model.NeoBERTConfig`) is a thin view of it,
and training YAML files map onto it 1:1. This module imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POSITION_EMBEDDINGS = ("rope", "learned")
FFN_TYPES = ("swiglu", "gelu")
NORM_TYPES = ("rmsnorm", "layernorm")
ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")
# Numeric precision of a run, training or inference: "auto" is whichever of fp32 and bf16 runs faster for
# the model's shapes on this device, measured once per process (neobert.runtime.hardware.resolve_precision).
# Training: bf16 autocast over fp32 weights; inference: bf16 weights (the NeoBERT fast path).
PRECISIONS = ("auto", "fp32", "bf16")


def load_mapping(path: str | Path, error: type[Exception] | None = None) -> dict[str, Any]:
    """The mapping of settings in a YAML file (JSON for ``.json``); an unreadable file, a syntax error or a
    non-mapping raises ``error`` (default :class:`ConfigError`) naming the file."""
    error = error or ConfigError
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise error(f"cannot read config file {path}: {err}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as err:  # json.JSONDecodeError
        raise error(f"{path}: not valid JSON: {err}") from None
    except Exception as err:  # yaml.YAMLError
        raise error(f"{path}: not valid YAML: {err}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


class ConfigError(ValueError):
    """A configuration value or key is invalid."""


def _bf16_as_precision(on: bool) -> str:
    return "bf16" if on else "fp32"


@dataclass(frozen=True)
class Rename:
    """A setting renamed on purpose (one name per setting): its old name keeps working for a while, in a
    settings file (:func:`renamed_settings`, a FutureWarning) and on the command line
    (``cli/options.py:renamed_options``, a deprecation note), both naming the new one."""

    old: str  # the old setting name; on the command line ``--`` + old with ``-`` for ``_``
    new: str  # the one name now
    settings: str  # the settings files it may appear in: "training" (every training task's, grids, ladders) | "serve"
    commands: tuple[str, ...] = ()  # the commands that had it as an option (``finetune glue``)
    value: Callable[[Any], Any] | None = None  # old value -> new value, where the meaning changed too
    switch: bool = (
        False  # on the command line the old option was a switch: ``--old`` is ``--new value(True)``
    )

    def __post_init__(self) -> None:
        if self.switch and self.value is None:
            raise ValueError(f"rename of switch {self.old!r}: give the value it meant (value=)")

    @property
    def options(self) -> tuple[str, str]:
        """The old and the new command-line option."""
        return "--" + self.old.replace("_", "-"), "--" + self.new.replace("_", "-")


_TASKS_WITH_LR = ("finetune glue", "finetune classify", "finetune tokens")
# The one table of renames: settings files and the command line both read it (issues 18, 24 and 32).
RENAMES: tuple[Rename, ...] = (
    Rename("learning_rate", "lr", "training", _TASKS_WITH_LR),
    Rename("grad_clip", "clip_grad_norm", "training", _TASKS_WITH_LR),
    Rename("gradient_checkpointing", "activation_checkpointing", "training", ("finetune contrastive",)),
    # contrastive training's bf16 switch, now the one precision setting (bf16 | fp32 | auto, as every task)
    Rename("bf16", "precision", "training", ("finetune contrastive",), value=_bf16_as_precision, switch=True),
    # issue 24: the head to load ('tasks' are the endpoints it serves)
    Rename("task", "head", "serve", ("serve",)),
)


def renamed_settings(
    data: dict[str, Any], what: str, settings: str = "training", error: type[Exception] | None = None
) -> dict[str, Any]:
    """``data`` with each deprecated setting name of :data:`RENAMES` for these ``settings`` files replaced by
    its one name (and its value translated where the meaning changed: ``bf16: true|false`` is ``precision:
    bf16|fp32``; a list of values, as in a grid, element by element), and a FutureWarning per replacement;
    both names at once raises ``error`` (default :class:`ConfigError`)."""
    out = dict(data)
    for rename in RENAMES:
        old, new, convert = rename.old, rename.new, rename.value
        if rename.settings != settings or old not in out:
            continue
        if new in out:
            raise (error or ConfigError)(f"{what}: {old!r} is the old name of {new!r}; give only {new!r}")
        value = out.pop(old)
        if convert is not None:
            value = [convert(v) for v in value] if isinstance(value, list) else convert(value)
        hint = f" ({old}: {data[old]!r} is {new}: {value!r})" if convert is not None else ""
        warnings.warn(f"{what}: {old!r} is deprecated, use {new!r}{hint}", FutureWarning, stacklevel=3)
        out[new] = value
    return out


def check_precision(precision: str, error: type[Exception] = ConfigError) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else ``error`` naming the choices."""
    if precision not in PRECISIONS:
        raise error(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def check_known_keys(
    cls: type, data: dict[str, Any], what: str, error: type[Exception] = ConfigError
) -> None:
    """Raise ``error`` naming every key of ``data`` that is not a field of the dataclass ``cls``."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise error(f"unknown {what} key(s): {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")


def typed_settings(
    cls: type, data: dict[str, Any], where: str = "", error: type[Exception] = ConfigError
) -> dict[str, Any]:
    """``data`` with each scalar setting converted to its field's type (``int``, ``float``, ``bool``, ``str``,
    optional or not), so that ``lr: 1e-4`` (YAML 1.1 reads a number without a dot as a string), ``--set
    optim.lr=1e-4`` or ``steps: "20"`` mean what they say. A value that is not of its field's type raises
    ``error`` naming the key (``where`` + name), the value and the type; other fields pass through."""
    hints = typing.get_type_hints(cls)
    out = dict(data)
    for key, value in data.items():
        kinds = _scalar_kinds(hints.get(key))
        if not kinds or value is None or type(value) in kinds:
            continue
        converted = _convert(value, kinds)
        if converted is _INVALID:
            names = " or ".join(k.__name__ for k in kinds)
            raise error(f"{where}{key}: {value!r} is not a {names}")
        out[key] = converted
    return out


_INVALID = object()
_SCALARS = (bool, int, float, str)


def _scalar_kinds(hint: Any) -> tuple[type, ...]:
    """The scalar types a field's hint allows (``float | None`` -> (float,)); () for any other hint."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    args = tuple(a for a in args if a is not type(None))
    return args if args and all(a in _SCALARS for a in args) else ()


def _convert(value: Any, kinds: tuple[type, ...]) -> Any:
    """``value`` as the first of ``kinds`` it reads as exactly (``"1e-4"`` -> 0.0001, 3 -> 3.0; ``2.5`` is no
    int, ``"yes"`` no bool); ``_INVALID`` where none does."""
    for kind in kinds:
        if kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                continue
        if kind is int and isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    return _INVALID


@dataclass
class ModelConfig:
    """Architecture of a NeoBERT encoder.

    The first block of fields are those of the released ``config.json``; the rest are switches for the
    ablation variants and context extension. Runtime choices (attention kernel, unpadding, compilation)
    are not architecture: they are set on a built model (:func:`neobert.model.set_runtime`). Defaults are the released NeoBERT (28 x 768,
    4096 positions).
    """

    # --- fields of the released config.json ---
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 28
    num_attention_heads: int = 12
    intermediate_size: int = 3072  # SwiGLU uses 2/3 of it, rounded up to a multiple of 8
    max_length: int = 4096  # largest sequence the model accepts (RoPE table / learned table size)
    norm_eps: float = 1e-5
    pad_token_id: int = 0
    embedding_init_range: float = 0.02
    decoder_init_range: float = 0.02
    classifier_init_range: float = 0.02
    dim_head: int | None = None  # derived: hidden_size // num_attention_heads; checked when given

    # --- architecture switches (ablation variants) ---
    position_embedding: str = "rope"  # rope | learned (RoBERTa-style table, BERT baseline)
    ffn: str = "swiglu"  # swiglu | gelu (no gating, BERT baseline)
    norm: str = "rmsnorm"  # rmsnorm | layernorm (always pre-norm; LayerNorm has its bias, as in BERT)
    linear_bias: bool = False  # biases in qkv, wo and the FFN (BERT has them; NeoBERT, released, has none)
    rope_theta: float = 10000.0

    # --- RoPE context extension ---
    rope_scaling_type: str = "none"  # none | linear | ntk | yarn
    rope_scaling_factor: float = 1.0
    rope_original_max_length: int | None = None  # the trained length; defaults to max_length
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0

    # --- heads ---
    classifier_pooling: str = "cls"  # cls (released dense+tanh head on [CLS]) | mean
    classifier_dropout: float = 0.1
    hidden_dropout: float = 0.0  # on each residual branch; 0 in pretraining

    def __post_init__(self) -> None:
        self._check_choice("position_embedding", POSITION_EMBEDDINGS)
        self._check_choice("ffn", FFN_TYPES)
        self._check_choice("norm", NORM_TYPES)
        self._check_choice("rope_scaling_type", ROPE_SCALINGS)
        # which poolings a classifier head takes is the pooling registry's answer (model/pooling.py, a floor
        # above this torch-free module): NeoBERTConfig, which every model is built from, checks the name
        if not isinstance(self.classifier_pooling, str):
            raise ConfigError(f"classifier_pooling must be a pooling name; got {self.classifier_pooling!r}")
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_length",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}"
            )
        head_dim = self.hidden_size // self.num_attention_heads
        if self.dim_head is None:
            self.dim_head = head_dim
        elif self.dim_head != head_dim:
            raise ConfigError(f"dim_head {self.dim_head} != hidden_size / num_attention_heads = {head_dim}")
        if self.position_embedding == "rope" and head_dim % 2:
            raise ConfigError(f"RoPE needs an even head dimension, got {head_dim}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})"
            )
        if self.rope_scaling_factor <= 0:
            raise ConfigError(f"rope_scaling_factor must be positive, got {self.rope_scaling_factor}")
        if self.rope_scaling_type != "none" and self.position_embedding != "rope":
            raise ConfigError("rope_scaling_type needs position_embedding='rope'")
        if self.rope_original_max_length is None:
            self.rope_original_max_length = self.max_length
        for name in ("classifier_dropout", "hidden_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    def _check_choice(self, name: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, name)
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")

    # --- derived quantities ---
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def ffn_hidden_size(self) -> int:
        """Width of the FFN's hidden layer. SwiGLU keeps the parameter count of a 4x GELU MLP."""
        if self.ffn == "gelu":
            return self.intermediate_size
        return _round_up(int(2 * self.intermediate_size / 3), 8)

    # --- construction ---
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a mapping, raising :class:`ConfigError` naming any unknown key."""
        check_known_keys(cls, data, "model config")
        return cls(**typed_settings(cls, data, "model."))

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named preset (see :data:`PRESETS`), optionally with some fields changed."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """Read a YAML or JSON file holding the fields (unknown keys raise)."""
        return cls.from_dict(load_mapping(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> ModelConfig:
        return ModelConfig.from_dict({**self.to_dict(), **changes})

    def with_context(self, length: int, method: str = "yarn") -> ModelConfig:
        """This architecture extended by RoPE scaling to accept ``length`` tokens.

        The scaling factor is ``length / trained length``; with ``length`` at or below the trained length
        the factor is 1 and the result computes exactly what the original does.
        """
        if self.position_embedding != "rope":
            raise ConfigError("context extension needs RoPE positions")
        original = self.rope_original_max_length if self.rope_scaling_type != "none" else self.max_length
        factor = max(1.0, length / original)
        return self.replace(
            max_length=max(length, self.max_length),
            rope_scaling_type=method,
            rope_scaling_factor=factor,
            rope_original_max_length=original,
        )

    def num_parameters(self, mlm_head: bool = False) -> int:
        """Exact parameter count, computed from the shapes (no allocation)."""
        c, f, v = self.hidden_size, self.ffn_hidden_size, self.vocab_size
        norm = c if self.norm == "rmsnorm" else 2 * c
        ffn = 3 * c * f if self.ffn == "swiglu" else 2 * c * f
        if self.linear_bias:  # qkv + wo, then w12 (or w1) + w3
            ffn += (2 * f if self.ffn == "swiglu" else f) + c
            ffn += 3 * c + c
        block = 2 * norm + 3 * c * c + c * c + ffn
        total = v * c + self.num_hidden_layers * block + norm
        if self.position_embedding == "learned":
            total += self.max_length * c
        if mlm_head:
            total += v * c + v
        return total


def _round_up(x: int, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


# Named architectures. `neobert` is the released model; the others are the paper's ablation shapes and
# a tiny model for tests.
PRESETS: dict[str, dict[str, Any]] = {
    "neobert": {},
    "neobert-1024": {"max_length": 1024},
    "120m": {"num_hidden_layers": 12, "max_length": 1024},
    "250m-wide": {
        "num_hidden_layers": 16,
        "hidden_size": 1008,
        "intermediate_size": 4032,
        "max_length": 1024,
    },
    "bert-baseline": {
        "num_hidden_layers": 12,
        "max_length": 512,
        "position_embedding": "learned",
        "ffn": "gelu",
        "norm": "layernorm",
        "linear_bias": True,
    },
    "small": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "max_length": 512,
    },
    "tiny": {
        "vocab_size": 128,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 192,
        "max_length": 128,
    },
}
