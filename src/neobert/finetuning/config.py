"""Settings of the fine-tuning entry points: plain dataclasses that reject unknown keys.

:class:`TrainSettings` holds the optimisation knobs shared by every fine-tuning run; :class:`GlueConfig`
and :class:`ClassifyConfig` add what their command needs. A YAML file maps 1:1 onto a config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.config import check_known_keys, check_precision, load_mapping, renamed_settings, typed_settings
from ..model.pooling import CLASSIFIER_POOLINGS
from ..training.lora import LoraSettings


class FinetuneConfigError(ValueError):
    """A fine-tuning setting is unknown or invalid."""


@dataclass(kw_only=True)
class TrainSettings(LoraSettings):
    """One fine-tuning run's hyperparameters (one point of a sweep), LoRA's included."""

    epochs: int = 10  # maximum epochs (the paper's bound; early stopping usually ends a run sooner)
    batch_size: int = 32  # examples per optimizer step
    lr: float = 2e-5  # peak learning rate (AdamW)
    weight_decay: float = 0.01  # AdamW weight decay
    warmup_ratio: float = 0.1  # linear warmup over this fraction of the steps, then linear decay to 0
    eval_every: int | None = None  # optimizer steps between evaluations; None: once per epoch
    patience: int | None = (
        3  # evaluations without improvement before stopping; None (CLI: 0): never stop early
    )
    max_length: int = 512  # tokens per example (pair) after truncation; capped by the model's limit
    eval_batch_size: int = 64  # examples per evaluation forward
    clip_grad_norm: float | None = 1.0  # gradient-norm clipping; None: off
    seed: int = 0  # seed of the head's initialization and the data order

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_length", "eval_batch_size"):
            _positive_int(self, name)
        for name in ("eval_every", "patience"):
            if getattr(self, name) is not None:
                _positive_int(self, name)
        if not self.lr > 0:
            raise FinetuneConfigError(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0:
            raise FinetuneConfigError(f"weight_decay must be non-negative, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise FinetuneConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        check_lora(self)

    def train_settings(self) -> TrainSettings:
        """The :class:`TrainSettings` part of this config (subclasses carry more)."""
        names = {f.name for f in dataclasses.fields(TrainSettings)}
        return TrainSettings(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        return config_from_dict(cls, data)

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any):
        return cls.from_dict({**load_mapping(path, FinetuneConfigError), **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_lora(config: LoraSettings) -> None:
    """The LoRA settings of a fine-tuning config, checked (a bad one raises FinetuneConfigError)."""
    try:
        LoraSettings.__post_init__(config)
    except ValueError as err:
        raise FinetuneConfigError(str(err)) from None


def config_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """The fine-tuning config ``cls`` from a settings mapping: old setting names load with a FutureWarning
    (:func:`neobert.common.config.renamed_settings`); unknown keys and missing required settings raise."""
    data = renamed_settings(data, cls.__name__)
    check_known_keys(cls, data, cls.__name__, FinetuneConfigError)
    data = typed_settings(cls, data, "", FinetuneConfigError)
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if data.get(name) is None]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise FinetuneConfigError(f"missing required setting(s): {', '.join(missing)} (CLI: {flags})")
    return cls(**data)


def settings(path: str | Path | None, given: dict[str, Any]) -> dict[str, Any]:
    """A config mapping: the settings file ``path`` (None: none) with the settings ``given`` laid over it;
    ``patience`` 0 (a command-line value) means never stop early."""
    data = load_mapping(path, FinetuneConfigError) if path else {}
    data.update(given)
    if data.get("patience") == 0:
        data["patience"] = None
    return data


def _positive_int(config: Any, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise FinetuneConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass(kw_only=True)
class ModelSource:
    """Which encoder to fine-tune; shared by every command so all models are treated the same way."""

    model: str  # NeoBERT directory, NeoBERT preset (random weights), or any transformers directory / hub id
    tokenizer: str | None = None  # default: the model's own; the NeoBERT tokenizer for presets
    preset_overrides: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields, presets only
    device: str | None = None  # default: cuda when available, else cpu
    precision: str = "auto"  # auto (bf16 autocast where measured faster for this model here) | fp32 | bf16
    tensorboard: bool = True  # TensorBoard logs in OUTPUT
    show_progress: bool = True  # progress bars
    resume: bool = False  # continue an interrupted run from its last evaluation's checkpoint
    license: str | None = None  # the license the model card names (none unless given), e.g. apache-2.0

    def __post_init__(self) -> None:
        check_precision(self.precision, FinetuneConfigError)


@dataclass(kw_only=True)
class GlueConfig(TrainSettings, ModelSource):
    """``neobert finetune glue``: fine-tune any encoder on one or all GLUE tasks, optionally swept over a
    hyperparameter grid; writes OUTPUT/results.md (Table 3 layout) and OUTPUT/results.json, and each task's
    best checkpoint in OUTPUT/<task>/best."""

    output: str  # output directory
    tasks: list[str] | str = "all"  # a task name, a list of them, or "all" (the 8 tasks of Table 3)
    data_dir: str | None = None  # local files; None: the hub data set nyu-mll/glue
    grid: str | dict[str, list] | None = (
        None  # None: one run; "paper"; a YAML file; a mapping field -> values
    )
    max_configs: int | None = None  # sample this many grid points (seeded) instead of all
    from_mnli: str | None = None  # start RTE / MRPC / STS-B from this checkpoint
    transfer_from_mnli: bool = True  # with MNLI in the run, start RTE / MRPC / STS-B from its best checkpoint
    max_train_samples: int | None = None  # truncate each training set (quick runs)
    max_eval_samples: int | None = None  # truncate each validation set
    update_card: bool = False  # add the GLUE dev scores to --model's README.md card (a local directory)

    def __post_init__(self) -> None:
        TrainSettings.__post_init__(self)
        ModelSource.__post_init__(self)
        for name in ("max_configs", "max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None:
                _positive_int(self, name)
        if self.max_configs is not None and self.grid is None:
            raise FinetuneConfigError(
                "max_configs samples points of a grid, and no grid is given: add grid "
                "(--grid paper or --grid FILE.yaml), or drop max_configs (--max-configs)"
            )


TASK_TYPES = ("classification", "regression")


@dataclass(kw_only=True)
class ClassifyConfig(TrainSettings, ModelSource):
    """``neobert finetune classify``: the user's own classification, regression or pair task. Writes
    OUTPUT/model (AutoModelForSequenceClassification + tokenizer), OUTPUT/metrics.json and
    OUTPUT/predictions.jsonl."""

    train: str  # training file (.csv, .tsv, .jsonl, .json, .parquet)
    validation: str  # validation file, same columns
    output: str  # output directory
    text_column: str = "text"  # column holding the text
    label_column: str = "label"  # column holding the label or target
    text_pair_column: str | None = None  # column holding the second text of a pair
    task_type: str = "classification"  # classification | regression
    max_train_samples: int | None = None  # use only the first N training rows (quick runs)
    max_eval_samples: int | None = None  # use only the first N validation rows
    pooling: str | None = None  # NeoBERT head: cls | mean (MLM-only checkpoints); default: the model's own

    def __post_init__(self) -> None:
        TrainSettings.__post_init__(self)
        ModelSource.__post_init__(self)
        if self.pooling is not None and self.pooling not in CLASSIFIER_POOLINGS:
            raise FinetuneConfigError(
                f"pooling must be one of {', '.join(CLASSIFIER_POOLINGS)}; got {self.pooling!r}"
            )
        if self.task_type not in TASK_TYPES:
            raise FinetuneConfigError(
                f"task_type must be one of {', '.join(TASK_TYPES)}; got {self.task_type!r}"
            )
        for name in ("max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None:
                _positive_int(self, name)


@dataclass(kw_only=True)
class TokensConfig(TrainSettings, ModelSource):
    """``neobert finetune tokens``: the user's own token-classification (NER) task, for any encoder. Files:
    CoNLL style (a token and its tag per line, the tag in the last column, blank lines between sentences,
    -DOCSTART- skipped) or JSONL (tokens + tags lists). Writes OUTPUT/model
    (AutoModelForTokenClassification + tokenizer), OUTPUT/metrics.json (entity-level P/R/F1, seqeval's
    definition) and OUTPUT/predictions.jsonl."""

    train: str  # training file: CoNLL style (a token and its tag per line), or .jsonl with tokens + tags
    validation: str  # validation file, same format
    output: str  # output directory
    max_train_samples: int | None = None  # use only the first N training sentences (quick runs)
    max_eval_samples: int | None = None  # use only the first N validation sentences

    def __post_init__(self) -> None:
        TrainSettings.__post_init__(self)
        ModelSource.__post_init__(self)
        for name in ("max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None:
                _positive_int(self, name)
