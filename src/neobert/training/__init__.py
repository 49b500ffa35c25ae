"""Pretraining: the loop (:func:`pretrain`) and its pure pieces (MLM masking, batching and packing,
learning-rate schedule, optimizer groups, loss normalisation).

Each is a function of its inputs only (randomness comes from an explicit generator or seed), so each is
tested alone; the trainer composes them.
"""

from .batching import (
    PackedRow,
    collate_packed,
    iter_packed_rows,
    micro_batches_for,
)
from .config import DataConfig, OptimConfig, PretrainConfig, ScheduleConfig
from .loss import masked_lm_loss_sum, normalize_loss
from .masking import IGNORE_INDEX, generator_for, mask_tokens
from .optim import build_optimizer, parameter_groups
from .schedule import lr_at, make_scheduler
from .trainer import NonFiniteLossError, PretrainResult, evaluate, pretrain

__all__ = [
    "IGNORE_INDEX",
    "DataConfig",
    "NonFiniteLossError",
    "OptimConfig",
    "PackedRow",
    "PretrainConfig",
    "PretrainResult",
    "ScheduleConfig",
    "build_optimizer",
    "collate_packed",
    "evaluate",
    "generator_for",
    "iter_packed_rows",
    "lr_at",
    "make_scheduler",
    "mask_tokens",
    "masked_lm_loss_sum",
    "micro_batches_for",
    "normalize_loss",
    "parameter_groups",
    "pretrain",
]
