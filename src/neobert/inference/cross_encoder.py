"""A sentence-transformers CrossEncoder directory's scores, as ``CrossEncoder(path).predict`` gives them: the
sequence classifier's logit of each (query, document) pair, through the activation the directory records
(``config_sentence_transformers.json``'s ``activation_fn``: ``Sigmoid`` or ``Identity``; a directory that records
none gets sentence-transformers' default, a sigmoid for one label). ``neobert mine`` scores with it (a teacher)
and ``finetune rerank`` writes such directories."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .directories import st_settings
from .kinds import load_for_inference
from .run import classifier_logits, pair_token_types

# the activations a CrossEncoder directory may record, by their sentence-transformers name
ACTIVATIONS = {
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
    "identity": "torch.nn.modules.linear.Identity",
}


def directory_activation(path: str | os.PathLike, labels: int = 1) -> str:
    """``sigmoid`` or ``identity``: what ``CrossEncoder(path)`` applies to the logits."""
    recorded = st_settings(Path(path)).get("activation_fn") if Path(path).is_dir() else None
    if recorded is None:
        return "sigmoid" if labels == 1 else "identity"
    for name, dotted in ACTIVATIONS.items():
        if recorded == dotted or recorded.rsplit(".", 1)[-1].lower() == name:
            return name
    raise ValueError(f"{path}: activation_fn {recorded!r} is neither Sigmoid nor Identity")


def activate(logits: np.ndarray, activation: str) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float32)
    return 1.0 / (1.0 + np.exp(-z)) if activation == "sigmoid" else z


class CrossEncoderScorer:
    """A one-label cross-encoder loaded once; ``scores(pairs)``: one float per (query, document) pair."""

    def __init__(self, source: str | os.PathLike, batch_size: int = 32):
        self.encoder = load_for_inference(source, None, "sequence-classification", precision=None)
        labels = self.encoder.model.config.num_labels
        if labels != 1:
            raise ValueError(f"{source}: a cross-encoder scores with one label, this one has {labels}")
        self.activation = directory_activation(source)
        self.batch_size = batch_size

    def scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        e = self.encoder
        logits = classifier_logits(
            e.model,
            e.tokenizer,
            [q for q, _ in pairs],
            [d for _, d in pairs],
            self.batch_size,
            show_progress=False,
        )
        return [float(v) for v in activate(logits[:, 0], self.activation)]


def pair_inputs(
    model: torch.nn.Module, tokenizer: Any, queries: Sequence[str], documents: Sequence[str], max_length: int
) -> dict[str, torch.Tensor]:
    """The padded model inputs of (query, document) pairs as a CrossEncoder tokenizes them (the pair cut
    longest-first to ``max_length``; token types where the model reads them), on the model's device."""
    batch = tokenizer(
        list(queries),
        list(documents),
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
        return_token_type_ids=True,
    )
    names = ["input_ids", "attention_mask"] + (
        ["token_type_ids"] if pair_token_types(model, tokenizer) else []
    )
    device = next(model.parameters()).device
    return {name: batch[name].to(device) for name in names}
