"""``neobert eval``: embedding and language-model evaluation of any encoder.

- ``eval mteb``: the ``mteb`` package's tasks through our encoder adapter (instructions, mean pooling);
  Table 4's layout.
- ``eval embeddings``: STS, retrieval, classification, clustering and pair classification on local files.
- ``eval pppl``: pseudo-perplexity per length bin, CSV and a Figure-2 plot.

Every option comes from the signature of the function the command calls (``mteb_adapter.select_tasks`` and
``run``, ``embedding_files.run``, ``pppl.run``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from rich.markup import escape

from ..evaluation import embedding_files as files
from ..evaluation import mteb_adapter, pppl
from ..evaluation.instructions import read_instruction_file
from .common import CLIError, add_command, make_console, quiet_transformers
from .options import add_signature_options, given

FAMILY_OPTIONS = {
    "sts": "JSONL of sentence1, sentence2, score",
    "pair_classification": "JSONL of sentence1, sentence2, label (0/1)",
    "clustering": "JSONL of text, label",
    "classification": "directory with train.jsonl and test.jsonl (text, label)",
    "retrieval": "directory with queries.jsonl, corpus.jsonl and qrels.tsv (or qrels.jsonl)",
}
MODELS = {"nargs": "append", "required": True}  # --model, repeated to compare several
# what the command itself decides: where results go, and the device when none is named
DEVICE = {"help": "cpu, cuda, cuda:1 ... (default: cuda when available)"}
RENAME = {"models": "model"}


def _settings(args: argparse.Namespace, cls: type) -> dict:
    """The called function's keyword arguments: the options given, the device resolved."""
    settings = given(cls, args)
    settings["device"] = settings.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    return settings


def _instructions(path: str | None) -> dict:
    if path is None:
        return {}
    if not Path(path).is_file():
        raise CLIError(f"instruction file {path} does not exist")
    return read_instruction_file(path)


def _print(markdown: str, report) -> int:
    console = make_console()
    console.print(markdown, highlight=False, markup=False, soft_wrap=True)
    for path in report.files:
        console.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
    console.print(f"done in {report.seconds:.1f}s", highlight=False)
    return 0


def _mteb(args: argparse.Namespace) -> int:
    quiet_transformers()
    try:
        import mteb  # noqa: F401
    except ImportError as err:
        raise ImportError("`neobert eval mteb` needs the mteb package: pip install 'neobert[mteb]'") from err
    tasks = mteb_adapter.select_tasks(**given(args.select, args))
    settings = _settings(args, args.options)
    report = mteb_adapter.run(tasks=tasks, instructions=_instructions(args.instructions), **settings)
    return _print(mteb_adapter.table4_markdown(report), report)


def _embeddings(args: argparse.Namespace) -> int:
    quiet_transformers()
    tasks = files.discover_tasks(args.tasks_dir) if args.tasks_dir else []
    for family in FAMILY_OPTIONS:
        for path in getattr(args, family) or []:
            if not Path(path).exists():
                raise CLIError(f"--{family.replace('_', '-')} {path} does not exist")
            name = Path(path).stem if Path(path).is_file() else Path(path).name
            tasks.append(files.TaskSpec(family, name, Path(path)))
    if not tasks:
        raise CLIError("no task given: pass --tasks-dir DIR or per-family options such as --sts FILE")
    settings = _settings(args, args.options)
    report = files.run(tasks=tasks, instructions=_instructions(args.instructions), **settings)
    return _print(files.to_markdown(report), report)


def _pppl(args: argparse.Namespace) -> int:
    quiet_transformers()
    report = pppl.run(**_settings(args, args.options))
    return _print(pppl.markdown(report.bins), report)


def _command(commands, name: str, func, run, help: str, output: str, **metadata) -> argparse.ArgumentParser:
    """A subcommand whose options are ``run``'s parameters (less those the command builds itself)."""
    parser = add_command(commands, name, func, help=help)
    skip = ("tasks", "instructions", "show_progress")
    metadata = {"models": MODELS, "output": {"default": output, "help": "results directory"}, "device": DEVICE,
                **metadata}  # fmt: skip
    options = add_signature_options(parser, run, skip=skip, metadata=metadata,
                                    rename={**RENAME, "use_instructions": "instructions"})  # fmt: skip
    parser.set_defaults(options=options)
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate encoders: MTEB, local embedding tasks, pseudo-perplexity"
    )
    commands = parser.add_subparsers(title="evaluations", dest="evaluation", metavar="EVALUATION")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    mteb = _command(commands, "mteb", _mteb, mteb_adapter.run, "MTEB tasks with instructions and mean pooling "
                    "(Table 4)", "results/mteb")  # fmt: skip
    many = {"nargs": "+"}
    mteb.set_defaults(select=add_signature_options(mteb, mteb_adapter.select_tasks,
                                                   metadata={"tasks": many, "task_types": many}))  # fmt: skip
    emb = _command(commands, "embeddings", _embeddings, files.run, "STS, retrieval, classification, clustering, "
                   "pair classification on local files", "results/embeddings")  # fmt: skip
    emb.add_argument(
        "--tasks-dir", help="directory of task files, one subdirectory per family (see docs/evaluation.md)"
    )
    for family, what in FAMILY_OPTIONS.items():
        emb.add_argument(f"--{family.replace('_', '-')}", action="append", metavar="PATH", help=what)
    for command, default in ((mteb, "the table"), (emb, "none")):
        command.add_argument(
            "--instructions", help=f"JSON: task -> instruction or {{query, corpus}} (default: {default})"
        )
    _command(commands, "pppl", _pppl, pppl.run, "pseudo-perplexity per sequence-length bin (Figure 2)",
             "results/pppl", input={"required": True},
             rope_scaling={"choices": ("none", "linear", "ntk", "yarn")})  # fmt: skip
