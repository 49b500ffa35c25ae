"""The documented examples, read from the Markdown itself: every fenced shell and Python block of README.md and
docs/*.md, and the one mechanism that runs them at tiny scale (tests/test_docs.py drives it; issue 42).

A block runs in the suite unless its first line says why not, visibly, in the docs:

    # not run: needs a GPU

A block that does not run is still checked: it parses (shell words, Python syntax), every ``neobert`` command in
it parses with the real command line's parser (so every flag it names exists and takes the values given), every
``pip install`` names extras that exist, and every file it names ships with the repository or is made by an
earlier block of the same document.

A block that runs does so in its document's sandbox (a fresh directory, its current directory), block after
block, so that a block uses what an earlier one made. The sandbox holds small stand-ins for the names the docs
use for "your" things (:data:`FIXTURES`: a corpus, labelled files, a model directory called ``DIR``, ...), and
every command is run at tiny scale by one rule (:data:`TINY`: the options that set a run's length get tiny
values, and a run that gives none gets them). ``neobert`` commands run through ``neobert.cli.main.main`` in
this process; a console transcript's ``$`` lines are its commands, and an ``error:`` line printed under one
means the command must fail with that message. Python blocks run in this process, each in a namespace of its
own. Nothing in this module copies a documented command: the commands are the docs' own text.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = ("bash", "sh", "shell", "console")
NOT_RUN = re.compile(r"^#\s*not run:\s*(\S.*)$")
PROMPT = "$ "


@dataclass
class Command:
    """One command line of a block: its words (environment assignments and the prompt removed), and the
    error the transcript shows it printing (an ``error:`` line under it), if any."""

    words: list[str]
    line: int  # in the document
    expected_error: str | None = None

    @property
    def program(self) -> str:
        """The program it runs (``python -m X`` runs X; ``python script.py`` runs python)."""
        words = self.words
        if len(words) > 2 and words[0] in ("python", "python3") and words[1] == "-m":
            return words[2]
        return words[0] if words else ""

    def neobert_argv(self) -> list[str] | None:
        """The arguments of a ``neobert`` command (also ``python -m neobert.cli.main`` and launchers of it)."""
        words = self.words
        if self.program == "neobert":
            return words[1:]
        if "neobert.cli.main" in words:
            return words[words.index("neobert.cli.main") + 1 :]
        return None


@dataclass
class Block:
    """A fenced block of a document."""

    document: Path
    line: int  # of the opening fence
    lang: str
    text: str
    reason: str | None = None  # why it does not run (None: it runs)
    commands: list[Command] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def document_blocks(document: Path) -> list[Block]:
    """The shell and Python blocks of ``document``, in order (an unlabelled block holding ``$`` prompts is a
    console transcript)."""
    found = []
    for token in MarkdownIt().parse(document.read_text(encoding="utf-8")):
        if token.type != "fence":
            continue
        lang, text = token.info.strip().split(" ")[0], token.content
        if not lang and any(line.startswith(PROMPT) for line in text.splitlines()):
            lang = "console"
        if lang not in (*SHELLS, "python"):
            continue
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        match = NOT_RUN.match(first)
        block = Block(document, token.map[0] + 1, lang, text, match.group(1) if match else None)
        if lang in SHELLS:
            block.commands = shell_commands(text, lang == "console", block.line + 1)
        found.append(block)
    return found


def shell_commands(text: str, console: bool, first_line: int) -> list[Command]:
    """The commands of a shell block: continuation lines joined, comments dropped, ``&&`` / ``;`` / ``|``
    separating commands; in a transcript only the ``$`` lines (and their continuations) are commands and an
    ``error:`` line after one is that command's expected failure."""
    commands: list[Command] = []
    lines, i = text.splitlines(), 0
    while i < len(lines):
        line, number = lines[i], first_line + i
        i += 1
        if console and not line.startswith(PROMPT):
            if line.startswith("error:") and commands:
                commands[-1].expected_error = line[len("error:") :].strip()
            continue
        line = line[len(PROMPT) :] if console else line
        while line.rstrip().endswith("\\") and i < len(lines):
            line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        for part in separate(line):
            words = shlex.split(part, comments=True)
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words = words[1:]  # VAR=value before a command
            if words:
                commands.append(Command(words, number))
    return commands


