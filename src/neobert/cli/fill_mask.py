"""``neobert fill-mask``: the most likely tokens for each [MASK] of a text."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..encoders import is_preset, load_model, resolve_tokenizer
from ..inference import fill_mask
from .common import add_model_arguments, make_console, quiet_transformers

RANDOM_WEIGHTS_NOTE = (
    "weights are random (a preset, not a trained checkpoint): predictions are meaningless until pretraining"
)


@dataclass
class FillMaskResult:
    text: str
    predictions: list[list[tuple[str, float]]]  # one list per [MASK], best first
    random_weights: bool


def run(model: str, text: str, top_k: int = 5, tokenizer: str | None = None) -> FillMaskResult:
    tok = resolve_tokenizer(model, tokenizer)
    mlm = load_model(model, task="mlm")
    return FillMaskResult(text, fill_mask(mlm, tok, text, top_k=top_k), is_preset(model))


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
    render(run(args.model, args.text, top_k=args.top_k, tokenizer=args.tokenizer), make_console())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fill-mask",
        help="predict the tokens behind each [MASK] of a text",
        description="Show the top-k tokens, with probabilities, for every [MASK] in TEXT.",
    )
    add_model_arguments(parser)
    parser.add_argument("text", help='text holding one or more [MASK], e.g. "Paris is the [MASK] of France."')
    parser.add_argument("--top-k", type=int, default=5)
    parser.set_defaults(func=_main)
