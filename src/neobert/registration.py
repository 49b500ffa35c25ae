"""Registration of model type ``neobert`` with transformers' Auto classes, and the class of each task."""

from __future__ import annotations

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .model import (
    NeoBERTConfig,
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
)

# task -> the transformers Auto class that loads any encoder for it, and the NeoBERT class behind it
AUTO_CLASSES = {
    "base": AutoModel,
    "mlm": AutoModelForMaskedLM,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}
NEOBERT_CLASSES = {
    "base": NeoBERTModel,
    "mlm": NeoBERTForMaskedLM,
    "sequence-classification": NeoBERTForSequenceClassification,
    "token-classification": NeoBERTForTokenClassification,
}


def register() -> None:
    """Make AutoConfig / AutoModel* resolve ``model_type: neobert`` to this package (idempotent)."""
    AutoConfig.register("neobert", NeoBERTConfig, exist_ok=True)
    for task, auto in AUTO_CLASSES.items():
        auto.register(NeoBERTConfig, NEOBERT_CLASSES[task], exist_ok=True)
