"""``neobert mine``: hard negatives for (query, positive) pairs (:mod:`neobert.finetuning.mining`); the options
come from :class:`~neobert.finetuning.mining.MineConfig`, the description from its docstring."""

from __future__ import annotations

import argparse

from ..finetuning.mining import MineConfig, mine
from .common import add_command, quiet_transformers, show
from .options import config_from_args

HELP = "mine hard negatives for (query, positive) pairs with a dense, SPLADE or late-interaction model"


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(mine(config_from_args(MineConfig, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(subparsers, "mine", _main, HELP, config=MineConfig)
