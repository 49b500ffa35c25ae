"""Corpus embedding as a resumable job: ``neobert embed --input INPUTS --output DIR``, the driver.

The inputs (files, directories, globs of .txt, .jsonl, .csv, .parquet; local or fsspec URLs) are planned
first (:func:`neobert.data.pieces.plan_file`: every row read once, bad rows found before the model loads),
then cut into pieces of ``shard_rows`` texts, one file's rows each. The engine runs a worker over the pieces
(:mod:`neobert.jobs.embed_workers`: the model loaded once per worker), each piece written as one shard of the
output's format (:mod:`neobert.jobs.embed_format`: single-vector shards, or a late-interaction model's
multi-vector shards) and recorded in ``_manifest.json``. A re-run recognises finished shards by their footers
(whatever became of the manifest), skips them and embeds the rest: a killed run, re-run, ends with the same
shards as an uninterrupted one. A ``.npy`` output is the same job into ``OUTPUT.parts/``, its shards gathered
into one array.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.io import atomic_file, output_lock
from ..common.tables import MISSING, markdown_table
from ..data.pieces import FilePlan, Piece, check_columns, duplicate_ids, file_pieces, merged_stats, plan_file
from ..data.readers import DataError, expand_inputs
from ..inference.backends import RUNTIMES, JobSample, choose_runtime, export_beside, open_export
from ..inference.encoders import EmbeddingSpec, is_preset, model_dir, resolve_model_precision
from ..inference.kinds import kind_of
from ..inference.long_documents import LongReport
from ..runtime.hardware import versions
from .embed_config import CONTENT_KEYS, EmbedConfig
from .embed_format import (
    FORMAT,
    MANIFEST,
    VERSION,
    read_single_vectors,
    remove_output,
    shard_path,
    shard_record,
    shard_records,
)
from .embed_workers import PieceEmbedder, PieceExportEmbedder, PieceTokenEmbedder, read_texts
from .engine import Engine, count_tokens, engine_of, progress, shared_output
from .file_job import notes
from .output import JobOutput


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


def with_declared_embedding(config: EmbedConfig) -> EmbedConfig:
    """``config`` with the pooling and normalisation it leaves to the model filled in: what the model's kind
    declares (a sentence-transformers directory's Pooling and Normalize, else mean pooling and unit vectors),
    as the service embeds. The manifest records them. A late-interaction model (token vectors) keeps them
    unset and is cut to its document length (a long-document policy is refused by name, as the service
    refuses it); a SPLADE directory's vectors are sparse, so it is refused unless the pooling is given."""
    kind = kind_of(config.model)
    if kind.embedding == "multi-vector":
        if config.long_documents != "truncate":
            raise ValueError(
                f"--long-documents {config.long_documents} does not apply to a late-interaction model: `neobert "
                "embed` cuts its documents to document_length, as ColBERT does (`neobert eval embeddings "
                "--long-documents chunk` reads every window's token vectors)"
            )
        if config.pooling is not None or config.normalize is not None:
            raise ValueError(
                "--pooling and --normalize do not apply to a late-interaction model: it writes one unit vector "
                "per token"
            )
        return config  # its token vectors: no pooling (the manifest records none)
    if kind.backend == "onnx":  # an export: its graph pools as it was written
        spec = kind.declared_embedding(config.model)
        if isinstance(spec, str):
            raise ValueError(f"{config.model} gives no dense embeddings to write: {spec}")
        check_export_settings(config, spec)
        return replace(config, pooling=spec.pooling, normalize=spec.normalize)
    if config.pooling is not None and config.normalize is not None:
        return config
    if kind.embedding == "sparse":
        raise ValueError(
            f"{config.model} is a {kind.name} directory: its vectors are sparse (neobert serve's /embed_sparse, "
            "neobert eval embeddings); give --pooling to write dense vectors of its encoder instead"
        )
    spec = kind.declared_embedding(config.model)
    if isinstance(spec, str):
        raise ValueError(f"{config.model} gives no dense embeddings to write: {spec}")
    pooling = config.pooling or spec.pooling
    return replace(
        config, pooling=pooling, normalize=spec.normalize if config.normalize is None else config.normalize
    )


def check_export_settings(config: EmbedConfig, spec: EmbeddingSpec) -> None:
    """Refuse, by name, what an export's graph does not compute: other pooling or normalisation than it was
    written with, a long-document policy but truncation, a window beyond the export's max length."""
    given = {"pooling": (config.pooling, spec.pooling), "normalize": (config.normalize, spec.normalize)}
    for name, (asked, written) in given.items():
        if asked is not None and asked != written:
            raise ValueError(
                f"{config.model} is an export whose graph computes {name} {written}; --{name} {asked} needs the "
                "model directory it was exported from (or export it again with that setting)"
            )
    if config.long_documents != "truncate":
        raise ValueError(
            f"--long-documents {config.long_documents} needs the torch backend; an export truncates at its max "
            f"length ({spec.max_length} tokens): embed the model directory it was exported from"
        )
    if config.max_length is not None and config.max_length > spec.max_length:
        raise ValueError(
            f"--max-length {config.max_length} is beyond the export's max length ({spec.max_length} tokens)"
        )


def embed_file(config: EmbedConfig) -> EmbedResult:
    """Embed every line of ``config.input`` (one file) into the (lines, hidden) array ``config.output``: the
    pipeline of :func:`embed_corpus` (same reader, precision, batching, engine) into ``OUTPUT.parts/``, its
    shards gathered in order into the array, then removed. Blank lines are embedded as empty texts (row i is
    line i) and reported. A killed run leaves ``OUTPUT.parts/``; the re-run resumes from its shards."""
    c = with_declared_embedding(config)
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
    vectors, shards = read_single_vectors(parts), shard_records(parts)
    empty = [row for shard in shards for row in shard.get("empty_rows", [])]
    with atomic_file(c.output, "wb") as handle:
        np.save(handle, vectors)
    ranges = c.ranges()
    if ranges is not None:  # the buckets, beside the vectors: X.npy -> X.ranges.npy
        with atomic_file(Path(c.output).with_suffix(".ranges.npy"), "wb") as handle:
            np.save(handle, ranges)
    shutil.rmtree(parts)
    seconds = time.perf_counter() - start
    norm = "L2-normalized" if c.normalize else "not normalized"
    ran = ", ".join(corpus.precision)  # what precision auto became, as the directory's summary says too
    summary = (
        f"wrote {len(vectors):,} x {vectors.shape[1]} {vectors.dtype} vectors ({c.pooling} pooling, {norm}, "
        f"{ran}) to {c.output} in {seconds:.1f}s"
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
    backend: str = "torch"  # what ran: torch, onnx or openvino
    backend_reason: str = ""  # why (backend auto on an export: the measurement)

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
            ["backend", f"{self.backend} ({self.backend_reason})" if self.backend_reason else self.backend],
            ["engine / workers", f"{self.engine} / {self.workers}"],
            ["time", f"{self.seconds:.1f} s"],
            ["this run", f"{self.texts_per_second:,.1f} texts/s, {self.tokens_per_second:,.0f} tokens/s"],
        ]
        return f"embedded into {self.output}\n\n" + markdown_table(["", ""], rows)


def embed_corpus(config: EmbedConfig, empty: str = "refuse") -> CorpusResult:
    """Embed every text of ``config.input`` into parquet shards plus ``_manifest.json`` under ``config.output``,
    skipping the shards an earlier run with the same settings finished. ``empty="keep"``: a blank line is a
    text too (row i is line i; its row is in the shard's record), as the .npy output needs."""
    c = with_declared_embedding(config)
    check_backend(c)  # before the output is opened
    engine = engine_of(c)
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
            p.name: r for p in pieces if (r := _finished_shard(out, p, job.manifest["digest"])) is not None
        }
        todo = [p for p in pieces if p.name not in done]
        records, pool, backend = _run(c, engine, job, pieces, done, empty)
        seconds = time.perf_counter() - start
        shards = [records[p.name] for p in pieces]
        stats = merged_stats(plans)
        totals = {**_totals(shards, stats.skipped_records), "duplicate_ids": duplicates.count}
        ran = {k: getattr(c, k) for k in ("engine", "workers", "cpus_per_worker", "gpus_per_worker")}
        manifest = job.complete(
            shards=shards,
            reader=asdict(stats),
            totals=totals,
            duplicate_ids=asdict(duplicates),
            engine=ran,
            backend=asdict(backend),
        )
    new = [records[p.name] for p in todo]
    result = _result(c, out, manifest["totals"], new, len(done), seconds, pool, duplicates.count, backend)
    result.notes = _notes(result, stats, duplicates)
    return result


