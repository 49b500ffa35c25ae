"""GLUE's metrics as pure functions of numpy arrays, with undefined values reported, never raised.

Every function returns a float. Where a metric is 0/0 (a correlation of a constant, an F1 with no positive
label nor prediction, Matthews' coefficient of a constant predictor) the value is NaN, and
:func:`compute_metrics` adds a note saying why: a fine-tuning run that collapses to one class is a result
to report, not a crash. sklearn's convention of reporting 0.0 in those cases hides exactly that collapse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

METRICS = ("accuracy", "f1", "macro_f1", "mcc", "pearson", "spearman")


def _pair(predictions: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(predictions), np.asarray(labels)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} must be 1-D of the same length")
    return p, y


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    p, y = _pair(predictions, labels)
    return float(np.mean(p == y)) if len(y) else math.nan


def _f1_of_class(p: np.ndarray, y: np.ndarray, positive: object) -> float:
    # 2TP / (2TP + FP + FN): equal to 2PR / (P + R) wherever that is defined, and 0 (not 0/0) when the
    # class is predicted but never right or present but never predicted.
    tp = int(np.sum((p == positive) & (y == positive)))
    fp = int(np.sum((p == positive) & (y != positive)))
    fn = int(np.sum((p != positive) & (y == positive)))
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else math.nan


def f1(predictions: Sequence, labels: Sequence, positive: object = 1) -> float:
    """Binary F1 of class ``positive`` (GLUE: the "duplicate" / "equivalent" class, 1)."""
    return _f1_of_class(*_pair(predictions, labels), positive)


def macro_f1(predictions: Sequence, labels: Sequence) -> float:
    """Unweighted mean of per-class F1 over the classes present in the labels or the predictions."""
    p, y = _pair(predictions, labels)
    classes = np.union1d(p, y)
    return float(np.mean([_f1_of_class(p, y, c) for c in classes])) if len(classes) else math.nan


def mcc(predictions: Sequence, labels: Sequence) -> float:
    """Matthews correlation coefficient (multi-class form; the usual binary formula for two classes)."""
    p, y = _pair(predictions, labels)
    classes, encoded = np.unique(np.concatenate([p, y]), return_inverse=True)
    k = len(classes)
    confusion = np.zeros((k, k), dtype=np.float64)  # rows: true class, columns: predicted class
    np.add.at(confusion, (encoded[len(p) :], encoded[: len(p)]), 1.0)
    n = confusion.sum()
    correct = np.trace(confusion)
    true_counts, pred_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    numerator = correct * n - true_counts @ pred_counts
    denominator = math.sqrt((n * n - pred_counts @ pred_counts) * (n * n - true_counts @ true_counts))
    return float(numerator / denominator) if denominator else math.nan


def _correlation(kind: str, predictions: Sequence, labels: Sequence) -> float:
    """scipy's Pearson or Spearman (average ranks for ties) coefficient; NaN where it is undefined: fewer
    than two pairs, a non-finite value, or a constant side."""
    from scipy import stats  # with the train / mteb extras

    p, y = _pair(predictions, labels)
    p, y = p.astype(np.float64), y.astype(np.float64)
    if (
        len(p) < 2
        or not (np.all(np.isfinite(p)) and np.all(np.isfinite(y)))
        or np.ptp(p) == 0
        or np.ptp(y) == 0
    ):
        return math.nan
    coefficient = stats.pearsonr(p, y)[0] if kind == "pearson" else stats.spearmanr(p, y)[0]
    return float(coefficient)


def pearson(predictions: Sequence, labels: Sequence) -> float:
    """Pearson's correlation coefficient (see :func:`_correlation`)."""
    return _correlation("pearson", predictions, labels)


def spearman(predictions: Sequence, labels: Sequence) -> float:
    """Spearman's rank correlation coefficient, ties at their average rank (see :func:`_correlation`)."""
    return _correlation("spearman", predictions, labels)


_FUNCTIONS = {
    "accuracy": accuracy,
    "f1": f1,
    "macro_f1": macro_f1,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
}


@dataclass
class MetricResult:
    """Metric values (NaN where undefined) and human-readable notes on anything degenerate."""

    values: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        # JSON has no NaN: undefined values are written as null, and the notes say why.
        return {
            "values": {k: (None if math.isnan(v) else v) for k, v in self.values.items()},
            "notes": list(self.notes),
        }


def compute_metrics(names: Sequence[str], predictions: Sequence, labels: Sequence) -> MetricResult:
    """Each metric in ``names`` over the predictions, plus notes on constant or non-finite inputs."""
    unknown = [n for n in names if n not in _FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; available: {', '.join(METRICS)}")
    p, y = _pair(predictions, labels)
    values = {name: _FUNCTIONS[name](p, y) for name in names}
    notes = []
    if len(p) == 0:
        notes.append("no examples to evaluate: every metric is undefined (NaN)")
    elif p.dtype.kind == "f" and not np.all(np.isfinite(p)):
        notes.append(f"{int(np.sum(~np.isfinite(p)))} prediction(s) are NaN or infinite")
    elif len(np.unique(p)) == 1:
        notes.append(f"predictions are constant (all {p[0].item()!r})")
    if len(y) and len(np.unique(y)) == 1:
        notes.append(f"labels are constant (all {y[0].item()!r})")
    undefined = [name for name, value in values.items() if math.isnan(value)]
    if undefined and len(p):
        notes.append(f"undefined (NaN): {', '.join(undefined)}")
    return MetricResult(values, notes)
