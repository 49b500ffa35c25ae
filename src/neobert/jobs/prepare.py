"""``neobert data prepare``: whole documents tokenized into compact, memory-mapped shards for pretraining, in
this process or by Ray workers, with the same output.

Shard k holds documents ``k * shard_size`` to ``(k + 1) * shard_size - 1`` of the input stream (counted before
short documents are dropped). Whether a document is held out depends only on a hash of its text, so the split
does not move when the sharding or the input order changes, and duplicates never straddle it. The format of
the output is described in :mod:`neobert.data.shards`.

The local engine reads the inputs as one stream in a background thread, tokenizes it in batches with the Rust
tokenizer (which spreads each batch over all cores) and cuts it every ``shard_size`` documents. The Ray engine
plans every input first (:func:`neobert.data.pieces.plan_file`, one Ray task per file: its documents counted,
every :data:`PLAN_STEP`-th one's position noted), cuts the stream at the same documents
(:func:`neobert.data.pieces.stream_pieces`), and each shard is read (seeking to its first document) and written
by :func:`write_shard` in a Ray actor (:class:`ShardTokenizer`): the same files, the same validation split and
the same manifest as the local engine. A re-run with the same settings resumes by shard under either engine
(the local one re-reads the inputs but skips the tokenization of recorded shards; an interrupted shard is
redone). The output directory must be one that every worker can write (a shared filesystem on a cluster).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.config import ConfigError, check_known_keys, load_mapping
from ..common.io import output_lock, write_dir
from ..common.progress import progress_bar
from ..common.tables import markdown_table
from ..data.pieces import Piece, check_columns, merged_stats, plan_file, read_piece, stream_pieces
from ..data.readers import ON_ERROR, TXT_MODES, DataError, ReadStats, expand_inputs, iter_documents
from ..data.shards import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SPLITS,
    ShardWriter,
    remove_prepared,
    token_dtype,
    totals,
)
from ..data.tokenizer import tokenizer_backend
from .engine import Engine, count_tokens, engine_of, progress, shared_output
from .output import JobOutput
from .settings import EngineSettings

PLAN_STEP = 4096  # documents between two noted positions: a shard's reader skips fewer than this many


# Settings that change the shards' content; a resume under other values would mix two data sets.
_CONTENT_KEYS = (
    "inputs",
    "text_column",
    "txt_mode",
    "on_error",
    "validation_fraction",
    "shard_size",
    "min_tokens",
    "max_tokens",
    "split_seed",
)


@dataclass
class PrepareConfig(EngineSettings):
    """Settings of ``neobert data prepare``; a YAML/JSON file maps onto it 1:1 (unknown keys raise). The
    engine (``engine``, ``workers``, ...: :class:`~neobert.jobs.settings.EngineSettings`) is part of it."""

    inputs: list[str] = field(default_factory=list)  # files, directories, hf:NAME[:CONFIG[:SPLIT]], stdlib:
    tokenizer: str = ""  # a tokenizer directory, e.g. bert-base-uncased files (or a hub name when online)
    output: str = ""  # output directory for the shards
    text_column: str = "text"  # for .jsonl, .csv, .parquet and hf: inputs
    txt_mode: str = "auto"  # .txt documents: blank-line separated (paragraph), one per line, or auto
    on_error: str = "raise"  # bad records / empty files: raise naming file and line, or skip and count
    validation_fraction: float = 0.01  # held-out share of documents
    shard_size: int = 100_000  # input documents per shard
    batch_size: int = 1_000  # documents per tokenizer call (the tokenizer parallelizes within a batch)
    min_tokens: int = 2  # documents with fewer tokens (not counting [CLS]/[SEP]) are dropped and counted
    max_tokens: int | None = None  # truncate documents (special tokens included); None keeps them whole
    # documents longer than N tokens, counted per split (summary and manifest): the sizes of the stage-2
    # sub-sets that a pretraining data.mixture key "gtN" samples
    length_thresholds: list[int] = field(default_factory=lambda: [1024, 2048])
    split_seed: int = 0  # salt of the validation hash: another seed draws another held-out set
    overwrite: bool = False  # delete shards prepared earlier with other settings instead of refusing
    progress: bool = True  # a progress bar

    def __post_init__(self) -> None:
        EngineSettings.__post_init__(self)
        if isinstance(self.inputs, (str, os.PathLike)):
            self.inputs = [self.inputs]
        self.inputs = [str(i) for i in self.inputs]
        self.tokenizer, self.output = str(self.tokenizer), str(self.output)
        if self.txt_mode not in TXT_MODES:
            raise ConfigError(f"txt_mode must be one of {', '.join(TXT_MODES)}; got {self.txt_mode!r}")
        if self.on_error not in ON_ERROR:
            raise ConfigError(f"on_error must be one of {', '.join(ON_ERROR)}; got {self.on_error!r}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        for name in ("shard_size", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.max_tokens is not None and self.max_tokens < 2 + self.min_tokens:
            raise ConfigError(f"max_tokens {self.max_tokens} leaves no room for min_tokens {self.min_tokens}")
        self.length_thresholds = sorted(int(t) for t in self.length_thresholds)

    def check_required(self) -> None:
        missing = [n for n in ("inputs", "tokenizer", "output") if not getattr(self, n)]
        if missing:
            raise ConfigError(f"prepare needs {', '.join(missing)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrepareConfig:
        check_known_keys(cls, data, "prepare config")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path | None, **changes: Any) -> PrepareConfig:
        """The settings file ``path`` (None: none) with ``changes`` laid over it."""
        return cls.from_dict({**(load_mapping(path) if path else {}), **changes})


@dataclass
class PrepareResult:
    output: Path
    shards_written: int  # by this run
    shards_resumed: int  # finished by an earlier run and skipped
    documents: int  # read from the inputs
    train_documents: int
    train_tokens: int
    validation_documents: int
    validation_tokens: int
    dropped_short: int
    skipped_records: int
    empty_files: int
    long_documents: dict[int, dict[str, int]]  # threshold -> split -> documents longer than it
    dtype: str
    vocab_size: int
    seconds: float
    tokens_per_second: float  # tokens written by this run per second of this run
    work_seconds: float | None = (
        None  # --engine ray: first shard's start to last shard's end (start-up excluded)
    )

    @property
    def summary(self) -> str:
        """Documents and tokens per split, then what was read, dropped, written and how fast, for a person."""
        rows = [
            ["documents", f"{self.train_documents:,}", f"{self.validation_documents:,}"],
            ["tokens", f"{self.train_tokens:,}", f"{self.validation_tokens:,}"],
            *(
                [f"documents > {threshold} tokens", f"{n['train']:,}", f"{n['validation']:,}"]
                for threshold, n in self.long_documents.items()
            ),
        ]
        speed = f"{self.tokens_per_second:,.0f} tok/s" if self.shards_written else "all shards were done"
        run = [
            ["documents read", f"{self.documents:,}"],
            ["dropped (too short)", f"{self.dropped_short:,}"],
            ["skipped records / empty files", f"{self.skipped_records:,} / {self.empty_files:,}"],
            ["shards written / resumed", f"{self.shards_written} / {self.shards_resumed}"],
            ["dtype / vocabulary", f"{self.dtype} / {self.vocab_size:,}"],
            ["time / throughput", f"{self.seconds:.1f} s / {speed}"],
        ]
        return (
            f"prepared {self.output}\n\n"
            + markdown_table(["", "train", "validation"], rows)
            + "\n"
            + markdown_table(["run", ""], run)
        )


def prepare(config: PrepareConfig) -> PrepareResult:
    """Tokenize ``config.inputs`` into shards under ``config.output`` on the config's engine, resuming a
    previous run."""
    engine = engine_of(config)
    with output_lock(shared_output(config.output), config.wait):
        if engine.in_process:  # one stream read ahead of the tokenizer: no plan needed
            return _prepare_stream(config)
        return _prepare_in_pieces(config, engine)


def _prepare_stream(config: PrepareConfig) -> PrepareResult:
    """The local engine: the inputs read as one stream, ahead of the tokenizer, cut every ``shard_size``
    documents."""
    config.check_required()
    files = expand_inputs(
        config.inputs, exclude=[config.output]
    )  # a missing file fails before anything is written
    start = time.perf_counter()
    hf_tokenizer, encoder = tokenizer_backend(config.tokenizer, config.max_tokens)
    out = Path(config.output)
    job = _open_output(out, config, hf_tokenizer, encoder)
    dtype = np.dtype(job.manifest["dtype"])
    n_special = len(encoder.encode("").ids)  # what the post-processor adds around one document
    finished = job.finished()
    stats = ReadStats()
    docs = _read_ahead(
        iter_documents(
            files,
            text_column=config.text_column,
            txt_mode=config.txt_mode,
            on_error=config.on_error,
            stats=stats,
        )
    )
    written = resumed = new_tokens = 0
    bar = progress_bar(desc="tokenizing", unit="doc", disable=not config.progress, dynamic_ncols=True)
    with bar, contextlib.closing(docs):  # closing stops the reader thread if tokenization fails
        for index in itertools.count():
            chunk = itertools.islice(docs, config.shard_size)
            if index in finished:
                n = _skip_finished(chunk, finished[index], bar)
                resumed += 1
                if n < config.shard_size:
                    break
                continue
            shard = write_shard(out, index, chunk, encoder, config, dtype, n_special, bar.update)
            if shard is None:
                break
            job.piece_finished(shard)
            written += 1
            new_tokens += sum(shard[s]["tokens"] for s in SPLITS)
            if shard["input_documents"] < config.shard_size:
                break
    manifest = _complete(job, stats)
    seconds = time.perf_counter() - start
    return _prepare_result(out, manifest, written, resumed, stats, seconds, new_tokens)


def _complete(job: JobOutput, stats: ReadStats) -> dict:
    """The manifest marked complete, with what was read and the totals over its shards."""
    return job.complete(reader=dataclasses.asdict(stats), totals=totals(job.manifest["shards"]))


def _prepare_in_pieces(config: PrepareConfig, engine: Engine) -> PrepareResult:
    config.check_required()
    files = expand_inputs(
        config.inputs, exclude=[config.output]
    )  # a missing file fails before anything is written
    check_columns(files, config.text_column)  # before a cluster starts
    start = time.perf_counter()
    hf_tokenizer, encoder = tokenizer_backend(config.tokenizer, config.max_tokens)
    out = shared_output(config.output)
    job = _open_output(out, config, hf_tokenizer, encoder)
    with engine.session():
        plans = engine.map_items(
            plan_file,
            files,
            step=PLAN_STEP,
            text_column=config.text_column,
            txt_mode=config.txt_mode,
            on_error=config.on_error,
        )
        pieces = stream_pieces(plans, config.shard_size)
        finished = job.finished()
        for piece in pieces:
            if piece.index in finished:
                _check_unchanged(finished[piece.index], piece.records)
        todo = [p for p in pieces if p.index not in finished]
        bar = progress(sum(p.records for p in pieces), "doc", "tokenizing", config.progress)
        bar.update(sum(p.records for p in pieces if p.index in finished))
        new_tokens = 0

        def done(shard: dict) -> None:
            nonlocal new_tokens
            job.piece_finished(shard)
            tokens = sum(shard[s]["tokens"] for s in SPLITS)
            new_tokens += tokens
            count_tokens(bar, shard["input_documents"], tokens)

        kwargs = {"config": config, "dtype": job.manifest["dtype"]}
        with bar:
            pool = engine.run_pieces(ShardTokenizer, kwargs, todo, done)
    stats = merged_stats(plans)
    manifest = _complete(job, stats)
    seconds = time.perf_counter() - start
    result = _prepare_result(out, manifest, len(todo), len(finished), stats, seconds, new_tokens)
    result.work_seconds = pool.span_seconds
    return result


def _check_unchanged(shard: dict, documents: int) -> None:
    """A finished shard's record against the ``documents`` the inputs give it now."""
    if documents != shard["input_documents"]:
        raise DataError(
            f"shard {shard['index']} was prepared from {shard['input_documents']} input documents but the "
            f"inputs now give {documents}: the inputs changed; prepare into a new directory or set overwrite"
        )


