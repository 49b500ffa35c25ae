"""``neobert classify``: run a sequence classifier over a text file or a table, one JSON line per row."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ..predict import ClassifyFileConfig, classify_file
from .common import add_command, make_console, note_empty_rows, quiet_transformers
from .long_documents import note_long_documents
from .options import add_options, config_from_args


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    config = config_from_args(ClassifyFileConfig, args)
    result = classify_file(config)
    console = make_console()
    console.print(
        f"classified {result.rows:,} rows in {result.seconds:.1f}s; wrote {escape(str(result.output))}",
        highlight=False,
        soft_wrap=True,
    )
    if result.regression:
        table = Table("min", "mean", "max", title="predicted values")
        table.add_row(*(f"{v:.4g}" for v in result.value_range))
    else:
        table = Table("label", "rows", "share", title="predicted labels")
        for name, count in result.label_counts.items():
            table.add_row(escape(name), f"{count:,}", f"{count / max(result.rows, 1):.1%}")
    console.print(table)
    note_empty_rows(console, result.empty_rows, "row", "their predictions say nothing about any text")
    note_long_documents(console, result.long, config.long_documents, "row")
    if result.random_weights:
        console.print("[yellow]note:[/] a preset has random weights: these predictions are meaningless")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "classify",
        _main,
        help="classify texts (a text file or a table) with a sequence classifier, into JSONL",
        description=(
            "Run a sequence classifier (e.g. the model directory written by `neobert finetune classify`) "
            "over a text file (one text per line) or a table; line i of the JSONL output is input row i."
        ),
    )
    add_options(parser, ClassifyFileConfig, skip=("show_progress",))
