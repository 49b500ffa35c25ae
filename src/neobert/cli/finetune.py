"""``neobert finetune``: GLUE with the paper's protocol (``glue``) and the user's own tasks (``classify``).

The options are derived from :class:`neobert.finetuning.GlueConfig` / :class:`ClassifyConfig` (one per field,
help from the field's comment, see :mod:`neobert.cli.options`); a flag left out keeps the config's default
(or the value from ``--config FILE``), so the dataclass stays the one source of settings.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..common.config import PRECISIONS
from ..finetuning import ClassifyConfig, GlueConfig, run_classify, run_glue
from ..finetuning.config import TASK_TYPES, TokensConfig, settings
from ..finetuning.tagging_task import run_tokens
from . import finetune_contrastive
from .common import add_command, describe, quiet_transformers, show
from .options import add_options, given, key_values, names

CHOICES = {"precision": PRECISIONS, "task_type": TASK_TYPES}


def add_settings(parser: argparse.ArgumentParser, config: type) -> None:
    """One option per field of ``config`` (help from the field's comment) and the few written by hand."""
    title = "settings (a flag given overrides --config; the defaults are the config's)"
    group = parser.add_argument_group(title)
    rename = {"transfer_from_mnli": "mnli_transfer"}
    add_options(group, config, skip=("show_progress",), rename=rename, choices=CHOICES, given_only=True)
    group.add_argument("--quiet", action="store_true", help="no progress bars")
    group.add_argument(
        "--preset-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a field of a preset model, e.g. vocab_size=30522 (repeatable)",
    )
    group.add_argument("--config", metavar="YAML", help="settings file; flags given here override it")


def settings_from_args(args: argparse.Namespace, config: type) -> dict[str, Any]:
    """The config mapping: --config file, then every flag actually given."""
    flags = given(config, args)
    if args.preset_override:
        flags["preset_overrides"] = key_values(args.preset_override, "--preset-override")
    if args.quiet:
        flags["show_progress"] = False
    if getattr(args, "task", None):
        flags["tasks"] = [name for item in args.task for name in names(item)]
    return settings(args.config, flags)


def _glue(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(run_glue(settings_from_args(args, GlueConfig)))


def _classify(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(run_classify(settings_from_args(args, ClassifyConfig)))


def _tokens(args: argparse.Namespace) -> int:
    quiet_transformers()
    return show(run_tokens(settings_from_args(args, TokensConfig)))


HELP = {
    "glue": "GLUE dev with the paper's protocol (sweep, early stopping, MNLI transfer)",
    "classify": "fine-tune on your own CSV / JSONL / parquet: classification, regression, text pairs",
    "tokens": "token classification (NER): CoNLL-style or JSONL files with BIO / IOB2 tags",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune any encoder: GLUE, your own classification / regression tasks",
        description="Fine-tuning with the same protocol for NeoBERT and any transformers encoder.",
    )
    tasks = parser.add_subparsers(title="fine-tuning commands", metavar="TASK")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    for name, func, config in (
        ("glue", _glue, GlueConfig),
        ("classify", _classify, ClassifyConfig),
        ("tokens", _tokens, TokensConfig),
    ):
        command = add_command(tasks, name, func, HELP[name], describe(config))
        if name == "glue":
            what = "task name(s), comma-separated or repeated, or 'all' (default)"
            command.add_argument("--task", action="append", help=what)
            what = "'paper' (60 points) or a YAML file mapping settings to value lists"
            command.add_argument("--grid", default=argparse.SUPPRESS, help=what)
        add_settings(command, config)
    finetune_contrastive.register(tasks)  # contrastive fine-tuning lives in its own module
