"""Corpus embedding as a resumable job: ``neobert embed INPUTS --output DIR``.

The inputs (files, directories, globs of .txt, .jsonl, .csv, .parquet; local or fsspec URLs) are planned
first (:func:`neobert.data.pieces.plan_file`: every row read once, bad rows found before the model loads),
then cut into pieces of ``shard_rows`` texts, one file's rows each. A piece is embedded by
:class:`PieceEmbedder` (the model loaded once per worker; the long-document policy, token-budget batching and
length grouping of :func:`neobert.inference.long_documents.embed`) and written as one parquet shard under an atomic
name, ``part-FFFFF-PPPPP.parquet``::

    id          string        the id column's value, or FILE:ROW (the input as expanded, the 1-based row or line)
    embedding   list<float>   float32 (or float16 with dtype float16), ``dimensions`` wide; int8 / uint8 with
                              dtype int8 / uint8 (the manifest's ``calibration_ranges`` are the buckets);
                              packed signs, ``dimensions / 8`` bytes, with dtype binary (int8) / ubinary (uint8)
    tokens      int32         the text's tokens, special ones included, before any cut
    truncated   bool          cut to the window (long-documents truncate)
    windows     int32         model rows the text took (chunk: more than one for a long text)

Each shard's footer repeats its record and the settings' digest, so a re-run recognises finished shards
whatever became of ``_manifest.json``, skips them and embeds the rest: a killed run, re-run, ends with the
same shards as an uninterrupted one.

A late-interaction (ColBERT) model directory writes multi-vector shards instead (:class:`PieceTokenEmbedder`):
``id``, ``vectors`` (list of ``dimensions``-wide float vectors: the document's kept tokens), ``length`` (their
count) and ``tokens``; ``neobert index`` builds a search index from them. The same worker runs in this process (``--engine local``) or in a Ray
actor pool (``--engine ray``, :mod:`neobert.jobs.engine`), so both engines write the same vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.io import atomic_file, clean_temporaries, output_lock
from ..common.tables import MISSING, markdown_table
from ..data.pieces import (
    ON_DUPLICATE,
    FilePlan,
    Piece,
    check_columns,
    duplicate_ids,
    file_pieces,
    merged_stats,
    plan_file,
    read_piece,
)
from ..data.readers import ON_ERROR, DataError, expand_inputs
from ..inference.encoders import (
    apply_precision,
    is_preset,
    model_dir,
    resolve_model_precision,
)
from ..inference.kinds import kind_of, load_for_inference
from ..inference.late_interaction import load_late_interaction, token_vectors
from ..inference.long_documents import LongDocuments, LongReport, model_window
from ..inference.long_documents import embed as embed_long
from ..inference.quantization import CALIBRATED, TYPES, calibration_ranges, quantize
from ..model.pooling import POOLING_NAMES
from ..runtime.hardware import versions
from .engine import Engine, count_tokens, engine_of, progress, shared_output
from .file_job import MAX_TOKENS_HELP, FileJob, notes, precision_field
from .output import JobOutput
from .settings import EngineSettings

FORMAT = "neobert-embeddings"
VERSION = 1
# "_": parquet readers (pyarrow, pandas, Ray Data) skip it when they read the directory
MANIFEST = "_manifest.json"
FOOTER_KEY = b"neobert"
# Settings that change the vectors: a re-run under other values would mix two sets of embeddings.
CONTENT_KEYS = (
    "model",
    "tokenizer",
    "pooling",
    "normalize",
    "precision",
    "dtype",
    "long_documents",
    "stride",
    "rope_scaling",
    "max_length",
    "text_column",
    "id_column",
    "on_error",
    "shard_rows",
)


@dataclass(kw_only=True)
class EmbedConfig(EngineSettings, FileJob):
    """``neobert embed``: embed texts. Into a directory (the default): any number of .txt (one text per line),
    .jsonl, .csv and .parquet files, directories and globs, as parquet shards of (id, embedding, tokens,
    truncated, windows) plus a manifest, resumable, in this process or on a Ray cluster. Into a .npy file:
    the lines of one text file, row i is line i (the same pipeline, its shards gathered into one array)."""

    input: list[str] = field(
        metadata={
            "nargs": "+",
            "help": (
                "files, directories or globs of .txt (one text per line), .jsonl, .csv, .parquet; local or URLs "
                "(s3://, gs://, ... where fsspec's library for it is installed)"
            ),
        }
    )
    # a directory (parquet shards + _manifest.json), or a .npy file (one text file's lines x hidden)
    output: str
    max_tokens: int | None = field(default=None, metadata={"help": MAX_TOKENS_HELP})
    pooling: str = field(
        default="mean", metadata={"choices": POOLING_NAMES, "help": " | ".join(POOLING_NAMES)}
    )
    normalize: bool = True  # unit L2 norm (--no-normalize keeps raw vectors)
    max_length: int | None = None  # truncate texts to this many tokens (default: the model's max_length)
    precision: str = precision_field("cosine > 0.99 to fp32")
    text_column: str = "text"  # tables: the column of texts
    # tables: a column of ids (default: FILE:ROW, the input path and the 1-based row or line)
    id_column: str | None = None
    dtype: str = field(
        default="float32",
        metadata={
            "choices": TYPES,
            "help": (
                "the stored vectors' type: float32, float16, int8 / uint8 (256 buckets per dimension between the "
                "calibration minimum and maximum), binary / ubinary (signs, 8 dimensions per byte)"
            ),
        },
    )
    # int8 / uint8: a .npy of float embeddings (N, dim) of representative texts (e.g. `neobert embed SAMPLE.txt
    # --output cal.npy`); their per-dimension minimum and maximum are the buckets, stored with the output
    calibration: str | None = None
    shard_rows: int = 4096  # texts per output shard (and per piece of work)
    on_error: str = field(
        default="raise",
        metadata={
            "choices": ON_ERROR,
            "help": (
                "a bad row (empty text, invalid UTF-8 or JSON, no id): raise naming file and row, or skip and count it"
            ),
        },
    )
    on_duplicate: str = field(
        default="refuse",
        metadata={
            "choices": ON_DUPLICATE,
            "help": (
                "--id-column: an id that two rows hold stops the job naming both rows (refuse), or only its first row "
                "is embedded and the others counted (keep-first)"
            ),
        },
    )
    overwrite: bool = False  # replace an output directory made with other settings instead of refusing

    def __post_init__(self) -> None:
        if isinstance(self.input, (str, Path)):
            self.input = [str(self.input)]
        self.input = [str(i) for i in self.input]
        FileJob.__post_init__(self)
        EngineSettings.__post_init__(self)
        if self.shard_rows < 1:
            raise ValueError(f"shard rows must be positive, got {self.shard_rows}")
        if self.on_duplicate not in ON_DUPLICATE:
            raise ValueError(
                f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}; got {self.on_duplicate!r}"
            )
        if self.dtype in CALIBRATED and self.calibration is None:
            raise ValueError(
                f"--dtype {self.dtype} needs --calibration FILE.npy (float embeddings of sample texts)"
            )

    def ranges(self) -> np.ndarray | None:
        """The int8 / uint8 calibration ranges (2, dim) from ``calibration``; None for the other types."""
        if self.dtype not in CALIBRATED:
            return None
        path = Path(self.calibration)
        if not path.is_file():
            raise ValueError(f"calibration file {path} does not exist")
        return calibration_ranges(np.load(path))

    @property
    def to_npy(self) -> bool:
        return str(self.output).lower().endswith(".npy")


@dataclass
class EmbedResult:
    output: Path
    shape: tuple[int, int]
    seconds: float
    empty_rows: list[int]  # 1-based lines whose text is empty or blank (embedded as such, and reported)
    long_report: LongReport | None = None  # what the long-document policy did (counts; no per-text lengths)
    summary: str = ""  # what was written, for a person
    notes: list[str] = field(default_factory=list)  # empty lines, long texts


def embed(config: EmbedConfig) -> EmbedResult | CorpusResult:
    """``neobert embed``: one text file's lines into a .npy array, or any inputs into a directory of shards."""
    return embed_file(config) if config.to_npy else embed_corpus(config)


