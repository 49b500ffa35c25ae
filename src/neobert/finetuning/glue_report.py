"""GLUE result files: each task's sweep table, and the final Table-3-style results.md / results.json."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .glue_tasks import GLUE_TASKS, TABLE3_TASKS, GlueTask
from .reporting import fmt, markdown_table, write_json_atomic, write_text_atomic
from .sweep import SweepRow, best_index

if TYPE_CHECKING:
    from .config import GlueConfig
    from .glue import GlueResults, GlueTaskResult

METRIC_SHORT = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman"}
SCORE_NOTE = (
    "Scores x100 on the dev sets. CoLA: MCC; STS-B: mean of Pearson and Spearman; MRPC and QQP: mean of F1 "
    "and accuracy; MNLI: matched accuracy; others: accuracy."
)


def _metrics_cell(task: GlueTask, metrics: dict[str, dict[str, float]]) -> str:
    parts = []
    for split, values in metrics.items():
        suffix = f" ({split.removeprefix('validation_')})" if len(metrics) > 1 else ""
        parts += [f"{METRIC_SHORT.get(m, m)} {fmt(values.get(m))}{suffix}" for m in task.metrics]
    return ", ".join(parts)


def _point_cell(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()) or "-"


def write_sweep_report(task: GlueTask, rows: list[SweepRow], task_dir: Path) -> None:
    best = best_index(rows)
    table = [
        [
            "**best**" if i == best else "",
            _point_cell(row.point),
            fmt(row.score),
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
    write_text_atomic(task_dir / "sweep.md", text)
    write_json_atomic(
        task_dir / "sweep.json", {"task": task.name, "best": best, "runs": [r.to_dict() for r in rows]}
    )


def table3_average(results: dict[str, GlueTaskResult]) -> float:
    """Mean score over the Table 3 tasks that ran (WNLI is left out, as in the paper)."""
    scores = [results[t].score for t in TABLE3_TASKS if t in results]
    if not scores or any(math.isnan(s) for s in scores):
        return math.nan
    return statistics.fmean(scores)


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


def write_glue_report(config: GlueConfig, results: dict[str, GlueTaskResult], output: Path) -> GlueResults:
    from .glue import GlueResults

    average = table3_average(results)
    columns = [t for t in (*TABLE3_TASKS, "wnli") if t in results]
    ran = sum(t in results for t in TABLE3_TASKS)
    header = ["Model", *(GLUE_TASKS[t].title for t in columns), f"Avg ({ran}/8)"]
    text = f"# GLUE dev results: {config.model}\n\n"
    text += markdown_table(header, [[config.model, *(fmt(results[t].score) for t in columns), fmt(average)]])
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
    md = write_text_atomic(output / "results.md", text)
    js = write_json_atomic(output / "results.json", data)
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
