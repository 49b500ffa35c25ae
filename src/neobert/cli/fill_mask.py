"""``neobert fill-mask``: the most likely tokens for each [MASK] of a text."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..predict import FillMaskResult, fill_mask_text
from .common import add_command, make_console, quiet_transformers
from .options import add_signature_options, given

RANDOM_WEIGHTS_NOTE = (
    "weights are random (a preset, not a trained checkpoint): predictions are meaningless until pretraining"
)


def render(result: FillMaskResult, console: Console) -> None:
    table = Table(title=f"fill-mask: {escape(result.text)}")
    table.add_column("[MASK] #", justify="right")
    table.add_column("rank", justify="right")
    table.add_column("token")
    table.add_column("probability", justify="right")
    for number, predictions in enumerate(result.predictions, start=1):
        for rank, (token, prob) in enumerate(predictions, start=1):
            table.add_row(str(number) if rank == 1 else "", str(rank), escape(token), f"{prob:.3g}")
        if number < len(result.predictions):
            table.add_section()
    console.print(table)
    if result.random_weights:
        console.print(f"[bold yellow]note:[/] {RANDOM_WEIGHTS_NOTE}")


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    render(fill_mask_text(text=args.text, **given(args.options, args)), make_console())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "fill-mask",
        _main,
        help="predict the tokens behind each [MASK] of a text",
        description="Show the top-k tokens, with probabilities, for every [MASK] in TEXT.",
    )
    parser.add_argument("text", help='text holding one or more [MASK], e.g. "Paris is the [MASK] of France."')
    parser.set_defaults(options=add_signature_options(parser, fill_mask_text, skip=("text",)))
