"""neobert: NeoBERT, the next-generation BERT encoder, in plain PyTorch and transformers.

Importing the package registers model type ``neobert`` with transformers' Auto classes, so a NeoBERT
directory (including the released one) loads with ``AutoModel.from_pretrained(path)`` and no remote code.
"""

from .config import PRESETS, ConfigError, ModelConfig
from .model import (
    CheckpointError,
    NeoBERTConfig,
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
    SequenceTooLongError,
    compile_blocks,
    set_runtime,
)
from .registration import register

register()

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "CheckpointError",
    "ConfigError",
    "ModelConfig",
    "NeoBERTConfig",
    "NeoBERTForMaskedLM",
    "NeoBERTForSequenceClassification",
    "NeoBERTForTokenClassification",
    "NeoBERTModel",
    "SequenceTooLongError",
    "__version__",
    "compile_blocks",
    "register",
    "set_runtime",
]
