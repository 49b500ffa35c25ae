"""Registration of model type ``neobert`` with transformers' Auto classes."""

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


def register() -> None:
    """Make AutoConfig / AutoModel* resolve ``model_type: neobert`` to this package (idempotent)."""
    AutoConfig.register("neobert", NeoBERTConfig, exist_ok=True)
    for auto, cls in (
        (AutoModel, NeoBERTModel),
        (AutoModelForMaskedLM, NeoBERTForMaskedLM),
        (AutoModelForSequenceClassification, NeoBERTForSequenceClassification),
        (AutoModelForTokenClassification, NeoBERTForTokenClassification),
    ):
        auto.register(NeoBERTConfig, cls, exist_ok=True)
