"""``neobert ablate``: the paper's ablation ladder (Figure 1), run rung by rung, with a report."""

from __future__ import annotations

import argparse
from typing import Any

from ..ablation import AblateConfig, run_ladder
from ..hardware import oversubscription_note
from .common import add_command, make_console, quiet_transformers
from .options import add_options, config_from_args


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "ablate",
        run_from_args,
        help="run an ablation ladder (M0 -> NeoBERT, Figure 1) and write its report",
        description=(
            "Pretrain every rung of a ladder (one ordinary pretraining run directory per rung and seed), "
            "fine-tune each on the ladder's tasks with `finetune classify`, and write DIR/ladder.md and "
            "DIR/ladder.png. Finished runs are skipped and a killed run resumes: run the same command again."
        ),
    )
    add_options(parser, AblateConfig)
    parser.add_argument("--smoke", action="store_true", help="the smoke ladder: tiny shapes, seconds per rung")


def run_from_args(args: argparse.Namespace) -> int:
    console = make_console()
    quiet_transformers()
    config = config_from_args(AblateConfig, args, **({"ladder": "smoke"} if args.smoke else {}))
    _warn_if_oversubscribed(console)
    result = run_ladder(config, log=lambda line: console.print(line, highlight=False, soft_wrap=True))
    console.print(f"ran {len(result.ran)} run(s), skipped {len(result.skipped)} finished")
    console.print(f"wrote {result.report_md}" + (f" and {result.report_png}" if result.report_png else ""))
    return 0


def _warn_if_oversubscribed(console) -> None:
    note = oversubscription_note()
    if note:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
