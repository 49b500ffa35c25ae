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
- a directory: every file above found under it, in sorted order; a glob (``corpus/*.jsonl``) the same.
- any of those behind a URL (``s3://bucket/corpus/``, ``gs://...``, ``file:///...``): opened through fsspec,
  for every protocol whose filesystem library is installed (``s3fs`` for ``s3://``, ``gcsfs`` for ``gs://``).
- ``hf:NAME[:CONFIG[:SPLIT]]``: a Hugging Face data set (split ``train`` by default), streamed unless
  ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` is set, in which case the local cache is used.
- ``stdlib:`` or ``stdlib:json,email``: the docstring corpus of the running interpreter
  (see :mod:`neobert.data.corpus`), optionally only some top-level modules.

Every record carries where it starts (:class:`Position`: the bytes and lines before it, or the rows before it
in a parquet file), so a reader can start at a record in the middle of a file (:func:`read_records`): that
is how the jobs of :mod:`neobert.jobs` cut one file into pieces read by several workers.

Bad input is either an error naming the file and line (``on_error="raise"``) or skipped and counted in
:class:`ReadStats` (``on_error="skip"``): files that are not UTF-8, malformed JSON records, records whose
text is not a string, and empty files. A missing text column is a configuration mistake and always raises,
listing the columns that exist.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NamedTuple

from .corpus import iter_stdlib_documents

FILE_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".csv", ".parquet")
TXT_MODES = ("auto", "paragraph", "line")
ON_ERROR = ("raise", "skip")
MAX_KEPT_MESSAGES = 20

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
        if len(self.messages) < MAX_KEPT_MESSAGES:
            self.messages.append(message)


class Position(NamedTuple):
    """Where a record starts: the bytes and lines of its file before it (text files), or the rows before it
    (parquet; and records for ``hf:`` / ``stdlib:`` inputs, which are read from their start)."""

    offset: int = 0
    line: int = 0


class Record(NamedTuple):
    """One text of an input, its 1-based row (the line it starts on; the row of a parquet file or data set),
    where it starts, and the value of the id column when one is asked for (else None)."""

    text: str
    row: int
    start: Position
    key: str | None = None


def is_url(spec: str) -> bool:
    """Whether ``spec`` names a file through a protocol (``s3://``, ``gs://``, ``file://`` ...)."""
    return "://" in spec


def _filesystem(spec: str):
    import fsspec

    try:
        return fsspec.core.url_to_fs(spec)
    except (ImportError, ValueError) as e:  # the protocol's library is not installed, or unknown
        raise DataError(f"{spec}: cannot open this URL ({e})") from None


def open_binary(spec: str) -> IO[bytes]:
    """A local path or a URL (fsspec), opened for reading bytes."""
    if not is_url(spec):
        return open(spec, "rb")
    fs, path = _filesystem(spec)
    return fs.open(path, "rb")


def file_size(spec: str) -> int:
    if not is_url(spec):
        return os.path.getsize(spec)
    fs, path = _filesystem(spec)
    return int(fs.size(path))


def _expand_url(spec: str) -> list[str]:
    fs, path = _filesystem(spec)
    protocol = spec.split("://", 1)[0]
    if glob.has_magic(path):
        found = fs.glob(path)
    elif fs.isdir(path):
        found = fs.find(path)
    elif fs.exists(path):
        return [spec]
    else:
        raise DataError(f"{spec}: no such file")
    files = sorted(f for f in found if Path(f).suffix.lower() in FILE_SUFFIXES and not fs.isdir(f))
    if not files:
        raise DataError(f"{spec}: holds no {', '.join(FILE_SUFFIXES)} files")
    return [f"{protocol}://{f.removeprefix(protocol + '://')}" for f in files]


# What a neobert job writes beside its output (embed: ``_manifest.json``, prepare: ``manifest.json``), with a
# ``format`` starting "neobert": such a directory is output, never input.
JOB_MANIFESTS = ("_manifest.json", "manifest.json")


def job_output(directory: Path) -> Path | None:
    """The neobert manifest ``directory`` holds, or None."""
    for name in JOB_MANIFESTS:
        path = directory / name
        if not path.is_file():
            continue
        try:
            kind = json.loads(path.read_text(encoding="utf-8")).get("format", "")
        except (OSError, ValueError, AttributeError):
            continue
        if str(kind).startswith("neobert"):
            return path
    return None


class _Outputs:
    """Which local paths lie inside a job's output: ``exclude`` (this job's output directories) or a directory
    holding a neobert manifest; every directory asked once."""

    def __init__(self, exclude: Iterable[str | os.PathLike]):
        self.exclude = {Path(p).resolve() for p in exclude if not is_url(str(p))}
        self.known: dict[Path, Path | None] = {}

    def holder(self, path: str | os.PathLike) -> Path | None:
        """The output directory (or manifest) that holds ``path``, or None."""
        resolved = Path(path).resolve()
        for directory in [resolved, *resolved.parents]:
            if directory in self.exclude:
                return directory
            if directory not in self.known:
                self.known[directory] = job_output(directory) if directory.is_dir() else None
            if self.known[directory] is not None:
                return self.known[directory]
        return None


def expand_inputs(
    inputs: Iterable[str | os.PathLike], exclude: Iterable[str | os.PathLike] = ()
) -> list[str]:
    """Resolve directories and globs into their supported files (sorted) and check that every path exists.

    Files inside ``exclude`` (the job's own output) or inside any directory holding a neobert job's manifest
    are output, never input: a directory or glob leaves them out, and a file named alone is refused.
    """
    outputs = _Outputs(exclude)
    out: list[str] = []
    for item in inputs:
        spec = str(item)
        if spec.startswith(("hf:", "stdlib:")):
            out.append(spec)
            continue
        if is_url(spec):
            out.extend(_expand_url(spec))
            continue
        found = _expand_local(spec)
        if len(found) == 1 and found[0] == spec and (holder := outputs.holder(spec)) is not None:
            raise DataError(
                f"{spec}: inside a neobert job's output ({holder}); outputs are never read as input"
            )
        kept = [path for path in found if outputs.holder(path) is None]
        if not kept:
            raise DataError(
                f"{spec}: holds only a neobert job's output ({outputs.holder(found[0])}), never read as input"
            )
        out.extend(kept)
    if not out:
        raise DataError("no inputs given")
    return out


def _expand_local(spec: str) -> list[str]:
    if glob.has_magic(spec):
        found = sorted(
            p
            for p in glob.glob(spec, recursive=True)
            if Path(p).is_file() and Path(p).suffix.lower() in FILE_SUFFIXES
        )
        if not found:
            raise DataError(f"{spec}: the pattern matches no {', '.join(FILE_SUFFIXES)} files")
        return found
    if Path(spec).is_dir():
        found = sorted(
            str(p) for p in Path(spec).rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES
        )
        if not found:
            raise DataError(f"{spec}: directory holds no {', '.join(FILE_SUFFIXES)} files")
        return found
    if not Path(spec).exists():
        raise DataError(f"{spec}: no such file")
    if Path(spec).suffix.lower() not in FILE_SUFFIXES:
        raise DataError(
            f"{spec}: unsupported file type {Path(spec).suffix!r}; expected one of {', '.join(FILE_SUFFIXES)}"
        )
    return [spec]


def iter_documents(
    inputs: Iterable[str | os.PathLike],
    *,
    text_column: str = "text",
    txt_mode: str = "auto",
    on_error: str = "raise",
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """Yield every document of ``inputs`` in order (deterministic for local files and the stdlib corpus)."""
    check_modes(txt_mode, on_error)
    stats = stats if stats is not None else ReadStats()
    for spec in expand_inputs(inputs):
        for record in file_records(spec, text_column, txt_mode, on_error, stats):
            yield record.text


def check_modes(txt_mode: str, on_error: str) -> None:
    if txt_mode not in TXT_MODES:
        raise DataError(f"txt_mode must be one of {', '.join(TXT_MODES)}; got {txt_mode!r}")
    if on_error not in ON_ERROR:
        raise DataError(f"on_error must be one of {', '.join(ON_ERROR)}; got {on_error!r}")


def file_records(
    spec: str,
    text_column: str,
    txt_mode: str,
    on_error: str,
    stats: ReadStats,
    empty: str = "allow",
    id_column: str | None = None,
) -> Iterator[Record]:
    """Every record of one input from its start, counted in ``stats``: a file without any is an error
    (``on_error="raise"``) or counted as empty. ``empty`` as in :func:`read_records`."""
    stats.files += 1
    texts, skipped_before = 0, stats.skipped_records
    for record in read_records(
        spec, text_column, txt_mode, on_error, stats, empty=empty, id_column=id_column
    ):
        texts += empty != "keep" or bool(record.text.strip())
        stats.documents += 1
        yield record
    if texts == 0 and stats.skipped_records == skipped_before:  # nothing at all, not only bad records
        if on_error == "raise":
            raise DataError(f"{spec}: empty input (no documents); use --on-error skip to skip it")
        stats.empty_files += 1


def read_records(
    spec: str,
    text_column: str = "text",
    txt_mode: str = "auto",
    on_error: str = "raise",
    stats: ReadStats | None = None,
    start: Position | None = None,
    empty: str = "allow",
    id_column: str | None = None,
) -> Iterator[Record]:
    """The records of one input, from its start or from the record that starts at ``start`` (a
    :class:`Position` an earlier read of the same file gave; ``txt_mode`` must then be resolved).

    ``empty="refuse"``: a blank text is a bad record (an error naming file and row, or skipped and counted),
    and every line of a line-mode ``.txt`` file is a record, so that row i is line i; ``empty="keep"``: every
    line is a record too, a blank one an empty text (a file of blank lines only is an empty input). ``id_column``: each
    record's ``key`` is that column's value as a string (tables only).
    """
    stats = stats if stats is not None else ReadStats()
    suffix = Path(spec).suffix.lower()
    if id_column is not None and (spec.startswith("stdlib:") or suffix == ".txt"):
        raise DataError(
            f"{spec}: an id column needs a table (.jsonl, .csv, .parquet); this input has no columns"
        )
    if spec.startswith(("stdlib:", "hf:")):
        if spec.startswith("stdlib:"):
            names = [n for n in spec[len("stdlib:") :].split(",") if n]
            documents = enumerate(iter_stdlib_documents(modules=names or None))
            records = (Record(t, i + 1, Position(i)) for i, t in documents)
        else:
            records = read_hf(spec, text_column, on_error=on_error, stats=stats, id_column=id_column)
        skip = start.offset if start is not None else 0  # no seeking in these: read up to the record
        records = (r for r in records if r.start.offset >= skip)
    elif suffix == ".txt":
        keep_blank = empty in ("refuse", "keep")
        records = read_txt(
            spec, mode=txt_mode, on_error=on_error, stats=stats, start=start, keep_blank=keep_blank
        )
    elif suffix in (".jsonl", ".ndjson"):
        records = read_jsonl(
            spec, text_column, on_error=on_error, stats=stats, start=start, id_column=id_column
        )
    elif suffix == ".csv":
        records = read_csv(
            spec, text_column, on_error=on_error, stats=stats, start=start, id_column=id_column
        )
    else:
        records = read_parquet(
            spec, text_column, on_error=on_error, stats=stats, start=start, id_column=id_column
        )
    return _refuse_empty(records, spec, stats, on_error) if empty == "refuse" else records


def _refuse_empty(records: Iterator[Record], spec: str, stats: ReadStats, on_error: str) -> Iterator[Record]:
    for record in records:
        if record.text.strip():
            yield record
        else:
            stats.skip(f"{spec}:{record.row}: empty text", on_error)


class _Lines:
    """A binary file read as UTF-8 lines, with their 1-based numbers and byte offsets.

    Undecodable lines raise :class:`DataError` naming file and line, or (skip mode) are decoded with
    replacement characters and flagged in ``bad`` so the caller drops the record holding them. ``start``
    begins at a line an earlier read reported (``position``: the line about to be read).
    """

    def __init__(self, path: str, on_error: str, start: Position | None = None):
        self.path, self.on_error = path, on_error
        start = start or Position()
        self.offset, self.lineno = start.offset, start.line  # before the next line
        self.bad = 0  # number of the last undecodable line not yet claimed by a record

    @property
    def position(self) -> Position:
        return Position(self.offset, self.lineno)

    def __iter__(self) -> Iterator[str]:
        with open_binary(self.path) as f:
            if self.offset:
                f.seek(self.offset)
            for raw in f:
                self.lineno += 1
                self.offset += len(raw)
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
    with open_binary(str(path)) as f:
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


def read_txt(
    path: str,
    *,
    mode: str = "auto",
    on_error: str = "raise",
    stats: ReadStats,
    start: Position | None = None,
    keep_blank: bool = False,
) -> Iterator[Record]:
    """Documents of a text file: blank-line separated paragraphs, one per line, or ``auto`` (see the module).

    ``keep_blank`` (line mode): a blank line is a record too, an empty text (one text per line, row i is line i).
    """
    mode = resolve_txt_mode(path, mode)
    lines = _Lines(path, on_error, start)
    block: list[str] = []
    first = lines.position  # where the block starts
    for line in lines:
        text = line.rstrip("\r\n")
        if mode == "line":
            if text.strip() or keep_blank:
                yield from _emit([text], lines, stats, on_error, first)
            else:
                lines.take_bad()
        elif not text.strip():
            if block:
                yield from _emit(block, lines, stats, on_error, first)
                block = []
        else:
            block.append(text)
            continue
        first = lines.position
    if block:
        yield from _emit(block, lines, stats, on_error, first)


def _emit(
    block: list[str], lines: _Lines, stats: ReadStats, on_error: str, first: Position
) -> Iterator[Record]:
    bad = lines.take_bad()
    if bad:
        stats.skip(f"{lines.path}:{bad}: document with invalid UTF-8 skipped", on_error)
    else:
        yield Record("\n".join(block), first.line + 1, first)


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


def read_jsonl(
    path: str,
    text_column: str,
    *,
    on_error: str = "raise",
    stats: ReadStats,
    start: Position | None = None,
    id_column: str | None = None,
) -> Iterator[Record]:
    """The ``text_column`` field of each JSON object of a JSON-lines file (blank lines ignored)."""
    lines = _Lines(path, on_error, start)
    first = start is None  # a file read from its start checks the column on its first record
    begin = lines.position
    for line in lines:
        where, at = f"{path}:{lines.lineno}", begin
        begin = lines.position
        if not line.strip():
            continue
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
        missing = [c for c in (text_column, id_column) if c is not None and c not in record]
        if missing:
            message = f"{where}: no column {missing[0]!r}; available: {', '.join(map(str, record))}"
            if first:  # a wrong column name is a configuration mistake, never silently skipped
                raise DataError(message)
            stats.skip(message, on_error)
            continue
        first = False
        key = record[id_column] if id_column is not None else None
        yield from _text_value(record[text_column], where, stats, on_error, at.line + 1, at, key, id_column)


def _text_value(
    value: object,
    where: str,
    stats: ReadStats,
    on_error: str,
    row: int,
    start: Position,
    key: object = None,
    id_column: str | None = None,
) -> Iterator[Record]:
    if id_column is not None and (key is None or key == ""):
        stats.skip(f"{where}: the id column {id_column!r} is empty", on_error)
        return
    if isinstance(value, str):
        if not value.isascii():
            try:  # JSON escapes can spell lone surrogates, which no tokenizer accepts
                value.encode("utf-8")
            except UnicodeEncodeError:
                stats.skip(f"{where}: text holds an unpaired surrogate escape", on_error)
                return
        yield Record(value, row, start, None if id_column is None else str(key))
    else:
        stats.skip(f"{where}: text is {type(value).__name__}, not a string", on_error)


def read_csv(
    path: str,
    text_column: str,
    *,
    on_error: str = "raise",
    stats: ReadStats,
    start: Position | None = None,
    id_column: str | None = None,
) -> Iterator[Record]:
    """The ``text_column`` cell of each row of a CSV file with a header (quoted multi-line cells work)."""
    # Web documents exceed csv's default 128 KiB cell limit.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    header = next(csv.reader(_Lines(path, on_error)), None)  # the header, also when starting further on
    if header is None:
        return
    for name in (text_column, id_column):
        if name is not None and name not in header:
            raise DataError(f"{path}: no column {name!r}; available: {', '.join(header)}")
    column = header.index(text_column)
    key = header.index(id_column) if id_column is not None else None
    lines = _Lines(path, on_error, start)
    reader = csv.reader(lines)
    if start is None:
        next(reader)  # the header
    lines.take_bad()
    while True:
        at = lines.position  # csv pulls exactly the lines of one row: the next row starts here
        row = next(reader, None)
        if row is None:
            return
        where = f"{path}:{lines.lineno}"
        if lines.take_bad():  # the flag belongs to this row's lines
            stats.skip(f"{where}: row with invalid UTF-8 skipped", on_error)
        elif max(column, key or 0) >= len(row):
            stats.skip(f"{where}: row has {len(row)} cells, fewer than its header", on_error)
        else:
            value = row[key] if key is not None else None
            yield from _text_value(row[column], where, stats, on_error, at.line + 1, at, value, id_column)


def read_parquet(
    path: str,
    text_column: str,
    *,
    on_error: str = "raise",
    stats: ReadStats,
    batch_rows: int = 8192,
    start: Position | None = None,
    id_column: str | None = None,
) -> Iterator[Record]:
    """The ``text_column`` of a Parquet file, read in record batches (Arrow strings are valid UTF-8), from
    the row group holding ``start`` (rows before the record) on."""
    import pyarrow.parquet as pq

    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open_binary(path)) if is_url(path) else path
        try:
            file = pq.ParquetFile(handle)
        except Exception as e:  # not parquet, or a truncated file: its footer is missing
            raise DataError(f"{path}: cannot read as parquet ({e})") from None
        names = file.schema_arrow.names
        columns = [c for c in (text_column, id_column) if c is not None]
        for name in columns:
            if name not in names:
                raise DataError(f"{path}: no column {name!r}; available: {', '.join(names)}")
        skip, groups, row = (start.offset if start else 0), [], 0
        for g in range(file.num_row_groups):
            size = file.metadata.row_group(g).num_rows
            if groups or row + size > skip:
                groups.append(g)
            else:  # wholly before the record: not read at all
                row += size
        if not groups:
            return
        for batch in file.iter_batches(batch_size=batch_rows, columns=columns, row_groups=groups):
            keys = batch.column(1).to_pylist() if id_column is not None else itertools.repeat(None)
            for value, key in zip(batch.column(0).to_pylist(), keys):
                row += 1
                if row > skip:
                    where = f"{path}: row {row}"
                    yield from _text_value(
                        value, where, stats, on_error, row, Position(row - 1), key, id_column
                    )


def read_hf(
    spec: str, text_column: str, *, on_error: str = "raise", stats: ReadStats, id_column: str | None = None
) -> Iterator[Record]:
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
        for name in (text_column, id_column):
            if name is not None and name not in row:
                raise DataError(f"{spec}: no column {name!r}; available: {', '.join(row)}")
        key = row[id_column] if id_column is not None else None
        yield from _text_value(
            row[text_column], f"{spec}: row {i}", stats, on_error, i, Position(i - 1), key, id_column
        )
