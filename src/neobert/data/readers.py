"""Iterate raw text documents from local files, Hugging Face data sets and the built-in stdlib corpus.

Input specifications (one string each):

- a ``.txt`` file. ``txt_mode="paragraph"``: documents are separated by one or more blank (whitespace-only)
  lines; the lines of one document are joined with ``"\\n"`` exactly as written. ``txt_mode="line"``: every
  non-blank line is a document (the usual layout of dumped corpora). ``txt_mode="auto"`` (the default)
  reads a file in line mode when no blank line separates two of its lines, in paragraph mode otherwise, and
  logs a warning naming each file it reads in line mode (read as paragraphs, such a file would be one
  single document).
- a ``.jsonl`` / ``.ndjson`` file: one JSON object per line, the text in ``text_column``.
- a ``.csv`` file with a header row naming ``text_column``.
- a ``.parquet`` file with a string column ``text_column``.
- a directory: every file above found under it, in sorted order.
- ``hf:NAME[:CONFIG[:SPLIT]]``: a Hugging Face data set (split ``train`` by default), streamed unless
  ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` is set, in which case the local cache is used.
- ``stdlib:`` or ``stdlib:json,email``: the docstring corpus of the running interpreter
  (see :mod:`neobert.data.corpus`), optionally only some top-level modules.

Bad input is either an error naming the file and line (``on_error="raise"``) or skipped and counted in
:class:`ReadStats` (``on_error="skip"``): files that are not UTF-8, malformed JSON records, records whose
text is not a string, and empty files. A missing text column is a configuration mistake and always raises,
listing the columns that exist.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .corpus import iter_stdlib_documents

FILE_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".csv", ".parquet")
TXT_MODES = ("auto", "paragraph", "line")
ON_ERROR = ("raise", "skip")
_MAX_KEPT_MESSAGES = 20

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """Input data cannot be read as configured (the message names the file and, where known, the line)."""


@dataclass
class ReadStats:
    """What the readers saw; filled in while documents are iterated."""

    files: int = 0
    documents: int = 0
    empty_files: int = 0
    skipped_records: int = 0  # not UTF-8, malformed or non-string records dropped in skip mode
    messages: list[str] = field(default_factory=list)  # the first few skip reasons, for the report

    def skip(self, message: str, on_error: str) -> None:
        if on_error == "raise":
            raise DataError(message)
        self.skipped_records += 1
        if len(self.messages) < _MAX_KEPT_MESSAGES:
            self.messages.append(message)


def expand_inputs(inputs: Iterable[str | os.PathLike]) -> list[str]:
    """Resolve directories into their supported files and check that every local path exists."""
    out: list[str] = []
    for item in inputs:
        spec = str(item)
        if spec.startswith(("hf:", "stdlib:")):
            out.append(spec)
            continue
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES)
            if not found:
                raise DataError(f"{path}: directory holds no {', '.join(FILE_SUFFIXES)} files")
            out.extend(str(p) for p in found)
        elif not path.exists():
            raise DataError(f"{path}: no such file")
        elif path.suffix.lower() not in FILE_SUFFIXES:
            raise DataError(
                f"{path}: unsupported file type {path.suffix!r}; expected one of {', '.join(FILE_SUFFIXES)}"
            )
        else:
            out.append(spec)
    if not out:
        raise DataError("no inputs given")
    return out


def iter_documents(
    inputs: Iterable[str | os.PathLike],
    *,
    text_column: str = "text",
    txt_mode: str = "auto",
    on_error: str = "raise",
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """Yield every document of ``inputs`` in order (deterministic for local files and the stdlib corpus)."""
    if txt_mode not in TXT_MODES:
        raise DataError(f"txt_mode must be one of {', '.join(TXT_MODES)}; got {txt_mode!r}")
    if on_error not in ON_ERROR:
        raise DataError(f"on_error must be one of {', '.join(ON_ERROR)}; got {on_error!r}")
    stats = stats if stats is not None else ReadStats()
    for spec in expand_inputs(inputs):
        stats.files += 1
        count, skipped_before = 0, stats.skipped_records
        for doc in _read_one(spec, text_column, txt_mode, on_error, stats):
            count += 1
            stats.documents += 1
            yield doc
        if count == 0 and stats.skipped_records == skipped_before:  # nothing at all, not only bad records
            if on_error == "raise":
                raise DataError(f"{spec}: empty input (no documents); use on_error='skip' to skip it")
            stats.empty_files += 1


def _read_one(spec: str, text_column: str, txt_mode: str, on_error: str, stats: ReadStats) -> Iterator[str]:
    if spec.startswith("stdlib:"):
        names = [n for n in spec[len("stdlib:") :].split(",") if n]
        return iter_stdlib_documents(modules=names or None)
    if spec.startswith("hf:"):
        return read_hf(spec, text_column, on_error=on_error, stats=stats)
    suffix = Path(spec).suffix.lower()
    if suffix == ".txt":
        return read_txt(spec, mode=txt_mode, on_error=on_error, stats=stats)
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(spec, text_column, on_error=on_error, stats=stats)
    if suffix == ".csv":
        return read_csv(spec, text_column, on_error=on_error, stats=stats)
    return read_parquet(spec, text_column, on_error=on_error, stats=stats)


class _Lines:
    """A binary file read as UTF-8 lines, with their 1-based numbers.

    Undecodable lines raise :class:`DataError` naming file and line, or (skip mode) are decoded with
    replacement characters and flagged in ``bad`` so the caller drops the record holding them.
    """

    def __init__(self, path: str, on_error: str):
        self.path, self.on_error = path, on_error
        self.lineno = 0
        self.bad = 0  # number of the last undecodable line not yet claimed by a record

    def __iter__(self) -> Iterator[str]:
        with open(self.path, "rb") as f:
            for raw in f:
                self.lineno += 1
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    message = f"{self.path}:{self.lineno}: not valid UTF-8 ({e.reason} at byte {e.start})"
                    if self.on_error == "raise":
                        raise DataError(message) from None
                    self.bad = self.lineno
                    line = raw.decode("utf-8", errors="replace")
                if self.lineno == 1:
                    line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not text
                yield line

    def take_bad(self) -> int:
        """The bad line seen since the last call, or 0 (and reset)."""
        bad, self.bad = self.bad, 0
        return bad


def txt_has_separators(path: str | os.PathLike) -> bool:
    """Whether a blank line stands between two non-blank lines of the file (blank lines at its ends do not count).

    Reads only up to the first such blank line; a file without one is read to its end.
    """
    seen_text = blank_after_text = False
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                if blank_after_text:
                    return True
                seen_text = True
            elif seen_text:
                blank_after_text = True
    return False


def resolve_txt_mode(path: str, mode: str) -> str:
    """``paragraph`` or ``line`` for this file; ``auto`` picks line mode when no blank line separates text."""
    if mode != "auto":
        return mode
    if txt_has_separators(path):
        return "paragraph"
    logger.warning(
        "%s: no blank lines, so each line is read as one document (txt_mode 'line'); "
        "use --txt-mode paragraph to read the whole file as one document",
        path,
    )
    return "line"


def read_txt(path: str, *, mode: str = "auto", on_error: str = "raise", stats: ReadStats) -> Iterator[str]:
    """Documents of a text file: blank-line separated paragraphs, one per line, or ``auto`` (see the module)."""
    mode = resolve_txt_mode(path, mode)
    lines = _Lines(path, on_error)
    block: list[str] = []
    for line in lines:
        text = line.rstrip("\r\n")
        if mode == "line" or not text.strip():
            if mode == "line" and text.strip():
                block.append(text)
            if block:
                yield from _emit(block, lines, stats, on_error)
                block = []
        else:
            block.append(text)
    if block:
        yield from _emit(block, lines, stats, on_error)


def _emit(block: list[str], lines: _Lines, stats: ReadStats, on_error: str) -> Iterator[str]:
    bad = lines.take_bad()
    if bad:
        stats.skip(f"{lines.path}:{bad}: document with invalid UTF-8 skipped", on_error)
    else:
        yield "\n".join(block)


def json_objects(path: str | os.PathLike, what: str = "input file") -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file, strictly: a missing file, invalid
    UTF-8, invalid JSON or a line that is not a JSON object raises :class:`DataError` naming ``what``, the file
    and the line (the lenient reader of corpora is :func:`read_jsonl`)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist")
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{where}: not valid UTF-8 (column {err.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line.removeprefix("\ufeff"))
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not valid JSON ({err.msg}, column {err.colno})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def read_jsonl(path: str, text_column: str, *, on_error: str = "raise", stats: ReadStats) -> Iterator[str]:
    """The ``text_column`` field of each JSON object of a JSON-lines file (blank lines ignored)."""
    lines = _Lines(path, on_error)
    first = True
    for line in lines:
        if not line.strip():
            continue
        where = f"{path}:{lines.lineno}"
        if lines.take_bad():
            stats.skip(f"{where}: record with invalid UTF-8 skipped", on_error)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            stats.skip(f"{where}: invalid JSON ({e.msg})", on_error)
            continue
        if not isinstance(record, dict):
            stats.skip(f"{where}: expected a JSON object, got {type(record).__name__}", on_error)
            continue
        if text_column not in record:
            message = f"{where}: no column {text_column!r}; available: {', '.join(map(str, record))}"
            if first:  # a wrong column name is a configuration mistake, never silently skipped
                raise DataError(message)
            stats.skip(message, on_error)
            continue
        first = False
        yield from _text_value(record[text_column], where, stats, on_error)


def _text_value(value: object, where: str, stats: ReadStats, on_error: str) -> Iterator[str]:
    if isinstance(value, str):
        if not value.isascii():
            try:  # JSON escapes can spell lone surrogates, which no tokenizer accepts
                value.encode("utf-8")
            except UnicodeEncodeError:
                stats.skip(f"{where}: text holds an unpaired surrogate escape", on_error)
                return
        yield value
    else:
        stats.skip(f"{where}: text is {type(value).__name__}, not a string", on_error)


def read_csv(path: str, text_column: str, *, on_error: str = "raise", stats: ReadStats) -> Iterator[str]:
    """The ``text_column`` cell of each row of a CSV file with a header (quoted multi-line cells work)."""
    # Web documents exceed csv's default 128 KiB cell limit.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    lines = _Lines(path, on_error)
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        return
    if text_column not in header:
        raise DataError(f"{path}: no column {text_column!r}; available: {', '.join(header)}")
    column = header.index(text_column)
    lines.take_bad()
    for row in reader:
        where = f"{path}:{lines.lineno}"
        if lines.take_bad():  # csv pulls exactly the lines of this row, so the flag belongs to it
            stats.skip(f"{where}: row with invalid UTF-8 skipped", on_error)
        elif column >= len(row):
            stats.skip(f"{where}: row has {len(row)} cells, no {text_column!r}", on_error)
        else:
            yield row[column]


def read_parquet(
    path: str, text_column: str, *, on_error: str = "raise", stats: ReadStats, batch_rows: int = 8192
) -> Iterator[str]:
    """The ``text_column`` of a Parquet file, read in record batches (Arrow strings are valid UTF-8)."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    if text_column not in names:
        raise DataError(f"{path}: no column {text_column!r}; available: {', '.join(names)}")
    row = 0
    for batch in file.iter_batches(batch_size=batch_rows, columns=[text_column]):
        for value in batch.column(0).to_pylist():
            row += 1
            yield from _text_value(value, f"{path}: row {row}", stats, on_error)


