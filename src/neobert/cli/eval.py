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

from ..evaluation import embedding_files as files
from ..evaluation import mteb_adapter, pppl
from ..evaluation.instructions import read_instruction_file
from ..evaluation.report import update_cards
from ..runtime.hardware import default_device
from .common import add_command, make_console, note, quiet_transformers, say, wrote
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
RENAME = {"models": "model", "use_instructions": "instructions"}


def _settings(args: argparse.Namespace) -> dict:
    """The called function's keyword arguments: the options given, the device resolved, the instructions
    read from their file."""
    settings = given(args.options, args)
    settings["device"] = settings.get("device") or default_device()
    if getattr(args, "instructions", None):
        settings["instructions"] = read_instruction_file(args.instructions)
    return settings


def _print(markdown: str, report, args: argparse.Namespace, results=None) -> int:
    """The report, the files written and, with --update-card, the model cards updated."""
    console = make_console()
    say(markdown, console)
    wrote(*report.files, console=console)
    if args.update_card and results is not None:
        updated, notes = update_cards(results)
        if updated:
            say("updated the model card " + ", ".join(map(str, updated)), console)
        for text in notes:
            note(text, console)
    say(f"done in {report.seconds:.1f}s", console)
    return 0


def _mteb(args: argparse.Namespace) -> int:
    quiet_transformers()
    try:
        import mteb  # noqa: F401
    except ImportError as err:
        raise ImportError("`neobert eval mteb` needs the mteb package: pip install 'neobert[mteb]'") from err
    tasks = mteb_adapter.select_tasks(**given(args.select, args))
    report = mteb_adapter.run(tasks=tasks, **_settings(args))
    results = mteb_adapter.card_results(report) if args.update_card else None
    return _print(mteb_adapter.table4_markdown(report), report, args, results)


def _embeddings(args: argparse.Namespace) -> int:
    quiet_transformers()
    tasks = files.select_tasks(args.tasks_dir, {family: getattr(args, family) for family in FAMILY_OPTIONS})
    report = files.run(tasks=tasks, **_settings(args))
    return _print(
        files.to_markdown(report), report, args, files.card_results(report) if args.update_card else None
    )


def _pppl(args: argparse.Namespace) -> int:
    quiet_transformers()
    settings = _settings(args)
    report = pppl.run(**settings)
    results = None
    if args.update_card:
        keys = ("rope_scaling", "context")
        results = pppl.card_results(
            report, settings["models"], settings["input"], **{k: settings.get(k) for k in keys}
        )
    return _print(pppl.markdown(report.bins), report, args, results)


def _command(commands, name: str, func, run, help: str, output: str, **metadata) -> argparse.ArgumentParser:
    """A subcommand whose options are ``run``'s parameters (less those the command builds itself)."""
    parser = add_command(commands, name, func, help=help)
    skip = ("tasks", "instructions", "show_progress")
    results = {"default": output, "help": "results directory"}
    metadata = {"models": MODELS, "output": results, "device": DEVICE, **metadata}
    options = add_signature_options(parser, run, skip=skip, metadata=metadata, rename=RENAME)
    what = "add the results to each --model directory's README.md card (replacing that task's old entries)"
    parser.add_argument("--update-card", action="store_true", help=what)
    parser.set_defaults(options=options)
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "evaluate encoders: MTEB, local embedding tasks, pseudo-perplexity"
    parser = subparsers.add_parser("eval", help=help)
    commands = parser.add_subparsers(title="evaluations", dest="evaluation", metavar="EVALUATION")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    help = "MTEB tasks with instructions and mean pooling (Table 4)"
    mteb = _command(commands, "mteb", _mteb, mteb_adapter.run, help, "results/mteb")
    many = {"nargs": "+"}
    many = {"tasks": many, "task_types": many}
    select = add_signature_options(mteb, mteb_adapter.select_tasks, metadata=many)
    mteb.set_defaults(select=select)
    help = "STS, retrieval, classification, clustering, pair classification on local files"
    emb = _command(
        commands,
        "embeddings",
        _embeddings,
        files.run,
        help,
        "results/embeddings",
        long_documents={"choices": files.LONG_POLICIES},
    )
    what = "directory of task files, one subdirectory per family (see docs/evaluation.md)"
    emb.add_argument("--tasks-dir", help=what)
    for family, what in FAMILY_OPTIONS.items():
        emb.add_argument(f"--{family.replace('_', '-')}", action="append", metavar="PATH", help=what)
    for command, default in ((mteb, "the table"), (emb, "none")):
        what = f"JSON: task -> instruction or {{query, corpus}} (default: {default})"
        command.add_argument("--instructions", help=what)
    scaling = {"choices": pppl.ROPE_METHODS}
    help = "pseudo-perplexity per sequence-length bin (Figure 2)"
    _command(
        commands,
        "pppl",
        _pppl,
        pppl.run,
        help,
        "results/pppl",
        input={"required": True},
        rope_scaling=scaling,
    )
