"""A pretraining run as phases: each its length, rows, data mixture, masking, learning-rate shape and RoPE.

NeoBERT trained 1,024-token rows then 4,096 with a length mixture; ModernBERT, Ettin and mmBERT train a long
stable phase, a context extension and a decay on other data. A phase (:class:`PhaseConfig`, listed in
``PretrainConfig.phases``) lays its settings over the run's; :func:`plan` resolves the list into
:class:`Phase` es with their first step and a whole :class:`PretrainConfig` each (``max_steps`` the phase's),
so the MLM task asks "which phase is step s in" and uses that phase's config as it used the run's. A run
without phases is one phase of ``max_steps`` with the run's own settings: one code path.

Lengths in tokens are multiplied by ``PretrainConfig.scale`` and divided by ``tokens_per_step`` (a recipe
written at full size runs at any size); row lengths and ``model.max_length`` by ``context_scale``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..common.config import ConfigError

# PretrainConfig (training/config.py) imports this module, so it is not imported here: annotations name it
PretrainConfig = Any

# what a phase may change in the model: the positions it takes and how RoPE rotates them (weights unchanged)
PHASE_MODEL_FIELDS = (
    "max_length",
    "rope_theta",
    "rope_scaling_type",
    "rope_scaling_factor",
    "rope_original_max_length",
)


@dataclass
class PhaseConfig:
    name: str = ""  # e.g. pretrain, context-extension, decay (default: phase-N)
    steps: int | None = None  # optimizer steps of the phase; or:
    tokens: float | None = None  # the phase's tokens (times scale) / tokens_per_step, at least 1 step
    seq_len: int | None = None  # row length (times context_scale); None: data.seq_len
    micro_batch_size: int | None = None  # rows per forward; None: the run's
    mixture: dict[str, float] | None = None  # length sub-sets (all, gtN) with weights; None: data.mixture
    sources: dict[str, float] | None = None  # data sources (prepared directories by name) with weights
    temperature: float | None = None  # sample the sources by size (tokens) ** temperature instead
    mask_rate: float | None = None  # None: data.mask_rate (of the run)
    mask_rate_end: float | None = None  # the rate at the phase's last step; None: mask_rate throughout
    lr: float | None = None  # the phase's peak learning rate; None: optim.lr
    schedule: dict[str, Any] | None = (
        None  # ScheduleConfig fields over the phase's own steps; None: the run's
    )
    model: dict[str, Any] = field(default_factory=dict)  # max_length, rope_theta, rope_scaling_* of the phase


@dataclass(frozen=True)
class Phase:
    index: int
    name: str
    start: int  # first step (0-based, global)
    steps: int
    config: PretrainConfig  # the run's settings with the phase's laid over them; max_steps = steps
    peak: float  # the phase's peak learning rate

    @property
    def end(self) -> int:
        return self.start + self.steps


def phase_steps(phase: PhaseConfig, config: PretrainConfig, where: str) -> int:
    if (phase.steps is None) == (phase.tokens is None):
        raise ConfigError(f"{where}: give the phase's length as steps or as tokens (one of them)")
    for key in ("steps", "tokens"):
        value = getattr(phase, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(
                f"{where}.{key} must be a number, got {value!r} (YAML: write 1.7e+12 or 1_700_000_000_000)"
            )
    if phase.steps is not None:
        if phase.steps <= 0:
            raise ConfigError(f"{where}.steps must be positive, got {phase.steps}")
        return phase.steps
    if phase.tokens <= 0:
        raise ConfigError(f"{where}.tokens must be positive, got {phase.tokens}")
    return max(1, round(phase.tokens * config.scale / config.tokens_per_step))


def tokens_to_steps(tokens: float | None, config: PretrainConfig) -> int | None:
    """A length in tokens (times ``scale``) as optimizer steps; None stays None."""
    return None if tokens is None else round(tokens * config.scale / config.tokens_per_step)


def check_phases(config: PretrainConfig) -> int:
    """Validate ``config.phases`` (errors name the key, e.g. ``phases[1].sources.wiki``); their total steps."""
    total = 0
    for i, phase in enumerate(config.phases):
        where = f"phases[{i}]"
        total += phase_steps(phase, config, where)
        bad = sorted(set(phase.model) - set(PHASE_MODEL_FIELDS))
        if bad:
            raise ConfigError(
                f"{where}.model.{bad[0]}: a phase may change only {', '.join(PHASE_MODEL_FIELDS)}"
            )
        picks = [k for k in ("mixture", "sources", "temperature") if getattr(phase, k) is not None]
        if "mixture" in picks and len(picks) > 1:
            raise ConfigError(f"{where}: mixture (length sub-sets) and sources/temperature are exclusive")
        check_sources(phase.sources, phase.temperature, config.data.paths, where)
    return total


def check_sources(
    sources: dict[str, float] | None, temperature: float | None, paths: list[str], where: str
) -> None:
    if temperature is not None and not temperature > 0:
        raise ConfigError(f"{where}.temperature must be positive, got {temperature}")
    names = source_names(paths)
    for name, weight in (sources or {}).items():
        if paths and name not in names:
            raise ConfigError(
                f"{where}.sources.{name}: no data source of that name (sources: {', '.join(names)})"
            )
        if not weight >= 0:
            raise ConfigError(f"{where}.sources.{name}: a weight must be non-negative, got {weight}")
    if sources is not None and not sum(sources.values()) > 0:
        raise ConfigError(f"{where}.sources: the weights sum to zero")


def source_names(paths: list[str]) -> list[str]:
    """A data source's name: the last part of its path (a prepared directory's name)."""
    from pathlib import Path

    return [Path(p).name for p in paths]


def plan(config: PretrainConfig) -> list[Phase]:
    """The run's phases with their first steps and configs; a run without phases is one phase."""
    if not config.phases:
        return [Phase(0, "main", 0, config.max_steps, config, config.optim.lr)]
    phases, start = [], 0
    for i, phase in enumerate(config.phases):
        steps = phase_steps(phase, config, f"phases[{i}]")
        view = phase_view(config, phase, steps, i)
        max_length = view.model_config().max_length
        if view.data.seq_len > max_length:
            raise ConfigError(
                f"phases[{i}].seq_len {view.data.seq_len} exceeds the model's max_length {max_length}: set "
                f"phases[{i}].model.max_length (context extension) or a shorter seq_len"
            )
        phases.append(Phase(i, phase.name or f"phase-{i + 1}", start, steps, view, view.optim.lr))
        start += steps
    return phases


