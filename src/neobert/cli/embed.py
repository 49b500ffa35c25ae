"""``neobert embed``: one vector per line of a text file, written to a .npy file."""

from __future__ import annotations

import argparse

from ..predict import EmbedConfig, embed_file
from .common import add_command, quiet_transformers, show
from .options import config_from_args


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(embed_file(config_from_args(EmbedConfig, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "embed a text file (one text per line) into a .npy array"
    add_command(subparsers, "embed", _main, help, config=EmbedConfig, skip=("show_progress",))