def embed_file(config: EmbedConfig) -> EmbedResult:
    """Embed every line of ``config.input`` (one file) into the (lines, hidden) array ``config.output``: the
    pipeline of :func:`embed_corpus` (same reader, precision, batching, engine) into ``OUTPUT.parts/``, its
    shards gathered in order into the array, then removed. Blank lines are embedded as empty texts (row i is
    line i) and reported. A killed run leaves ``OUTPUT.parts/``; the re-run resumes from its shards."""
    c = config
    if len(c.input) != 1:
        raise ValueError(
            "a .npy output holds one text file's lines: give one --input, or an output directory"
        )
    if kind_of(c.model).embedding == "multi-vector":
        raise ValueError(
            "a late-interaction model's token vectors (a list per text) go to an output directory, "
            "not a .npy array"
        )
    if c.on_error != "raise":  # a skipped line would move every later row
        raise ValueError("a .npy output keeps row i = line i: --on-error skip needs an output directory")
    start = time.perf_counter()
    parts = Path(f"{c.output}.parts")
    corpus = embed_corpus(replace(c, output=str(parts)), empty="keep")
    vectors, empty = _gather(parts)
    shards = corpus_shards(parts)
    with atomic_file(c.output, "wb") as handle:
        np.save(handle, vectors)
    ranges = c.ranges()
    if ranges is not None:  # the buckets, beside the vectors: X.npy -> X.ranges.npy
        with atomic_file(Path(c.output).with_suffix(".ranges.npy"), "wb") as handle:
            np.save(handle, ranges)
    shutil.rmtree(parts)
    seconds = time.perf_counter() - start
    norm = "L2-normalized" if c.normalize else "not normalized"
    summary = (
        f"wrote {len(vectors):,} x {vectors.shape[1]} {vectors.dtype} vectors ({c.pooling} pooling, {norm}) "
        f"to {c.output} in {seconds:.1f}s"
    )
    consequence = "their rows embed an empty text, so that row i is line i"
    report = LongReport(
        texts=len(vectors),
        over_window=sum(s.get("over_window", 0) for s in shards),
        truncated=corpus.truncated,
        rows=sum(s["windows"] for s in shards),
    )
    found = notes(empty, "line", consequence, report, c.long_documents)
    return EmbedResult(Path(c.output), vectors.shape, seconds, empty, report, summary, found)