def separate(line: str) -> list[str]:
    """A command line cut at ``&&``, ``||``, ``;``, ``|`` and ``&`` between commands, not at a synopsis's
    alternatives (``[--a X | --b Y]``) nor inside quotes."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(line):
        char = line[i]
        if quote:
            quote = "" if char == quote else quote
        elif char == "#" and (i == 0 or line[i - 1] == " "):
            break  # a comment: the rest of the line
        elif char in "'\"":
            quote = char
        elif char in "[(":
            depth += 1
        elif char in "])":
            depth = max(depth - 1, 0)
        elif depth == 0 and char in "&|;" and (char == ";" or i == 0 or line[i - 1] == " "):
            width = 2 if line[i : i + 2] in ("&&", "||") else 1
            if i + width == len(line) or line[i + width] == " ":
                parts.append(line[start:i])
                start = i + width
                i += width
                continue
        i += 1
    return [*parts, line[start:]]


def all_blocks() -> list[Block]:
    return [block for document in DOCUMENTS for block in document_blocks(document)]


# --- checking a command without running it ----------------------------------------------------------------

PLACEHOLDER = re.compile(
    r"(?<![a-z0-9_])[A-Z][A-Z0-9_]*(?![a-z])"
)  # DIR, MODEL, M, N, FILE.json, HEAD_IP:6379
PATH_OPTIONS = (
    "--input",
    "--inputs",
    "--train",
    "--validation",
    "--data",
    "--config",
    "--tokenizer",
    "--model",
    "--calibration",
    "--tasks-dir",
    "--sts",
    "--instructions",
    "--from-mnli",
    "--decay-from",
    "--data-dir",
    "--lengths-file",
    "--retrieval",
    "--classification",
    "--clustering",
    "--pair-classification",
    "--index",
    "--queries",
    "--base",
)
FILE_SUFFIXES = (
    ".txt",
    ".csv",
    ".tsv",
    ".jsonl",
    ".json",
    ".parquet",
    ".yaml",
    ".yml",
    ".npy",
    ".conll",
    ".py",
)


def is_placeholder(word: str) -> bool:
    """A name the reader replaces (``DIR``, ``MODEL``, ``FILE.json``, ``DIR|PRESET|HUB_ID``, ``[NAME=]SOURCE``)."""
    return bool(PLACEHOLDER.search(word)) and not word.startswith("-")


def unbracketed(words: list[str]) -> list[str]:
    """The words of a synopsis with its notation removed: ``[--steps 2000]`` is ``--steps 2000``, a bracketed
    group with ``...`` in it goes, of ``[--a X | --b Y]`` the first alternative stays, ``[NAME=]pairs.jsonl``
    is ``pairs.jsonl``, and ``...`` alone goes."""
    out, group = [], []
    for word in words:
        word = re.sub(r"\[[A-Z_]+=\]", "", word)
        if group or word.startswith("["):
            group.append(word.strip("[]"))
            if word.endswith("]"):
                first = group[: group.index("|")] if "|" in group else group  # [--a X | --b Y]: --a X
                out += [] if "..." in group else [w for w in first if w]
                group = []
            continue
        if word != "...":
            out.append(word)
    return out + [w for w in group if w and w != "..."]


def path_like(word: str) -> bool:
    if "://" in word or word.startswith(("hf:", "stdlib:", "-")) or is_placeholder(word):
        return False
    return "/" in word or word.endswith(FILE_SUFFIXES)


def named_paths(argv: list[str]) -> list[str]:
    """The paths a ``neobert`` command reads: the values of its input options that look like paths (a
    trailing ``@...`` variant of a model, e.g. ``DIR@yarn:8192``, cut off; a ``NAME=`` before it too)."""
    found, take = [], False
    for word in argv:
        name, sep, source = word.partition("=")
        if take and sep and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:+-]*", name):
            word = source  # serve's --model NAME=PATH names the model at PATH
        if take and path_like(word):
            found.append(word.split("@")[0].rstrip("/") or word)
        take = word in PATH_OPTIONS or (take and not word.startswith("-"))
    return found


def output_of(argv: list[str]) -> str | None:
    """What a ``neobert`` command writes (its ``--output``; the embedded default run, ``neobert pretrain``
    with no data, config or preset, writes ``runs/default``)."""
    if "--output" in argv[:-1]:
        return argv[argv.index("--output") + 1]
    if argv[:1] == ["pretrain"] and not {"--data", "--config", "--preset", "--recipe"} & set(argv):
        return "runs/default"
    return None


def made_or_shipped(path: str, made: list[str], fixtures: set[str]) -> bool:
    """Whether ``path`` ships with the repository, is one of the sandbox's stand-ins, or lies in (or holds) what
    an earlier block wrote."""
    clean = path.rstrip("/")
    if (ROOT / clean).exists() or clean in fixtures or any(clean.startswith(f"{f}/") for f in fixtures):
        return True
    return any(clean == m or clean.startswith(f"{m}/") or m.startswith(f"{clean}/") for m in made)


def command_parser(parser, words: list[str]):
    """The (sub)parser a command's leading words select, and the words after them."""
    import argparse

    while words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or words[0] not in subparsers[0].choices:
            break
        parser, words = subparsers[0].choices[words[0]], words[1:]
    return parser, words


