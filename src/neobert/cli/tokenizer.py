"""``neobert tokenizer train``: a WordPiece (as the paper) or byte-level BPE tokenizer from local text."""

from __future__ import annotations

import argparse

from rich.table import Table

from ..data import train_tokenizer
from ..data.readers import TXT_MODES
from ..data.tokenizer import KINDS
from .common import add_command, make_console, quiet_transformers
from .options import add_signature_options, given

OPTIONS = {
    "inputs": {"nargs": "+"},
    "kind": {"choices": KINDS},
    "output_dir": {"required": True},
    "txt_mode": {"choices": TXT_MODES},
    "on_error": {"choices": ("raise", "skip")},
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("tokenizer", help="train tokenizers")
    commands = parser.add_subparsers(title="tokenizer commands", dest="tokenizer_command", metavar="COMMAND")
    commands.required = True
    p = add_command(
        commands,
        "train",
        run_train,
        help="train a WordPiece or BPE tokenizer with the BERT special tokens",
        description="Reads the same inputs as `neobert data prepare` (.txt, .jsonl, .csv, .parquet, "
        "directories, hf:NAME, stdlib:) and saves a directory that AutoTokenizer.from_pretrained loads.",
    )
    p.set_defaults(options=add_signature_options(p, train_tokenizer, metadata=OPTIONS,
                                                 rename={"inputs": "input", "output_dir": "output"}))  # fmt: skip


def run_train(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = train_tokenizer(**given(args.options, args))
    table = Table(title=f"{result.kind} tokenizer saved to {result.output_dir}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("vocabulary", f"{result.vocab_size:,}")
    table.add_row("documents", f"{result.documents:,}")
    for token, token_id in result.special_token_ids.items():
        table.add_row(token, str(token_id))
    make_console().print(table)
    return 0
