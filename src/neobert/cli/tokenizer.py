"""``neobert tokenizer train``: a WordPiece (as the paper) or byte-level BPE tokenizer from local text."""

from __future__ import annotations

import argparse

from ..data import train_tokenizer
from ..data.readers import ON_ERROR, TXT_MODES
from ..data.tokenizer import KINDS
from .common import add_command, quiet_transformers, say
from .options import add_signature_options, given

OPTIONS = {
    "inputs": {"nargs": "+"},
    "kind": {"choices": KINDS},
    "output_dir": {"required": True},
    "txt_mode": {"choices": TXT_MODES},
    "on_error": {"choices": ON_ERROR},
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
    rename = {"inputs": "input", "output_dir": "output"}
    p.set_defaults(options=add_signature_options(p, train_tokenizer, metadata=OPTIONS, rename=rename))


def run_train(args: argparse.Namespace) -> int:
    quiet_transformers()
    say(train_tokenizer(**given(args.options, args)).summary)
    return 0
