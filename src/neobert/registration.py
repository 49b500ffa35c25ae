"""Registration of model type ``neobert`` with transformers' Auto classes, the class of each head, and the one
place a model's head is decided (:func:`head_of`, from a loaded model's class or a config's
``architectures``, as transformers' Auto mappings decide it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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

# head -> the transformers Auto class that loads any encoder for it, and the NeoBERT class behind it
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


HEADS = tuple(AUTO_CLASSES)  # base | mlm | sequence-classification | token-classification
# the class-name suffix of each head in transformers' naming (BertForMaskedLM, NeoBERTForTokenClassification)
_HEAD_SUFFIXES = {"ForMaskedLM": "mlm", "ForSequenceClassification": "sequence-classification",
                  "ForTokenClassification": "token-classification"}  # fmt: skip


def head_of_names(architectures: Iterable[str] | None) -> str:
    """The head named by class names (a config's ``architectures``): the first that names one; else base."""
    for name in architectures or ():
        for suffix, head in _HEAD_SUFFIXES.items():
            if name.endswith(suffix):
                return head
    return "base"


def head_of(model: Any) -> str:
    """The head of a loaded model (any torch.compile / DDP wrapper unwrapped), from its class."""
    for attr in ("_orig_mod", "module"):
        model = getattr(model, attr, model)
    return head_of_names([type(model).__name__])


def declared_head(config: Any) -> str:
    """The head a transformers config (or config.json's mapping) declares in ``architectures``."""
    names = config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    return head_of_names(names)


def require_head(model: Any, head: str, what: str) -> None:
    """A TypeError naming ``what`` needs and what ``model`` is, unless ``model`` has ``head``."""
    if head_of(model) != head:
        inner = getattr(model, "_orig_mod", model)
        raise TypeError(f"{what} needs a {head} model (load it with task={head!r}), got {type(inner).__name__}")