class ShardTokenizer:
    """One worker: the tokenizer loaded once; ``self(piece)`` reads a shard's documents and writes the shard."""

    def __init__(self, *, config: PrepareConfig, dtype: str):
        self.config, self.dtype = config, np.dtype(dtype)
        _, self.encoder = tokenizer_backend(config.tokenizer, config.max_tokens)
        self.n_special = len(self.encoder.encode("").ids)

    def __call__(self, piece: Piece) -> dict:
        c = self.config
        documents = (record.text for _, record in read_piece(piece, c.text_column, c.on_error))
        return write_shard(
            Path(c.output), piece.index, documents, self.encoder, c, self.dtype, self.n_special
        )


def is_validation(text: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic held-out membership: a 64-bit hash of the text, compared with ``fraction``."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, salt=_salt(seed)).digest()
    return int.from_bytes(digest, "little") < fraction * 2**64


def _salt(seed: int) -> bytes:
    return seed.to_bytes(8, "little", signed=True)


def _encode_batch(encoder, texts: list[str]) -> list[list[int]]:
    # encode_batch releases the GIL and spreads the batch over all cores (Rust, rayon).
    return [e.ids for e in encoder.encode_batch(texts, add_special_tokens=True)]


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _read_ahead(items: Iterator[str], block: int = 256, depth: int = 16) -> Iterator[str]:
    """The same items, read in a thread so that parsing the inputs overlaps tokenization (Rust, no GIL).

    Order is kept, and an error of the reader surfaces after the items read before it.
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def work() -> None:
        part: list[str] = []
        try:
            for item in items:
                part.append(item)
                if len(part) == block:
                    put(part)
                    part = []
            put(part)
            put(_END)
        except BaseException as e:  # handed to the consumer, after the items read before it
            put(part)
            put(e)

    threading.Thread(target=work, name="neobert-read-ahead", daemon=True).start()
    try:
        while (part := q.get()) is not _END:
            if isinstance(part, BaseException):
                raise part
            yield from part
    finally:
        stop.set()  # the consumer stopped early: let the reader thread exit


_END = object()


def _skip_finished(chunk: Iterator[str], shard: dict, bar) -> int:
    n = sum(1 for _ in chunk)
    _check_unchanged(shard, n)
    bar.update(n)
    return n


def write_shard(out, index, chunk, encoder, config, dtype, n_special, advance=None) -> dict | None:
    """Tokenize one shard's documents (an iterator of texts) and write its files; None when ``chunk`` is
    empty. ``advance(n)`` is called after each batch of ``n`` documents. The one shard writer of both
    engines (:class:`ShardTokenizer` calls it in each Ray worker)."""
    first = next(chunk, None)
    if first is None:
        return None
    writers = {s: ShardWriter(out, s, index, dtype) for s in SPLITS}
    n_in = dropped = 0
    try:
        for batch in _batches(itertools.chain([first], chunk), config.batch_size):
            n_in += len(batch)
            kept: dict[str, list[list[int]]] = {s: [] for s in SPLITS}
            for text, ids in zip(batch, _encode_batch(encoder, batch)):
                if len(ids) - n_special < config.min_tokens:
                    dropped += 1
                    continue
                held_out = is_validation(text, config.validation_fraction, config.split_seed)
                kept["validation" if held_out else "train"].append(ids)
            for s in SPLITS:
                writers[s].add(kept[s])
            if advance is not None:
                advance(len(batch))
        info = {s: writers[s].finish(config.length_thresholds) for s in SPLITS}
    except BaseException:  # KeyboardInterrupt too: leave no partial file behind
        for w in writers.values():
            w.abort()
        raise
    return {"index": index, "input_documents": n_in, "dropped_short": dropped, **info}


def _fingerprint(config: PrepareConfig, encoder) -> dict:
    fp = {k: getattr(config, k) for k in _CONTENT_KEYS}
    fp["tokenizer_sha256"] = hashlib.sha256(encoder.to_str().encode()).hexdigest()
    return fp


def _open_output(out: Path, config: PrepareConfig, hf_tokenizer, encoder) -> JobOutput:
    """The output of an earlier run with the same settings (resumed), or a new output directory."""
    fingerprint = _fingerprint(config, encoder)

    def check(manifest: dict) -> None:
        changed = sorted(k for k in fingerprint if manifest["fingerprint"].get(k) != fingerprint[k])
        if changed:
            raise DataError(
                f"{out} was prepared with other settings ({', '.join(changed)}); use another output "
                "directory or set overwrite"
            )

    def new() -> dict:
        write_dir(hf_tokenizer.save_pretrained, out / "tokenizer")  # without fixed padding/truncation
        vocab_size = len(hf_tokenizer)
        return {
            "version": FORMAT_VERSION,
            "dtype": token_dtype(vocab_size).name,
            "vocab_size": vocab_size,
            "special_token_ids": {
                name: getattr(hf_tokenizer, f"{name}_token_id", None)
                for name in ("pad", "unk", "cls", "sep", "mask")
            },
            "fingerprint": fingerprint,
            "config": {k: v for k, v in dataclasses.asdict(config).items() if k not in _NOT_RECORDED},
        }

    job = JobOutput(out, MANIFEST, FORMAT)
    job.open(new, check, config.overwrite, lambda: remove_prepared(out))
    return job


# how a run went, not what it made: left out of the manifest's config
_NOT_RECORDED = ("overwrite", "progress", *EngineSettings.__dataclass_fields__)


def _prepare_result(out, manifest, written, resumed, stats, seconds, new_tokens) -> PrepareResult:
    t = manifest["totals"]
    empty = {"documents": 0, "tokens": 0, "long_documents": {}}
    train, val = t.get("train", empty), t.get("validation", empty)
    thresholds = manifest["config"]["length_thresholds"]
    return PrepareResult(
        output=out,
        shards_written=written,
        shards_resumed=resumed,
        documents=stats.documents,
        train_documents=train["documents"],
        train_tokens=train["tokens"],
        validation_documents=val["documents"],
        validation_tokens=val["tokens"],
        dropped_short=t["dropped_short"],
        skipped_records=stats.skipped_records,
        empty_files=stats.empty_files,
        long_documents={
            th: {
                "train": train["long_documents"].get(str(th), 0),
                "validation": val["long_documents"].get(str(th), 0),
            }
            for th in thresholds
        },
        dtype=manifest["dtype"],
        vocab_size=manifest["vocab_size"],
        seconds=seconds,
        tokens_per_second=new_tokens / seconds if seconds > 0 else 0.0,
    )