def phase_view(config: PretrainConfig, phase: PhaseConfig, steps: int, index: int) -> PretrainConfig:
    """The run's config as phase ``phase`` trains it (``max_steps`` its steps, no phases of its own)."""
    data = config.data
    changes: dict[str, Any] = {"phases": [], "max_steps": steps, "scale": 1.0, "context_scale": 1.0}
    seq_len = phase.seq_len or data.seq_len
    changes["data.seq_len"] = scaled_length(seq_len, config.context_scale)
    model = {**config.model, **phase.model}
    if "max_length" in model:
        model["max_length"] = scaled_length(model["max_length"], config.context_scale)
    changes["model"] = model
    for key in ("mixture", "sources", "temperature", "mask_rate", "mask_rate_end"):
        value = getattr(phase, key)
        target = {"temperature": "source_temperature"}.get(key, key)
        if value is not None or key in ("mask_rate_end",):
            changes[f"data.{target}"] = value if value is not None else getattr(data, target)
    rows = config.tokens_per_step // changes["data.seq_len"]
    if rows < 1:
        raise ConfigError(
            f"phases[{index}]: a step of {config.tokens_per_step:,} tokens holds no row of {changes['data.seq_len']:,}"
        )
    # a phase of long rows holds fewer rows per step: its micro-batch is at most a step's rows
    changes["micro_batch_size"] = phase.micro_batch_size or min(config.micro_batch_size, rows)
    if phase.lr is not None:
        changes["optim.lr"] = phase.lr
    schedule = {**dataclasses.asdict(config.schedule), **(phase.schedule or {})}
    schedule = resolve_schedule_tokens(schedule, config)
    changes["schedule"] = schedule
    try:
        return config.override(**changes)
    except ConfigError as err:
        raise ConfigError(f"phases[{index}]: {err}") from None


def resolve_schedule_tokens(schedule: dict[str, Any], config: PretrainConfig) -> dict[str, Any]:
    """``warmup_tokens`` / ``decay_tokens`` (times scale) as steps, replacing the step counts."""
    schedule = dict(schedule)
    for name in ("warmup", "decay"):
        tokens = schedule.pop(f"{name}_tokens", None)
        if tokens is not None:  # a warmup or decay given in tokens lasts at least a step
            schedule[f"{name}_steps"] = max(1, tokens_to_steps(tokens, config)) if tokens > 0 else 0
    return schedule


def scaled_length(length: int, context_scale: float) -> int:
    """A row or position count times ``context_scale``, a multiple of 8, at least 16."""
    if context_scale == 1.0:
        return length
    return max(16, round(length * context_scale / 8) * 8)


def phase_at(phases: list[Phase], step: int) -> Phase:
    """The phase step ``step`` (0-based) belongs to; past the end, the last."""
    for phase in phases:
        if step < phase.end:
            return phase
    return phases[-1]


def source_weights(
    sizes: dict[str, int], weights: dict[str, float] | None, temperature: float | None
) -> dict[str, float]:
    """Sampling probability per source: the weights given (normalised), or size ** temperature normalised
    (temperature 1: in proportion to size; towards 0: uniform over sources), or in proportion to size."""
    if weights is not None:
        chosen = {name: float(weights.get(name, 0.0)) for name in sizes}
    else:
        exponent = 1.0 if temperature is None else temperature
        chosen = {name: float(size) ** exponent if size else 0.0 for name, size in sizes.items()}
    total = sum(chosen.values())
    return {name: w / total for name, w in chosen.items()}


def apply_model_settings(model: Any, settings: dict[str, Any]) -> bool:
    """Give ``model`` (a NeoBERT MLM, unwrapped) a phase's positions and RoPE settings; whether anything
    changed. Only the config and the rotation tables change (they are rebuilt on next use); weights do not."""
    wanted = {k: v for k, v in settings.items() if k in PHASE_MODEL_FIELDS and getattr(model.config, k) != v}
    if not wanted:
        return False
    for key, value in wanted.items():
        setattr(model.config, key, value)
    encoder = model.model
    encoder.model_config = model.config.to_model_config()  # validates the combination
    if hasattr(encoder, "rotary"):
        encoder.rotary.config = encoder.model_config
        encoder.rotary.reset()
    return True
