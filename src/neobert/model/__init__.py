"""The NeoBERT model: config view, encoder, heads, and their building blocks."""

from .attention import AttentionContext, packed_context, padded_context, unpad
from .checkpoint import CheckpointError
from .configuration import NeoBERTConfig
from .modeling import (
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
    NeoBERTPreTrainedModel,
    SequenceTooLongError,
)
from .pooling import cls_pool, mean_pool, pool
from .rope import apply_rope, inverse_frequencies, rope_tables

__all__ = [
    "AttentionContext",
    "CheckpointError",
    "NeoBERTConfig",
    "NeoBERTForMaskedLM",
    "NeoBERTForSequenceClassification",
    "NeoBERTForTokenClassification",
    "NeoBERTModel",
    "NeoBERTPreTrainedModel",
    "SequenceTooLongError",
    "apply_rope",
    "cls_pool",
    "inverse_frequencies",
    "mean_pool",
    "packed_context",
    "padded_context",
    "pool",
    "rope_tables",
    "unpad",
]
