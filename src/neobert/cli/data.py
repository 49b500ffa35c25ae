"""``neobert data prepare`` (documents -> token shards) and ``neobert data corpus`` (the offline corpus)."""

from __future__ import annotations

import argparse

from rich.table import Table

from ..data import PrepareConfig, PrepareResult, prepare, write_stdlib_corpus
from .common import make_console, quiet_transformers

# CLI flag -> PrepareConfig field, for flags whose default is "not given" so that --config values survive.
_OVERRIDES = {
    "input": "inputs",
    "tokenizer": "tokenizer",
    "output": "output",
    "text_column": "text_column",
    "txt_mode": "txt_mode",
    "on_error": "on_error",
    "validation_fraction": "validation_fraction",
    "shard_size": "shard_size",
    "batch_size": "batch_size",
    "min_tokens": "min_tokens",
    "max_tokens": "max_tokens",
    "length_thresholds": "length_thresholds",
    "split_seed": "split_seed",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="prepare pretraining data (token shards, offline corpus)")
    commands = parser.add_subparsers(title="data commands", dest="data_command", metavar="COMMAND")
    commands.required = True
    _register_prepare(commands)
    corpus = commands.add_parser(
        "corpus", help="write the offline English corpus (the interpreter's stdlib docstrings) to a .txt file"
    )
    corpus.add_argument(
        "--output", required=True, help="the .txt file to write (blank line between documents)"
    )
    corpus.add_argument("--modules", nargs="+", help="only these top-level stdlib modules (default: all)")
    corpus.set_defaults(func=run_corpus)


def _register_prepare(commands) -> None:
    p = commands.add_parser(
        "prepare",
        help="tokenize documents into memory-mapped shards with a validation split",
        description="Inputs: .txt (blank line between documents), .jsonl, .csv, .parquet, directories of "
        "those, hf:NAME[:CONFIG[:SPLIT]] (Hugging Face data set) or stdlib: (offline docstring corpus). "
        "Re-running resumes, skipping finished shards.",
    )
    p.add_argument("--input", nargs="+", metavar="PATH", help="input files, directories or specs")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (e.g. bert-base-uncased files)")
    p.add_argument("--output", metavar="DIR", help="output directory for the shards")
    p.add_argument("--config", metavar="FILE", help="YAML/JSON file of prepare settings; flags override it")
    p.add_argument("--text-column", help="text column of .jsonl/.csv/.parquet/hf inputs (default: text)")
    p.add_argument(
        "--txt-mode",
        choices=["auto", "paragraph", "line"],
        help="documents of .txt files: blank-line separated paragraphs, one per line, or (default) auto: "
        "line mode for a file without blank lines",
    )
    p.add_argument(
        "--on-error", choices=["raise", "skip"], help="bad records and empty files (default: raise)"
    )
    p.add_argument("--validation-fraction", type=float, help="held-out share of documents (default: 0.01)")
    p.add_argument("--shard-size", type=int, help="input documents per shard (default: 100000)")
    p.add_argument("--batch-size", type=int, help="documents per tokenizer call (default: 1000)")
    p.add_argument("--min-tokens", type=int, help="drop documents with fewer tokens (default: 2)")
    p.add_argument(
        "--max-tokens", type=int, help="truncate documents to this many tokens (default: keep whole)"
    )
    p.add_argument(
        "--length-thresholds", type=int, nargs="+", help="long-document counts (default: 1024 2048)"
    )
    p.add_argument("--split-seed", type=int, help="salt of the validation hash (default: 0)")
    p.add_argument("--overwrite", action="store_true", help="replace shards prepared with other settings")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run_prepare)


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    """The --config file (if any) with every given flag laid over it."""
    values = PrepareConfig.from_file(args.config).__dict__ if args.config else {}
    values = dict(values)
    for flag, name in _OVERRIDES.items():
        if getattr(args, flag, None) is not None:
            values[name] = getattr(args, flag)
    if args.overwrite:
        values["overwrite"] = True
    if args.no_progress:
        values["progress"] = False
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
    stats = write_stdlib_corpus(args.output, modules=args.modules)
    make_console().print(
        f"wrote {stats.documents:,} documents ({stats.characters:,} characters) to {stats.path}",
        highlight=False,
    )
    return 0
