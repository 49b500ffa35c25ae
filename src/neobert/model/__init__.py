"""The NeoBERT model: config view, encoder, heads, and their building blocks."""

from .attention import (
    ATTN_BACKENDS,
    AttentionBackendError,
    AttentionContext,
    AttentionRuntime,
    packed_context,
    padded_context,
    resolve_backend,
    unpad,
)
from .checkpoint import CheckpointError
from .configuration import NeoBERTConfig
from .execution import compile_blocks, neobert_encoder, set_runtime
from .modeling import (
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
    NeoBERTPreTrainedModel,
    SequenceTooLongError,
)
from .pooling import cls_pool, mean_pool, pool
from .rope import inverse_frequencies, rope_tables

__all__ = [
    "ATTN_BACKENDS",
    "AttentionBackendError",
    "AttentionContext",
    "AttentionRuntime",
    "CheckpointError",
    "NeoBERTConfig",
    "NeoBERTForMaskedLM",
    "NeoBERTForSequenceClassification",
    "NeoBERTForTokenClassification",
    "NeoBERTModel",
    "NeoBERTPreTrainedModel",
    "SequenceTooLongError",
    "cls_pool",
    "compile_blocks",
    "inverse_frequencies",
    "mean_pool",
    "neobert_encoder",
    "packed_context",
    "padded_context",
    "pool",
    "resolve_backend",
    "rope_tables",
    "set_runtime",
    "unpad",
]
