"""Pieces shared by the CLI commands: the error type, the console, a subcommand, empty-row notes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console
from transformers.utils import logging


class CLIError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


def make_console(console: Console | None = None) -> Console:
    return console if console is not None else Console()


def quiet_transformers() -> None:
    """Hide transformers' per-file progress bars and info chatter: the commands report what matters."""
    logging.disable_progress_bar()
    logging.set_verbosity_error()


def add_command(
    subparsers: Any, name: str, func: Callable[[argparse.Namespace], int], help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` and the function that runs it (given the parsed arguments, it returns the
    exit code)."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(func=func)
    return parser


def note_empty_rows(console: Console, rows: list[int], noun: str, consequence: str) -> None:
    """One yellow line naming the empty rows (the first ten), if any."""
    if rows:
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        console.print(
            f"[yellow]note:[/] {len(rows):,} {noun}(s) have an empty text ({noun}s {shown}); {consequence}",
            highlight=False,
        )
