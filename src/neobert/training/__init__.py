"""Training: the loop every task drives (:mod:`~neobert.training.trainer`), the MLM pretraining task
(:mod:`~neobert.training.mlm_task`, :func:`pretrain`) and their pure pieces (MLM masking, packing,
learning-rate schedule, optimizer groups, loss normalisation).

Each piece is a function of its inputs only (randomness comes from an explicit generator or seed), so each
is tested alone; the MLM task composes them and the trainer runs it.
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
from .mlm_task import NonFiniteLossError, PretrainResult, evaluate, pretrain
from .optim import build_optimizer, parameter_groups
from .schedule import lr_at, make_scheduler

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
