"""Hyperparameter sweeps: the paper's grid or the user's, expanded into runs, and the best one chosen."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.config import renamed_settings
from .classification_task import FitResult, is_better
from .config import FinetuneConfigError, TrainSettings

# Section 4 of the paper: every GLUE task is swept over these 5 x 6 x 2 = 60 points.
PAPER_GRID: dict[str, list] = {
    "batch_size": [2, 4, 8, 16, 32],
    "lr": [5e-6, 6e-6, 8e-6, 1e-5, 2e-5, 3e-5],
    "weight_decay": [1e-2, 1e-5],
}
SHORT_NAMES = {"batch_size": "bs", "weight_decay": "wd"}


def load_grid(grid: str | dict[str, list] | None) -> dict[str, list]:
    """``None`` (no sweep), ``"paper"``, a YAML file mapping settings to lists, or such a mapping."""
    if grid is None:
        return {}
    if isinstance(grid, str):
        if grid == "paper":
            return dict(PAPER_GRID)
        path = Path(grid)
        if not path.is_file():
            raise FinetuneConfigError(f"grid {grid!r} is neither 'paper' nor a YAML file")
        import yaml

        grid = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(grid, dict):
        raise FinetuneConfigError(f"a grid maps setting names to lists of values, got {type(grid).__name__}")
    grid = renamed_settings(grid, "grid")
    known = {f.name for f in dataclasses.fields(TrainSettings)}
    unknown = sorted(set(grid) - known)
    if unknown:
        raise FinetuneConfigError(
            f"unknown grid key(s) {', '.join(unknown)}; sweepable settings: {', '.join(sorted(known))}"
        )
    out = {}
    for key, values in grid.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise FinetuneConfigError(f"grid key {key!r} has no values")
        out[key] = values
    return out


def expand_grid(
    grid: dict[str, list], base: TrainSettings, max_configs: int | None = None, seed: int = 0
) -> list[tuple[dict[str, Any], TrainSettings]]:
    """Every grid point as (the swept values, the full settings), in grid order; with ``max_configs``,
    a seeded random sample of that many points (still in grid order)."""
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    if max_configs is not None and max_configs < len(points):
        chosen = sorted(random.Random(seed).sample(range(len(points)), max_configs))
        points = [points[i] for i in chosen]
    try:
        return [(point, dataclasses.replace(base, **point)) for point in points]
    except (TypeError, ValueError) as err:
        raise FinetuneConfigError(f"invalid grid value: {err}") from None


def run_label(point: dict[str, Any]) -> str:
    """A file-name-safe name for a grid point, e.g. ``bs16-lr2e-05-wd0.01``."""
    if not point:
        return "default"
    parts = [
        f"{SHORT_NAMES.get(k, k)}{v:g}" if isinstance(v, float) else f"{SHORT_NAMES.get(k, k)}{v}"
        for k, v in point.items()
    ]
    return "-".join(parts).replace("/", "_")


@dataclass
class SweepRow:
    """One grid point's outcome: its best evaluation over training."""

    point: dict[str, Any]
    score: float
    best_step: int
    steps: int
    stopped_early: bool
    metrics: dict[str, dict[str, float]]  # split -> metric -> value
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lora: Any = None  # the run's LoraReport (a LoRA run), for the card

    @classmethod
    def from_fit(cls, point: dict[str, Any], fitted: FitResult, seconds: float) -> SweepRow:
        best = fitted.best
        return cls(
            point,
            best.score,
            best.step,
            fitted.steps,
            fitted.stopped_early,
            {split: dict(r.values) for split, r in best.results.items()},
            [f"{split}: {note}" for split, r in best.results.items() for note in r.notes],
            seconds,
            fitted.lora,
        )

    def to_dict(self) -> dict[str, Any]:
        def clean(v: float) -> float | None:
            return None if math.isnan(v) else v

        return {
            "config": self.point,
            "score": clean(self.score),
            "best_step": self.best_step,
            "steps": self.steps,
            "stopped_early": self.stopped_early,
            "metrics": {s: {k: clean(v) for k, v in m.items()} for s, m in self.metrics.items()},
            "notes": self.notes,
            "seconds": round(self.seconds, 2),
        }


def best_index(rows: list[SweepRow]) -> int:
    """The row with the highest score (NaN loses; the earlier row wins a tie)."""
    if not rows:
        raise ValueError("no sweep rows")
    best = 0
    for i, row in enumerate(rows[1:], start=1):
        if is_better(row.score, rows[best].score):
            best = i
    return best
