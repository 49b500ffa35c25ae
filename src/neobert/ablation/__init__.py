"""The paper's ablation ladder (Figure 1): ladder files, the runner and the report.

``run_ladder(AblateConfig(...))`` is the entry point of ``neobert ablate``; see docs/ablations.md.
"""

from .ladder import Ladder, LadderError, Rung, RungPlan, Scale, load_ladder, pretrain_config, resolve
from .report import verdict, write_report
from .runner import AblateConfig, LadderResult, run_ladder, run_rung

__all__ = [
    "AblateConfig",
    "Ladder",
    "LadderError",
    "LadderResult",
    "Rung",
    "RungPlan",
    "Scale",
    "load_ladder",
    "pretrain_config",
    "resolve",
    "run_ladder",
    "run_rung",
    "verdict",
    "write_report",
]
