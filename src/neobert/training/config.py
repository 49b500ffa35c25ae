"""Pretraining configuration: nested dataclasses that YAML files map onto 1:1 (unknown keys raise)."""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.config import PRESETS, ConfigError, ModelConfig, check_precision, load_mapping, typed_settings
from .batching import LONG_DOCS
from .masking import RATE_SHAPES
from .optim import build_optimizer
from .phases import PhaseConfig, check_phases, check_sources, plan
from .schedule import KINDS, SHAPES


@dataclass
class DataConfig:
    # prepared data directories (`neobert data prepare`) or raw text files (.txt/.jsonl/.csv/.parquet),
    # which are prepared into OUTPUT/data first
    paths: list[str] = field(default_factory=list)
    tokenizer: str | None = None  # tokenizer directory; default: the one stored with the prepared data
    text_column: str = "text"
    seq_len: int = 1024
    packing: bool = True  # whole documents packed into rows with per-document attention
    # a document longer than seq_len: "split" into consecutive seq_len pieces (nothing is lost) or "truncate"
    # to its first seq_len tokens (the paper's rule for unpacked rows); unset: split when packing, else truncate
    long_docs: str | None = None
    # stage 2: sampling weights of the full set ("all") and of sub-sets of the documents longer than N tokens
    # ("gtN"; `neobert data prepare --length-thresholds` counts them)
    mixture: dict[str, float] | None = None  # e.g. {"all": 0.2, "gt1024": 0.4, "gt2048": 0.4}
    # sampling weights of the data sources (the prepared directories of paths, by name), e.g. {"web": 0.7,
    # "code": 0.3}; None: documents drawn from all of them alike
    sources: dict[str, float] | None = None
    # sample the sources in proportion to size ** temperature (tokens; 1: by size, towards 0: uniform), as
    # mmBERT's 0.7 -> 0.5 -> 0.3; exclusive with sources
    source_temperature: float | None = None
    mask_rate: float = 0.2  # share of the eligible tokens selected for prediction (at the first step)
    # the rate at the last step: the rate moves from mask_rate to mask_rate_end over the run (over each phase,
    # with phases), e.g. 0.3 -> 0.15 (a masking curriculum); None: mask_rate throughout
    mask_rate_end: float | None = None
    mask_rate_shape: str = "linear"  # linear | cosine: how the rate moves from mask_rate to mask_rate_end
    # the rate validation masks with (fixed, so validation losses compare across steps and runs); None: the
    # rate the run (the phase being trained) ends at
    eval_mask_rate: float | None = None
    mask_scheme: str = "mask"  # mask: every selected token -> [MASK]; bert: 80/10/10
    validation_fraction: float = 0.01


@dataclass
class OptimConfig:
    name: str = (
        "adamw"  # adamw | adam (BERT baseline) | muon (Muon for the hidden 2-D weights, AdamW for the rest)
    )
    lr: float = 6e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_norms_biases_embeddings: bool = False
    clip_grad_norm: float = 1.0
    muon_momentum: float = 0.95  # muon: momentum of the Muon group
    muon_nesterov: bool = True  # muon: Nesterov momentum
    muon_ns_steps: int = 5  # muon: Newton-Schulz iterations per step
    # muon: match_rms_adamw (Muon's update scaled to AdamW's RMS, so both share lr and weight decay) | original
    muon_adjust_lr: str = "match_rms_adamw"

    def build(self, model: Any, fused: bool | None = None) -> Any:
        """The optimizer these settings describe over ``model`` (:func:`neobert.training.optim.build_optimizer`)."""
        return build_optimizer(
            model,
            name=self.name,
            lr=self.lr,
            betas=tuple(self.betas),
            eps=self.eps,
            weight_decay=self.weight_decay,
            decay_norms_biases_embeddings=self.decay_norms_biases_embeddings,
            fused=fused,
            muon={
                "momentum": self.muon_momentum,
                "nesterov": self.muon_nesterov,
                "ns_steps": self.muon_ns_steps,
                "adjust_lr": self.muon_adjust_lr,
            }
            if self.name == "muon"
            else None,
        )


