"""neobert: NeoBERT, the next-generation BERT encoder, in plain PyTorch and transformers.

Importing the package registers model type ``neobert`` with transformers' Auto classes, so a NeoBERT
directory (including the released one) loads with ``AutoModel.from_pretrained(path)`` and no remote code.

The folders are the floors of docs/architecture.md: ``common/`` (floor 0), ``model/``, ``runtime/`` and
``data/`` (floor 1), ``inference/``, ``training/``, ``jobs/``, ``cards/`` (floor 2), the tasks (floor 3),
``cli/`` (floor 4). The modules that lay at the package root until issue 32 keep their old names
(``neobert.inference.encoders``, ``neobert.common.config``, ...) through one table, :data:`neobert._moved.MOVED`.
"""

from . import _moved
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
_moved.install()  # the old module names import as their new ones


def __getattr__(name: str):
    return _moved.module_attribute(__name__, name)  # neobert.inference.encoders and the other old names


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