def corpus_shards(output: Path) -> list[dict]:
    """The records of a finished job's shards, in the order of its inputs."""
    return json.loads((output / MANIFEST).read_text(encoding="utf-8"))["shards"]


def _gather(parts: Path) -> tuple[np.ndarray, list[int]]:
    """The vectors of a job's shards in order (one array), and the rows of its empty texts."""
    import pyarrow.parquet as pq

    arrays, empty = [], []
    for shard in corpus_shards(parts):
        column = pq.read_table(parts / f"{shard['name']}.parquet", columns=["embedding"]).column("embedding")
        flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        arrays.append(flat.reshape(shard["rows"], -1))  # packed bits (binary) are narrower than dimensions
        empty += shard.get("empty_rows", [])
    return np.concatenate(arrays), empty


@dataclass
class CorpusResult:
    output: Path
    texts: int  # in the output, all runs
    shards_written: int  # by this run
    shards_resumed: int  # finished by an earlier run and kept
    skipped: int  # bad rows skipped (on_error skip)
    truncated: int
    tokens: int
    dimensions: int
    precision: list[str]  # what ran
    engine: str
    workers: int
    seconds: float
    texts_per_second: float  # texts embedded by this run per second
    tokens_per_second: float
    work_seconds: float = 0.0  # first piece's start to last piece's end (start-up and the plan excluded)
    duplicates: int = 0  # rows left out: their id came before (on_duplicate keep-first)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        rows = [
            ["texts / shards", f"{self.texts:,} / {self.shards_written + self.shards_resumed:,}"],
            ["shards written / resumed", f"{self.shards_written:,} / {self.shards_resumed:,}"],
            ["skipped rows", f"{self.skipped:,}"],
            *([["duplicate ids left out", f"{self.duplicates:,}"]] if self.duplicates else []),
            ["truncated texts", f"{self.truncated:,}"],
            ["tokens", f"{self.tokens:,}"],
            ["dimensions / precision", f"{self.dimensions} / {', '.join(self.precision) or MISSING}"],
            ["engine / workers", f"{self.engine} / {self.workers}"],
            ["time", f"{self.seconds:.1f} s"],
            ["this run", f"{self.texts_per_second:,.1f} texts/s, {self.tokens_per_second:,.0f} tokens/s"],
        ]
        return f"embedded into {self.output}\n\n" + markdown_table(["", ""], rows)


