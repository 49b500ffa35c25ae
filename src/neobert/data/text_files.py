"""Files of texts: tables (CSV, TSV, JSONL, JSON, parquet) and plain files of one text per line.

The readers behind ``neobert embed`` / ``classify`` / ``tag`` and every fine-tuning task's table; errors
are :class:`~neobert.data.readers.DataError`, naming the file and, where known, the line or row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .readers import DataError

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")


def read_table(path: str | Path) -> Any:
    """A pandas DataFrame from a CSV, TSV, JSONL (one object per line), JSON array or parquet file."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist" if not path.exists() else f"{path} is not a file")
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(TABLE_SUFFIXES)}")
    if path.stat().st_size == 0:
        raise DataError(f"data file {path} is empty")
    try:
        if suffix in (".csv", ".tsv"):
            # TSV cells hold raw quotes (GLUE's own files): no quote processing there.
            sep, quoting = ("\t", 3) if suffix == ".tsv" else (",", 0)
            frame = pd.read_csv(path, sep=sep, quoting=quoting, keep_default_na=False, na_values=[""])
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_json(path, lines=suffix == ".jsonl", dtype=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"data file {path} is empty") from None
    except ValueError as err:
        raise DataError(f"{path}: cannot parse as {suffix[1:]}: {err}") from None
    if len(frame) == 0:
        raise DataError(f"data file {path} has a header but no rows")
    return frame


def require_columns(frame: Any, columns: Sequence[str | None], path: str | Path) -> None:
    """Raise naming the missing columns and listing the available ones."""
    missing = [c for c in columns if c is not None and c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: no column(s) {', '.join(repr(c) for c in missing)}; "
            f"available columns: {', '.join(repr(str(c)) for c in frame.columns)}"
        )


def text_column(frame: Any, column: str, path: str | Path) -> list[str]:
    """The column as strings; a missing cell is an error naming its row (a silent "nan" text would train)."""
    values = frame[column]
    empty = values.isna()
    if empty.any():
        rows = [int(i) + 1 for i in np.flatnonzero(empty.to_numpy())[:5]]
        raise DataError(f"{path}: column {column!r} is empty in row(s) {rows} (1-based, header excluded)")
    return values.astype(str).tolist()


def read_lines(path: str | Path) -> list[str]:
    """One text per line (line i -> row i, blank lines kept as empty texts); errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist" if not path.exists() else f"{path} is not a file")
    texts = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}, line {number}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column "
                    f"{err.start + 1}); re-encode the file as UTF-8"
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")  # a byte-order mark is not part of the text
            texts.append(line.rstrip("\r\n"))
    if not any(text.strip() for text in texts):
        raise DataError(f"input file {path} is empty: expected one text per line")
    return texts


def read_texts(
    path: str | Path, column: str = "text", pair_column: str | None = None
) -> tuple[list[str], list[str] | None]:
    """Texts (and second texts) from a table's columns or, for any other file, its lines (one text per line)."""
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        if pair_column is not None:
            raise DataError(
                f"--pair-column needs a table ({', '.join(TABLE_SUFFIXES)}); {path} is read as plain text, "
                "one text per line"
            )
        return read_lines(path), None
    frame = read_table(path)
    require_columns(frame, [column, pair_column], path)
    pairs = text_column(frame, pair_column, path) if pair_column is not None else None
    return text_column(frame, column, path), pairs
