"""``neobert info``: architecture summary and exact parameter counts (:mod:`neobert.inference.model_info`)."""

from __future__ import annotations

import argparse

from ..common.config import PRESETS
from ..inference.model_info import model_info
from .common import add_command, say

DESCRIPTION = (
    "Summarize a NeoBERT architecture; counts come from the real modules built on the meta device, so even "
    "the full model costs no memory."
)


def _main(args: argparse.Namespace) -> int:
    say(model_info(args.model).summary)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "architecture and parameter counts of a preset or model directory"
    parser = add_command(subparsers, "info", _main, help, DESCRIPTION)
    what = f"model directory or preset ({', '.join(PRESETS)})"
    parser.add_argument("model", metavar="PATH_OR_PRESET", help=what)
