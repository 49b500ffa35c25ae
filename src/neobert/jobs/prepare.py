"""``neobert data prepare --engine ray``: token shards tokenized in parallel by Ray workers, equal to the local
engine's.

The local engine (:func:`neobert.data.prepare.prepare`) reads the inputs as one stream and cuts it every
``shard_size`` documents. Here every input is planned first (:func:`neobert.data.pieces.plan_file`, one Ray
task per file: its documents counted, every :data:`PLAN_STEP`-th one's position noted), the stream is cut at
the same documents (:func:`neobert.data.pieces.stream_pieces`), and each shard is read (seeking to its first
document) and written by :func:`neobert.data.prepare.write_shard` in a Ray actor: the same files, the same
validation split (a hash of each text) and the same manifest as the local engine, and the same resume by
shard. The output directory must be one that every worker can write (a shared filesystem on a cluster).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..common.io import output_lock
from ..data.pieces import Piece, check_columns, merged_stats, plan_file, read_piece, stream_pieces
from ..data.prepare import (
    PrepareConfig,
    PrepareResult,
    complete,
    open_output,
    prepare_result,
    tokenizer_backend,
    write_shard,
)
from ..data.prepare import prepare as prepare_here
from ..data.readers import DataError, expand_inputs
from ..data.shards import SPLITS
from .engine import Engine, count_tokens, engine_of, progress, shared_output

PLAN_STEP = 4096  # documents between two noted positions: a shard's reader skips fewer than this many


def prepare(config: PrepareConfig) -> PrepareResult:
    """Tokenize ``config.inputs`` into shards under ``config.output`` on the config's engine."""
    engine = engine_of(config)
    with output_lock(shared_output(config.output), config.wait):
        if engine.in_process:  # one stream read ahead of the tokenizer: no plan needed
            return prepare_here(config)
        return _prepare_in_pieces(config, engine)


def _prepare_in_pieces(config: PrepareConfig, engine: Engine) -> PrepareResult:
    config.check_required()
    files = expand_inputs(
        config.inputs, exclude=[config.output]
    )  # a missing file fails before anything is written
    check_columns(files, config.text_column)  # before a cluster starts
    start = time.perf_counter()
    hf_tokenizer, encoder = tokenizer_backend(config.tokenizer, config.max_tokens)
    out = shared_output(config.output)
    job = open_output(out, config, hf_tokenizer, encoder)
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
            _check_unchanged(piece, finished.get(piece.index))
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
    manifest = complete(job, stats)
    seconds = time.perf_counter() - start
    result = prepare_result(out, manifest, len(todo), len(finished), stats, seconds, new_tokens)
    result.work_seconds = pool.span_seconds
    return result


def _check_unchanged(piece: Piece, shard: dict | None) -> None:
    if shard is not None and shard["input_documents"] != piece.records:
        raise DataError(
            f"shard {piece.index} was prepared from {shard['input_documents']} input documents but the inputs "
            f"now give {piece.records}: the inputs changed; prepare into a new directory or set overwrite"
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