class PieceEmbedder:
    """One worker: the model and tokenizer loaded once; ``self(piece)`` embeds a piece and writes its shard."""

    def __init__(self, *, config: EmbedConfig, precision: str, digest: str, empty: str = "refuse"):
        self.c, self.digest, self.empty = config, digest, empty
        loaded = load_for_inference(config.model, config.tokenizer, "base", precision=None)
        model = loaded.model.to("cuda") if torch.cuda.is_available() else loaded.model
        self.model, self.tokenizer = apply_precision(model, precision), loaded.tokenizer
        self.precision = "bf16" if next(self.model.parameters()).dtype == torch.bfloat16 else "fp32"
        self.long_policy = LongDocuments(config.long_documents, config.stride, config.rope_scaling)
        self.window = config.max_length or model_window(self.model, self.tokenizer)
        self.node = _node()
        ranges = config.ranges()
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)

    def __call__(self, piece: Piece) -> dict:
        c = self.c
        ids, texts, blank = [], [], []
        for spec, record in read_piece(piece, c.text_column, c.on_error, self.empty, c.id_column):
            ids.append(record.key if c.id_column is not None else f"{spec}:{record.row}")
            texts.append(record.text)
            if not record.text.strip():
                blank.append(record.row)
        vectors, report = embed_long(
            self.model,
            self.tokenizer,
            texts,
            self.long_policy,
            c.pooling,
            c.normalize,
            c.batch_size,
            c.max_tokens,
            window=c.max_length,
        )
        cut = self.long_policy.policy == "truncate"
        truncated = [cut and length > self.window for length in report.lengths]
        record = {
            "name": piece.name,
            "rows": len(texts),
            "tokens": int(sum(report.lengths)),
            "truncated": int(report.truncated),
            "over_window": int(report.over_window),  # texts longer than the window (cut, chunked or extended)
            "windows": int(sum(report.windows)),
            "dimensions": int(vectors.shape[1]),
            "precision": self.precision,
            "node": self.node,  # Ray's node id (or this host's name), and the worker's process
            "pid": os.getpid(),
            **({"empty_rows": blank} if blank else {}),  # kept only with empty="keep"
        }
        _write_shard(
            shard_path(c.output, piece),
            ids,
            quantize(vectors, c.dtype, self.ranges),
            report,
            truncated,
            record,
            self.digest,
        )
        return record


