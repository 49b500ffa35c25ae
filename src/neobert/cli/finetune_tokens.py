"""``neobert finetune tokens``: token classification (NER) on CoNLL / JSONL files (joins ``finetune``)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..token_classification.finetune import TokensConfig, run_tokens
from .common import make_console, quiet_transformers
from .finetune import _add_settings, _cell, _settings


def _tokens(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = run_tokens(_settings(args, TokensConfig))
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
    _add_settings(parser, TokensConfig)
    parser.set_defaults(func=_tokens)
