"""Numbers and Markdown tables for people: the one formatter every report and command uses.

A missing value (None or NaN: a metric undefined for the data, a split that does not exist) reads ``n/a``
everywhere. Scores are scaled by the caller (``scale=100, digits=1`` is the paper's x100 with one decimal).
Machine-readable output (JSON, CSV) never goes through here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MISSING = "n/a"


def fmt(value: Any, scale: float = 1.0, digits: int = 2) -> str:
    """A number for a person: floats scaled and rounded, None and NaN as ``n/a``, ints and text as they are."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value * scale:.{digits}f}"
    return str(value)


def markdown_table(
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    scale: float = 1.0,
    digits: int = 2,
    align: str | None = None,
) -> str:
    """A Markdown table; float cells (and missing ones) go through :func:`fmt`, other cells as they are.
    ``align``: one letter per column, ``l`` or ``r`` (right-aligned numbers); default all left."""
    marks = {"l": "---", "r": "---:"}
    align = align or "l" * len(header)
    if len(align) != len(header) or set(align) - set(marks):
        raise ValueError(f"align needs one of l, r per column ({len(header)}), got {align!r}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(fmt(v, scale, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
