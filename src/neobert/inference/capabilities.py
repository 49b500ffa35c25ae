"""What a model can do, decided once: its head, labels, embeddings (pooling, normalisation, longest input)
and the tasks (endpoints) it offers.

Every caller that asks "what is this model" asks here: the service's two backends and its ``/info``, and
(through :func:`neobert.inference.registration.head_of`, the one head detection) inference, tagging, the file tasks
and the ONNX export. :func:`load_for_inference` is the one call that loads a model for inference: head,
embedding settings, tokenizer (held to the directory's declared input length), vocabulary check, precision.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from .encoders import (
    EmbeddingSpec,
    Encoder,
    apply_precision,
    embedding_spec,
    is_preset,
    load_encoder,
    max_positions,
    model_dir,
    resolve_tokenizer,
)
from .late_interaction import is_late_interaction_dir, load_late_interaction
from .registration import HEADS, declared_head
from .registration import head as registered_head
from .run import label_names
from .sparse import is_sparse_dir

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
    late_interaction: dict[str, Any] | None = None  # a ColBERT model's settings (token vectors, MaxSim)

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
            "late_interaction": dict(self.late_interaction) if self.late_interaction else None,
        }

    def not_served(self) -> dict[str, str]:
        """The head's tasks this model does not offer, and why (``/info``'s ``not_served``)."""
        out = {}
        offered = HEADS[self.head].tasks
        if "embed" in offered and "embed" not in self.tasks and self.refused:
            out["embed"] = self.refused
        if self.late_interaction and "embed_all" in offered:
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


SPLADE_NO_DENSE = (
    "a SPLADE SparseEncoder directory: its vectors are sparse (embed_sparse); dense embeddings "
    "(embed) would not be what SparseEncoder computes, so they are not offered"
)


def splade_dir(source: str | os.PathLike, sparse: bool = False) -> bool:
    """Whether ``source`` is a SPLADE ``SparseEncoder`` directory :func:`neobert.inference.sparse.encode_sparse`
    reproduces. One with other SPLADE settings raises where ``sparse`` (``--sparse``) is asked for, and is
    served as a plain model (no ``embed_sparse``) otherwise."""
    if not Path(source).is_dir():
        return False
    try:
        return is_sparse_dir(source)
    except ValueError:
        if sparse:
            raise
        return False


def _declared_max_length(source: str | os.PathLike) -> int | None:
    """sentence-transformers' ``max_seq_length`` of a directory (``sentence_bert_config.json``), if any."""
    settings_file = Path(source) / "sentence_bert_config.json"
    if not settings_file.is_file():
        return None
    value = json.loads(settings_file.read_text(encoding="utf-8")).get("max_seq_length")
    return int(value) if value else None


def source_embedding(source: str | os.PathLike) -> EmbeddingSpec | str:
    """How ``source`` declares its embeddings (:func:`neobert.inference.encoders.embedding_spec`), or why they cannot
    be reproduced (the error's message), so a model with another head can still serve that head."""
    if not Path(source).is_dir():
        return EmbeddingSpec()
    try:
        return embedding_spec(source)
    except ValueError as err:
        return str(err)


