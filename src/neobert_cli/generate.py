"""Write ``neobert_cli/parsers.json``, the description of the real parser that the launcher answers help from.

Run ``python -m neobert_cli.generate`` after changing a command or an option; tests/test_cli_launcher.py fails
until the file is what the live parser (``neobert.cli.main.build_parser``) describes. The description holds
what argparse prints (usage, descriptions, groups, each action's option strings, dest, nargs, choices, default,
help, metavar, the subcommands' names and help), not the printed text: the launcher builds the parser again
with the argparse it runs on, so its help reads as the real parser's at any terminal width, on any Python.
What the launcher cannot build again (another formatter class, mutually exclusive groups, an action class of
our own, aliases) is refused here with its name.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any

from neobert.cli.main import build_parser
from neobert.common.io import write_text

from .launcher import ACTION_CLASSES, SPEC

# Python 3.10's BooleanOptionalAction appends this to its help
_BOOLEAN_SUFFIX = " (default: %(default)s)"
_APPENDS_DEFAULT = argparse.BooleanOptionalAction(["--x"], "x", default=True, help="").help != ""


def _kind(action: argparse.Action) -> str:
    """The name the launcher builds ``action`` by: argparse's own name for its class."""
    names = {cls: name for name, cls in argparse.ArgumentParser()._registries["action"].items() if name}
    names.update({cls: name for name, cls in ACTION_CLASSES.items()})
    if type(action) not in names:
        raise ValueError(
            f"{type(action).__name__} ({'/'.join(action.option_strings) or action.dest}): the launcher builds "
            "argparse's own actions only; add the class to neobert_cli.launcher.ACTION_CLASSES"
        )
    return names[type(action)]


def _stored(value: Any, name: str) -> Any:
    """``value`` as JSON keeps it for the help: choices and a metavar per argument as a list of strings; any
    other value that is not a JSON scalar as its str() (a default shows only through ``%(default)s``)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if name in ("choices", "metavar"):
        return [str(v) for v in value]
    return str(value)


def _changed(action: Any, cls: type) -> dict[str, Any]:
    """The arguments of ``cls``'s constructor whose value on ``action`` is not the constructor's default
    (``type`` left out: the help never shows it)."""
    found = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "option_strings", "type", "prog", "parser_class"):
            continue
        value = _stored(getattr(action, name), name)
        if param.default is param.empty or value != _stored(param.default, name):
            found[name] = value
    return found


def _boolean_optional(spec: dict[str, Any]) -> dict[str, Any]:
    """A BooleanOptionalAction as it was given: it adds ``--no-X`` after each ``--X`` (and, on Python 3.10,
    the default to its help); the argparse that builds it again adds them as it does."""
    given, strings = [], iter(spec["option_strings"])
    for option in strings:
        given.append(option)
        if option.startswith("--"):
            next(strings)
    help = spec.get("help")
    if _APPENDS_DEFAULT and isinstance(help, str):
        spec["help"] = help.removesuffix(_BOOLEAN_SUFFIX)
    return {**spec, "option_strings": given}


def _action(action: argparse.Action, group: int) -> dict[str, Any]:
    spec = {"kind": _kind(action), "option_strings": list(action.option_strings), "group": group}
    spec.update(_changed(action, type(action)))
    if not action.option_strings:
        spec.pop("required", None)  # a positional's is argparse's to decide from its nargs
    return _boolean_optional(spec) if spec["kind"] == "boolean_optional" else spec


def _check(parser: argparse.ArgumentParser) -> None:
    """Refuse what :func:`neobert_cli.launcher.build` does not build again."""
    commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    problems = {
        "a formatter class of its own": parser.formatter_class is not argparse.HelpFormatter,
        "no -h/--help, or other prefix characters": not parser.add_help or parser.prefix_chars != "-",
        "mutually exclusive groups": bool(parser._mutually_exclusive_groups),
        "options after its subcommands": bool(commands) and parser._actions[-1] is not commands[0],
        "subcommand aliases": any(c.metavar != c.dest for a in commands for c in a._choices_actions),
    }
    found = [what for what, true in problems.items() if true]
    if found:
        raise ValueError(f"{parser.prog}: the launcher cannot describe {', '.join(found)}")


def _commands(parser: argparse.ArgumentParser, action: argparse._SubParsersAction) -> dict[str, Any]:
    """A parser's subcommands: how ``add_subparsers`` was called, and each name with its help if it has one."""
    spec: dict[str, Any] = {}
    group = parser._subparsers
    if group not in parser._action_groups[:2]:  # a group of their own (add_subparsers(title=...)): the last
        if group is not parser._action_groups[-1] or group._group_actions != [action]:
            raise ValueError(f"{parser.prog}: the subcommands' group must be its last group and theirs alone")
        spec.update(title=group.title, description=group.description)
    spec.update(_changed(action, type(action)))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    spec["choices"] = [[name, helps[name]] if name in helps else [name] for name in action.choices]
    return spec


def _entry(parser: argparse.ArgumentParser) -> dict[str, Any]:
    _check(parser)
    groups = parser._action_groups
    commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    skip = (argparse._HelpAction, argparse._SubParsersAction)
    entry: dict[str, Any] = {
        "usage": parser.usage,
        "description": parser.description,
        "epilog": parser.epilog,
        "groups": [
            {"title": g.title, "description": g.description}
            for g in groups[2:]
            if not (commands and g is parser._subparsers)
        ],
        "actions": [
            _action(a, next(i for i, g in enumerate(groups) if a in g._group_actions))
            for a in parser._actions
            if not isinstance(a, skip)
        ],
    }
    if commands:
        entry["commands"] = _commands(parser, commands[0])
    return entry


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """prog ("neobert data prepare") -> its description, for ``parser`` and every subcommand below it."""
    found = {parser.prog: _entry(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(describe(sub))
    return found


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The text of ``parsers.json`` for ``parser`` (the live one by default)."""
    return json.dumps(describe(parser or build_parser()), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    write_text(SPEC, render())
    print(f"wrote {SPEC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
