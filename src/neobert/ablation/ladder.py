"""A ladder: the paper's ablation (Figure 1) as data. One YAML file per ladder, loaded into dataclasses.

A ladder has a ``base`` (the :class:`PretrainConfig` fields every rung starts from), a ``scale`` that maps the
paper's sizes (120M / 250M models, 512 / 1024 / 4096 tokens, 131k / 2M-token batches) onto this machine's,
named ``corpora`` and ``tokenizers``, the ``downstream`` scoring, and the ``rungs``. Each rung is the delta
from the rung before it (or from ``base_rung``: the paper dropped some changes, and the next rung starts from
the one before them). :func:`resolve` turns the deltas into one complete plan per rung; :func:`pretrain_config`
turns a plan into the ordinary :class:`PretrainConfig` of one run. Unknown keys raise, naming the key and the
file.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..common.config import ConfigError, load_mapping, renamed_settings
from ..finetuning.config import TrainSettings
from ..training.config import PretrainConfig

SHIPPED = ("figure1-laptop", "figure1-gpu", "smoke")
# the rung settings that name an entry of the scale / corpora / tokenizers sections
NAMED = ("size", "context", "batch", "corpus", "tokenizer")


class LadderError(ConfigError):
    """A ladder file is invalid: unknown key, unknown name, missing setting."""


@dataclass
class Scale:
    """The paper's sizes at this scale."""

    name: str
    steps: int  # pretraining steps of every rung
    sizes: dict[str, dict[str, Any]]  # paper model size -> ModelConfig fields
    context: dict[int, int]  # paper context (tokens) -> seq_len here
    batch: dict[str, int]  # paper batch name -> tokens per step here
    out_of_reach: dict[str, str] = field(default_factory=dict)  # rung -> why it cannot run at this scale


@dataclass
class Corpus:
    inputs: list[str]  # anything `neobert data prepare` reads, plus the ablation sources (see sources.py)
    note: str = ""


@dataclass
class TokenizerSpec:
    source: str | None = None  # bert-base-uncased | default (the pinned 8,192 WordPiece) | a directory
    train: str | None = None  # wordpiece | bpe: trained on `corpus`
    vocab_size: int = 30522
    corpus: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if (self.source is None) == (self.train is None):
            raise LadderError("a tokenizer needs exactly one of source (an existing one) or train (a kind)")
        if self.train is not None and self.corpus is None:
            raise LadderError("a trained tokenizer needs corpus (the corpus to train it on)")


# the `finetune classify` settings a ladder may give; the runner sets the rest (model, files, seed, device)
DOWNSTREAM_SETTINGS = frozenset(f.name for f in dataclasses.fields(TrainSettings)) - {"seed"} | {"pooling"}


@dataclass
class Downstream:
    tasks: list[str]  # names from neobert.ablation.sources.TASKS
    train_samples: int | None = None  # rows of each task's training split used
    eval_samples: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # DOWNSTREAM_SETTINGS of finetune classify

    def __post_init__(self) -> None:
        self.settings = renamed_settings(self.settings, "downstream.settings")
        unknown = sorted(set(self.settings) - DOWNSTREAM_SETTINGS)
        if unknown:  # found now, not at the first fine-tuning after a rung's pretraining
            raise LadderError(
                f"unknown key(s) {', '.join('downstream.settings.' + k for k in unknown)}; "
                f"allowed: {', '.join(sorted(DOWNSTREAM_SETTINGS))}"
            )


@dataclass
class Rung:
    name: str
    change: str  # what this rung changes, in words
    paper_delta: float | None = (
        None  # the paper's GLUE change for this rung (points), where the spec states it
    )
    paper_kept: bool = True  # false: the paper dropped this change; the next rung starts from its base
    base_rung: str | None = None  # the rung this delta applies to (default: the previous kept rung)
    pretrain: bool | None = None  # false: no pretraining (random initialization)
    size: str | None = None
    context: int | None = None
    batch: str | None = None
    corpus: str | None = None
    tokenizer: str | None = None
    init_from: str | None = None  # start from this rung's pretrained model (the stage-1 -> stage-2 hand-over)
    set: dict[str, Any] = field(default_factory=dict)  # dotted PretrainConfig keys, e.g. optim.name: adamw


