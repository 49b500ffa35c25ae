"""``neobert embed``: one vector per line of a text file, written to a .npy file."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..predict import EmbedConfig, embed_file
from .common import add_command, make_console, note_empty_rows, quiet_transformers
from .long_documents import note_long_documents
from .options import add_options, config_from_args


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    config = config_from_args(EmbedConfig, args)
    result = embed_file(config)
    n, dim = result.shape
    norm = "L2-normalized" if config.normalize else "not normalized"
    console = make_console()
    console.print(
        f"wrote {n:,} x {dim} float32 vectors ({config.pooling} pooling, {norm}) to "
        f"{escape(str(result.output))} in {result.seconds:.1f}s",
        highlight=False,
        soft_wrap=True,
    )
    note_empty_rows(
        console, result.empty_rows, "line", "their rows embed an empty text, so that row i is line i"
    )
    note_long_documents(console, result.long, config.long_documents, "line")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "embed",
        _main,
        help="embed a text file (one text per line) into a .npy array",
        description="Embed each line of a UTF-8 text file; row i of the output is line i.",
    )
    add_options(parser, EmbedConfig, skip=("show_progress",))
