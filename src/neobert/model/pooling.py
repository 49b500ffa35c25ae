"""Pooling a sequence of hidden states into one vector per sequence, and the one registry of poolings.

:data:`POOLINGS` is the one home of the pooling names: every command, the service, the ONNX export, the
sentence-transformers export, the long-document policy and the classifier head ask it (a new pooling is one
entry here, see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over real tokens. hidden (B, L, C), attention_mask (B, L) 0/1 -> (B, C).

    A row with no real token pools to zeros rather than NaN.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    total = (hidden * mask).sum(dim=1)
    return total / mask.sum(dim=1).clamp(min=1.0)


def cls_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The first token's state ([CLS]). (B, L, C) -> (B, C)."""
    return hidden[:, 0]


def last_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The last real token's state (right-padded rows; decoder-style embedders). (B, L, C) -> (B, C)."""
    if attention_mask is None:
        return hidden[:, -1]
    last = (attention_mask.sum(dim=1) - 1).clamp(min=0)  # (B,)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


@dataclass(frozen=True)
class Pooling:
    """One way of pooling, and what each consumer needs to know about it."""

    name: str
    pool: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]  # (B, L, C), (B, L) -> (B, C)
    sentence_transformers: str  # sentence-transformers' Pooling mode of the same computation
    onnx: bool  # `neobert export onnx` writes it into the graph's sentence_embedding
    by_tokens: bool  # long documents (chunk): windows' vectors averaged weighted by their token counts
    classifier: bool  # a NeoBERT sequence-classification head may pool this way (`classifier_pooling`)


POOLINGS: dict[str, Pooling] = {
    p.name: p
    for p in (
        Pooling("mean", mean_pool, "mean", onnx=True, by_tokens=True, classifier=True),
        Pooling("cls", cls_pool, "cls", onnx=True, by_tokens=False, classifier=True),
        # the export's checked graph has no last-token branch (the parity check has never run one); no
        # classifier head was trained on the last token (a bidirectional encoder's [CLS] or mean does its job)
        Pooling("last", last_pool, "lasttoken", onnx=False, by_tokens=False, classifier=False),
    )
}
POOLING_NAMES = tuple(POOLINGS)
ONNX_POOLINGS = tuple(name for name, p in POOLINGS.items() if p.onnx)
CLASSIFIER_POOLINGS = tuple(name for name, p in POOLINGS.items() if p.classifier)  # NeoBERTConfig checks it


def get_pooling(name: str, supported: tuple[str, ...] = POOLING_NAMES, what: str = "") -> Pooling:
    """The registry's entry for ``name``; a ValueError naming the choices (of ``supported``: e.g. what an
    export can write; ``what`` names that consumer in the message)."""
    if name not in supported:
        where = f" {what}" if what else ""
        raise ValueError(f"unknown pooling {name!r}{where}; use one of {', '.join(supported)}")
    return POOLINGS[name]


def from_sentence_transformers(mode: str) -> str | None:
    """Our name for a sentence-transformers Pooling mode (``lasttoken`` -> ``last``); None if we have none."""
    for name, pooling in POOLINGS.items():
        if pooling.sentence_transformers == mode:
            return name
    return None


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, method: str) -> torch.Tensor:
    """``hidden`` (B, L, C) pooled by the registry's ``method`` -> (B, C)."""
    return get_pooling(method).pool(hidden, attention_mask)
