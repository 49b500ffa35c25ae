"""The kinds of model directory, asked in order: the one registry that says what a directory is, and the
loader that loads any source for inference by its kind (:func:`load_for_inference`).

Each kind is a module here with a :class:`~neobert.inference.directories.DirectoryKind` subclass
(:mod:`.onnx`, :mod:`.late_interaction`, :mod:`.splade`, :mod:`.cross_encoder`, :mod:`.sentence_transformers`,
:mod:`.adapter`, :mod:`.transformers`); the first whose ``matches`` holds is a directory's kind, and the plain transformers kind is asked last (it
also loads what is no directory: a preset or a Hub id). A new kind is one module and its line in
:data:`DIRECTORY_KINDS` below, or a :func:`register_directory_kind` call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..directories import Directory, DirectoryKind
from ..encoders import Encoder
from ..registration import HEADS
from .adapter import AdapterKind
from .cross_encoder import CrossEncoderKind
from .late_interaction import LateInteractionKind
from .onnx import OnnxKind
from .sentence_transformers import SentenceTransformersKind
from .splade import SpladeKind
from .transformers import TransformersKind

DIRECTORY_KINDS: dict[str, DirectoryKind] = {}


def register_directory_kind(kind: DirectoryKind, before: str | None = None) -> DirectoryKind:
    """Add ``kind`` to the registry, asked before the kind ``before`` (default: before the plain
    transformers directory, the catch-all)."""
    before = before or ("transformers" if "transformers" in DIRECTORY_KINDS else None)
    items = [(k, v) for k, v in DIRECTORY_KINDS.items() if k != kind.name]
    at = next((i for i, (k, _) in enumerate(items) if k == before), len(items))
    items.insert(at, (kind.name, kind))
    DIRECTORY_KINDS.clear()
    DIRECTORY_KINDS.update(items)
    return kind


for _kind in (
    OnnxKind(),
    LateInteractionKind(),
    SpladeKind(),
    CrossEncoderKind(),
    SentenceTransformersKind(),
    # a LoRA adapter loads its base by the base's own kind (the functions below, resolved when called)
    AdapterKind(lambda *args, **kw: load_for_inference(*args, **kw), lambda source: kind_of(source)),
    TransformersKind(),
):
    register_directory_kind(_kind)


def describe_directory(source: str | os.PathLike) -> Directory | None:
    """What kind of model directory ``source`` is; None where it is no directory or no kind matches."""
    path = Path(source).expanduser()
    if not path.is_dir():
        return None
    kind = next((k for k in DIRECTORY_KINDS.values() if k.matches(path)), None)
    return None if kind is None else Directory.of(path, kind)


def kind_of(source: str | os.PathLike) -> DirectoryKind:
    """The kind that loads ``source``: a directory's own, and the plain transformers kind for a preset, a Hub
    id or a directory no kind recognises (its loader says what is missing)."""
    found = describe_directory(source)
    return found.kind if found is not None else DIRECTORY_KINDS["transformers"]


def load_for_inference(
    source: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    head: str = "auto",
    precision: str | None = "auto",
    sparse: bool = False,
    fields: dict[str, Any] | None = None,
) -> Encoder:
    """Load ``source`` for inference in one call, by its kind: its head (``auto``: the one its config
    declares; ``fields``: config fields it is loaded with, a LoRA adapter's head labels), how it embeds, its tokenizer (held to the input length the directory declares, e.g.
    sentence-transformers' ``max_seq_length``, as ``SentenceTransformer`` holds it), the vocabulary check and
    ``precision`` (:func:`neobert.inference.encoders.apply_precision`; None: the weights as loaded, float32,
    on the padded path); ``encoder.capabilities`` says what it serves. ``sparse``: serve the model's SPLADE
    vectors (``embed_sparse``) though it is not a SPLADE directory (one is served so without asking); it
    needs a masked-LM head."""
    if fields:
        return kind_of(source).load(source, tokenizer, head, precision, sparse, fields=fields)
    return kind_of(source).load(source, tokenizer, head, precision, sparse)


def pipeline_tag(card_head: str) -> str:
    """The Hub pipeline of what a card calls a model: a registered head's, or a directory kind's."""
    if card_head in HEADS:
        return HEADS[card_head].pipeline_tag
    for kind in DIRECTORY_KINDS.values():
        if kind.card_head == card_head and kind.pipeline_tag:
            return kind.pipeline_tag
    raise ValueError(f"unknown head {card_head!r}; one of {', '.join(card_heads())}")


def card_heads() -> list[str]:
    """Every name a card may give a model: the registered heads and the directory kinds' names."""
    return [*HEADS, *(k.card_head for k in DIRECTORY_KINDS.values() if k.card_head)]
