"""``neobert merge``: checkpoints or models of one run (or several) merged into a model directory."""

from __future__ import annotations

import argparse

from ..training.merge import METHODS, MergeConfig, merge
from .common import add_command, show
from .options import add_options, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "merge",
        run_from_args,
        help="merge checkpoints (the average of the last k, an EMA, TIES) or fold a LoRA adapter into its base",
        description=(
            "Merge model directories or training checkpoints of one architecture (a run directory stands for "
            "its checkpoints) into a model directory with its card: --method mean (checkpoint averaging, "
            "with --last K), ema (in the inputs' order), ties (runs decayed from --base), lora (the one input, "
            "a LoRA adapter directory, folded into its base: a plain model directory)."
        ),
    )
    add_options(parser, MergeConfig, choices={"method": METHODS})


def run_from_args(args: argparse.Namespace) -> int:
    return show(merge(config_from_args(MergeConfig, args)))
