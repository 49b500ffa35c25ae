"""``neobert pretrain``: from text to a NeoBERT checkpoint. With no data, the embedded default run.

The options are derived from :class:`neobert.training.PretrainConfig`'s top-level fields (see
:mod:`neobert.cli.options`); sections (model, data, optim, schedule) take ``--set`` or ``--config``.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml
from rich.table import Table

from ..config import PRECISIONS, ConfigError, load_mapping
from ..training.config import PretrainConfig, set_dotted
from ..training.default_run import run_default
from ..training.trainer import pretrain
from .common import CLIError, add_command, make_console
from .options import add_options, given

# Fields written by hand below (data paths, tokenizer) or only reachable through --set / --config (sections).
_SKIP = ("model", "data", "optim", "schedule")
# What a flag or --set cannot change in the embedded default run: its data and pinned tokenizer.
_DEFAULT_RUN_FIXED = ("data.paths", "data.tokenizer")


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "pretrain",
        run_from_args,
        help="pretrain a NeoBERT encoder (no arguments: the embedded offline default)",
        description=(
            "MLM pretraining with the paper's recipe. Without --data, --config and --preset: the embedded "
            "default run (its settings still change with the flags below and --set). Settings not listed "
            "here come from --config (a YAML file mapping onto neobert.training.PretrainConfig) or --set "
            "KEY=VALUE (dotted keys, YAML values). Small presets (tiny, small) come with a sequence length "
            "and batch that suit them; settings given win. Launch with `torchrun` or `accelerate launch` "
            "for several processes."
        ),
    )
    parser.add_argument(
        "--data",
        nargs="+",
        dest="data_paths",
        help="prepared data directories or text files (.txt/.jsonl/.csv/.parquet)",
    )
    parser.add_argument(
        "--tokenizer",
        help="tokenizer directory for raw text inputs (default: the one stored with prepared data; for "
        "the neobert presets, bert-base-uncased from the examples extra)",
    )
    parser.add_argument("--config", help="YAML config file (e.g. one of neobert/configs/*.yaml)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set data.seq_len=512 --set optim.lr=1e-4",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --output"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    settings = parser.add_argument_group("settings (neobert.training.PretrainConfig; a flag given wins)")
    add_options(settings, PretrainConfig, skip=_SKIP, choices=CHOICES, given_only=True)


CHOICES = {"precision": PRECISIONS, "device": ("cpu", "cuda")}


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted key -> value for every setting given: --set first, then the named flags."""
    changes: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--set expects KEY=VALUE, got {item!r}")
        changes[key.strip()] = yaml.safe_load(value)
    changes.update(given(PretrainConfig, args))
    if args.data_paths is not None:
        changes["data.paths"] = args.data_paths
    if args.tokenizer is not None:
        changes["data.tokenizer"] = args.tokenizer
    return changes


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """--config's mapping (or none) with every setting given laid over it; small presets' defaults fill in
    what is still missing (:func:`neobert.training.config.with_preset_training`)."""
    data = load_mapping(args.config) if args.config else {}
    for dotted, value in _overrides(args).items():
        set_dotted(data, dotted, value)
    try:
        return PretrainConfig.from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{args.config}: {err}" if args.config else str(err)) from None


def run_from_args(args: argparse.Namespace) -> int:
    console = make_console()
    if args.data_paths is None and args.config is None and getattr(args, "preset", None) is None:
        return _run_default(args, console)
    result = pretrain(config_from_args(args), resume=args.resume, progress_bar=not args.no_progress)
    _print_summary(console, result)
    return 0


def _run_default(args: argparse.Namespace, console) -> int:
    overrides = _overrides(args)
    fixed = [key for key in _DEFAULT_RUN_FIXED if key in overrides]
    if fixed:
        flags = " and ".join("--tokenizer" if key == "data.tokenizer" else key for key in fixed)
        raise CLIError(
            f"{flags}: the embedded default run (no --data, --config or --preset) trains on its own corpus "
            "with its pinned tokenizer; give --data (and --preset or --config) to train on other data"
        )
    console.print(
        "[bold]neobert pretrain[/]: embedded default run (Python stdlib docstrings, small NeoBERT, CPU)"
    )
    output = overrides.pop("output", "runs/default")
    result = run_default(
        output=output, resume=args.resume, progress_bar=not args.no_progress, overrides=overrides
    )
    _print_summary(console, result.pretrain)
    table = Table(title="fill-mask (top 3)")
    table.add_column("text")
    table.add_column("predictions")
    for text, predictions in result.examples:
        table.add_row(text, ", ".join(f"{tok} ({p:.2f})" for tok, p in predictions))
    console.print(table)
    console.print(f"report: {result.report}")
    return 0


def _print_summary(console, result) -> None:
    table = Table(title="pretraining result")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("steps", f"{result.steps:,}"),
        ("tokens seen", f"{result.tokens_seen:,}"),
        ("minutes", f"{result.seconds / 60:.1f}"),
        ("last train loss", _fmt(result.train_loss)),
        ("validation loss", "n/a (no validation split)" if result.val_loss is None else _fmt(result.val_loss)),
        ("unigram baseline", _fmt(result.unigram_entropy)),
        ("validation accuracy", _fmt(result.val_accuracy)),
        ("final model", str(result.final_model)),
        ("loss curve", str(result.loss_curve)),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
