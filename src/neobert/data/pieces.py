"""Inputs cut into pieces that workers read on their own: one pass counts each file's records and notes where
every ``step``-th one starts; a piece is then a run of records that a reader reaches by seeking there.

Both jobs of :mod:`neobert.jobs` plan with :func:`plan_file` (one file per call, so a cluster plans files in
parallel): corpus embedding cuts each file into pieces of its own (:func:`file_pieces`), data preparation
cuts the whole input stream into shards of ``shard_size`` documents that may span files
(:func:`stream_pieces`), exactly as its single-process reader counts them. The plan reads every record once,
so bad input is found (and, with ``on_error="skip"``, counted) before any model or tokenizer runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .readers import (
    MAX_KEPT_MESSAGES,
    DataError,
    Position,
    ReadStats,
    Record,
    file_records,
    file_size,
    is_url,
    read_records,
    resolve_txt_mode,
)

ON_DUPLICATE = ("refuse", "keep-first")


@dataclass
class FilePlan:
    """One input's records: how many, where every ``step``-th starts, its size and what its reader saw."""

    spec: str
    records: int
    step: int
    checkpoints: list[Position]  # checkpoints[k]: where record k * step starts
    txt_mode: str  # resolved (a .txt file in auto mode is read the same way by every piece)
    size: int  # bytes (0 for hf: / stdlib: inputs)
    stats: ReadStats = field(default_factory=ReadStats)
    # with an id column: each id's first record (index, row); the later records holding an id already seen
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    repeats: list[tuple[str, int, int]] = field(default_factory=list)  # (id, index, row)
    drop: frozenset[int] = frozenset()  # indexes of records left out (duplicate ids, keep-first)


def plan_file(
    spec: str,
    step: int,
    *,
    text_column: str = "text",
    txt_mode: str = "auto",
    on_error: str = "raise",
    empty: str = "allow",
    id_column: str | None = None,
) -> FilePlan:
    """Read one input through and note where every ``step``-th record starts."""
    if step < 1:
        raise ValueError(f"step must be positive, got {step}")
    local = not spec.startswith(("hf:", "stdlib:"))
    if spec.endswith(".txt"):
        txt_mode = resolve_txt_mode(spec, txt_mode)
    stats, checkpoints, count = ReadStats(), [], 0
    keys: dict[str, tuple[int, int]] = {}
    repeats = []
    for record in file_records(spec, text_column, txt_mode, on_error, stats, empty, id_column):
        if count % step == 0:
            checkpoints.append(record.start)
        if record.key is not None:
            if record.key in keys:
                repeats.append((record.key, count, record.row))
            else:
                keys[record.key] = (count, record.row)
        count += 1
    size = file_size(spec) if local or is_url(spec) else 0
    return FilePlan(spec, count, step, checkpoints, txt_mode, size, stats, keys, repeats)


def check_columns(specs: Sequence[str], text_column: str = "text", id_column: str | None = None) -> None:
    """Each input's columns (a table's header or first record), in this process: a missing column stops
    the job here, before a cluster starts to plan the inputs whole."""
    for spec in specs:
        if spec.startswith(("hf:", "stdlib:")) or (spec.endswith(".txt") and id_column is None):
            continue  # hf: loads a data set; a text file has no columns
        records = read_records(spec, text_column, "line", "skip", ReadStats(), id_column=id_column)
        next(iter(records), None)


@dataclass
class Duplicates:
    """Records whose id an earlier record (in input order) already holds."""

    count: int = 0
    messages: list[str] = field(default_factory=list)  # the first few, each naming both rows


