"""Fine-tuning any encoder: GLUE with the paper's protocol, the user's own classification and token-classification
tasks, and contrastive training.

Entry points are functions taking a config and returning results; the ``neobert finetune`` CLI is a thin
layer over them.
"""

from .classify import ClassifyResult, run_classify
from .config import ClassifyConfig, FinetuneConfigError, GlueConfig, TrainSettings
from .data import DataError
from .glue import GlueResults, GlueTaskResult, run_glue
from .glue_tasks import GLUE_TASKS, MNLI_TRANSFER_TASKS, TABLE3_TASKS, GlueTask, get_task
from .models import load_classifier
from .sweep import PAPER_GRID, expand_grid, load_grid

__all__ = [
    "GLUE_TASKS",
    "MNLI_TRANSFER_TASKS",
    "PAPER_GRID",
    "TABLE3_TASKS",
    "ClassifyConfig",
    "ClassifyResult",
    "DataError",
    "FinetuneConfigError",
    "GlueConfig",
    "GlueResults",
    "GlueTask",
    "GlueTaskResult",
    "TrainSettings",
    "expand_grid",
    "get_task",
    "load_classifier",
    "load_grid",
    "run_classify",
    "run_glue",
]
