"""``neobert data prepare`` (documents -> token shards) and ``neobert data corpus`` (the offline corpus)."""

from __future__ import annotations

import argparse

from rich.table import Table

from ..data import PrepareConfig, PrepareResult, prepare, write_stdlib_corpus
from ..data.prepare import ON_ERROR, TXT_MODES
from .common import add_command, make_console, quiet_transformers
from .options import add_options, add_signature_options, given

CHOICES = {"txt_mode": TXT_MODES, "on_error": ON_ERROR}


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="prepare pretraining data (token shards, offline corpus)")
    commands = parser.add_subparsers(title="data commands", dest="data_command", metavar="COMMAND")
    commands.required = True
    _register_prepare(commands)
    corpus = add_command(
        commands,
        "corpus",
        run_corpus,
        help="write the offline English corpus (the interpreter's stdlib docstrings) to a .txt file",
    )
    options = add_signature_options(corpus, write_stdlib_corpus, skip=("include_tests",), rename={"path": "output"},
                                    metadata={"modules": {"nargs": "+"}})  # fmt: skip
    corpus.set_defaults(options=options)


def _register_prepare(commands) -> None:
    p = add_command(
        commands,
        "prepare",
        run_prepare,
        help="tokenize documents into memory-mapped shards with a validation split",
        description="Inputs: .txt (blank line between documents), .jsonl, .csv, .parquet, directories of "
        "those, hf:NAME[:CONFIG[:SPLIT]] (Hugging Face data set) or stdlib: (offline docstring corpus). "
        "Re-running resumes, skipping finished shards.",
    )
    p.add_argument("--input", nargs="+", metavar="PATH", help="input files, directories or specs")
    p.add_argument("--config", metavar="FILE", help="YAML/JSON file of prepare settings; flags override it")
    settings = p.add_argument_group("settings (neobert.data.PrepareConfig; a flag given wins over --config)")
    add_options(settings, PrepareConfig, skip=("inputs",), choices=CHOICES, given_only=True)


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    """The --config file (if any) with every given flag laid over it."""
    values = dict(PrepareConfig.from_file(args.config).__dict__) if args.config else {}
    values.update(given(PrepareConfig, args))
    if args.input is not None:
        values["inputs"] = args.input
    config = PrepareConfig.from_dict(values)
    config.check_required()
    return config


def run_prepare(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = prepare(config_from_args(args))
    make_console().print(summary_table(result))
    return 0


def summary_table(r: PrepareResult) -> Table:
    table = Table(title=f"prepared {r.output}", show_header=True)
    table.add_column("", style="bold")
    table.add_column("train", justify="right")
    table.add_column("validation", justify="right")
    table.add_row("documents", f"{r.train_documents:,}", f"{r.validation_documents:,}")
    table.add_row("tokens", f"{r.train_tokens:,}", f"{r.validation_tokens:,}")
    for threshold, counts in r.long_documents.items():
        table.add_row(f"documents > {threshold} tokens", f"{counts['train']:,}", f"{counts['validation']:,}")
    table.add_section()
    table.add_row("documents read", f"{r.documents:,}", "")
    table.add_row("dropped (too short)", f"{r.dropped_short:,}", "")
    table.add_row("skipped records / empty files", f"{r.skipped_records:,} / {r.empty_files:,}", "")
    table.add_row("shards written / resumed", f"{r.shards_written} / {r.shards_resumed}", "")
    table.add_row("dtype / vocabulary", f"{r.dtype} / {r.vocab_size:,}", "")
    speed = f"{r.tokens_per_second:,.0f} tok/s" if r.shards_written else "all shards were done"
    table.add_row("time / throughput", f"{r.seconds:.1f} s / {speed}", "")
    return table


def run_corpus(args: argparse.Namespace) -> int:
    stats = write_stdlib_corpus(**given(args.options, args))
    make_console().print(
        f"wrote {stats.documents:,} documents ({stats.characters:,} characters) to {stats.path}",
        highlight=False,
    )
    return 0