def duplicate_ids(plans: Sequence[FilePlan], policy: str) -> Duplicates:
    """Every record whose id came before, across all inputs: ``refuse`` raises naming both rows of the first;
    ``keep-first`` marks the later ones dropped (``plan.drop``) and counts them."""
    if policy not in ON_DUPLICATE:
        raise DataError(f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}; got {policy!r}")
    seen: dict[str, tuple[str, int]] = {}
    found = Duplicates()
    for plan in plans:
        later = [(key, index, row) for key, (index, row) in plan.keys.items() if key in seen]
        for key, index, row in sorted([*later, *plan.repeats], key=lambda r: r[1]):
            where = seen.get(key) or (plan.spec, plan.keys[key][1])
            message = f"{plan.spec}:{row}: id {key!r} already at {where[0]}:{where[1]}"
            if policy == "refuse":
                raise DataError(f"{message}; ids must be unique (--on-duplicate keep-first keeps the first)")
            found.count += 1
            if len(found.messages) < MAX_KEPT_MESSAGES:
                found.messages.append(message)
            plan.drop = plan.drop | {index}
        for key, (_, row) in plan.keys.items():
            seen.setdefault(key, (plan.spec, row))
    return found


@dataclass(frozen=True)
class Part:
    """Records ``first`` to ``first + count - 1`` of one input."""

    spec: str
    first: int
    count: int
    start: Position  # the checkpoint at or before record ``first``
    skip: int  # records between the checkpoint and ``first``
    txt_mode: str
    drop: frozenset[int] = frozenset()  # records of the part left out, counted from ``first``

    @property
    def records(self) -> int:
        return self.count - len(self.drop)


@dataclass(frozen=True)
class Piece:
    """A unit of work: its name (the output shard's), its index and the parts of the inputs it covers."""

    name: str
    index: int
    parts: tuple[Part, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.parts)


def part_of(plan: FilePlan, first: int, count: int) -> Part:
    k = first // plan.step
    drop = frozenset(i - first for i in plan.drop if first <= i < first + count)
    return Part(plan.spec, first, count, plan.checkpoints[k], first - k * plan.step, plan.txt_mode, drop)


def file_pieces(plans: Sequence[FilePlan], size: int) -> list[Piece]:
    """Each file cut into pieces of ``size`` records (the last one shorter): ``part-FFFFF-PPPPP``."""
    pieces = []
    for f, plan in enumerate(plans):
        for p, first in enumerate(range(0, plan.records, size)):
            part = part_of(plan, first, min(size, plan.records - first))
            if part.records == 0:  # every record of it dropped
                continue
            pieces.append(Piece(f"part-{f:05d}-{p:05d}", len(pieces), (part,)))
    return pieces


def stream_pieces(plans: Sequence[FilePlan], size: int) -> list[Piece]:
    """The inputs read one after the other, cut every ``size`` records (pieces may span files)."""
    pieces: list[Piece] = []
    parts: list[Part] = []
    room = size
    for plan in plans:
        first = 0
        while first < plan.records:
            count = min(room, plan.records - first)
            parts.append(part_of(plan, first, count))
            first, room = first + count, room - count
            if room == 0:
                pieces.append(Piece(f"{len(pieces):05d}", len(pieces), tuple(parts)))
                parts, room = [], size
    if parts:
        pieces.append(Piece(f"{len(pieces):05d}", len(pieces), tuple(parts)))
    return pieces


def read_piece(
    piece: Piece,
    text_column: str = "text",
    on_error: str = "raise",
    empty: str = "allow",
    id_column: str | None = None,
) -> Iterator[tuple[str, Record]]:
    """(input, record) for every record of the piece, in order (read as the plan read them)."""
    for part in piece.parts:
        stats = ReadStats()  # the plan counted these already
        records = read_records(
            part.spec, text_column, part.txt_mode, on_error, stats, part.start, empty, id_column
        )
        for i, record in enumerate(itertools.islice(records, part.skip, part.skip + part.count)):
            if i not in part.drop:
                yield part.spec, record


def merged_stats(plans: Sequence[FilePlan]) -> ReadStats:
    """What the readers saw over all inputs, as one pass through them in order would count it."""
    out = ReadStats()
    for plan in plans:
        for name in ("files", "documents", "empty_files", "skipped_records"):
            setattr(out, name, getattr(out, name) + getattr(plan.stats, name))
        out.messages.extend(plan.stats.messages[: max(0, MAX_KEPT_MESSAGES - len(out.messages))])
    return out
