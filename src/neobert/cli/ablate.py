"""``neobert ablate``: the paper's ablation ladder (Figure 1), run rung by rung, with a report."""

from __future__ import annotations

import argparse
from typing import Any

from ..ablation import AblateConfig, run_ladder
from ..hardware import oversubscription_note
from .common import add_command, make_console, quiet_transformers


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
    parser.add_argument(
        "--ladder",
        default="figure1-laptop",
        help="figure1-laptop (default), figure1-gpu, smoke or a YAML file",
    )
    parser.add_argument("--output", required=True, help="the ladder's directory")
    parser.add_argument("--rungs", help="comma-separated rung names to run (default: all within reach)")
    parser.add_argument("--seeds", type=int, help="pretraining seeds per rung (default: the ladder's)")
    parser.add_argument(
        "--only-seed",
        type=int,
        help="run this seed alone; start one process per seed on the same DIR to use more cores",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the smoke ladder: tiny shapes, seconds per rung"
    )
    parser.add_argument("--max-steps", type=int, help="pretraining steps per rung instead of the scale's")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep finished runs' checkpoints")


def run_from_args(args: argparse.Namespace) -> int:
    console = make_console()
    quiet_transformers()
    config = AblateConfig(
        ladder="smoke" if args.smoke else args.ladder,
        output=args.output,
        rungs=[r.strip() for r in args.rungs.split(",") if r.strip()] if args.rungs else None,
        seeds=args.seeds,
        max_steps=args.max_steps,
        keep_checkpoints=args.keep_checkpoints,
        only_seed=args.only_seed,
    )
    _warn_if_oversubscribed(console)
    result = run_ladder(config, log=lambda line: console.print(line, highlight=False, soft_wrap=True))
    console.print(f"ran {len(result.ran)} run(s), skipped {len(result.skipped)} finished")
    console.print(f"wrote {result.report_md}" + (f" and {result.report_png}" if result.report_png else ""))
    return 0


def _warn_if_oversubscribed(console) -> None:
    note = oversubscription_note()
    if note:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
