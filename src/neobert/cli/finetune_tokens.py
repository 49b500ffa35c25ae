"""``neobert finetune tokens``: token classification (NER) on CoNLL / JSONL files (joins ``finetune``)."""

from __future__ import annotations

import argparse

from ..finetuning.tokens import TokensConfig, run_tokens
from .common import add_command, quiet_transformers
from .finetune import add_settings, print_fitted, settings_from_args


def _tokens(args: argparse.Namespace) -> int:
    quiet_transformers()
    print_fitted(run_tokens(settings_from_args(args, TokensConfig)), metric_prefix="entity ")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "tokens",
        _tokens,
        help="token classification (NER): CoNLL-style or JSONL files with BIO / IOB2 tags",
        description="Fine-tune any encoder for token classification. Files: CoNLL style (a token and its tag "
        "per line, the tag in the last column, blank lines between sentences, -DOCSTART- skipped) or JSONL "
        "(tokens + tags lists). Writes OUTPUT/model (AutoModelForTokenClassification + tokenizer), "
        "OUTPUT/metrics.json (entity-level P/R/F1, seqeval's definition) and OUTPUT/predictions.jsonl.",
    )
    add_settings(parser, TokensConfig)
