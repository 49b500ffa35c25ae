"""Entities from BIO / IOB2 tags, and entity-level precision / recall / F1, with seqeval's definitions.

seqeval (the reference implementation that CoNLL results are reported with) does the work; it is an
optional dependency: ``pip install 'neobert[tokens]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TOKENS_HINT = "pip install 'neobert[tokens]'"


def _seqeval() -> Any:
    try:
        import seqeval.metrics
        import seqeval.metrics.sequence_labeling
    except ImportError as err:
        raise ImportError(f"token classification needs the seqeval package: {TOKENS_HINT}") from err
    return seqeval.metrics


def spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) word index of each entity, last inclusive (seqeval's ``get_entities``: an I-
    without a preceding B- of its type opens an entity, as conlleval does)."""
    return [(kind, start, end) for kind, start, end in _seqeval().sequence_labeling.get_entities(list(tags))]


def entity_scores(truth: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Micro precision, recall and F1 over entities (an entity counts when its type and exact word span
    match), with the per-type breakdown and the number of gold entities per type (``support``)."""
    if len(truth) != len(predicted):
        raise ValueError(f"{len(truth)} gold sentences but {len(predicted)} predicted")
    for i, (gold, guess) in enumerate(zip(truth, predicted)):
        if len(gold) != len(guess):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(guess)} predicted")
    metrics = _seqeval()
    truth, predicted = [list(s) for s in truth], [list(s) for s in predicted]
    report = metrics.classification_report(truth, predicted, output_dict=True, zero_division=0)
    per_type = {
        name: {k: float(v) if k != "support" else int(v) for k, v in values.items()}
        for name, values in report.items()
        if not name.endswith(" avg")
    }
    return {
        "precision": float(metrics.precision_score(truth, predicted, zero_division=0)),
        "recall": float(metrics.recall_score(truth, predicted, zero_division=0)),
        "f1": float(metrics.f1_score(truth, predicted, zero_division=0)),
        "accuracy": float(metrics.accuracy_score(truth, predicted)) if any(truth) else float("nan"),
        "per_type": per_type,
    }
