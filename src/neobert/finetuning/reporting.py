"""Result files: atomic JSON / text writes and Markdown tables (sweeps, Table 3)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write beside ``path`` then rename, so a reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | Path, data: Any) -> Path:
    # allow_nan=False: an undefined metric must already be null (with a note), never the non-JSON NaN.
    return write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False, default=str) + "\n")


def fmt(value: float | None, scale: float = 100.0, digits: int = 1) -> str:
    """A score for a table: x100 with one decimal, as in the paper; undefined values read NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    return f"{value * scale:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