@dataclass
class Ladder:
    name: str
    description: str
    scale: Scale
    corpora: dict[str, Corpus]
    tokenizers: dict[str, TokenizerSpec]
    downstream: Downstream
    base: dict[str, Any]  # PretrainConfig fields shared by every rung
    rungs: list[Rung]
    seeds: int = 2
    source: str = ""  # the file it was read from

    def __post_init__(self) -> None:
        names = [r.name for r in self.rungs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise LadderError(f"duplicate rung name(s): {', '.join(duplicates)}")
        if not self.rungs:
            raise LadderError("a ladder needs at least one rung")
        if self.seeds <= 0:
            raise LadderError(f"seeds must be positive, got {self.seeds}")
        PretrainConfig.from_dict(self.base)  # unknown base keys fail at load time

    def rung_names(self) -> list[str]:
        return [r.name for r in self.rungs]


@dataclass
class RungPlan:
    """One rung with every setting resolved (the deltas applied)."""

    name: str
    change: str
    paper_delta: float | None
    paper_kept: bool
    base_rung: str | None
    pretrain: bool
    size: str
    context: int
    batch: str
    corpus: str
    tokenizer: str
    init_from: str | None
    set: dict[str, Any]
    out_of_reach: str | None  # why this rung cannot run at this scale (it is named in the report, not run)


def ladder_path(name_or_path: str | Path) -> Path:
    """A shipped ladder's file (``figure1-laptop``) or a YAML path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise LadderError(f"ladder file not found: {path}")
        return path
    if str(name_or_path) not in SHIPPED:
        raise LadderError(
            f"unknown ladder {name_or_path!r}; shipped: {', '.join(SHIPPED)}, or give a YAML path"
        )
    with resources.as_file(resources.files("neobert.configs") / "ladders" / f"{name_or_path}.yaml") as p:
        return Path(p)


def load_ladder(name_or_path: str | Path) -> Ladder:
    path = ladder_path(name_or_path)
    data = load_mapping(path, LadderError)
    try:
        ladder = _build(Ladder, {**data, "source": str(path)}, "")
        for plan in resolve(ladder):  # names that refer to nothing and bad `set` keys fail now, not at rung 7
            pretrain_config(ladder, plan, 0, "check", "check")
    except (ConfigError, TypeError) as err:
        raise LadderError(f"{path}: {err}") from None
    return ladder


def _build(cls: type, data: Any, where: str) -> Any:
    """A (nested) dataclass from a mapping; an unknown key raises with its dotted path."""
    if not isinstance(data, dict):
        raise LadderError(f"{where.rstrip('.') or 'ladder'}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise LadderError(
            f"unknown key(s) {', '.join(where + k for k in unknown)}; allowed here: {', '.join(fields)}"
        )
    missing = [
        n
        for n, f in fields.items()
        if n not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise LadderError(f"missing key(s) {', '.join(where + k for k in missing)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        hint, inner = hints[key], typing.get_args(hints[key])
        if dataclasses.is_dataclass(hint):
            value = _build(hint, value, f"{where}{key}.")
        elif typing.get_origin(hint) is list and inner and dataclasses.is_dataclass(inner[0]):
            value = [
                _build(inner[0], v, f"{where}{key}[{i}].") for i, v in enumerate(_list(value, where + key))
            ]
        elif typing.get_origin(hint) is dict and len(inner) == 2 and dataclasses.is_dataclass(inner[1]):
            value = {
                k: _build(inner[1], v, f"{where}{key}.{k}.") for k, v in _dict(value, where + key).items()
            }
        kwargs[key] = value
    return cls(**kwargs)


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise LadderError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise LadderError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def resolve(ladder: Ladder) -> list[RungPlan]:
    """Apply each rung's delta to its base rung; the first rung must state every named setting."""
    plans: dict[str, RungPlan] = {}
    chain_end: str | None = None  # the last rung the paper kept: the default base of the next rung
    for rung in ladder.rungs:
        base_name = rung.base_rung if rung.base_rung is not None else chain_end
        if base_name is not None and base_name not in plans:
            raise LadderError(f"rung {rung.name}: base_rung {base_name!r} is not an earlier rung")
        base = plans.get(base_name) if base_name else None
        values: dict[str, Any] = {}
        for key in (*NAMED, "pretrain"):
            own = getattr(rung, key)
            values[key] = own if own is not None else (getattr(base, key) if base else None)
            if values[key] is None:
                raise LadderError(f"rung {rung.name}: {key} is not set (the first rung states every setting)")
        _check_names(ladder, rung.name, values)
        if rung.init_from is not None and rung.init_from not in plans:
            raise LadderError(f"rung {rung.name}: init_from {rung.init_from!r} is not an earlier rung")
        plans[rung.name] = RungPlan(
            name=rung.name,
            change=rung.change,
            paper_delta=rung.paper_delta,
            paper_kept=rung.paper_kept,
            base_rung=base_name,
            init_from=rung.init_from,
            set={**(base.set if base else {}), **rung.set},
            out_of_reach=ladder.scale.out_of_reach.get(rung.name),
            **values,
        )
        if rung.paper_kept:
            chain_end = rung.name
    unknown = sorted(set(ladder.scale.out_of_reach) - set(plans))
    if unknown:
        raise LadderError(f"scale.out_of_reach names unknown rung(s): {', '.join(unknown)}")
    return list(plans.values())


def _check_names(ladder: Ladder, rung: str, values: dict[str, Any]) -> None:
    tables = {
        "size": ladder.scale.sizes,
        "context": ladder.scale.context,
        "batch": ladder.scale.batch,
        "corpus": ladder.corpora,
        "tokenizer": ladder.tokenizers,
    }
    for key, table in tables.items():
        if values[key] not in table:
            raise LadderError(
                f"rung {rung}: {key} {values[key]!r} is not defined; defined: {', '.join(map(str, table))}"
            )


def pretrain_config(
    ladder: Ladder, plan: RungPlan, seed: int, output: str | Path, data_dir: str | Path
) -> PretrainConfig:
    """The ordinary pretraining config of one rung and seed (the scale's sizes filled in)."""
    seq_len = ladder.scale.context[plan.context]
    model = {**ladder.base.get("model", {}), **ladder.scale.sizes[plan.size], "max_length": seq_len}
    config = PretrainConfig.from_dict({**ladder.base, "model": model})
    changes: dict[str, Any] = {
        "data.seq_len": seq_len,
        "tokens_per_step": ladder.scale.batch[plan.batch],
        "max_steps": ladder.scale.steps,
        "seed": seed,
        "output": str(output),
        "data.paths": [str(data_dir)],
        **plan.set,
    }
    try:
        return config.override(**changes)
    except KeyError as err:
        raise LadderError(f"rung {plan.name}: set names an unknown config key {err}") from None
