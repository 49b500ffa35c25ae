"""``neobert classify``: run a sequence classifier over a text file or a table, one JSON line per row."""

from __future__ import annotations

import argparse

from ..predict import ClassifyFileConfig, classify_file
from .common import add_command, quiet_transformers, show
from .options import config_from_args


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(classify_file(config_from_args(ClassifyFileConfig, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "classify texts (a text file or a table) with a sequence classifier, into JSONL"
    add_command(subparsers, "classify", _main, help, config=ClassifyFileConfig, skip=("show_progress",))
