"""What a model can do, decided once: its head, labels, embeddings (pooling, normalisation, longest input)
and the tasks (endpoints) it offers.

Every caller that asks "what is this model" asks here: the service's two backends and its ``/info``, and
(through :func:`neobert.inference.registration.head_of`, the one head detection) inference, tagging, the file tasks
and the ONNX export. Loading a model for inference is its directory kind's
(:func:`neobert.inference.kinds.load_for_inference`), which builds its capabilities here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from .encoders import EmbeddingSpec, embedding_spec, is_preset, model_dir
from .registration import HEADS, declared_head
from .run import label_names

# The tasks (service endpoints) each head offers are its registry entry's (``registration.Head.tasks``): the
# encoder inside any head embeds (pooled, and token by token: embed_all); a sequence classifier classifies
# texts and pairs (predict) and, with one or two labels (a cross-encoder), reranks. An MLM's SPLADE vectors
# (embed_sparse) are offered where it is used as a sparse model (a SPLADE SparseEncoder directory, or served
# with --sparse): see ``describe``'s ``sparse``.
# What every model offers beside its head's tasks (its tokenizer's), once it offers one of them.
TOKENIZER_TASKS = ("tokenize", "decode")
# Tasks that are there only where another is: token embeddings where the model's embeddings are served.
NEEDS = {"embed_all": "embed"}


def heads_offering(task: str) -> list[str]:
    """The heads whose models offer ``task`` (their registry entries; every head for a tokenizer task)."""
    return list(HEADS) if task in TOKENIZER_TASKS else [h.name for h in HEADS.values() if task in h.tasks]


@dataclass(frozen=True)
class Capabilities:
    """What one loaded model can do."""

    head: str  # a registration.HEADS key
    model_type: str
    tasks: tuple[str, ...]  # what it offers: embed, fill-mask, classify, rerank, tokens
    dimensions: int  # the encoder's hidden size
    max_input_tokens: int  # the longest input, special tokens included
    labels: tuple[str, ...] | None = None  # classifiers, in id order
    embedding: EmbeddingSpec | None = None  # None: it does not embed (see ``refused``)
    refused: str | None = None  # why it does not embed, where it does not
    sparse: bool = False  # used as a sparse model: offers embed_sparse (SPLADE vectors of its MLM logits)
    token_vectors: dict[str, Any] | None = None  # the settings of its token vectors (a ColBERT model's)
    # a task the routes ask by its common name -> the task that answers it here (its kind's: rerank -> maxsim)
    aliases: dict[str, str] = field(default_factory=dict)
    fixed_window: str | None = (
        None  # why the long-document policies (chunk, extend) do not apply; None: they do
    )

    def info(self) -> dict[str, Any]:
        """The model's part of ``/info`` (plain data: it crosses processes)."""
        spec = self.embedding
        return {
            "prompts": dict(spec.prompts) if spec else {},
            "default_prompt_name": spec.default_prompt_name if spec else None,
            "matryoshka_dims": list(spec.matryoshka_dims) if spec else [],
            "head": self.head,
            "serves": list(self.tasks),
            "model_type": self.model_type,
            "dimensions": self.dimensions,
            "max_input_tokens": self.max_input_tokens,
            "pooling": spec.pooling if spec else None,
            "normalize": spec.normalize if spec else None,
            "embedding_settings_from": spec.declared_by if spec else None,
            "labels": list(self.labels) if self.labels is not None else None,
            "not_served": self.not_served(),
            "token_vectors": dict(self.token_vectors) if self.token_vectors else None,
        }

    def not_served(self) -> dict[str, str]:
        """The head's tasks this model does not offer, and why (``/info``'s ``not_served``)."""
        out = {}
        offered = HEADS[self.head].tasks
        if "embed" in offered and "embed" not in self.tasks and self.refused:
            out["embed"] = self.refused
        if self.token_vectors and "embed_all" in offered:
            out["embed_all"] = self.refused or ""
        if "embed_sparse" in offered and "embed_sparse" not in self.tasks:
            out["embed_sparse"] = (
                "not a SPLADE SparseEncoder directory; serve a masked-LM model with --sparse "
                "for its SPLADE vectors"
            )
        return out


def describe(
    config: Any,
    head: str,
    embedding: EmbeddingSpec | str | None,
    max_input_tokens: int,
    pair_token_types: bool = True,
    model_type: str | None = None,
    runtime: tuple[str, ...] | None = None,
    sparse: bool = False,
) -> Capabilities:
    """What a model with transformers ``config`` and ``head`` can do. ``embedding``: how it embeds, or why
    it does not (a string), or None (its runtime cannot embed, e.g. a classifier's ONNX graph);
    ``pair_token_types``: whether the runtime passes a pair's token types (ONNX graphs take none, so a
    BERT-style cross-encoder, which reads them, is not offered rerank there); ``runtime``: the tasks the
    runtime implements (None: every task); ``sparse``: the model is used as a sparse model (a SPLADE
    directory, or ``--sparse``), so an MLM offers ``embed_sparse``. Raises ValueError saying why when the model would offer
    nothing. ``model_type`` overrides the config's (a plain ``PretrainedConfig`` read from a file loses it)."""
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    spec = embedding if isinstance(embedding, EmbeddingSpec) else None
    refused = embedding if isinstance(embedding, str) else None
    tasks = []
    for task in HEADS[head].tasks:
        if task == "embed" and spec is None:
            continue
        if task == "rerank" and not _reranks(config, values, pair_token_types):
            continue
        if task == "embed_sparse" and not sparse:
            continue
        if task in NEEDS and NEEDS[task] not in tasks:
            continue
        tasks.append(task)
    tasks = [task for task in tasks if runtime is None or task in runtime]
    if not tasks:
        reason = refused or f"its {head} head serves no endpoint"
        raise ValueError(f"this model would serve nothing, so it is not served: {reason}")
    tasks += [task for task in TOKENIZER_TASKS if runtime is None or task in runtime]
    classifier = HEADS[head].labelled
    return Capabilities(
        head=head,
        model_type=str(model_type or values.get("model_type")),
        tasks=tuple(tasks),
        dimensions=int(values.get("hidden_size") or values.get("dim") or 0),
        max_input_tokens=int(max_input_tokens),
        labels=tuple(label_names(config)) if classifier else None,
        embedding=spec,
        refused=refused,
        sparse="embed_sparse" in tasks,
    )


def _reranks(config: Any, values: dict[str, Any], pair_token_types: bool) -> bool:
    """A cross-encoder: one or two labels, and its pairs can be given as its training gave them."""
    labels = getattr(config, "num_labels", None) or len(values.get("id2label") or {}) or 2
    return labels in (1, 2) and (pair_token_types or int(values.get("type_vocab_size") or 0) < 2)


def detect_head(source: str | os.PathLike) -> str:
    """The head ``source`` holds, without loading it: config.json's ``architectures`` (a directory or hub
    id); a preset is an MLM (what pretraining writes)."""
    if is_preset(source):
        return "mlm"
    path = model_dir(source)
    if path is not None:
        return declared_head(json.loads((path / "config.json").read_text(encoding="utf-8")))
    return declared_head(AutoConfig.from_pretrained(str(source)))


def source_embedding(source: str | os.PathLike) -> EmbeddingSpec | str:
    """How ``source`` declares its embeddings (:func:`neobert.inference.encoders.embedding_spec`), or why they cannot
    be reproduced (the error's message), so a model with another head can still serve that head."""
    if not Path(source).is_dir():
        return EmbeddingSpec()
    try:
        return embedding_spec(source)
    except ValueError as err:
        return str(err)
