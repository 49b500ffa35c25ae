"""Pretraining configuration: nested dataclasses that YAML files map onto 1:1 (unknown keys raise)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError, ModelConfig, load_mapping


@dataclass
class DataConfig:
    # prepared data directories (`neobert data prepare`) or raw text files (.txt/.jsonl/.csv/.parquet),
    # which are prepared into OUTPUT/data first
    paths: list[str] = field(default_factory=list)
    tokenizer: str | None = None  # tokenizer directory; default: the one stored with the prepared data
    text_column: str = "text"
    seq_len: int = 1024
    packing: bool = True  # whole documents packed into rows with per-document attention
    # stage 2: sampling weights of the full set and the sub-sets of documents longer than 1024 / 2048 tokens
    mixture: dict[str, float] | None = None  # e.g. {"all": 0.2, "gt1024": 0.4, "gt2048": 0.4}
    mask_rate: float = 0.2
    mask_scheme: str = "mask"  # mask: every selected token -> [MASK]; bert: 80/10/10
    validation_fraction: float = 0.01


@dataclass
class OptimConfig:
    name: str = "adamw"  # adamw | adam (BERT baseline)
    lr: float = 6e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_norms_biases_embeddings: bool = False
    clip_grad_norm: float = 1.0


@dataclass
class ScheduleConfig:
    kind: str = "cosine"  # cosine | linear | constant
    warmup_steps: int = 2000
    final_ratio: float = 0.1  # decay to 10% of peak ...
    decay_fraction: float = 0.9  # ... over 90% of the steps, then flat


@dataclass
class PretrainConfig:
    preset: str = "neobert"
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields overriding the preset
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    max_steps: int = 1_000_000
    tokens_per_step: int = 2_097_152  # the paper's 2M-token batch, kept fixed when seq_len grows
    micro_batch_size: int = 32  # rows per process per forward
    precision: str = "bf16"  # bf16 | fp32
    device: str | None = None  # None: CUDA when available (one GPU per process); "cpu" forces the CPU
    compile: bool = False  # regional compilation of the encoder blocks
    activation_checkpointing: bool = False  # recompute each block's activations in the backward
    seed: int = 0
    output: str = "runs/pretrain"
    init_from: str | None = None  # a model directory to start from (stage 2 from stage 1)
    max_minutes: float | None = None  # stop (and save) after this much wall time
    log_every: int = 10
    eval_every: int = 1000
    eval_batches: int = 20
    save_every: int = 1000
    keep_last: int = 3
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])

    def __post_init__(self) -> None:
        if self.precision not in ("bf16", "fp32"):
            raise ConfigError(f"precision must be bf16 or fp32, got {self.precision!r}")
        if self.device not in (None, "cpu", "cuda"):
            raise ConfigError(f"device must be cpu or cuda (or unset: CUDA when available), got {self.device!r}")
        if self.data.mask_scheme not in ("mask", "bert"):
            raise ConfigError(f"data.mask_scheme must be 'mask' or 'bert', got {self.data.mask_scheme!r}")
        if self.optim.name not in ("adamw", "adam"):
            raise ConfigError(f"optim.name must be 'adamw' or 'adam', got {self.optim.name!r}")
        if self.schedule.kind not in ("cosine", "linear", "constant"):
            raise ConfigError(f"schedule.kind must be cosine, linear or constant, got {self.schedule.kind!r}")
        if self.data.mixture is not None:
            unknown = set(self.data.mixture) - {"all", "gt1024", "gt2048"}
            if unknown:
                raise ConfigError(f"data.mixture keys must be all, gt1024, gt2048; got {sorted(unknown)}")
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
        self.model_config()  # validates preset and overrides now, not at step 0

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_name(self.preset, **self.model)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PretrainConfig:
        return _build(cls, data, "")

    @classmethod
    def from_file(cls, path: str | Path) -> PretrainConfig:
        data = load_mapping(path)
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None

    def override(self, **changes: Any) -> PretrainConfig:
        """A copy with dotted keys changed, e.g. ``override(**{"data.seq_len": 128})``."""
        data = self.to_dict()
        for dotted, value in changes.items():
            target = data
            *parents, leaf = dotted.split(".")
            for key in parents:
                target = target[key]
            target[leaf] = value
        return PretrainConfig.from_dict(data)


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
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, f"{where}{key}.")
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)