@dataclass
class ScheduleConfig:
    # cosine | linear | 1-sqrt | inverse-sqrt (decay from the end of warmup) | constant | wsd (warmup, stable,
    # then a decay of decay_steps at the end)
    kind: str = "cosine"
    warmup_steps: int = 2000
    final_ratio: float = 0.1  # decay to 10% of peak ...
    decay_fraction: float = 0.9  # ... over 90% of the steps, then flat (the kinds that decay after warmup)
    # wsd: steps of the final decay (0: stable to the end, decayed later with decay_from); None: the last 10%
    decay_steps: int | None = None
    decay_shape: str = "1-sqrt"  # wsd: linear | cosine | 1-sqrt | inverse-sqrt
    warmup_tokens: float | None = None  # in a phase: warmup as tokens (times scale), instead of warmup_steps
    decay_tokens: float | None = (
        None  # in a phase: the wsd decay as tokens (times scale), instead of decay_steps
    )

    def lr_kwargs(self) -> dict[str, Any]:
        """The schedule's shape, as :func:`neobert.training.schedule.lr_at` takes it."""
        return {
            "kind": self.kind,
            "final_ratio": self.final_ratio,
            "decay_fraction": self.decay_fraction,
            "decay_steps": self.decay_steps,
            "decay_shape": self.decay_shape,
        }


