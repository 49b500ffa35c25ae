"""What kind of directory a model is, decided in one place: :func:`describe_directory`.

A model directory is one of the kinds in :data:`DIRECTORY_KINDS`, the first whose test matches: an ONNX
export (``neobert export onnx``), a late-interaction (ColBERT) directory (PyLate's layout, which
``MultiVectorEncoder`` loads too), a SPLADE ``SparseEncoder`` directory, a sentence-transformers directory
(``modules.json``), or a plain transformers directory (``config.json``). Each kind says which library loads
it and what its model card calls it; the head inside is the one ``config.json`` declares
(:func:`neobert.inference.registration.declared_head`). Cards, the service's backend choice, SPLADE detection and the
evaluations ask here; a new kind is one :func:`register_directory_kind` call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .registration import HEADS, declared_head

ONNX_CONFIG_FILE = "onnx_config.json"  # written by `neobert export onnx`, read by OnnxEncoder
MODULES_FILE = "modules.json"  # a sentence-transformers pipeline
ST_SETTINGS_FILE = "config_sentence_transformers.json"  # its settings (model_type, prompts, similarity)
MULTI_VECTOR_TYPES = ("ColBERT", "MultiVectorEncoder")  # PyLate's and sentence-transformers' late interaction


def modules(path: Path) -> list[dict[str, Any]]:
    """The modules a sentence-transformers directory lists (empty where it has no ``modules.json``)."""
    file = path / MODULES_FILE
    if not file.is_file():
        return []
    listed = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(listed, list):
        raise ValueError(f"{file}: expected a list of modules, got {type(listed).__name__}")
    return listed


def st_settings(path: Path) -> dict[str, Any]:
    """A sentence-transformers directory's ``config_sentence_transformers.json`` (empty where it has none)."""
    file = path / ST_SETTINGS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}


def module_types(path: Path) -> list[str]:
    """The class name of each module of ``path``'s pipeline, in order (``SpladePooling``, ``Pooling``)."""
    return [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules(path)]


@dataclass(frozen=True)
class DirectoryKind:
    """One kind of model directory."""

    name: str
    test: Callable[[Path], bool]  # whether a directory is of this kind (asked in registry order)
    library: str  # the library that loads it (the card's library_name)
    card_head: str | None = None  # what its card calls it; None: the head its config.json declares
    pipeline_tag: str | None = None  # its Hub pipeline where card_head is not a registered head


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
    DirectoryKind("onnx", lambda p: (p / ONNX_CONFIG_FILE).is_file(), "onnx"),
    DirectoryKind(
        "late-interaction",
        lambda p: (p / MODULES_FILE).is_file() and st_settings(p).get("model_type") in MULTI_VECTOR_TYPES,
        "sentence-transformers",
        "late-interaction",
        "sentence-similarity",
    ),
    DirectoryKind(
        "splade",
        lambda p: "SpladePooling" in module_types(p),
        "sentence-transformers",
        "sparse-embedding",
        "feature-extraction",
    ),
    DirectoryKind(
        "sentence-transformers",
        lambda p: (p / MODULES_FILE).is_file(),
        "sentence-transformers",
        "sentence-embedding",
        "sentence-similarity",
    ),
    DirectoryKind("transformers", lambda p: (p / "config.json").is_file(), "transformers"),
):
    register_directory_kind(_kind)


@dataclass(frozen=True)
class Directory:
    """A model directory, described: its kind and the head its config.json declares."""

    path: Path
    kind: DirectoryKind
    head: str  # registration.HEADS key (base where config.json names none)

    @property
    def library(self) -> str:
        return self.kind.library

    @property
    def card_head(self) -> str:
        """What the model card calls it: the kind's name for itself (SPLADE, sentence embeddings) or its head."""
        return self.kind.card_head or self.head

    def config(self) -> dict[str, Any]:
        file = self.path / "config.json"
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}


def describe_directory(source: str | os.PathLike) -> Directory | None:
    """What kind of model directory ``source`` is; None where it is no directory or no kind matches."""
    path = Path(source).expanduser()
    if not path.is_dir():
        return None
    kind = next((k for k in DIRECTORY_KINDS.values() if k.test(path)), None)
    if kind is None:
        return None
    config = path / "config.json"
    head = declared_head(json.loads(config.read_text(encoding="utf-8"))) if config.is_file() else "base"
    return Directory(path, kind, head)


def is_kind(source: str | os.PathLike, name: str) -> bool:
    """Whether ``source`` is a model directory of kind ``name``."""
    found = describe_directory(source)
    return found is not None and found.kind.name == name


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