class PieceTokenEmbedder:
    """A late-interaction model's worker: each text's document token vectors, as a multi-vector shard
    (``id``, ``vectors``: one ``dimensions``-wide vector per kept token, ``length``: their count, ``tokens``)."""

    def __init__(self, *, config: EmbedConfig, precision: str, digest: str, empty: str = "refuse"):
        if config.dtype not in ("float32", "float16"):
            raise ValueError(f"token vectors are stored as float32 or float16, not {config.dtype}")
        self.c, self.digest, self.node, self.precision, self.empty = config, digest, _node(), "fp32", empty
        device = "cuda" if torch.cuda.is_available() else None
        self.model, self.tokenizer, self.spec = load_late_interaction(config.model, device, config.max_length)

    def __call__(self, piece: Piece) -> dict:
        c, spec = self.c, self.spec
        ids, texts = [], []
        for source, record in read_piece(piece, c.text_column, c.on_error, self.empty, c.id_column):
            ids.append(record.key if c.id_column is not None else f"{source}:{record.row}")
            texts.append(record.text)
        vectors = token_vectors(self.model, self.tokenizer, texts, spec, False, c.batch_size)
        lengths = [
            len(ids_) for ids_ in self.tokenizer([spec.document_prefix + t for t in texts])["input_ids"]
        ]
        record = {
            "name": piece.name,
            "rows": len(texts),
            "tokens": int(sum(lengths)),
            "truncated": sum(n > spec.document_length for n in lengths),
            "windows": len(texts),
            "dimensions": spec.dim,
            "vectors": int(sum(len(v) for v in vectors)),
            "precision": self.precision,
            "node": self.node,
            "pid": os.getpid(),
        }
        _write_token_shard(shard_path(c.output, piece), ids, vectors, lengths, c.dtype, record, self.digest)
        return record


def _write_token_shard(
    path: Path, ids, vectors: list, lengths: list[int], dtype: str, record: dict, digest: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = record["dimensions"]
    counts = [len(v) for v in vectors]
    flat = np.concatenate([v.numpy() for v in vectors]) if vectors else np.zeros((0, dim), np.float32)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(dtype).reshape(-1)), dim)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    table = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "vectors": pa.ListArray.from_arrays(offsets, rows),
            "length": pa.array(counts, pa.int32()),
            "tokens": pa.array(lengths, pa.int32()),
        }
    )
    table = table.replace_schema_metadata({FOOTER_KEY: json.dumps({**record, "digest": digest}).encode()})
    with atomic_file(path, "wb") as handle:
        pq.write_table(table, handle)


def _node() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return platform.node()


def shard_path(output: str | Path, piece: Piece) -> Path:
    return Path(output) / f"{piece.name}.parquet"


def _write_shard(path: Path, ids, vectors: np.ndarray, report, truncated, record: dict, digest: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = pa.array(vectors.reshape(-1))
    table = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]),
            "tokens": pa.array(report.lengths, pa.int32()),
            "truncated": pa.array(truncated, pa.bool_()),
            "windows": pa.array(report.windows, pa.int32()),
        }
    )
    footer = json.dumps({**record, "digest": digest}).encode()
    table = table.replace_schema_metadata({FOOTER_KEY: footer})
    with atomic_file(path, "wb") as handle:
        pq.write_table(table, handle)


