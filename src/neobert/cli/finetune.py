"""``neobert finetune``: GLUE with the paper's protocol (``glue``) and the user's own tasks (``classify``).

Flags map onto :class:`neobert.finetuning.GlueConfig` / :class:`ClassifyConfig`; a flag left out keeps the
config's default (or the value from ``--config FILE``), so the dataclass stays the one source of defaults.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from .common import CLIError, add_model_arguments, make_console, quiet_transformers

# argparse dest -> config field, for the flags shared by both commands.
TRAINING_FLAGS = {
    "epochs": int,
    "batch_size": int,
    "learning_rate": float,
    "weight_decay": float,
    "warmup_ratio": float,
    "eval_every": int,
    "patience": int,
    "max_length": int,
    "eval_batch_size": int,
    "seed": int,
    "max_train_samples": int,
    "max_eval_samples": int,
    "device": str,
    "precision": str,
}


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training (defaults: the config's)")
    for name, kind in TRAINING_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        group.add_argument(flag, type=kind, default=None, help=_HELP.get(name))
    group.add_argument("--no-tensorboard", action="store_true", help="do not write TensorBoard logs")
    group.add_argument("--quiet", action="store_true", help="no progress bars")
    group.add_argument("--resume", action="store_true", help="continue an interrupted run of this output")
    group.add_argument(
        "--preset-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a field of a preset model, e.g. vocab_size=30522 (repeatable)",
    )
    group.add_argument("--config", metavar="YAML", help="settings file; flags given here override it")


_HELP = {
    "epochs": "maximum epochs (default 10)",
    "eval_every": "evaluate every N optimizer steps (default: once per epoch)",
    "patience": "stop after N evaluations without improvement; 0 disables early stopping (default 3)",
    "max_length": "truncate each example to N tokens (default 512, capped by the model)",
    "max_train_samples": "use only the first N training rows (quick runs)",
    "max_eval_samples": "use only the first N validation rows",
    "precision": "auto (bf16 autocast on CUDA) | fp32 | bf16",
}


def _parse_override(item: str) -> tuple[str, Any]:
    import yaml

    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CLIError(f"--preset-override expects KEY=VALUE, got {item!r}")
    return key.strip(), yaml.safe_load(value)


def _settings(args: argparse.Namespace, fields: tuple[str, ...]) -> dict[str, Any]:
    """The config mapping: --config file, then every flag actually given."""
    data: dict[str, Any] = {}
    if args.config:
        from ..config import load_mapping
        from ..finetuning.config import FinetuneConfigError

        data = load_mapping(args.config, FinetuneConfigError)
    for name in (*TRAINING_FLAGS, *fields, "model", "tokenizer"):
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    if data.get("patience") == 0:
        data["patience"] = None
    if args.preset_override:
        data["preset_overrides"] = dict(_parse_override(item) for item in args.preset_override)
    if args.no_tensorboard:
        data["tensorboard"] = False
    if args.quiet:
        data["show_progress"] = False
    if args.resume:
        data["resume"] = True
    return data


def _cell(value: float | None) -> str:
    return "NaN" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _glue(args: argparse.Namespace) -> int:
    from ..finetuning import run_glue

    quiet_transformers()
    data = _settings(args, ("output", "data_dir", "grid", "max_configs", "from_mnli"))
    if args.task:
        data["tasks"] = [t.strip() for item in args.task for t in item.split(",") if t.strip()]
    if args.no_mnli_transfer:
        data["transfer_from_mnli"] = False
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
    from ..finetuning import run_classify

    quiet_transformers()
    fields = ("output", "train", "validation", "text_column", "text_pair_column", "label_column", "task_type")
    result = run_classify(_settings(args, fields))
    console = make_console()
    scores = ", ".join(f"{name} {_cell(value)}" for name, value in result.metrics.items())
    console.print(f"best step {result.best_step} of {result.steps}: {scores}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(
        f"wrote {escape(str(result.metrics_file))}, {escape(str(result.predictions_file))} and the model "
        f"in {escape(str(result.model_dir))}"
    )
    return 0


def _register_glue(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "glue",
        help="GLUE dev with the paper's protocol (sweep, early stopping, MNLI transfer)",
        description="Fine-tune any encoder on GLUE tasks; writes OUTPUT/results.md (Table 3 layout) and "
        "OUTPUT/results.json, and each task's best checkpoint in OUTPUT/<task>/best.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--task", action="append", help="task name(s), comma-separated or repeated, or 'all' (default)"
    )
    parser.add_argument("--output", help="output directory")
    parser.add_argument(
        "--data-dir", help="local files DIR/<task>/{train,validation}.{csv,tsv,jsonl,parquet}"
    )
    parser.add_argument("--grid", help="'paper' (60 points) or a YAML file mapping settings to value lists")
    parser.add_argument("--max-configs", type=int, help="sample N grid points (seeded) instead of all")
    parser.add_argument("--from-mnli", metavar="DIR", help="start RTE, MRPC and STS-B from this checkpoint")
    parser.add_argument(
        "--no-mnli-transfer", action="store_true", help="start RTE, MRPC and STS-B from --model too"
    )
    _add_training_arguments(parser)
    parser.set_defaults(func=_glue)


def _register_classify(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "classify",
        help="fine-tune on your own CSV / JSONL / parquet: classification, regression, text pairs",
        description="Writes OUTPUT/model (AutoModelForSequenceClassification + tokenizer), "
        "OUTPUT/metrics.json and OUTPUT/predictions.jsonl.",
    )
    add_model_arguments(parser)
    parser.add_argument("--train", help="training file (.csv, .tsv, .jsonl, .json, .parquet)")
    parser.add_argument("--validation", help="validation file, same columns")
    parser.add_argument("--text-column", help="column holding the text (default: text)")
    parser.add_argument("--text-pair-column", help="column holding the second text of a pair")
    parser.add_argument("--label-column", help="column holding the label or target (default: label)")
    parser.add_argument("--task-type", choices=["classification", "regression"])
    parser.add_argument("--output", help="output directory")
    _add_training_arguments(parser)
    parser.set_defaults(func=_classify)


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
