"""``neobert demo``: the inference path end to end on a small random NeoBERT (:mod:`neobert.recipes.demo`)."""

from __future__ import annotations

import argparse

from ..recipes.demo import run_demo
from .common import add_command, make_console, quiet_transformers, say

DESCRIPTION = (
    "Run the inference path end to end on a small NeoBERT with RANDOM weights and the real "
    "bert-base-uncased tokenizer, checking each step."
)


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    console = make_console()
    return 0 if run_demo(args.output, log=lambda text: say(text, console)).ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "showcase on a small random NeoBERT: save, reload, embed, fill-mask, sentence-transformers"
    parser = add_command(subparsers, "demo", _main, help, DESCRIPTION)
    parser.add_argument("--output", metavar="DIR", help="keep the saved model directories here")