def _result(
    c: EmbedConfig,
    out: Path,
    totals: dict,
    new: list[dict],
    resumed: int,
    seconds: float,
    pool: Any,
    duplicates: int,
    backend: EmbedBackend,
) -> CorpusResult:
    """What the job did: the output's totals, and this run's shards (``new``) and rate."""
    texts_now, tokens_now = sum(r["rows"] for r in new), sum(r["tokens"] for r in new)
    return CorpusResult(
        out,
        totals["texts"],
        len(new),
        resumed,
        totals["skipped"],
        totals["truncated"],
        totals["tokens"],
        totals["dimensions"],
        totals["precision"],
        c.engine,
        pool.workers,
        seconds,
        texts_now / seconds,
        tokens_now / seconds,
        pool.span_seconds,
        duplicates,
        backend=backend.name,
        backend_reason=backend.reason,
    )


@dataclass
class EmbedBackend:
    """What runs the workers' model, decided once by the driver, and why."""

    name: str  # torch | onnx | openvino
    precision: str  # torch: fp32 | bf16; an export: its runtime and label ("openvino bf16", "onnx int8")
    reason: str


def check_backend(c: EmbedConfig) -> bool:
    """Refuse, by name, a ``--backend`` that cannot run ``c.model`` (before any output is opened); whether the
    model is an export (``neobert export onnx``, run by ONNX Runtime or OpenVINO)."""
    kind = kind_of(c.model)
    export = kind.backend == "onnx"
    if not export and c.backend in RUNTIMES:
        raise ValueError(
            f"--backend {c.backend} runs a directory written by `neobert export onnx`; {c.model} is a "
            f"{kind.name} model: export it first, or use --backend torch"
        )
    if export and c.backend == "torch":
        raise ValueError(
            f"{c.model} is an export (a graph, no PyTorch weights): run it with --backend onnx, openvino or auto, "
            "or embed the model directory it was exported from"
        )
    if export and c.precision == "bf16" and c.onnx_variant != "fp32":
        raise ValueError(f"precision bf16 runs an export's fp32 graph; --onnx-variant is {c.onnx_variant}")
    if export and c.backend == "onnx" and (c.precision == "bf16" or c.onnx_variant == "int8-static"):
        asked = "precision bf16" if c.precision == "bf16" else "--onnx-variant int8-static"
        raise ValueError(f"{asked} runs on OpenVINO: use --backend openvino (or auto)")
    return export


