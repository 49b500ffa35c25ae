"""``neobert tokenizer train``: a WordPiece (as the paper) or byte-level BPE tokenizer from local text."""

from __future__ import annotations

import argparse

from rich.table import Table

from ..data import train_tokenizer
from .common import add_command, make_console, quiet_transformers


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
    p.add_argument(
        "--input", nargs="+", required=True, metavar="PATH", help="input files, directories or specs"
    )
    p.add_argument("--kind", choices=["wordpiece", "bpe"], default="wordpiece", help="default: wordpiece")
    p.add_argument("--vocab-size", type=int, default=30522, help="default: 30522 (bert-base-uncased)")
    p.add_argument("--min-frequency", type=int, default=2, help="rarest pair to merge (default: 2)")
    p.add_argument("--output", required=True, metavar="DIR", help="directory to save the tokenizer in")
    p.add_argument("--text-column", default="text", help="text column of .jsonl/.csv/.parquet/hf inputs")
    p.add_argument(
        "--txt-mode",
        choices=["auto", "paragraph", "line"],
        default="auto",
        help="documents of .txt files (auto: one per line when a file has no blank lines)",
    )
    p.add_argument(
        "--on-error", choices=["raise", "skip"], default="raise", help="bad records and empty files"
    )
    p.add_argument("--model-max-length", type=int, help="record this maximum length in the tokenizer config")


def run_train(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = train_tokenizer(
        args.input,
        kind=args.kind,
        vocab_size=args.vocab_size,
        output_dir=args.output,
        min_frequency=args.min_frequency,
        text_column=args.text_column,
        txt_mode=args.txt_mode,
        on_error=args.on_error,
        model_max_length=args.model_max_length,
    )
    table = Table(title=f"{result.kind} tokenizer saved to {result.output_dir}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("vocabulary", f"{result.vocab_size:,}")
    table.add_row("documents", f"{result.documents:,}")
    for token, token_id in result.special_token_ids.items():
        table.add_row(token, str(token_id))
    make_console().print(table)
    return 0