@dataclass
class PretrainConfig:
    preset: str = (
        "neobert"  # model preset (neobert, neobert-1024, 120m, 250m-wide, bert-baseline, small, tiny)
    )
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields overriding the preset
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    max_steps: int = 1_000_000  # optimizer steps
    tokens_per_step: int = 2_097_152  # the paper's 2M-token batch, kept fixed when seq_len grows
    micro_batch_size: int = 32  # rows per process per forward
    precision: str = (
        "auto"  # auto (the measured faster of the two for this model here) | fp32 | bf16 (autocast)
    )
    device: str | None = None  # None: CUDA when available (one GPU per process); "cpu" forces the CPU
    compile: bool = False  # regional compilation of the encoder blocks
    activation_checkpointing: bool = False  # recompute each block's activations in the backward
    seed: int = 0  # seed of the initialization, the data order and the masking
    output: str = "runs/pretrain"  # run directory (checkpoints, logs, final model)
    init_from: str | None = None  # a model directory to start from (stage 2 from stage 1)
    # a checkpoint (OUTPUT/checkpoints/step-N) of a stable (wsd) run to branch a decay from: this run starts
    # from its exact state (weights, optimizer, data position) and decays over schedule.decay_steps steps, so
    # max_steps becomes N + decay_steps; the output must be another directory
    decay_from: str | None = None
    max_minutes: float | None = None  # stop (and save) after this much wall time
    log_every: int = 10  # steps between training-loss logs
    eval_every: int = 1000  # steps between validation losses
    eval_batches: int = 20  # validation batches per evaluation
    save_every: int = 1000  # steps between resumable checkpoints
    keep_last: int = 3  # checkpoints kept
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # loggers besides metrics.jsonl
    # steps between exported checkpoints OUTPUT/exports/step-N, each a model directory with its card
    # (published as Hub revision step-N with push_to); None: only the final model
    push_every: int | None = None
    push_to: str | None = None  # Hub repository (OWNER/NAME): the final model on main, checkpoints as step-N
    license: str | None = None  # the license the model cards name (none unless given), e.g. apache-2.0
    # the run as phases (neobert.training.phases.PhaseConfig: length, rows, data mixture, masking, lr shape,
    # RoPE); given, max_steps is their total. Set in a --config/--recipe file
    phases: list[PhaseConfig] = field(default_factory=list)
    scale: float = 1.0  # phase lengths given in tokens (and warmup/decay tokens) are multiplied by this
    context_scale: float = 1.0  # phase row lengths and model.max_length are multiplied by this

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.device not in (None, "cpu", "cuda"):
            raise ConfigError(
                f"device must be cpu or cuda (or unset: CUDA when available), got {self.device!r}"
            )
        if self.data.mask_scheme not in ("mask", "bert"):
            raise ConfigError(f"data.mask_scheme must be 'mask' or 'bert', got {self.data.mask_scheme!r}")
        if self.data.long_docs not in (None, *LONG_DOCS):
            raise ConfigError(
                f"data.long_docs must be split or truncate (or unset), got {self.data.long_docs!r}"
            )
        if self.optim.name not in ("adamw", "adam", "muon"):
            raise ConfigError(f"optim.name must be adamw, adam or muon, got {self.optim.name!r}")
        if self.optim.muon_adjust_lr not in ("match_rms_adamw", "original"):
            raise ConfigError(
                f"optim.muon_adjust_lr must be match_rms_adamw or original, got {self.optim.muon_adjust_lr!r}"
            )
        _check_schedule(self.schedule, "schedule.")
        _check_masking(self.data, "data.")
        if self.decay_from is not None and (self.schedule.kind != "wsd" or not self.schedule.decay_steps):
            raise ConfigError(
                "decay_from needs schedule.kind wsd and schedule.decay_steps > 0 (the length of the decay), "
                f"got kind {self.schedule.kind!r}, decay_steps {self.schedule.decay_steps!r}"
            )
        for name in self.data.mixture or {}:
            subset_min_length(name)  # raises on a bad name
        self._check_phases()
        for name in (
            "max_steps",
            "tokens_per_step",
            "micro_batch_size",
            "log_every",
            "eval_every",
            "save_every",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.push_every is not None and self.push_every <= 0:
            raise ConfigError(f"push_every must be positive (or unset), got {self.push_every}")
        if self.push_to is not None and self.push_to.count("/") != 1:
            raise ConfigError(f"push_to must be a Hub repository OWNER/NAME, got {self.push_to!r}")
        self.model_config()  # validates preset and overrides now, not at step 0

    def _check_phases(self) -> None:
        if not self.scale > 0 or not self.context_scale > 0:
            raise ConfigError(
                f"scale and context_scale must be positive, got {self.scale}, {self.context_scale}"
            )
        if self.data.sources is not None and self.data.source_temperature is not None:
            raise ConfigError(
                "data.sources and data.source_temperature are exclusive: weights or a temperature"
            )
        check_sources(self.data.sources, self.data.source_temperature, self.data.paths, "data")
        tokens = self.schedule.warmup_tokens is not None or self.schedule.decay_tokens is not None
        if tokens and not self.phases:
            raise ConfigError("schedule.warmup_tokens / decay_tokens are for phases; give warmup_steps")
        if self.phases:
            if self.decay_from is not None:
                raise ConfigError("decay_from branches a one-phase wsd run; for phases, add a decay phase")
            self.max_steps = check_phases(self)
            plan(self)  # each phase's settings validated now, naming the phase

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_name(self.preset, **self.model)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PretrainConfig:
        """The config of ``data``; settings it leaves out that a small preset needs come from
        :data:`PRESET_TRAINING` (see :func:`with_preset_training`)."""
        return _build(cls, with_preset_training(data), "")

    @classmethod
    def from_file(cls, path: str | Path | None, **changes: Any) -> PretrainConfig:
        """The settings file ``path`` (None: no file) with dotted keys changed (``changes``, e.g.
        ``**{"data.seq_len": 128}``); a small preset's settings fill in what is still missing."""
        data = load_mapping(path) if path else {}
        for dotted, value in changes.items():
            set_dotted(data, dotted, value)
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}" if path else str(err)) from None

    def override(self, **changes: Any) -> PretrainConfig:
        """A copy with dotted keys changed, e.g. ``override(**{"data.seq_len": 128})``."""
        data = self.to_dict()
        for dotted, value in changes.items():
            set_dotted(data, dotted, value)
        return PretrainConfig.from_dict(data)


