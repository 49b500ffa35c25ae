"""``neobert ablate``: the paper's ablation ladder (Figure 1), run rung by rung, with a report."""

from __future__ import annotations

import argparse
from typing import Any

from ..ablation import AblateConfig, run_ladder
from ..runtime.hardware import oversubscription_note
from .common import add_command, make_console, note, quiet_transformers, say, wrote
from .options import config_from_args


def register(subparsers: Any) -> None:
    help = "run an ablation ladder (M0 -> NeoBERT, Figure 1) and write its report"
    parser = add_command(subparsers, "ablate", run_from_args, help, config=AblateConfig)
    parser.add_argument(
        "--smoke", action="store_true", help="the smoke ladder: tiny shapes, seconds per rung"
    )


def run_from_args(args: argparse.Namespace) -> int:
    console = make_console()
    quiet_transformers()
    config = config_from_args(AblateConfig, args, **({"ladder": "smoke"} if args.smoke else {}))
    note(oversubscription_note(), console)
    result = run_ladder(config, log=lambda line: say(line, console))
    say(f"ran {len(result.ran)} run(s), skipped {len(result.skipped)} finished", console)
    wrote(result.report_md, *([result.report_png] if result.report_png else []), console=console)
    return 0
