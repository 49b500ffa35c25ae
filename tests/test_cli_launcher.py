"""The ``neobert`` console script's launcher (issue 42 item 3): help and the version at once, without torch.

``neobert_cli/parsers.json`` describes the real parser; the launcher builds each command's parser again from it.
The committed file must be what the live parser describes (regenerate: ``python -m neobert_cli.generate``),
every command's help built from it must read as the live parser's, a help or version run must leave torch,
transformers and neobert unimported, and every other command line must reach the real command line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import neobert_cli
from neobert import __version__
from neobert.cli.main import build_parser, command_paths
from neobert.cli.main import main as real_main
from neobert_cli import generate, launcher

REGENERATE = "neobert_cli/parsers.json is stale: regenerate it with `python -m neobert_cli.generate`"
ROOT = Path(__file__).resolve().parents[1]
SRC = Path(neobert_cli.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def live() -> argparse.ArgumentParser:
    return build_parser()


def subparser(parser: argparse.ArgumentParser, path: str) -> argparse.ArgumentParser:
    for word in path.split():
        parser = parser._subparsers._group_actions[0].choices[word]
    return parser


def fresh_python(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter that finds this checkout's packages first, 80 columns wide."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "80", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, check=True
    )


def test_the_committed_spec_is_the_live_parsers(live):
    assert Path(launcher.SPEC).read_text(encoding="utf-8") == generate.render(live), REGENERATE


def test_the_spec_has_every_command_path(live):
    spec = launcher.load_spec()
    assert set(spec) == {"neobert"} | {f"neobert {path}" for path in command_paths(live)}
    assert {"neobert pretrain", "neobert data prepare", "neobert bench serve", "neobert serve"} <= set(spec)


@pytest.mark.parametrize("columns", ["50", "80", "200"])
def test_every_command_reads_as_the_live_parser_at_any_width(live, columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", columns)
    spec = launcher.load_spec()
    for path in ["", *sorted(command_paths(live))]:
        built, real = launcher.build(spec, f"neobert {path}".strip()), subparser(live, path)
        assert built.format_help() == real.format_help(), (f"neobert {path}".strip(), REGENERATE)
        assert built.format_usage() == real.format_usage(), path


# Each command line's exit code and what it printed, then the heavy modules loaded, from one fresh interpreter.
ANSWERED = [[], ["--help"], ["-h"], ["embed", "--help"], ["data", "prepare", "-h"], ["serve", "--help"]]
PROBE = """
import contextlib, io, json, sys
from neobert_cli.launcher import main
answers = []
for argv in {argvs!r}:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    answers.append([code, out.getvalue()])
heavy = [m for m in ("torch", "transformers", "neobert", "numpy", "rich") if m in sys.modules]
print(json.dumps([answers, heavy]))
"""


def test_help_and_version_leave_torch_and_transformers_out(live, monkeypatch):
    done = fresh_python(PROBE.format(argvs=[*ANSWERED, ["--version"]]))
    answers, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert heavy == []  # not torch, not transformers, not even neobert's __init__
    monkeypatch.setenv("COLUMNS", "80")  # the width the probe ran at
    expected = [
        [2, live.format_help()],  # no command: the help, with the usage exit code (neobert.cli.main.main)
        [0, live.format_help()],
        [0, live.format_help()],
        [0, subparser(live, "embed").format_help()],
        [0, subparser(live, "data prepare").format_help()],
        [0, subparser(live, "serve").format_help()],
        [0, f"neobert {__version__}\n"],
    ]
    assert answers == expected


# transformers' part of `import neobert`: what registering NeoBERT's classes with the Auto classes needs
TRANSFORMERS_FLOOR = (
    "from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, "
    "AutoModelForTokenClassification, PreTrainedModel"
)
MODULES = "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"


@pytest.mark.slow  # six fresh interpreters (19 s); test_import_graph.py checks what import neobert loads by default
def test_import_neobert_adds_only_its_own_modules_to_what_registering_needs():
    """``import neobert`` costs what transformers' PreTrainedModel costs (torch, torch.distributed, scipy...:
    docs/architecture.md) and nothing more: every module it loads beyond that floor is one of its own."""
    loaded = [
        json.loads(fresh_python(code + MODULES).stdout.splitlines()[-1])
        for code in (TRANSFORMERS_FLOOR, "import neobert")
    ]
    floor, package = set(loaded[0]), set(loaded[1])
    assert {"torch", "transformers.modeling_utils"} <= floor <= package
    assert sorted(m for m in package - floor if m.split(".")[0] != "neobert") == []


def test_a_real_command_runs_through_the_launcher_in_a_fresh_interpreter():
    code = (
        "import json, sys; from neobert_cli.launcher import main; code = main(['info', 'neobert']); "
        "print(json.dumps([code, 'torch' in sys.modules]))"
    )
    done = fresh_python(code)
    assert "221,665,536" in done.stdout and "245,136,954" in done.stdout  # the preset's exact counts
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, True]


def outcome(main, argv, capsys) -> tuple:
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],  # an unknown command: argparse's invalid choice
        ["pretrain", "--no-such-option"],  # a bad option: argparse's unrecognized arguments
        ["data", "prepare", "--help", "extra"],  # help not last: the real parser decides
        ["finetune", "classify", "--learning-rate", "5e-5", "--help"],  # a renamed option: a note, help
        ["info", "tiny"],
    ],
)
def test_every_other_command_line_is_the_real_command_lines(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    handed = []
    monkeypatch.setattr(launcher, "hand_over", lambda args: handed.append(args) or real_main(args))
    through_launcher = outcome(launcher.main, argv, capsys)
    assert handed == [argv]
    assert through_launcher == outcome(real_main, argv, capsys)
    code, out, err = through_launcher
    expected = {
        "frobnicate": (2, "neobert: error: argument COMMAND: invalid choice: 'frobnicate'"),
        "pretrain": (2, "neobert: error: unrecognized arguments: --no-such-option"),
        "data": (0, "usage: neobert data prepare"),
        "finetune": (0, "--learning-rate was renamed --lr"),
        "info": (0, "| parameters: encoder | 90,432 |"),  # the tiny preset's exact count
    }[argv[0]]
    assert (code, expected[1] in out + err) == (expected[0], True)


def test_the_launcher_reads_sys_argv_as_a_console_script_does(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/usr/bin/neobert", "--version"])
    monkeypatch.setattr(launcher, "hand_over", lambda args: pytest.fail(f"handed over {args}"))
    with pytest.raises(SystemExit) as stop:
        launcher.main()
    assert stop.value.code == 0 and capsys.readouterr().out == f"neobert {__version__}\n"


def test_the_generator_builds_again_what_argparse_offers():
    parser = argparse.ArgumentParser(prog="toy", description="a toy", epilog="the end")
    parser.add_argument("--pair", nargs=2, metavar=("LO", "HI"), type=int, help="two numbers")
    parser.add_argument("--mode", choices=[1, 2], default=2, help="a choice (default: %(default)s)")
    parser.add_argument("--hidden", help=argparse.SUPPRESS)
    parser.add_argument("--flag", action=argparse.BooleanOptionalAction, help="on or off")
    parser.add_argument("--many", action="append", default=[], help="repeated (default: %(default)s)")
    group = parser.add_argument_group("tuning", "knobs")
    group.add_argument("-k", "--knob", type=float, default=0.5, required=True, help="%(default)s")
    subparsers = parser.add_subparsers(dest="command")  # no title: among the positionals
    shown = subparsers.add_parser("shown", help="a subcommand")
    shown.add_argument("words", nargs="*", metavar="WORD", help="positional words (default: %(default)s)")
    subparsers.add_parser("unlisted")
    spec = generate.describe(parser)
    assert set(spec) == {"toy", "toy shown", "toy unlisted"}
    spec = json.loads(json.dumps(spec))  # as read from the file
    for prog, real in [("toy", parser), ("toy shown", subparser(parser, "shown"))]:
        assert launcher.build(spec, prog).format_help() == real.format_help()
    assert spec["toy"]["commands"]["choices"] == [["shown", "a subcommand"], ["unlisted"]]  # listed: one


class Custom(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


@pytest.mark.parametrize(
    ("add", "refused"),
    [
        (lambda p: p.add_argument("--c", action=Custom), "ACTION_CLASSES"),
        (lambda p: p.add_mutually_exclusive_group().add_argument("--m"), "mutually exclusive groups"),
    ],
)
def test_the_generator_refuses_what_the_launcher_cannot_build(add, refused):
    parser = argparse.ArgumentParser(prog="toy")
    add(parser)
    with pytest.raises(ValueError, match=refused):
        generate.describe(parser)


def test_the_console_script_is_the_launcher_and_ships_its_spec():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["neobert"] == "neobert_cli.launcher:main"
    assert "parsers.json" in project["tool"]["setuptools"]["package-data"]["neobert_cli"]
    assert (ROOT / "src" / "neobert_cli" / "__init__.py").exists()  # found by setuptools' packages.find
