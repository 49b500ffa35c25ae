"""What a kind of model directory is: :class:`DirectoryKind`, the behaviour every kind carries, and the files
sentence-transformers directories share (``modules.json``, ``config_sentence_transformers.json``).

A kind says how a directory of its kind is recognised (:meth:`DirectoryKind.matches`), loaded for inference
(:meth:`~DirectoryKind.load`: an :class:`~neobert.inference.encoders.Encoder` with its capabilities), which
serving backend runs it, what it embeds (``dense``, ``sparse`` or ``multi-vector``: what ``neobert embed``
writes and how ``eval embeddings`` scores it), which tasks it answers under another task's name (``rerank``
by MaxSim), whether ``neobert export onnx`` takes it, and what its model card shows (library, pipeline, a
snippet that runs, the other ways to load it). The kinds are the modules of :mod:`neobert.inference.kinds`,
whose registry asks them in order; this module imports none of them, so the modules a kind is built on
(``sparse``, ``late_interaction``) can read the shared files from here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .registration import declared_head

ONNX_CONFIG_FILE = "onnx_config.json"  # written by `neobert export onnx`, read by OnnxEncoder
MODULES_FILE = "modules.json"  # a sentence-transformers pipeline
ST_SETTINGS_FILE = "config_sentence_transformers.json"  # its settings (model_type, prompts, similarity)
EMBEDDINGS = ("dense", "sparse", "multi-vector")  # what a kind's embeddings are


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


def directory_config(path: Path) -> dict[str, Any]:
    """A directory's ``config.json`` (empty where it has none)."""
    file = path / "config.json"
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}


class DirectoryKind:
    """One kind of model directory, with its behaviour. Subclasses set the class attributes and override
    :meth:`matches`, :meth:`load` and the card's :meth:`usage` / :meth:`other_ways`."""

    name: str = ""
    library: str = "transformers"  # the library that loads it (the card's library_name)
    loaded_with: str = "transformers"  # how the card names that library ("With transformers:")
    card_head: str | None = None  # what its card calls it; None: the head its config.json declares
    pipeline_tag: str | None = None  # its Hub pipeline where card_head is not a registered head
    backend: str = "torch"  # the serving backend that runs it (inference.backends.BACKENDS)
    exports_onnx: bool = True  # `neobert export onnx` takes it (its encoder, or a head whose graph exports)
    embedding: str = "dense"  # what it embeds: dense | sparse | multi-vector (EMBEDDINGS)
    # a task the routes ask by its common name -> this kind's task that answers it (rerank -> maxsim)
    aliases: Mapping[str, str] = MappingProxyType({})

    def matches(self, path: Path) -> bool:
        """Whether the directory ``path`` is of this kind (asked in the registry's order)."""
        raise NotImplementedError

    def validate(self, path: Path) -> None:
        """Raise ValueError naming what this package cannot reproduce of the directory ``path`` (a SPLADE
        directory with other pooling, say); nothing by default."""

    def load(
        self,
        source: str | os.PathLike,
        tokenizer: str | os.PathLike | None = None,
        head: str = "auto",
        precision: str | None = "auto",
        sparse: bool = False,
        fields: dict[str, Any] | None = None,
    ) -> Any:
        """``source`` loaded for inference: an :class:`~neobert.inference.encoders.Encoder` whose
        ``capabilities`` say what it serves (see :func:`neobert.inference.kinds.load_for_inference`;
        ``fields``: config fields of its head, which only a kind that loads a transformers head takes)."""
        raise ValueError(f"{source} is a {self.name} directory, which is not loaded with PyTorch")

    def declared_embedding(self, source: str | os.PathLike) -> Any:
        """How ``source`` declares its dense embeddings (an :class:`~neobert.inference.encoders.EmbeddingSpec`:
        pooling, normalisation, input length, prompts), or why it has none (a string)."""
        return f"a {self.name} directory has no dense embeddings"

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        """The card's first snippet (run against the directory itself) and the line it prints."""
        raise NotImplementedError

    def other_ways(self, head: str) -> str:
        """The card's paragraph on the other ways to load the directory."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


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
        return directory_config(self.path)

    @classmethod
    def of(cls, path: Path, kind: DirectoryKind) -> Directory:
        config = directory_config(path)
        return cls(path, kind, declared_head(config) if config else "base")
