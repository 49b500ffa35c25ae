"""GLUE result files: each task's sweep table, and the final Table-3-style results.md / results.json."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.io import write_json, write_text
from ..common.tables import MISSING, fmt, markdown_table
from .config import GlueConfig
from .glue_tasks import GLUE_TASKS, TABLE3_TASKS, GlueTask
from .sweep import SweepRow, best_index


@dataclass
class GlueTaskResult:
    task: GlueTask
    score: float  # the task's Table 3 number (NaN if undefined)
    metrics: dict[str, dict[str, float]]  # validation split -> metric -> value, of the best run
    notes: list[str]
    best_config: dict[str, Any]  # the swept values of the best run
    best_step: int
    checkpoint: Path
    init_from: str  # the model this task's runs started from (MNLI's checkpoint for transfer tasks)
    sweep: list[SweepRow] = field(default_factory=list)


@dataclass
class GlueResults:
    model: str
    tasks: dict[str, GlueTaskResult]
    average: float  # over the Table 3 tasks run; NaN if one of them is undefined
    results_md: Path
    results_json: Path

    @property
    def summary(self) -> str:
        """The Table 3 row (scores x100 and their average) and the files written, for a person."""
        header = [r.task.title for r in self.tasks.values()] + ["Avg"]
        scores = [*(r.score for r in self.tasks.values()), self.average]
        table = markdown_table(header, [scores], scale=100, digits=1)
        return f"GLUE dev: {self.model}\n\n{table}\nwrote {self.results_md} and {self.results_json}"

    @property
    def notes(self) -> list[str]:
        return [f"{r.task.title}: {note}" for r in self.tasks.values() for note in r.notes]


METRIC_SHORT = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman"}
SCORE_NOTE = (
    "Scores x100 on the dev sets. CoLA: MCC; STS-B: mean of Pearson and Spearman; MRPC and QQP: mean of F1 "
    "and accuracy; MNLI: matched accuracy; others: accuracy."
)


def _metrics_cell(task: GlueTask, metrics: dict[str, dict[str, float]]) -> str:
    parts = []
    for split, values in metrics.items():
        suffix = f" ({split.removeprefix('validation_')})" if len(metrics) > 1 else ""
        parts += [f"{METRIC_SHORT.get(m, m)} {fmt(values.get(m), 100, 1)}{suffix}" for m in task.metrics]
    return ", ".join(parts)


def _point_cell(point: dict[str, Any]) -> str:
    return (
        ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()) or MISSING
    )


def write_sweep_report(task: GlueTask, rows: list[SweepRow], task_dir: Path) -> None:
    best = best_index(rows)
    table = [
        [
            "**best**" if i == best else "",
            _point_cell(row.point),
            fmt(row.score, 100, 1),
            _metrics_cell(task, row.metrics),
            row.best_step,
            f"{row.steps}{' (early stop)' if row.stopped_early else ''}",
            f"{row.seconds:.0f}s",
        ]
        for i, row in enumerate(rows)
    ]
    header = ["", "config", "score", "metrics", "best step", "steps", "time"]
    text = f"# {task.title} sweep ({len(rows)} run(s))\n\n" + markdown_table(header, table)
    notes = [f"- {_point_cell(r.point)}: {n}" for r in rows for n in r.notes]
    if notes:
        text += "\nNotes:\n" + "\n".join(notes) + "\n"
    write_text(task_dir / "sweep.md", text)
    runs = {"task": task.name, "best": best, "runs": [r.to_dict() for r in rows]}
    write_json(task_dir / "sweep.json", runs, allow_nan=False, default=str)


def table3_average(results: dict[str, GlueTaskResult]) -> float:
    """Mean score over the Table 3 tasks that ran (WNLI is left out, as in the paper)."""
    scores = [results[t].score for t in TABLE3_TASKS if t in results]
    if not scores or any(math.isnan(s) for s in scores):
        return math.nan
    return statistics.fmean(scores)


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


def write_glue_report(config: GlueConfig, results: dict[str, GlueTaskResult], output: Path) -> GlueResults:
    average = table3_average(results)
    columns = [t for t in (*TABLE3_TASKS, "wnli") if t in results]
    ran = sum(t in results for t in TABLE3_TASKS)
    header = ["Model", *(GLUE_TASKS[t].title for t in columns), f"Avg ({ran}/8)"]
    text = f"# GLUE dev results: {config.model}\n\n"
    text += markdown_table(
        header, [[config.model, *(fmt(results[t].score, 100, 1) for t in columns), fmt(average, 100, 1)]]
    )
    text += f"\n{SCORE_NOTE} Avg: the Table 3 tasks run (WNLI excluded).\n\n## Details\n\n"
    details = [
        [
            r.task.title,
            _metrics_cell(r.task, r.metrics),
            _point_cell(r.best_config),
            r.best_step,
            len(r.sweep),
            r.init_from,
            r.checkpoint.relative_to(output) if r.checkpoint.is_relative_to(output) else r.checkpoint,
        ]
        for r in (results[t] for t in columns)
    ]
    header = ["Task", "metrics", "best config", "best step", "runs", "started from", "checkpoint"]
    text += markdown_table(header, details)
    notes = [f"- {r.task.title}: {n}" for r in results.values() for n in r.notes]
    if notes:
        text += "\nNotes (degenerate predictions or undefined metrics):\n" + "\n".join(notes) + "\n"
    data = {
        "model": config.model,
        "average": _clean(average),
        "average_over": [t for t in TABLE3_TASKS if t in results],
        "tasks": {t: _task_json(results[t]) for t in columns},
        "config": config.to_dict(),
    }
    md = write_text(output / "results.md", text)
    js = write_json(output / "results.json", data, allow_nan=False, default=str)
    return GlueResults(config.model, results, average, md, js)


def _task_json(result: GlueTaskResult) -> dict[str, Any]:
    return {
        "title": result.task.title,
        "score": _clean(result.score),
        "metrics": {s: {k: _clean(v) for k, v in m.items()} for s, m in result.metrics.items()},
        "notes": result.notes,
        "best_config": result.best_config,
        "best_step": result.best_step,
        "checkpoint": str(result.checkpoint),
        "init_from": result.init_from,
        "sweep": [row.to_dict() for row in result.sweep],
    }
