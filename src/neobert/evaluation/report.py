"""Result tables: Markdown for people, JSON for programs, written atomically."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import io


def fmt(value: Any, scale: float = 1.0, digits: int = 2) -> str:
    """A table cell: floats scaled and rounded (NaN shown as n/a), counts and text as they are."""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value * scale:.{digits}f}"
    return str(value)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], scale: float = 1.0, digits: int = 2
) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v, scale, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


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
