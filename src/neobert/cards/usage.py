"""The card's "How to load it": a snippet that runs against the directory itself, and the other ways. Both
are the directory kind's (:mod:`neobert.inference.kinds`): each kind knows the library that loads it."""

from __future__ import annotations

from pathlib import Path

from ..inference.adapters import is_adapter_dir
from ..inference.directories import DirectoryKind
from ..inference.kinds import DIRECTORY_KINDS, describe_directory
from .facts import CardInfo

EXAMPLE_TEXTS = ("NeoBERT is a next-generation encoder.", "A second, longer example sentence for the batch.")


def _kind(directory: Path) -> DirectoryKind:
    """The directory's kind; a LoRA adapter's whatever files sit beside it (an embedding run's
    sentence-transformers files make it a sentence-transformers directory too)."""
    if is_adapter_dir(directory):
        return DIRECTORY_KINDS["adapter"]
    found = describe_directory(directory)
    return found.kind if found is not None else DIRECTORY_KINDS["transformers"]


def usage(directory: Path, info: CardInfo) -> tuple[str, str, str]:
    """The card's first Python snippet (run against the directory itself: ``path = "."``), the line it
    prints (the output's shape, computed from the directory's config and tokenizer) and the library it uses.
    A LoRA adapter directory's is peft's over the base it names, whatever files sit beside the adapter."""
    kind = _kind(directory)
    return (*kind.usage(directory, info.head, EXAMPLE_TEXTS), kind.loaded_with)


def other_ways(directory: Path, info: CardInfo) -> str:
    """How else to load it: the other two of transformers, sentence-transformers and ONNX Runtime (an
    adapter directory: folded into a plain model directory, or served over its base)."""
    return _kind(directory).other_ways(info.head)
