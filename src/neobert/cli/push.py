"""``neobert push``: publish a model directory (with its card) on the Hugging Face Hub."""

from __future__ import annotations

import argparse

from ..cards.hub import HubError, push
from .common import CLIError, add_command, say
from .options import add_signature_options, given


def _main(args: argparse.Namespace) -> int:
    try:
        result = push(args.directory, **given(args.options, args))
    except HubError as err:  # offline, unreachable, unauthorised: one line naming the cause
        raise CLIError(str(err)) from None
    say(result.summary)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "upload a model directory to the Hugging Face Hub (a branch per --revision)"
    what = (
        "Create the repository if it is missing (and the branch of --revision), then upload DIR, its README.md "
        "model card included. The token is HF_TOKEN or your login (`hf auth login`); it is never printed. "
        "HF_ENDPOINT points the client at another Hub."
    )
    parser = add_command(subparsers, "push", _main, help, what)
    parser.add_argument(
        "directory", metavar="DIR", help="model directory written by neobert (with its README.md)"
    )
    metadata = {"repo_id": {"required": True}}
    parser.set_defaults(options=add_signature_options(parser, push, skip=("directory",), metadata=metadata))
