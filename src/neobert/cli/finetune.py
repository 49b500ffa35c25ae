"""``neobert finetune``: GLUE with the paper's protocol (``glue``) and the user's own tasks (``classify``).

The options are derived from :class:`neobert.finetuning.GlueConfig` / :class:`ClassifyConfig` (one per field,
help from the field's comment, see :mod:`neobert.cli.options`); a flag left out keeps the config's default
(or the value from ``--config FILE``), so the dataclass stays the one source of settings.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from typing import Any

import yaml
from rich.markup import escape
from rich.table import Table

from ..config import PRECISIONS, load_mapping
from ..finetuning import ClassifyConfig, GlueConfig, run_classify, run_glue
from ..finetuning.config import TASK_TYPES, FinetuneConfigError
from .common import CLIError, add_command, make_console, quiet_transformers
from .options import add_options, given

CHOICES = {"precision": PRECISIONS, "task_type": TASK_TYPES}


def add_settings(parser: argparse.ArgumentParser, config: type) -> None:
    """One option per field of ``config`` (help from the field's comment) and the few written by hand."""
    group = parser.add_argument_group(
        "settings (a flag given overrides --config; the defaults are the config's)"
    )
    skip = ("show_progress",)  # --quiet below
    add_options(
        group,
        config,
        skip=skip,
        rename={"transfer_from_mnli": "mnli_transfer"},
        choices=CHOICES,
        given_only=True,
    )
    group.add_argument("--quiet", action="store_true", help="no progress bars")
    group.add_argument(
        "--preset-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a field of a preset model, e.g. vocab_size=30522 (repeatable)",
    )
    group.add_argument("--config", metavar="YAML", help="settings file; flags given here override it")


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CLIError(f"--preset-override expects KEY=VALUE, got {item!r}")
    return key.strip(), yaml.safe_load(value)


def settings_from_args(args: argparse.Namespace, config: type) -> dict[str, Any]:
    """The config mapping: --config file, then every flag actually given."""
    data = load_mapping(args.config, FinetuneConfigError) if args.config else {}
    data.update(given(config, args))
    if data.get("patience") == 0:
        data["patience"] = None
    if args.preset_override:
        data["preset_overrides"] = dict(_parse_override(item) for item in args.preset_override)
    if args.quiet:
        data["show_progress"] = False
    return data


def _cell(value: float | None) -> str:
    return "NaN" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _glue(args: argparse.Namespace) -> int:
    quiet_transformers()
    data = settings_from_args(args, GlueConfig)
    if args.task:
        data["tasks"] = [t.strip() for item in args.task for t in item.split(",") if t.strip()]
    results = run_glue(data)
    table = Table(title=f"GLUE dev: {escape(results.model)}")
    for result in results.tasks.values():
        table.add_column(result.task.title, justify="right")
    table.add_column("Avg", justify="right")
    table.add_row(*(_cell(r.score) for r in results.tasks.values()), _cell(results.average))
    console = make_console()
    console.print(table)
    for result in results.tasks.values():
        for note in result.notes:
            console.print(f"[yellow]{result.task.title}:[/] {escape(note)}", highlight=False)
    console.print(f"wrote {escape(str(results.results_md))} and {escape(str(results.results_json))}")
    return 0


def _classify(args: argparse.Namespace) -> int:
    quiet_transformers()
    print_fitted(run_classify(settings_from_args(args, ClassifyConfig)))
    return 0


def print_fitted(result: Any, metric_prefix: str = "") -> None:
    """The summary of a file fine-tuning run (classify, tokens): best scores, notes, files written."""
    console = make_console()
    scores = ", ".join(f"{metric_prefix}{name} {_cell(value)}" for name, value in result.metrics.items())
    console.print(f"best step {result.best_step} of {result.steps}: {scores}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(
        f"wrote {escape(str(result.metrics_file))}, {escape(str(result.predictions_file))} and the model "
        f"in {escape(str(result.model_dir))}"
    )


def _register_glue(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "glue",
        _glue,
        help="GLUE dev with the paper's protocol (sweep, early stopping, MNLI transfer)",
        description="Fine-tune any encoder on GLUE tasks; writes OUTPUT/results.md (Table 3 layout) and "
        "OUTPUT/results.json, and each task's best checkpoint in OUTPUT/<task>/best.",
    )
    parser.add_argument(
        "--task", action="append", help="task name(s), comma-separated or repeated, or 'all' (default)"
    )
    parser.add_argument(
        "--grid",
        default=argparse.SUPPRESS,
        help="'paper' (60 points) or a YAML file mapping settings to value lists",
    )
    add_settings(parser, GlueConfig)


def _register_classify(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "classify",
        _classify,
        help="fine-tune on your own CSV / JSONL / parquet: classification, regression, text pairs",
        description="Writes OUTPUT/model (AutoModelForSequenceClassification + tokenizer), "
        "OUTPUT/metrics.json and OUTPUT/predictions.jsonl.",
    )
    add_settings(parser, ClassifyConfig)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune any encoder: GLUE, your own classification / regression tasks",
        description="Fine-tuning with the same protocol for NeoBERT and any transformers encoder.",
    )
    finetune_subparsers = parser.add_subparsers(title="fine-tuning commands", metavar="TASK")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    _register_glue(finetune_subparsers)
    _register_classify(finetune_subparsers)
    # Contrastive and token fine-tuning live in their own modules; they join this group when present.
    for name in ("finetune_contrastive", "finetune_tokens"):
        if importlib.util.find_spec(f"{__package__}.{name}") is not None:
            importlib.import_module(f"{__package__}.{name}").register(finetune_subparsers)