def choose_backend(c: EmbedConfig, engine: Engine, sample: JobSample | None = None) -> EmbedBackend:
    """``--backend`` for ``c.model``: torch for a model directory, preset or Hub id (``precision`` auto measured
    as :func:`_precision` measures it); for an export, ONNX Runtime or OpenVINO as named, or for ``auto`` the
    fastest of those that apply here, each checked against PyTorch fp32 as it loads
    (:func:`neobert.inference.backends.open_export`, the service's rule)."""
    if not check_backend(c):
        beside = export_beside(c.model) if c.backend == "auto" and model_dir(c.model) else None
        if beside is not None and not engine.gpu_workers():
            unlike = export_unlike(c, beside)
            if unlike is None:
                threads = engine.worker_threads()
                opened = choose_runtime(c.model, c.precision, threads, c.backend_cache, sample)
                label = opened.precision if opened.runtime == "torch" else opened.label
                return EmbedBackend(opened.runtime, label, opened.reason)
            reason = f"its export {beside} left out: {unlike}"
        elif c.backend == "torch":
            reason = "named"
        else:
            reason = (
                "a PyTorch model (`neobert export onnx --model DIR --output DIR/onnx` for auto to measure ONNX Runtime "
                "and OpenVINO beside it)"
            )
        return EmbedBackend("torch", _precision(c, engine), reason)
    precision = "fp32" if c.backend == "onnx" and c.precision == "auto" else c.precision
    opened = open_export(
        c.model, c.backend, c.onnx_variant, precision, engine.worker_threads(), c.backend_cache, sample
    )
    return EmbedBackend(opened.runtime, opened.label, opened.reason)


