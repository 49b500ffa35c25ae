"""``neobert index`` and ``neobert search``: a late-interaction index over multi-vector shards
(:mod:`neobert.jobs.index`); options from the configs, the descriptions from their docstrings."""

from __future__ import annotations

import argparse

from ..jobs.index import IndexConfig, SearchConfig, build_index, search
from .common import add_command, quiet_transformers, show
from .options import config_from_args

TASKS = {"index": (IndexConfig, build_index), "search": (SearchConfig, search)}
HELP = {
    "index": "build a search index (voyager HNSW + exact MaxSim) from a late-interaction model's shards",
    "search": "search an index built by neobert index: the best documents of each query, as JSON lines",
}


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    config, task = TASKS[args.index_task]
    return show(task(config_from_args(config, args)))


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, (config, _) in TASKS.items():
        parser = add_command(subparsers, name, _main, HELP[name], config=config)
        parser.set_defaults(index_task=name)
