"""``neobert embed``, ``classify`` and ``tag``: a model over a file of texts (:mod:`neobert.jobs.predict`), one
result per row; options from the task's config, the description from its docstring."""

from __future__ import annotations

import argparse

from ..jobs.embed import embed
from ..jobs.embed_config import EmbedConfig
from ..jobs.predict import ClassifyFileConfig, TagConfig, classify_file, tag_file
from .common import add_command, quiet_transformers, show
from .options import config_from_args

TASKS = {
    "embed": (EmbedConfig, embed),
    "classify": (ClassifyFileConfig, classify_file),
    "tag": (TagConfig, tag_file),
}
HELP = {
    "embed": "embed texts (files, directories, globs; local or on Ray) into parquet shards, or one file into .npy",
    "classify": "classify texts (a text file or a table) with a sequence classifier, into JSONL",
    "tag": "tag entities with a fine-tuned token classifier (character offsets), JSONL out",
}


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    config, task = TASKS[args.file_task]
    return show(task(config_from_args(config, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, (config, _) in TASKS.items():
        parser = add_command(subparsers, name, _main, HELP[name], config=config, skip=("show_progress",))
        parser.set_defaults(file_task=name)
