"""``neobert finetune tokens``: token classification (NER) on CoNLL / JSONL files (joins ``finetune``)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from .common import add_model_arguments, make_console, quiet_transformers
from .finetune import _add_training_arguments, _cell, _settings


def _tokens(args: argparse.Namespace) -> int:
    from ..token_classification.finetune import run_tokens

    quiet_transformers()
    result = run_tokens(_settings(args, ("output", "train", "validation")))
    console = make_console()
    scores = ", ".join(f"entity {name} {_cell(value)}" for name, value in result.metrics.items())
    console.print(f"best step {result.best_step} of {result.steps}: {scores}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(
        f"wrote {escape(str(result.metrics_file))}, {escape(str(result.predictions_file))} and the model "
        f"in {escape(str(result.model_dir))}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tokens",
        help="token classification (NER): CoNLL-style or JSONL files with BIO / IOB2 tags",
        description="Fine-tune any encoder for token classification. Files: CoNLL style (a token and its tag "
        "per line, the tag in the last column, blank lines between sentences, -DOCSTART- skipped) or JSONL "
        "(tokens + tags lists). Writes OUTPUT/model (AutoModelForTokenClassification + tokenizer), "
        "OUTPUT/metrics.json (entity-level P/R/F1, seqeval's definition) and OUTPUT/predictions.jsonl.",
    )
    add_model_arguments(parser)
    parser.add_argument("--train", help="training file (CoNLL style, or .jsonl)")
    parser.add_argument("--validation", help="validation file, same format")
    parser.add_argument("--output", help="output directory")
    _add_training_arguments(parser)
    parser.set_defaults(func=_tokens)
