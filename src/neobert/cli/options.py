"""Command-line options derived from a config dataclass: each field is written once, with its help beside it.

A field ``batch_size: int = 32  # texts per batch at most`` becomes ``--batch-size N`` (default 32) with that
trailing comment as its help (``field(metadata={"help": ...})`` takes precedence; ``metadata={"choices":
...}`` restricts the values). Types map as follows:
``int``/``float``/``str`` (``X | None`` alike), ``bool`` -> a flag (``--name`` when the default is False,
``--no-name`` when it is True), ``bool | None`` -> both (``--name`` / ``--no-name``; neither: None), ``list``/``tuple`` of ``int``/``str`` -> a comma-separated list, and
``tuple[int, int]`` -> ``LO,HI``. Fields of other types (nested mappings) are left to the command.
``metadata={"nargs": "+"}`` takes a list as separate words, ``{"nargs": "append"}`` as a repeated option.

A function's typed keyword parameters work the same way (:func:`add_signature_options`): the help of each
comes from the ``Args:`` section of its docstring (``name: help``, continued on deeper-indented lines);
``metadata`` per parameter adds ``choices``, ``nargs``, ``required`` or the command's own ``default``.
"""

from __future__ import annotations

import argparse
import ast
import collections.abc
import dataclasses
import inspect
import io
import os
import pathlib
import re
import textwrap
import tokenize
import types
import typing
from typing import Any

import yaml

from ..common import config as neobert_config
from ..common.config import Rename


def ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from err
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def key_values(items: list[str], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` items (a repeated option) as a mapping, each value read as YAML (``3`` is a number)."""
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        found[key.strip()] = yaml.safe_load(value)
    return found


def names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def int_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    try:
        return int(lo), int(hi)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected LO,HI, got {text!r}") from err


def field_help(cls: type) -> dict[str, str]:
    """Help text per field (inherited ones too): ``metadata["help"]``, else the comments on the field's lines
    and the full-line comments just above it."""
    found: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        found.update(_comments(klass))
    for f in dataclasses.fields(cls):
        if "help" in f.metadata:
            found[f.name] = f.metadata["help"]
    return found


def _comments(cls: type) -> dict[str, str]:
    """The comments of each field that ``cls`` itself declares."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments = {
        token.start[0]: (token.string.lstrip("#").strip(), token.line.strip().startswith("#"))
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, line = [], node.lineno - 1
        while line in comments and comments[line][1]:  # full-line comments right above the field
            above.insert(0, comments[line][0])
            line -= 1
        beside = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        found[node.target.id] = " ".join(above + beside)
    return found


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def _optional(hint: Any) -> Any:
    """``X`` for ``X | None``; other hints as they are (None for a union of several types)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else (str if set(args) <= {str, os.PathLike, pathlib.Path} else None)
    if typing.get_origin(hint) in (collections.abc.Sequence, collections.abc.Iterable):
        return list[typing.get_args(hint)] if typing.get_args(hint) else None
    return hint


def _converter(hint: Any) -> tuple[Any, str | None] | None:
    """(argparse type, metavar) for a field type, or None when it has no command-line form."""
    hint = _optional(hint)
    if hint in (int, float, str):
        return hint, None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if args and typing.get_origin(args[0]) in (typing.Union, types.UnionType):
        args = (_optional(args[0]),)  # list[str | PathLike]: a list of paths
    if origin is tuple and args == (int, int):
        return int_range, "LO,HI"
    if origin in (list, tuple) and args and args[0] in (int, str):
        return (ints, "N,N,...") if args[0] is int else (names, "A,B,...")
    return None


def add_options(
    parser: Any,
    cls: type,
    *,
    skip: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
    choices: dict[str, tuple[str, ...]] | None = None,
    given_only: bool = False,
) -> None:
    """Add one option per field of the dataclass ``cls`` to ``parser`` (or an argument group).

    ``rename``: field -> option name (without dashes). ``given_only``: an option left out sets nothing (so a
    settings file or the config's own default decides); the help still shows the config's default.
    """
    hints = typing.get_type_hints(cls)
    helps = field_help(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default, text = _default(f), helps.get(f.name, "")
        flag = "--" + (rename or {}).get(f.name, f.name).replace("_", "-")
        unset = argparse.SUPPRESS if given_only else default
        if hints[f.name] == bool | None:  # both spellings; neither leaves the config's None (decided later)
            parser.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=unset, help=text
            )
            continue
        if hints[f.name] is bool:
            if default:
                off = f"turn off: {text}" if text else f"turn {f.name} off"
                parser.add_argument(
                    f"--no-{flag[2:]}", dest=f.name, action="store_false", default=unset, help=off
                )
            else:
                parser.add_argument(flag, dest=f.name, action="store_true", default=unset, help=text)
            continue
        converter = _converter(hints[f.name])
        if converter is None:
            continue
        kind, metavar = converter
        many = f.metadata.get("nargs")
        if many:  # a list as separate words (nargs "+") or as a repeated option ("append")
            kind = _optional(typing.get_args(_optional(hints[f.name]))[0])
            metavar = None
        if default not in (None, "", []) and not f.metadata.get("required"):
            text = f"{text} (default: {_shown(default)})" if text else f"default: {_shown(default)}"
        required = f.metadata.get("required", f.default is f.default_factory is dataclasses.MISSING)
        required = required and not given_only
        parser.add_argument(
            flag,
            dest=f.name,
            type=kind,
            default=unset,
            required=required,
            metavar=metavar,
            choices=(choices or {}).get(f.name, f.metadata.get("choices")),
            help=text,
            **({"action": "append"} if many == "append" else {"nargs": many} if many else {}),
        )


def given(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``cls`` that ``args`` holds (with ``given_only``: those given on the command line).

    An option written by hand for a field is taken too: give it ``default=argparse.SUPPRESS`` (or another
    ``dest``) so that leaving it out sets nothing."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if hasattr(args, f.name):
            value = getattr(args, f.name)
            if typing.get_origin(hints[f.name]) is tuple and isinstance(value, list):
                value = tuple(value)
            values[f.name] = value
    return values


def config_from_args(cls: type, args: argparse.Namespace, **changes: Any) -> Any:
    """An instance of ``cls`` from the options :func:`add_options` added (plus ``changes``)."""
    return cls(**{**given(cls, args), **changes})


def docstring_args(func: Any) -> dict[str, str]:
    """``name -> help`` from the ``Args:`` section of ``func``'s docstring."""
    lines = inspect.cleandoc(func.__doc__ or "").splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.strip() == "Args:"), len(lines))
    found: dict[str, str] = {}
    name, indent = None, None
    for line in lines[start:]:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        match = re.match(r"(\w+): (.*)", line.strip())
        if match and (indent is None or depth == indent):
            indent, name = depth, match[1]
            found[name] = match[2]
        elif name is not None and depth > (indent or 0):
            found[name] += " " + line.strip()
        else:
            break
    return found


def signature_config(
    func: Any, *, skip: tuple[str, ...] = (), metadata: dict[str, dict] | None = None
) -> type:
    """A dataclass whose fields are ``func``'s typed parameters (less ``skip``), helps from its docstring:
    what :func:`add_options`, :func:`given` and :func:`config_from_args` take."""
    hints = typing.get_type_hints(func)
    helps = docstring_args(func)
    fields = []
    for p in inspect.signature(func).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        meta = {"help": helps.get(p.name, ""), **(metadata or {}).get(p.name, {})}
        default = meta.pop("default", dataclasses.MISSING if p.default is p.empty else p.default)
        if isinstance(default, list | dict | set):
            default = dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
        else:
            default = dataclasses.field(default=default, metadata=meta)
        fields.append((p.name, hints.get(p.name, Any), default))
    return dataclasses.make_dataclass(func.__name__, fields, kw_only=True)


def add_signature_options(
    parser: Any,
    func: Any,
    *,
    skip: tuple[str, ...] = (),
    metadata: dict[str, dict] | None = None,
    **kwargs: Any,
) -> type:
    """Options for ``func``'s typed keyword parameters (see :func:`signature_config`); returns the config class
    to hand to :func:`given` / :func:`config_from_args` (call ``func(**given(cls, args))``)."""
    cls = signature_config(func, skip=skip, metadata=metadata)
    add_options(parser, cls, **kwargs)
    return cls


# --- renamed options ----------------------------------------------------------------------------------------


# (command, old option) -> its rename, from the one table of renames (neobert.common.config.RENAMES, which settings
# files read too). The old name keeps working for a while with a deprecation note naming the new one
# (:func:`renamed_options`); tests/test_cli_option_sets.py keeps the record (a rename not listed fails it).
def option_renames() -> dict[tuple[str, str], Rename]:
    """(command, old option) -> its entry of the one table, as the table stands now."""
    return {(command, r.options[0]): r for r in neobert_config.RENAMES for command in r.commands}


# (command, old option) -> new option
RENAMED_OPTIONS: dict[tuple[str, str], str] = {key: r.options[1] for key, r in option_renames().items()}


def renamed_options(argv: list[str], commands: set[str]) -> tuple[list[str], list[str]]:
    """``argv`` with every old option name of ``config.RENAMES`` replaced by its new one (``--old=V`` too), and
    a deprecation note per replacement. ``commands``: the command paths there are (``finetune classify``)."""
    words = [a for a in argv if not a.startswith("-")][:2]
    command = " ".join(words) if " ".join(words) in commands else (words[0] if words else "")
    out, notes, renames = [], [], option_renames()
    for arg in argv:
        name, eq, value = arg.partition("=")
        rename = renames.get((command, name)) if arg.startswith("--") else None
        if rename is None:
            out.append(arg)
            continue
        new = rename.options[1]
        if rename.switch:  # --bf16 is --precision bf16: the value the switch meant
            replacement = [new, str(rename.value(True))]
        else:
            replacement = [new + eq + value if eq else new]
        out += replacement
        notes.append(
            f"{name} was renamed {new} (neobert {command}); the old name still works for now but "
            f"will be removed: write {' '.join(replacement)}"
        )
    return out, notes
