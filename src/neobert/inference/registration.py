"""The head registry: everything the package knows about a head, in one entry each, and the one place a
model's head is decided (:func:`head_of`, from a loaded model's class or a config's ``architectures``, as
transformers' Auto mappings decide it). Registering ``model_type: neobert`` with transformers' Auto classes
goes through the same entries.

A new head is one :func:`register_head` call: loading (``load_model(head=...)``), the service's endpoints and
its ``POST /``, the model card's pipeline tag and snippet, and the ONNX export all read its :class:`Head`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from ..model import (
    NeoBERTConfig,
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
)
from ..model.losses import mlm_loss, sequence_loss, token_loss


@dataclass(frozen=True)
class Head:
    """One head: how it loads, what it serves, how a card and an export describe it."""

    name: str
    auto_class: type  # transformers' Auto class that loads any encoder with this head
    neobert_class: type  # NeoBERT's class for it (presets are built from it)
    suffix: (
        str | None
    )  # its class-name suffix in transformers' naming (BertForMaskedLM); None: the bare encoder
    tasks: tuple[str, ...]  # the service endpoints its models offer (capabilities.describe narrows them)
    root_task: str  # what text-embeddings-inference's `POST /` means for it
    pipeline_tag: str  # the Hub's pipeline vocabulary (cards)
    title: str = ""  # what a person calls it in an error ("masked-LM")
    output: str = "logits"  # the forward pass's output a user reads (the card's snippet)
    width: str = "labels"  # that output's last axis: hidden | vocab | labels
    per_token: bool = True  # that output has a token axis
    labelled: bool = False  # a classifier: label names in id order
    exports: bool = False  # the ONNX export writes this head's graph (its logits); otherwise its base encoder
    loss: Callable[..., Any] | None = None  # its training loss (model/losses.py)

    @property
    def auto_class_name(self) -> str:
        return self.auto_class.__name__


HEADS: dict[str, Head] = {}


def register_head(head: Head) -> Head:
    """Add ``head`` to the registry and its NeoBERT class to transformers' Auto class (idempotent)."""
    HEADS[head.name] = head
    head.auto_class.register(NeoBERTConfig, head.neobert_class, exist_ok=True)
    return head


def register() -> None:
    """Make AutoConfig / AutoModel* resolve ``model_type: neobert`` to this package (idempotent)."""
    AutoConfig.register("neobert", NeoBERTConfig, exist_ok=True)
    for head in _BUILT_IN:
        register_head(head)


_BUILT_IN = (
    Head(
        "base",
        AutoModel,
        NeoBERTModel,
        None,
        ("embed", "embed_all"),
        "embed",
        "feature-extraction",
        "bare encoder",
        output="last_hidden_state",
        width="hidden",
    ),
    Head(
        "mlm",
        AutoModelForMaskedLM,
        NeoBERTForMaskedLM,
        "ForMaskedLM",
        ("embed", "embed_all", "fill-mask", "embed_sparse"),
        "fill-mask",
        "fill-mask",
        "masked-LM",
        width="vocab",
        loss=mlm_loss,
    ),
    Head(
        "sequence-classification",
        AutoModelForSequenceClassification,
        NeoBERTForSequenceClassification,
        "ForSequenceClassification",
        ("embed", "embed_all", "classify", "predict", "rerank"),
        "predict",
        "text-classification",
        "sequence classifier",
        per_token=False,
        labelled=True,
        exports=True,
        loss=sequence_loss,
    ),
    Head(
        "token-classification",
        AutoModelForTokenClassification,
        NeoBERTForTokenClassification,
        "ForTokenClassification",
        ("embed", "embed_all", "tokens"),
        "tokens",
        "token-classification",
        "token classifier",
        labelled=True,
        loss=token_loss,
    ),
)


def head(name: str) -> Head:
    """The registered head ``name`` (a ValueError naming the registered ones otherwise)."""
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; use one of {', '.join(HEADS)}")
    return HEADS[name]


def head_of_names(architectures: Iterable[str] | None) -> str:
    """The head named by class names (a config's ``architectures``): the first that names one; else base."""
    for name in architectures or ():
        for entry in HEADS.values():
            if entry.suffix and name.endswith(entry.suffix):
                return entry.name
    return "base"


def head_of(model: Any) -> str:
    """The head of a loaded model (any torch.compile / DDP wrapper unwrapped), from its class."""
    for attr in ("_orig_mod", "module"):
        model = getattr(model, attr, model)
    return head_of_names([type(model).__name__])


def declared_head(config: Any) -> str:
    """The head a transformers config (or config.json's mapping) declares in ``architectures``."""
    names = (
        config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    )
    return head_of_names(names)


def require_head(model: Any, head: str, what: str) -> None:
    """A TypeError naming ``what`` needs and what ``model`` is, unless ``model`` has ``head``."""
    if head_of(model) != head:
        inner = getattr(model, "_orig_mod", model)
        title = HEADS[head].title if head in HEADS else head
        raise TypeError(
            f"{what} needs a {title} model (load it with head={head!r}), got {type(inner).__name__}"
        )
