"""``neobert tag``: entities with character offsets from a fine-tuned token classifier, one JSON line per text."""

from __future__ import annotations

import argparse

from ..predict import TagConfig, tag_file
from .common import add_command, quiet_transformers, show
from .options import config_from_args


def _tag(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(tag_file(config_from_args(TagConfig, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "tag entities with a fine-tuned token classifier (character offsets), JSONL out"
    add_command(subparsers, "tag", _tag, help, config=TagConfig, skip=("show_progress",))
