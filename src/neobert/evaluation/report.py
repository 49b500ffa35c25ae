"""Evaluation results for programs: means over defined scores, JSON with undefined scores as null.
(Tables for people: :mod:`neobert.common.tables`.)"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cards import Result, update_card
from ..common import io


def nan_mean(values: Sequence[float]) -> float:
    """Mean of the defined values; NaN when none is."""
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else math.nan


def _json_safe(value: Any) -> Any:
    # JSON has no NaN: undefined scores are written as null.
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """``data`` as JSON, undefined scores (NaN) written as null, atomically."""
    return io.write_json(path, _json_safe(data))


FAMILY_TASK_TYPES = {
    "sts": "STS",
    "retrieval": "Retrieval",
    "classification": "Classification",
    "clustering": "Clustering",
    "pair_classification": "PairClassification",
}  # MTEB's names


def update_cards(results: dict[str, list[Result]]) -> tuple[list[Path], list[str]]:
    """Put each model's ``results`` into its directory's card (``--update-card``): the cards updated, and a
    note for every model that is no local directory (a preset or a hub id has no card here)."""
    updated, notes = [], []
    for model, entries in results.items():
        path = Path(model).expanduser()
        if not (path / "config.json").is_file():
            notes.append(f"{model}: not a local model directory, no card to update")
        elif not entries:
            notes.append(f"{model}: no defined result to add to its card")
        else:
            updated.append(update_card(path, entries))
    return updated, notes


def defined(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))
