"""``neobert fill-mask``: the most likely tokens for each [MASK] of a text."""

from __future__ import annotations

import argparse

from ..jobs.predict import fill_mask_text
from .common import add_command, quiet_transformers, show
from .options import add_signature_options, given


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(fill_mask_text(text=args.text, **given(args.options, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "predict the tokens behind each [MASK] of a text"
    what = "Show the top-k tokens, with probabilities, for every [MASK] in TEXT."
    parser = add_command(subparsers, "fill-mask", _main, help, what)
    parser.add_argument("text", help='text holding one or more [MASK], e.g. "Paris is the [MASK] of France."')
    parser.set_defaults(options=add_signature_options(parser, fill_mask_text, skip=("text",)))
