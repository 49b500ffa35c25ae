"""Result tables: scores formatted as in the paper, and Markdown tables (sweeps, Table 3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def fmt(value: float | None, scale: float = 100.0, digits: int = 1) -> str:
    """A score for a table: x100 with one decimal, as in the paper; undefined values read NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    return f"{value * scale:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
