"""``neobert``, the console script: help and the version at once, everything else by the real command line.

``neobert``, ``neobert --help``, ``neobert COMMAND [SUBCOMMAND] --help`` (or ``-h``) and ``neobert --version``
are answered from ``parsers.json``: the parser of that command, described by :mod:`neobert_cli.generate` from
``neobert.cli.main.build_parser`` and rebuilt here with argparse, so that help, usage and version read exactly
as the real parser prints them (at this terminal's width, by this Python's argparse). Nothing of ``neobert``
is imported for them, hence neither torch nor transformers. Any other command line, an error included, is
handed to ``neobert.cli.main.main`` unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parsers.json")
PROG = "neobert"
HELP_FLAGS = ("-h", "--help")
VERSION = ["--version"]
# action kinds the spec names that argparse does not register under a name of its own
ACTION_CLASSES: dict[str, type[argparse.Action]] = {"boolean_optional": argparse.BooleanOptionalAction}


def load_spec(path: str = SPEC) -> dict[str, Any]:
    """prog ("neobert data prepare") -> the description of that parser (:mod:`neobert_cli.generate`)."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _value(value: Any) -> Any:
    """A value as argparse takes it: its SUPPRESS marker as the object argparse compares by identity, a
    list (choices, or a metavar per argument) as a tuple."""
    if value == argparse.SUPPRESS:
        return argparse.SUPPRESS
    return tuple(value) if isinstance(value, list) else value


def build(spec: dict[str, Any], prog: str) -> argparse.ArgumentParser:
    """The parser ``prog`` of ``spec`` built again with argparse: its groups and actions in their order,
    its subcommands (names and help) when it has some."""
    entry = spec[prog]
    parser = argparse.ArgumentParser(
        prog=prog, usage=entry["usage"], description=entry["description"], epilog=entry["epilog"]
    )
    for group in entry["groups"]:
        parser.add_argument_group(group["title"], group["description"])
    groups = parser._action_groups  # the two of every parser (positionals, options), then the ones above
    for action in entry["actions"]:
        options = {k: _value(v) for k, v in action.items() if k not in ("kind", "option_strings", "group")}
        names = action["option_strings"] or [options.pop("dest")]  # a positional is named by its dest
        kind = ACTION_CLASSES.get(action["kind"], action["kind"])
        groups[action["group"]].add_argument(*names, action=kind, **options)
    if "commands" in entry:
        commands = entry["commands"]
        subparsers = parser.add_subparsers(**{k: _value(v) for k, v in commands.items() if k != "choices"})
        for name, *text in commands["choices"]:  # [name] or [name, help]: listed in the help only with one
            subparsers.add_parser(name, **({"help": _value(text[0])} if text else {}))
    return parser


def answer(argv: list[str], spec: dict[str, Any]) -> int | None:
    """Answer a command line that asks for help or the version only, as the real parser does (argparse
    prints and exits with SystemExit(0)); no command: the help and exit code 2, as ``neobert.cli.main.main``.
    None for any other command line."""
    if not argv:
        build(spec, PROG).print_help()
        return 2
    prog = " ".join([PROG, *argv[:-1]])
    if argv == VERSION or (argv[-1] in HELP_FLAGS and prog in spec):
        build(spec, prog).parse_args(argv[-1:])
    return None


def hand_over(argv: list[str]) -> int:
    """Run ``argv`` with the real command line (importing neobert: torch and transformers)."""
    from neobert.cli.main import main as run  # imported only for real work: the point of this launcher

    return run(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[-1] not in HELP_FLAGS and argv != VERSION:
        return hand_over(argv)  # real work: the spec is not even read
    answered = answer(argv, load_spec())
    return hand_over(argv) if answered is None else answered


if __name__ == "__main__":
    sys.exit(main())
