"""neobert: NeoBERT, the next-generation BERT encoder, in plain PyTorch and transformers.

Importing the package registers model type ``neobert`` with transformers' Auto classes, so a NeoBERT
directory (including the released one) loads with ``AutoModel.from_pretrained(path)`` and no remote code.

The folders are the floors of docs/architecture.md: ``common/`` (floor 0), ``model/``, ``runtime/`` and
``data/`` (floor 1), ``inference/``, ``training/``, ``jobs/``, ``cards/`` (floor 2), the tasks (floor 3),
``cli/`` (floor 4). Import from the module that defines a name (``from neobert.inference.run import
encode``); CHANGELOG.md lists what moved.
"""

from .common.config import PRESETS, ConfigError, ModelConfig
from .inference.registration import register
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
