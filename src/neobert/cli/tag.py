"""``neobert tag``: entities with character offsets from a fine-tuned token classifier, one JSON line per text."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..predict import TagConfig, tag_file
from .common import add_command, make_console, quiet_transformers
from .long_documents import note_long_documents
from .options import add_options, config_from_args


def _tag(args: argparse.Namespace) -> int:
    quiet_transformers()
    config = config_from_args(TagConfig, args)
    result = tag_file(config)
    console = make_console()
    found = sum(len(row) for row in result.entities)
    console.print(
        f"tagged {result.texts:,} texts: {found:,} entities in {result.seconds:.1f} s -> "
        f"{escape(str(result.output))}",
        highlight=False,
    )
    note_long_documents(console, result.long, config.long_documents, "text")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "tag",
        _tag,
        help="tag entities with a fine-tuned token classifier (character offsets), JSONL out",
        description="One JSON line per input text: {text, entities: [{label, start, end, text, score}]}; "
        "offsets are characters of the text, end exclusive.",
    )
    add_options(parser, TagConfig, skip=("show_progress",))