def read_hf(spec: str, text_column: str, *, on_error: str = "raise", stats: ReadStats) -> Iterator[str]:
    """``hf:NAME[:CONFIG[:SPLIT]]``: a Hugging Face data set, streamed when the hub is reachable."""
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(f"{spec}: expected hf:NAME[:CONFIG[:SPLIT]]")
    name, config, split = parts[0], (parts[1:2] or [None])[0] or None, (parts[2:3] or ["train"])[0]
    import datasets

    # Offline, streaming cannot work; the local cache (if any) serves the data set instead.
    offline = any(os.environ.get(k, "0") not in ("", "0") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    try:
        data = datasets.load_dataset(name, config, split=split, streaming=not offline)
    except Exception as e:  # network, missing data set or config: report it as an input error
        raise DataError(f"{spec}: cannot load Hugging Face data set ({type(e).__name__}: {e})") from e
    columns = list(getattr(data, "column_names", None) or [])  # None for some streamed data sets
    if columns and text_column not in columns:
        raise DataError(f"{spec}: no column {text_column!r}; available: {', '.join(columns)}")
    for i, row in enumerate(data, 1):
        if text_column not in row:
            raise DataError(f"{spec}: no column {text_column!r}; available: {', '.join(row)}")
        yield from _text_value(row[text_column], f"{spec}: row {i}", stats, on_error)
