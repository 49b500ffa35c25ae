"""Every subcommand's options, recorded: a change to the command line that drops an option fails here.

``cli_option_sets.json`` holds, per command path (``finetune classify``), its option strings and whether each
is required. An option may be renamed only by listing it in ``neobert.common.config.RENAMES`` (the old name then
keeps working with a deprecation note: tests/test_cli_papercuts.py); new options are recorded by
regenerating the file (``python tests/test_cli_option_sets.py``) and reviewing the diff.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from neobert.cli.main import build_parser
from neobert.cli.options import RENAMED_OPTIONS  # from the one table of renames (old names keep working)

RECORD = Path(__file__).with_name("cli_option_sets.json")
# (command, option) removed on purpose, with where it went
REMOVED: dict[tuple[str, str], str] = {
    ("serve", "--batching"): "a3b7fae (serving, on main): the model runs in a process of its own",
}


def option_sets(parser: argparse.ArgumentParser, path: str = "") -> dict[str, dict[str, bool]]:
    """command path -> {option string: required}, for the parser and every subcommand below it."""
    found: dict[str, dict[str, bool]] = {}
    options: dict[str, bool] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(option_sets(sub, f"{path} {name}".strip()))
        elif isinstance(action, argparse._HelpAction):
            continue
        elif action.option_strings:
            for option in action.option_strings:
                options[option] = bool(action.required)
        else:
            options[f"<{action.dest}>"] = True  # a positional argument
    found[path or "neobert"] = options
    return found


def test_no_option_is_lost():
    recorded = json.loads(RECORD.read_text())
    current = option_sets(build_parser())
    missing = []
    for command, options in recorded.items():
        for option, required in options.items():
            if (command, option) in REMOVED:
                continue
            new = RENAMED_OPTIONS.get((command, option), option)
            if command not in current or new not in current[command]:
                missing.append(f"{command}: {option}" + (f" (renamed {new})" if new != option else ""))
            elif current[command][new] and not required:
                missing.append(f"{command}: {new} became required")
    assert missing == []


def test_renamed_options_have_their_new_name_only():
    current = option_sets(build_parser())
    assert [
        (c, old) for (c, old), new in RENAMED_OPTIONS.items() if old in current[c] or new not in current[c]
    ] == []


def test_every_current_option_is_recorded():
    """New options are reviewed: regenerate the record and read its diff."""
    recorded = json.loads(RECORD.read_text())
    current = option_sets(build_parser())
    assert {c: sorted(o) for c, o in current.items()} == {c: sorted(o) for c, o in recorded.items()}


def test_the_recorder_sees_subcommands_and_positionals():
    sets = option_sets(build_parser())
    assert "--model" in sets["finetune classify"] and "<text>" in sets["fill-mask"]


if __name__ == "__main__":
    RECORD.write_text(json.dumps(option_sets(build_parser()), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