def load_for_inference(
    source: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    head: str = "auto",
    precision: str | None = "auto",
    sparse: bool = False,
) -> Encoder:
    """Load ``source`` for inference in one call: its head (``auto``: :func:`detect_head`), how it embeds,
    its tokenizer (held to the input length the directory declares, e.g. sentence-transformers'
    ``max_seq_length``, as ``SentenceTransformer`` holds it), the vocabulary check and ``precision``
    (:func:`neobert.inference.encoders.apply_precision`; None: the weights as loaded, float32, on the padded path).
    ``sparse``: serve the model's SPLADE vectors (``embed_sparse``) though it is not a SPLADE directory (one
    is served so without asking); it needs a masked-LM head."""
    if Path(source).is_dir() and is_late_interaction_dir(source):
        if sparse:
            raise ValueError(
                f"{source} is a late-interaction (ColBERT) directory: it has no masked-LM logits "
                "for SPLADE vectors (--sparse)"
            )
        return load_late_for_inference(source, precision)
    head = detect_head(source) if head == "auto" else registered_head(head).name
    if head == "token-classification" and not Path(source).is_dir():
        raise ValueError(f"a token classifier is served from a fine-tuned model directory, not {source!r}")
    splade = splade_dir(source, sparse)
    is_sparse = sparse or splade
    if is_sparse and head != "mlm":
        asked = "--sparse" if sparse else "a SPLADE SparseEncoder directory"
        raise ValueError(
            f"{source} is served for SPLADE vectors ({asked}), which need a masked-LM head's "
            f"logits; it was loaded with the {head} head"
        )
    # a SPLADE directory: sparse vectors only, held to its own max_seq_length as SparseEncoder holds it
    embedding = SPLADE_NO_DENSE if splade else source_embedding(source)
    tok = resolve_tokenizer(source, tokenizer)
    declared = embedding.max_length if isinstance(embedding, EmbeddingSpec) else None
    declared = _declared_max_length(source) if splade else declared
    if declared:
        tok.model_max_length = min(int(tok.model_max_length), declared)
    encoder = load_encoder(source, tok, head=head)  # a preset's vocabulary sized to the tokenizer
    if precision is not None:
        apply_precision(encoder.model, precision)
    limit = max_positions(encoder.model.base_model, tok)
    encoder.max_length = limit
    encoder.capabilities = describe(encoder.model.config, head, embedding, limit, sparse=is_sparse)
    return encoder


# What a late-interaction (ColBERT) directory serves: its token vectors (queries and documents) and MaxSim
# rerank, beside its tokenizer's tasks; a pooled vector or raw hidden states would not be what
# MultiVectorEncoder computes.
LATE_TASKS = ("token_vectors", "rerank")
LATE_NO_DENSE = (
    "a late-interaction (ColBERT) directory: it serves token vectors (/v1/embeddings with "
    "return_multivector) and MaxSim /rerank; one pooled vector or the encoder's hidden states would "
    "not be what MultiVectorEncoder computes, so they are not offered"
)


def load_late_for_inference(source: str | os.PathLike, precision: str | None = "auto") -> Encoder:
    """A late-interaction directory for inference (:func:`neobert.inference.late_interaction.load_late_interaction`):
    an :class:`Encoder` whose model is the :class:`~neobert.inference.late_interaction.LateInteractionModel`, with the
    spec as ``encoder.spec`` and capabilities offering :data:`LATE_TASKS` and the tokenizer's tasks; its
    input limit is the spec's ``document_length``. It runs on the padded path, in float32 unless
    ``precision`` is ``bf16`` (``auto`` keeps float32): the unpadded fast path drops the positions the encoder
    does not attend to, and a query's expansion tokens are such positions whose vectors MaxSim counts."""
    model, tokenizer, spec = load_late_interaction(source)
    if precision == "bf16":
        model.encoder.to(torch.bfloat16)
    values = model.config.to_dict()
    settings = {
        "dim": spec.dim,
        "query_length": spec.query_length,
        "document_length": spec.document_length,
        "query_prefix": spec.query_prefix,
        "document_prefix": spec.document_prefix,
        "similarity": "MaxSim",
        "skiplist_words": list(spec.skiplist_words),
    }
    capabilities = Capabilities(
        head=declared_head(values),
        model_type=str(values.get("model_type")),
        tasks=LATE_TASKS + TOKENIZER_TASKS,
        dimensions=spec.dim,
        max_input_tokens=spec.document_length,
        refused=LATE_NO_DENSE,
        late_interaction=settings,
    )
    encoder = Encoder(model, tokenizer, str(source), spec.document_length, capabilities)
    encoder.spec = spec
    return encoder