def export_unlike(c: EmbedConfig, export: Path) -> str | None:
    """Why the export a model directory carries does not compute what job ``c`` asks of the model (None:
    it does): its pooling, normalisation, window, tokenizer or the kind of vectors."""
    kind = kind_of(c.model)
    if kind.embedding != "dense":
        return f"a {kind.name} model's vectors are {kind.embedding}, not one pooled vector"
    if c.tokenizer is not None or c.long_documents != "truncate":
        return "--tokenizer" if c.tokenizer is not None else f"--long-documents {c.long_documents}"
    spec, own = kind_of(export).declared_embedding(export), kind.declared_embedding(c.model)
    if isinstance(spec, str):
        return spec
    if (c.pooling, c.normalize) != (spec.pooling, spec.normalize):
        return f"it pools {spec.pooling}, normalize {spec.normalize}; the job {c.pooling}, {c.normalize}"
    window = c.max_length or (None if isinstance(own, str) else own.max_length)
    if window is not None and window > spec.max_length:
        return f"it truncates at {spec.max_length} tokens; the job at {window}"
    return None


def _run(c: EmbedConfig, engine: Engine, job: JobOutput, pieces: list[Piece], done: dict, empty: str):
    """Every piece not ``done`` embedded by the engine, under a progress bar: (name -> record, pool stats,
    the backend that ran)."""
    todo = [p for p in pieces if p.name not in done]
    ran = sorted({r["precision"] for r in done.values()})
    if ran:  # a resumed job keeps the backend and precision it ran in
        name = ran[0].split()[0] if " " in ran[0] else "torch"
        backend = EmbedBackend(name, ran[0], "resumed: as the run that wrote the first shards")
    else:  # timed on the job's own texts: the first piece's first PROBE_TEXTS
        backend = choose_backend(c, engine, _sample(c, todo))
    precision = backend.precision
    records = dict(done)
    bar = progress(sum(p.records for p in pieces), "text", "embedding", c.show_progress)
    bar.update(sum(r["rows"] for r in done.values()))

    def finished(record: dict) -> None:
        records[record["name"]] = record
        job.piece_finished(record)
        count_tokens(bar, record["rows"], record["tokens"])

    kwargs = {"config": c, "precision": precision, "digest": job.manifest["digest"], "empty": empty}
    with bar:
        if backend.name != "torch":
            worker = PieceExportEmbedder
        elif kind_of(c.model).embedding == "multi-vector":
            worker = PieceTokenEmbedder
        else:
            worker = PieceEmbedder
        pool = engine.run_pieces(worker, kwargs, todo, finished)
    return records, pool, backend


PROBE_TEXTS = 64  # --backend auto times its candidates on this many of the job's texts


def _sample(c: EmbedConfig, pieces: list[Piece]) -> JobSample | None:
    """The job's first texts (at most :data:`PROBE_TEXTS`, blank ones left out) and its batching, for
    ``--backend auto``'s timing."""
    if c.backend != "auto" or not pieces:
        return None
    texts = [t for t in read_texts(c, pieces[0], "keep")[1] if t.strip()][:PROBE_TEXTS]
    return JobSample(texts, c.batch_size, c.max_tokens) if texts else None


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


def _finished_shard(output: Path, piece: Piece, digest: str) -> dict | None:
    """The record of ``piece``'s shard if a run with the same settings finished it, else None."""
    record = shard_record(shard_path(output, piece.name), digest)
    return record if record is not None and record.get("rows") == piece.records else None


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
    patterns = ("*.safetensors", "*.bin", "*.onnx", "*.xml")  # an export's graphs (and OpenVINO's int8) too
    for weights in sorted(f for pattern in patterns for f in path.glob(pattern)):
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
        lambda: remove_output(out),
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