def embed_corpus(config: EmbedConfig, empty: str = "refuse") -> CorpusResult:
    """Embed every text of ``config.input`` into parquet shards plus ``_manifest.json`` under ``config.output``,
    skipping the shards an earlier run with the same settings finished. ``empty="keep"``: a blank line is a
    text too (row i is line i; its row is in the shard's record), as the .npy output needs."""
    c, engine = config, engine_of(config)
    out = shared_output(c.output)
    start = time.perf_counter()
    files = expand_inputs(c.input, exclude=[out])
    check_columns(files, c.text_column, c.id_column)  # before a cluster starts
    with output_lock(out, c.wait), engine.session():
        plans = engine.map_items(
            plan_file,
            files,
            step=c.shard_rows,
            text_column=c.text_column,
            txt_mode="line",
            on_error=c.on_error,
            empty=empty,
            id_column=c.id_column,
        )
        duplicates = duplicate_ids(plans, c.on_duplicate)  # refused here, before the model loads
        pieces = file_pieces(plans, c.shard_rows)
        job = _open_output(out, c, plans, empty)
        done = {
            p.name: r for p in pieces if (r := finished_shard(out, p, job.manifest["digest"])) is not None
        }
        todo = [p for p in pieces if p.name not in done]
        records, pool = _run(c, engine, job, pieces, done, empty)
        seconds = time.perf_counter() - start
        shards = [records[p.name] for p in pieces]
        stats = merged_stats(plans)
        totals = {**_totals(shards, stats.skipped_records), "duplicate_ids": duplicates.count}
        ran = {k: getattr(c, k) for k in ("engine", "workers", "cpus_per_worker", "gpus_per_worker")}
        manifest = job.complete(
            shards=shards, reader=asdict(stats), totals=totals, duplicate_ids=asdict(duplicates), engine=ran
        )
    new = [records[p.name] for p in todo]
    texts_now, tokens_now = sum(r["rows"] for r in new), sum(r["tokens"] for r in new)
    t = manifest["totals"]
    result = CorpusResult(
        out,
        t["texts"],
        len(todo),
        len(done),
        t["skipped"],
        t["truncated"],
        t["tokens"],
        t["dimensions"],
        t["precision"],
        c.engine,
        pool.workers,
        seconds,
        texts_now / seconds,
        tokens_now / seconds,
        pool.span_seconds,
        duplicates.count,
    )
    result.notes = _notes(result, stats, duplicates)
    return result


def _run(c: EmbedConfig, engine: Engine, job: JobOutput, pieces: list[Piece], done: dict, empty: str):
    """Every piece not ``done`` embedded by the engine, under a progress bar: (name -> record, pool stats)."""
    todo = [p for p in pieces if p.name not in done]
    ran = sorted({r["precision"] for r in done.values()})
    precision = ran[0] if ran else _precision(c, engine)  # a resumed job keeps the precision it ran in
    records = dict(done)
    bar = progress(sum(p.records for p in pieces), "text", "embedding", c.show_progress)
    bar.update(sum(r["rows"] for r in done.values()))

    def finished(record: dict) -> None:
        records[record["name"]] = record
        job.piece_finished(record)
        count_tokens(bar, record["rows"], record["tokens"])

    kwargs = {"config": c, "precision": precision, "digest": job.manifest["digest"], "empty": empty}
    with bar:
        worker = PieceTokenEmbedder if kind_of(c.model).embedding == "multi-vector" else PieceEmbedder
        pool = engine.run_pieces(worker, kwargs, todo, finished)
    return records, pool


def _precision(c: EmbedConfig, engine: Engine) -> str:
    """One precision for every worker, decided here: ``auto`` measured on this machine for CPU workers (a
    cluster of another CPU kind pins ``--precision``), bf16 for GPU workers when no GPU is here to measure."""
    gpu = engine.gpu_workers()
    if gpu and not torch.cuda.is_available():
        return "bf16" if c.precision == "auto" else c.precision
    return resolve_model_precision(c.model, c.precision, "cuda" if gpu else "cpu")


