"""``neobert data prepare`` (documents -> token shards), ``neobert data corpus`` (the offline corpus) and
``neobert data docstring-pairs`` (offline query/document pairs and a held-out retrieval task)."""

from __future__ import annotations

import argparse

from ..data import write_stdlib_corpus
from ..data.docstring_pairs import write_docstring_retrieval
from ..data.readers import ON_ERROR, TXT_MODES
from ..jobs.prepare import PrepareConfig, prepare
from ..jobs.settings import EngineSettings
from .common import add_command, quiet_transformers, say
from .options import add_options, add_signature_options, given

CHOICES = {"txt_mode": TXT_MODES, "on_error": ON_ERROR}
PREPARE = (
    "Inputs: .txt (blank line between documents), .jsonl, .csv, .parquet, directories of those, "
    "globs, URLs (s3://, gs://, ... through fsspec), hf:NAME[:CONFIG[:SPLIT]] (Hugging Face data set) or "
    "stdlib: (offline docstring corpus). Re-running resumes, skipping finished shards. --engine ray "
    "tokenizes the shards in parallel on a Ray cluster, with the same output."
)


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="prepare pretraining data (token shards, offline corpus)")
    commands = parser.add_subparsers(title="data commands", dest="data_command", metavar="COMMAND")
    commands.required = True
    help = "tokenize documents into memory-mapped shards with a validation split"
    p = add_command(commands, "prepare", run_prepare, help, PREPARE)
    p.add_argument("--input", nargs="+", metavar="PATH", help="input files, directories or specs")
    p.add_argument("--config", metavar="FILE", help="YAML/JSON file of prepare settings; flags override it")
    settings = p.add_argument_group(
        "settings (neobert.jobs.prepare.PrepareConfig; a flag given wins over --config)"
    )
    engine = tuple(EngineSettings.__dataclass_fields__)
    add_options(settings, PrepareConfig, skip=("inputs", *engine), choices=CHOICES, given_only=True)
    add_options(p.add_argument_group("engine (neobert.jobs.settings.EngineSettings)"), EngineSettings)

    help = "write the offline English corpus (the interpreter's stdlib docstrings) to a .txt file"
    corpus = add_command(commands, "corpus", run_corpus, help)
    modules = {"modules": {"nargs": "+"}}
    options = add_signature_options(
        corpus, write_stdlib_corpus, skip=("include_tests",), rename={"path": "output"}, metadata=modules
    )
    corpus.set_defaults(options=options)

    help = "write query/document pairs from stdlib docstrings (summary -> rest), split by module into training pairs and a held-out retrieval task"
    pairs = add_command(commands, "docstring-pairs", run_docstring_pairs, help)
    options = add_signature_options(pairs, write_docstring_retrieval, metadata=modules)
    pairs.set_defaults(options=options)


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    """The --config file (if any) with every given flag laid over it."""
    inputs = {} if args.input is None else {"inputs": args.input}
    return PrepareConfig.from_file(args.config, **given(PrepareConfig, args), **inputs)


def run_prepare(args: argparse.Namespace) -> int:
    quiet_transformers()
    say(prepare(config_from_args(args)).summary)
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    say(write_stdlib_corpus(**given(args.options, args)).summary)
    return 0


def run_docstring_pairs(args: argparse.Namespace) -> int:
    say(write_docstring_retrieval(**given(args.options, args)).summary)
    return 0