# Settings that suit a small preset, used where a run leaves them out (settings given always win): the
# paper's 1024-token rows do not fit tiny's 128 positions, and its 2M-token batch takes minutes a step.
PRESET_TRAINING: dict[str, dict[str, Any]] = {
    "tiny": {
        "data.seq_len": 128,
        "tokens_per_step": 4096,
        "micro_batch_size": 32,
        "schedule.warmup_steps": 50,
    },
    "small": {
        "data.seq_len": 512,
        "tokens_per_step": 16384,
        "micro_batch_size": 16,
        "schedule.warmup_steps": 200,
    },
}


def with_preset_training(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a nested mapping) with the settings of :data:`PRESET_TRAINING` for its preset filled in
    where it has none; and ``data.seq_len``, when not given, at most the model's ``max_length``."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    preset = data.get("preset", PretrainConfig.preset)
    for dotted, value in PRESET_TRAINING.get(preset, {}).items():
        if get_dotted(data, dotted) is None:
            set_dotted(data, dotted, value)
    if get_dotted(data, "data.seq_len") is None and preset in PRESETS:
        model = data.get("model") if isinstance(data.get("model"), dict) else {}
        max_length = model.get("max_length", PRESETS[preset].get("max_length", ModelConfig.max_length))
        if isinstance(max_length, int) and max_length < DataConfig.seq_len:
            set_dotted(data, "data.seq_len", max_length)
    return data


def _check_schedule(schedule: ScheduleConfig, where: str) -> None:
    if schedule.kind not in KINDS:
        raise ConfigError(f"{where}kind must be one of {', '.join(KINDS)}, got {schedule.kind!r}")
    if schedule.decay_shape not in SHAPES:
        raise ConfigError(
            f"{where}decay_shape must be one of {', '.join(SHAPES)}, got {schedule.decay_shape!r}"
        )
    if schedule.decay_steps is not None and schedule.decay_steps < 0:
        raise ConfigError(f"{where}decay_steps must be non-negative (or unset), got {schedule.decay_steps}")
    if schedule.warmup_steps < 0:
        raise ConfigError(f"{where}warmup_steps must be non-negative, got {schedule.warmup_steps}")


def _check_masking(data: DataConfig, where: str) -> None:
    for name in ("mask_rate", "mask_rate_end", "eval_mask_rate"):
        value = getattr(data, name)
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"{where}{name} must be in (0, 1), got {value!r}")
    if data.mask_rate_shape not in RATE_SHAPES:
        raise ConfigError(
            f"{where}mask_rate_shape must be one of {', '.join(RATE_SHAPES)}, got {data.mask_rate_shape!r}"
        )


def get_dotted(data: dict[str, Any], dotted: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``"a.b"``, creating missing levels."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
        if not isinstance(data, dict):
            raise ConfigError(f"{dotted}: {key} is not a section")
    data[leaf] = value


def subset_min_length(name: str) -> int:
    """Smallest document length (tokens) of mixture sub-set ``name``: "all" -> 0, "gtN" -> N + 1."""
    if name == "all":
        return 0
    if name.startswith("gt") and name[2:].isdigit():
        return int(name[2:]) + 1
    raise ConfigError(f"data.mixture keys are 'all' and 'gtN' (documents longer than N tokens); got {name!r}")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    """Instantiate a (nested) dataclass from a mapping, naming any unknown key with its dotted path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        dotted = ", ".join(f"{where}{k}" for k in unknown)
        raise ConfigError(f"unknown config key(s): {dotted}; allowed here: {', '.join(names)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    data = typed_settings(cls, data, where)
    for key, value in data.items():
        hint = hints[key]
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list and typing.get_args(hint) else None
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, f"{where}{key}.")
        elif item is not None and dataclasses.is_dataclass(item):
            if not isinstance(value, list):
                raise ConfigError(f"{where}{key}: expected a list, got {type(value).__name__}")
            kwargs[key] = [
                v if isinstance(v, item) else _build(item, v, f"{where}{key}[{i}].")
                for i, v in enumerate(value)
            ]
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)