def _totals(shards: list[dict], skipped: int) -> dict:
    return {
        "texts": sum(s["rows"] for s in shards),
        "shards": len(shards),
        "skipped": skipped,
        "truncated": sum(s["truncated"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "dimensions": max((s["dimensions"] for s in shards), default=0),
        "precision": sorted({s["precision"] for s in shards}),
    }


def _notes(result: CorpusResult, stats: Any, duplicates: Any) -> list[str]:
    notes = []
    if duplicates.count:
        notes.append(
            f"{duplicates.count:,} row(s) whose id came before were left out (on-duplicate keep-first), "
            f"e.g. {'; '.join(duplicates.messages[:3])}"
        )
    if result.skipped:
        shown = "; ".join(stats.messages[:3])
        notes.append(f"{result.skipped:,} bad row(s) skipped (on-error skip), e.g. {shown}")
    if result.truncated:
        notes.append(
            f"{result.truncated:,} text(s) longer than the window were truncated (--long-documents chunk or "
            "extend keeps all of them)"
        )
    return notes


def finished_shard(output: Path, piece: Piece, digest: str) -> dict | None:
    """The record of ``piece``'s shard if a run with the same settings finished it, else None."""
    import pyarrow.parquet as pq

    path = shard_path(output, piece)
    if not path.is_file():
        return None
    try:
        metadata = pq.read_schema(path).metadata or {}
        record = json.loads(metadata[FOOTER_KEY])
    except (OSError, KeyError, ValueError):  # not a shard of ours: redone, and replaced whole
        return None
    if record.pop("digest", None) != digest or record.get("rows") != piece.records:
        return None
    return record


def _settings(c: EmbedConfig, plans: list[FilePlan], empty: str) -> dict:
    settings = {key: getattr(c, key) for key in CONTENT_KEYS}
    if empty != "refuse":  # blank lines are texts (a .npy output's parts)
        settings["empty"] = empty
    if c.id_column is not None:
        settings["on_duplicate"] = c.on_duplicate
    settings["model_files"] = _model_files(c.model)
    ranges = c.ranges()
    if ranges is not None:  # int8 / uint8: the buckets (row 0 minima, row 1 maxima) every shard was cut with
        settings["calibration_ranges"] = ranges.tolist()
    settings["inputs"] = [{"path": p.spec, "bytes": p.size, "rows": p.records} for p in plans]
    return settings


def _model_files(model: str) -> dict[str, Any]:
    """What identifies the weights: config.json's hash and each weight file's size (a preset: its name)."""
    path = model_dir(model)
    if path is None:
        return {"preset": model} if is_preset(model) else {"hub": model}
    found: dict[str, Any] = {}
    if (path / "config.json").is_file():
        found["config.json"] = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
    for weights in sorted([*path.glob("*.safetensors"), *path.glob("*.bin")]):
        found[weights.name] = weights.stat().st_size
    return found


def _open_output(out: Path, c: EmbedConfig, plans: list[FilePlan], empty: str) -> JobOutput:
    """The output of an earlier run with the same settings, or a new one; other settings are refused with
    the difference named (``overwrite`` removes the earlier output instead)."""
    settings = _settings(c, plans, empty)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

    def check(manifest: dict) -> None:
        changed = _differences(manifest["settings"], settings)
        if changed:
            raise DataError(
                f"{out} holds embeddings made with other settings ({'; '.join(changed)}); use another "
                "output directory or --overwrite"
            )

    job = JobOutput(out, MANIFEST, FORMAT, key="name")
    job.open(
        lambda: {"version": VERSION, "digest": digest, "settings": settings, "versions": versions()},
        check,
        c.overwrite,
        lambda: _remove_output(out),
    )
    return job


def _differences(before: dict, now: dict) -> list[str]:
    changed = []
    for key in sorted(set(before) | set(now)):
        if key == "inputs" and before.get(key) != now.get(key):
            was = {i["path"]: i for i in before.get(key, [])}
            new = {i["path"]: i for i in now.get(key, [])}
            parts = [f"{p} added" for p in new if p not in was] + [f"{p} gone" for p in was if p not in new]
            parts += [
                f"{p} changed ({was[p]['bytes']:,} -> {new[p]['bytes']:,} bytes, {was[p]['rows']:,} -> "
                f"{new[p]['rows']:,} rows)"
                for p in new
                if p in was and was[p] != new[p]
            ]
            changed.append("inputs: " + ", ".join(parts[:5]))
        elif before.get(key) != now.get(key):
            changed.append(f"{key}: {before.get(key)!r} -> {now.get(key)!r}")
    return changed


def _remove_output(out: Path) -> None:
    for path in out.glob("part-*.parquet"):
        path.unlink()
    (out / MANIFEST).unlink(missing_ok=True)
    clean_temporaries(out)
