"""The GLUE tasks: columns, labels, metrics, validation splits, and where their data comes from.

Column names and label ids are those of the hub data set ``nyu-mll/glue``; local files must use them too
(labels may be given as ids or as the class names below).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..data.readers import DataError
from ..data.text_files import TABLE_SUFFIXES, read_table, require_columns, text_column
from ..evaluation.metrics import MetricResult

HUB_DATASET = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    name: str  # hub config name, e.g. "sst2"
    title: str  # as printed in Table 3, e.g. "SST-2"
    text: str
    text_pair: str | None
    label_names: tuple[str, ...]  # () for regression (STS-B)
    metrics: tuple[str, ...]
    validation_splits: tuple[str, ...] = ("validation",)

    @property
    def num_labels(self) -> int:
        return len(self.label_names) or 1

    @property
    def regression(self) -> bool:
        return not self.label_names

    def score(self, results: dict[str, MetricResult]) -> float:
        """The task's single number: its metric, or the mean of its two (F1/accuracy, Pearson/Spearman),
        as the GLUE leaderboard averages them, on the first validation split (MNLI: matched)."""
        values = [results[self.validation_splits[0]].values[m] for m in self.metrics]
        return math.nan if any(math.isnan(v) for v in values) else statistics.fmean(values)


GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask(
            "mnli",
            "MNLI",
            "premise",
            "hypothesis",
            ("entailment", "neutral", "contradiction"),
            ("accuracy",),
            ("validation_matched", "validation_mismatched"),
        ),
        GlueTask("qnli", "QNLI", "question", "sentence", ("entailment", "not_entailment"), ("accuracy",)),
        GlueTask("qqp", "QQP", "question1", "question2", ("not_duplicate", "duplicate"), ("f1", "accuracy")),
        GlueTask("rte", "RTE", "sentence1", "sentence2", ("entailment", "not_entailment"), ("accuracy",)),
        GlueTask("sst2", "SST-2", "sentence", None, ("negative", "positive"), ("accuracy",)),
        GlueTask(
            "mrpc", "MRPC", "sentence1", "sentence2", ("not_equivalent", "equivalent"), ("f1", "accuracy")
        ),
        GlueTask("cola", "CoLA", "sentence", None, ("unacceptable", "acceptable"), ("mcc",)),
        GlueTask("stsb", "STS-B", "sentence1", "sentence2", (), ("pearson", "spearman")),
        GlueTask("wnli", "WNLI", "sentence1", "sentence2", ("not_entailment", "entailment"), ("accuracy",)),
    )
}
# Table 3's eight tasks, in its column order; WNLI runs only when named.
TABLE3_TASKS = ("mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb")
# Small tasks that the paper starts from the best MNLI checkpoint.
MNLI_TRANSFER_TASKS = ("rte", "mrpc", "stsb")


def get_task(name: str) -> GlueTask:
    """Look a task up by hub name or title, ignoring case and dashes ("SST-2", "sst2", "STS-B")."""
    key = name.lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; available: {', '.join(GLUE_TASKS)} or 'all'")
    return GLUE_TASKS[key]


def resolve_tasks(tasks: str | list[str]) -> list[GlueTask]:
    """Task names (a list, or one comma-separated string) -> tasks, "all" meaning Table 3's eight. MNLI is
    moved first so that the tasks which start from its checkpoint run after it."""
    names = [n.strip() for item in ([tasks] if isinstance(tasks, str) else tasks) for n in item.split(",")]
    names = [n for n in names if n]
    expanded = [n for name in names for n in (TABLE3_TASKS if name.lower() == "all" else (name,))]
    if not expanded:
        raise ValueError("no GLUE task given")
    resolved = list(dict.fromkeys(get_task(n) for n in expanded))
    return sorted(resolved, key=lambda t: t.name != "mnli")


def local_file(task: GlueTask, data_dir: Path, split: str) -> Path:
    """``DATA_DIR/<task>/<split>.<ext>`` (task as "sst2" or "SST-2"), or ``DATA_DIR/<split>.<ext>``
    when DATA_DIR is the task's own folder. GLUE's "dev" is accepted for "validation"."""
    folders = [data_dir / task.name, data_dir / task.title, data_dir]
    stems = [split, split.replace("validation", "dev")]
    for folder in folders:
        for stem in stems:
            for suffix in TABLE_SUFFIXES:
                if (folder / f"{stem}{suffix}").is_file():
                    return folder / f"{stem}{suffix}"
    raise DataError(
        f"no {split} file for {task.title} under {data_dir}: expected {data_dir / task.name}/{split}"
        f"{{{','.join(TABLE_SUFFIXES)}}}"
    )


def load_split(
    task: GlueTask, split: str, data_dir: str | Path | None = None, limit: int | None = None
) -> tuple[list[str], list[str] | None, list]:
    """(texts, text pairs or None, labels: class ids or floats) of one split, from files or the hub."""
    if data_dir is not None:
        path = local_file(task, Path(data_dir), split)
        frame = read_table(path)
    else:
        import datasets

        path = f"{HUB_DATASET}/{task.name}[{split}]"
        frame = datasets.load_dataset(HUB_DATASET, task.name, split=split).to_pandas()
    require_columns(frame, [task.text, task.text_pair, "label"], path)
    if limit is not None:
        frame = frame.iloc[:limit]
    texts = text_column(frame, task.text, path)
    pairs = text_column(frame, task.text_pair, path) if task.text_pair else None
    return texts, pairs, _labels(task, frame["label"].tolist(), path)


def _labels(task: GlueTask, raw: list, path: object) -> list:
    if task.regression:
        try:
            values = [float(v) for v in raw]
        except (TypeError, ValueError):
            raise DataError(f"{path}: STS-B labels must be numbers") from None
        if not all(math.isfinite(v) for v in values):
            raise DataError(f"{path}: STS-B labels must be finite numbers")
        return values
    index = {name: i for i, name in enumerate(task.label_names)}
    out, bad = [], set()
    for value in raw:
        if isinstance(value, str) and value in index:
            out.append(index[value])
        elif _class_id(value) is not None and 0 <= _class_id(value) < task.num_labels:
            out.append(_class_id(value))
        else:
            bad.add(str(value))
    if bad:
        # The hub's test splits carry label -1 (hidden): they cannot be used for training or evaluation.
        raise DataError(
            f"{path}: labels {', '.join(sorted(bad)[:10])} are not {task.title} classes; expected ids "
            f"0..{task.num_labels - 1} or names {', '.join(task.label_names)}"
        )
    return out


def _class_id(value: object) -> int | None:
    """An integer-valued label (1, "1", 1.0) as an int, else None."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None
