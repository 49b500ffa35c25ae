"""Pieces shared by the CLI commands: the error type, the console, a subcommand, printing a report."""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from transformers.utils import logging

from .options import add_options


class CLIError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


def make_console(console: Console | None = None) -> Console:
    return console if console is not None else Console()


def quiet_transformers() -> None:
    """Hide transformers' per-file progress bars and info chatter: the commands report what matters."""
    logging.disable_progress_bar()
    logging.set_verbosity_error()


def describe(obj: Any) -> str | None:
    """The first paragraph of ``obj``'s docstring (a command's description) in one line, less a leading
    ````neobert NAME``: ````; None for a dataclass without one (its generated signature is no description)."""
    doc = inspect.getdoc(obj)
    if not doc or doc.startswith(f"{getattr(obj, '__name__', '')}("):
        return None
    text = re.sub(r"^``neobert [^`]*``: ", "", " ".join(doc.split("\n\n")[0].split()))
    return text[:1].upper() + text[1:]


def add_command(
    subparsers: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    description: str | None = None,
    config: type | None = None,
    **options: Any,
) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` and the function that runs it (given the parsed arguments, it returns the
    exit code). With ``config``: one option per field (``options`` go to :func:`add_options`), and the
    description, if not given, is the config's docstring."""
    description = description or (describe(config) if config is not None else None)
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(func=func)
    if config is not None:
        add_options(parser, config, **options)
    return parser


def say(text: str, console: Console | None = None) -> None:
    """Print ``text`` as it is (a Markdown report from the wing, a summary line): no markup read in it, no
    highlighting, long lines kept whole."""
    make_console(console).print(text.rstrip("\n"), highlight=False, markup=False, soft_wrap=True)


def note(text: str | None, console: Console | None = None, label: str = "note") -> None:
    """One yellow ``note:`` line, if there is a note."""
    if text:
        make_console(console).print(f"[yellow]{label}:[/] {escape(text)}", highlight=False, soft_wrap=True)


def wrote(*paths: Any, console: Console | None = None) -> None:
    """The files a command wrote, in one line."""
    say("wrote " + ", ".join(map(str, paths)), console)


def show(result: Any, console: Console | None = None) -> int:
    """Print a task's result: its summary (Markdown from the wing), then its notes in yellow; exit code 0."""
    console = make_console(console)
    say(result.summary, console)
    for text in result.notes:
        note(text, console)
    return 0