def _dummy(action) -> str | None:
    """A value the option takes, for a placeholder in its place."""
    if action.choices:
        return str(next(iter(action.choices)))
    kind = action.type
    if kind in (int, float) or getattr(kind, "__name__", "") in ("ints", "floats", "positive", "ratio"):
        return "1"
    return None


@functools.cache
def real_parser():
    """The command line's parser, built once (parsing does not change it)."""
    from neobert.cli.main import build_parser

    return build_parser()


def check_argv(argv: list[str]) -> str | None:
    """Why ``neobert ARGV`` does not parse (a flag that does not exist, a value it refuses), or None. A synopsis
    with ``...`` (a part left out) is checked for its flags only."""
    import contextlib
    import io

    from neobert.cli.main import command_paths
    from neobert.cli.options import renamed_options

    parser = real_parser()
    elided = "..." in argv
    words, _ = renamed_options(unbracketed(argv), command_paths(parser))
    sub, rest = command_parser(parser, words)
    actions = {s: a for a in sub._actions for s in a.option_strings}
    if elided:
        unknown = [w.split("=")[0] for w in rest if w.startswith("--") and w.split("=")[0] not in actions]
        return f"unknown option(s) {unknown}" if unknown else None
    fixed = list(words)
    for i in range(1, len(fixed)):
        action = actions.get(fixed[i - 1])
        if action is not None and is_placeholder(fixed[i]) and _dummy(action) is not None:
            fixed[i] = _dummy(action)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(fixed)
    except SystemExit as stop:
        return None if stop.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def check_pip(words: list[str]) -> str | None:
    """Why a ``pip install`` line names an extra that ``pyproject.toml`` does not declare, or None."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    asked = [x for w in words for x in re.findall(r"\.?\[([a-z0-9_,-]+)\]", w) for x in x.split(",")]
    asked += [x for w in words for x in re.findall(r"^neobert\[([a-z0-9_,-]+)\]$", w) for x in x.split(",")]
    missing = sorted({x for x in asked if x not in extras})
    return f"no extra(s) {missing} in pyproject.toml" if missing else None


# --- running a block at tiny scale -------------------------------------------------------------------------

# How long a documented run is, made tiny: these options get these values, and a command of these subcommands
# that sets none of them gets them (the one rule that scales every documented command down).
TINY = {
    "pretrain": {"--max-steps": "2"},
    "finetune glue": {"--epochs": "1"},
    "finetune classify": {"--epochs": "1"},
    "finetune tokens": {"--epochs": "1"},
    "finetune contrastive": {"--steps": "2"},
    "finetune sparse": {"--steps": "2"},
    "finetune late-interaction": {"--steps": "2"},
    "finetune rerank": {"--steps": "2"},
}
LARGE_PRESETS = ("neobert", "neobert-1024", "120m", "250m-wide", "bert-baseline", "small")
# programs a block may name without running them: what installs, what is this suite, what only displays
NEVER_RUN = {"pip": "installs", "pytest": "the suite itself", "head": "displays", "cat": "displays"}


def tiny(argv: list[str]) -> list[str]:
    """``argv`` at tiny scale (:data:`TINY`; a large preset is the tiny one)."""
    _, rest = command_parser(real_parser(), argv)
    path = " ".join(argv[: len(argv) - len(rest)])
    out = list(argv)
    for flag, value in TINY.get(path, {}).items():
        if flag in out[:-1]:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    if "--preset" in out[:-1] and out[out.index("--preset") + 1] in LARGE_PRESETS:
        out[out.index("--preset") + 1] = "tiny"
    return out


def runnable(block: Block) -> str | None:
    """Why an unmarked block cannot run here (then it must be marked), or None."""
    for command in block.commands:
        if command.neobert_argv() is None and command.program not in (*NEVER_RUN, "python"):
            return f"line {command.line}: `{command.program}` does not run in the suite"
        if command.program in ("torchrun", "accelerate"):
            return f"line {command.line}: several processes"
    if block.lang in SHELLS and not any(c.program not in NEVER_RUN for c in block.commands):
        return "nothing in it runs (install, display or the suite only)"
    return None
