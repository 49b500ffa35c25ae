"""``neobert pretrain``: from text to a NeoBERT checkpoint. With no arguments, the embedded default run."""

from __future__ import annotations

import argparse
from typing import Any

import yaml
from rich.table import Table

from .common import make_console


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain a NeoBERT encoder (no arguments: the embedded offline default)",
        description=(
            "MLM pretraining with the paper's recipe. Options not listed here come from --config (a YAML file "
            "mapping onto neobert.training.PretrainConfig) or --set KEY=VALUE (dotted keys, YAML values). "
            "Launch with `torchrun` or `accelerate launch` for several processes."
        ),
    )
    parser.add_argument(
        "--data", nargs="+", help="prepared data directories or text files (.txt/.jsonl/.csv/.parquet)"
    )
    parser.add_argument("--config", help="YAML config file (e.g. one of neobert/configs/*.yaml)")
    parser.add_argument(
        "--preset", help="model preset (neobert, neobert-1024, 120m, 250m-wide, bert-baseline, small, tiny)"
    )
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--output", help="run directory (checkpoints, logs, final model)")
    parser.add_argument("--tokenizer", help="tokenizer directory (needed for raw text inputs)")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --output"
    )
    parser.add_argument("--max-minutes", type=float, help="stop (saving a checkpoint) after this much time")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set data.seq_len=512 --set optim.lr=1e-4",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_from_args)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for item in args.set:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        changes[key.strip()] = yaml.safe_load(value)
    named = {
        "data.paths": args.data,
        "preset": args.preset,
        "max_steps": args.max_steps,
        "output": args.output,
        "data.tokenizer": args.tokenizer,
        "max_minutes": args.max_minutes,
    }
    changes.update({k: v for k, v in named.items() if v is not None})
    return changes


def run_from_args(args: argparse.Namespace) -> int:
    console = make_console()
    from ..training.config import PretrainConfig

    if args.data is None and args.config is None and args.preset is None:
        return _run_default(args, console)
    config = PretrainConfig.from_file(args.config) if args.config else PretrainConfig()
    config = config.override(**_overrides(args))
    from ..training.trainer import pretrain

    result = pretrain(config, resume=args.resume, progress_bar=not args.no_progress)
    _print_summary(console, result)
    return 0


def _run_default(args: argparse.Namespace, console) -> int:
    from ..training.default_run import run_default

    console.print(
        "[bold]neobert pretrain[/]: embedded default run (Python stdlib docstrings, small NeoBERT, CPU)"
    )
    result = run_default(
        output=args.output or "runs/default",
        resume=args.resume,
        max_minutes=args.max_minutes,
        progress_bar=not args.no_progress,
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
