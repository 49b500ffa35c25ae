"""The phases of a run as the MLM task trains them: one row stream per phase, the learning-rate multiplier
over every phase, the phase's model settings at its first step, and the record of what each phase saw."""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import PretrainConfig
from .data_setup import TrainingData
from .masking import mask_rate_at
from .phases import Phase, phase_at, source_weights
from .schedule import lr_at
from .stream import RowStream


def phase_seed(seed: int, index: int) -> int:
    """Phase 0 keeps the run's seed (a run without phases streams as it always did); later phases get
    unrelated streams."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def source_subsets(config: PretrainConfig, data: TrainingData) -> list[tuple[str, float, np.ndarray]] | None:
    """The data sources as weighted sub-sets of the training documents, when the config weights them."""
    d = config.data
    if d.sources is None and d.source_temperature is None:
        return None
    if not data.sources:
        raise ValueError("data.sources / a phase's sources need prepared data directories to name")
    sizes = {name: tokens for name, (_, _, tokens) in data.sources.items()}
    probabilities = source_weights(sizes, d.sources, d.source_temperature)
    return [
        (name, probabilities[name], np.arange(start, end)) for name, (start, end, _) in data.sources.items()
    ]


def make_stream(phase: Phase, data: TrainingData) -> RowStream:
    c = phase.config
    return RowStream(
        data.train,
        data.train.lengths,
        c.data.seq_len,
        phase_seed(c.seed, phase.index),
        c.data.packing,
        c.data.mixture,
        long_docs=c.data.long_docs,
        subsets=source_subsets(c, data),
    )


class PhasedStream:
    """Every phase's stream, checkpointed together (one registered object: the position of each)."""

    def __init__(self, streams: list[RowStream]):
        self.streams = streams

    def state_dict(self) -> dict[str, Any]:
        if len(self.streams) == 1:  # the layout of a run without phases, as before phases existed
            return self.streams[0].state_dict()
        return {"phases": [s.state_dict() for s in self.streams]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        states = state.get("phases", [state])
        if len(states) != len(self.streams):
            raise ValueError(f"the checkpoint has {len(states)} phase streams, this run {len(self.streams)}")
        for stream, s in zip(self.streams, states):
            stream.load_state_dict(s)


def lr_multiplier(phases: list[Phase], base: float):
    """``step -> lr / base`` over all phases: each phase's schedule over its own steps, at its own peak."""
    warmups = [fitted_warmup(p) for p in phases]

    def multiplier(step: int) -> float:
        phase = phase_at(phases, step)
        lr = lr_at(
            step - phase.start,
            peak=phase.peak,
            warmup_steps=warmups[phase.index],
            total_steps=phase.steps,
            **phase.config.schedule.lr_kwargs(),
        )
        return lr / base

    return multiplier


def fitted_warmup(phase: Phase) -> int:
    """The phase's warmup, cut to a tenth of its steps where it would not fit before the decay."""
    s, steps = phase.config.schedule, phase.steps
    if s.kind == "wsd" or s.kind == "constant":
        decay = (
            0
            if s.kind == "constant"
            else (s.decay_steps if s.decay_steps is not None else round(0.1 * steps))
        )
        return s.warmup_steps if s.warmup_steps <= steps - decay else (steps - decay) // 10
    return s.warmup_steps if s.warmup_steps < s.decay_fraction * steps else steps // 10


def phase_mask_rate(phases: list[Phase], step: int) -> float:
    phase = phase_at(phases, step)
    d = phase.config.data
    return mask_rate_at(step - phase.start, phase.steps, d.mask_rate, d.mask_rate_end, d.mask_rate_shape)


def phase_record(phase: Phase, stream: RowStream, done_steps: int, data: TrainingData) -> dict[str, Any]:
    """What a phase was set to and what it saw: steps and tokens trained, rows, masking, lr, model settings,
    and the documents drawn from each source or length sub-set."""
    c = phase.config
    trained = min(max(done_steps - phase.start, 0), phase.steps)
    counts = stream.subset_counts()
    return {
        "name": phase.name,
        "first_step": phase.start,
        "steps": phase.steps,
        "steps_trained": trained,
        "tokens_trained": trained * c.tokens_per_step,
        "seq_len": c.data.seq_len,
        "mask_rate": [
            c.data.mask_rate,
            c.data.mask_rate_end if c.data.mask_rate_end is not None else c.data.mask_rate,
        ],
        "peak_lr": phase.peak,
        "schedule": c.schedule.lr_kwargs() | {"warmup_steps": fitted_warmup(phase)},
        "model": {k: v for k, v in c.model.items() if k in ("max_length", "rope_theta", "rope_scaling_type")},
        "sampling": {n: round(w / sum(x for _, x, _ in stream.subsets), 6) for n, w, _ in stream.subsets}
        or {"all documents": 1.0},
        "documents_drawn": {name: blocks * stream.block_docs for name, blocks in counts.items()}
        or {
            "all documents": stream.position.block * stream.block_docs
            + (stream.block_docs if stream.position.row else 0)
        },
    }
