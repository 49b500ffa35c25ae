"""``neobert pretrain``: from text to a NeoBERT checkpoint. With no data, the embedded default run.

The options are derived from :class:`neobert.training.PretrainConfig`'s top-level fields (see
:mod:`neobert.cli.options`); sections (model, data, optim, schedule) take ``--set`` or ``--config``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..common.config import PRECISIONS, ConfigError
from ..recipes.default_run import run_default
from ..recipes.named import RECIPES, recipe_config
from ..training.config import PretrainConfig
from ..training.mlm_task import pretrain
from .common import add_command, make_console, say
from .options import add_options, given, key_values

# Sections: only reachable through --set / --config.
_SKIP = ("model", "data", "optim", "schedule", "phases")
CHOICES = {"precision": PRECISIONS, "device": ("cpu", "cuda")}


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
    what = "prepared data directories or text files (.txt/.jsonl/.csv/.parquet)"
    parser.add_argument("--data", nargs="+", dest="data_paths", help=what)
    what = (
        "tokenizer directory for raw text inputs (default: the one stored with prepared data; for the "
        "neobert presets, bert-base-uncased from the examples extra)"
    )
    parser.add_argument("--tokenizer", help=what)
    parser.add_argument("--config", help="YAML config file (e.g. one of neobert/configs/*.yaml)")
    what = (
        "a named recipe (phases, schedule, masking, optimizer of the paper; docs/pretraining.md) instead of "
        "--config; --scale multiplies its token counts, --context-scale its row lengths"
    )
    parser.add_argument("--recipe", choices=RECIPES, help=what)
    what = "override any config field, e.g. --set data.seq_len=512 --set optim.lr=1e-4"
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=what)
    what = "continue from the latest checkpoint in --output"
    parser.add_argument("--resume", action="store_true", help=what)
    what = (
        "with --decay-from CKPT (a stable wsd run's checkpoint): the decay's length in steps "
        "(schedule.decay_steps); the branch trains CKPT's step + N steps into its own --output"
    )
    parser.add_argument("--decay-steps", type=int, metavar="N", help=what)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    settings = parser.add_argument_group("settings (neobert.training.PretrainConfig; a flag given wins)")
    add_options(settings, PretrainConfig, skip=_SKIP, choices=CHOICES, given_only=True)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted key -> value for every setting given: --set first, then the named flags."""
    paths = {
        "data.paths": args.data_paths,
        "data.tokenizer": args.tokenizer,
        "schedule.decay_steps": args.decay_steps,
    }
    return {
        **key_values(args.set, "--set"),
        **given(PretrainConfig, args),
        **{key: value for key, value in paths.items() if value is not None},
    }


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """--config's (or --recipe's) settings, or none, with every setting given laid over them."""
    recipe = getattr(args, "recipe", None)
    if recipe is not None:
        if args.config is not None:
            raise ConfigError("give --recipe or --config, not both (copy the recipe file to change it)")
        return recipe_config(recipe, **_overrides(args))
    return PretrainConfig.from_file(args.config, **_overrides(args))


def run_from_args(args: argparse.Namespace) -> int:
    console, progress = make_console(), not args.no_progress
    named = args.config is not None or getattr(args, "recipe", None) is not None
    if args.data_paths is None and not named and getattr(args, "preset", None) is None:
        what = "embedded default run (Python stdlib docstrings, small NeoBERT, CPU)"
        console.print(f"[bold]neobert pretrain[/]: {what}")
        result = run_default(resume=args.resume, progress_bar=progress, overrides=_overrides(args))
    else:
        result = pretrain(config_from_args(args), resume=args.resume, progress_bar=progress)
    say(result.summary, console)
    return 0
