"""The workers of ``neobert embed``: each loads its model once, then embeds piece after piece and writes each
piece's shard whole (:mod:`neobert.jobs.embed_format`), returning its record. The same class runs in this
process (``--engine local``) or in a Ray actor (``--engine ray``, :mod:`neobert.jobs.engine`), so both engines
write the same vectors. :class:`PieceEmbedder` writes a pooled vector per text (the long-document policy,
token-budget batching and length grouping of :func:`neobert.inference.long_documents.embed`);
:class:`PieceTokenEmbedder` a late-interaction (ColBERT) model's vector per kept token; :class:`PieceExportEmbedder`
an export's pooled vector per text, on ONNX Runtime or OpenVINO."""

from __future__ import annotations

import os
import platform
import sys

import numpy as np
import torch

from ..data.pieces import Piece, read_piece
from ..data.tokenizer import whole_texts
from ..inference.backends import export_beside, open_export
from ..inference.encoders import apply_precision
from ..inference.kinds import load_for_inference
from ..inference.late_interaction import load_late_interaction, token_vectors
from ..inference.long_documents import LongDocuments, model_window
from ..inference.long_documents import embed as embed_long
from ..inference.quantization import quantize
from .embed_config import EmbedConfig
from .embed_format import shard_path, write_multi_vector, write_single_vector


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
        ids, texts, blank = read_texts(c, piece, self.empty)
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
        write_single_vector(
            shard_path(c.output, piece.name),
            ids,
            quantize(vectors, c.dtype, self.ranges),
            report.lengths,
            [cut and length > self.window for length in report.lengths],
            report.windows,
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
        ids, texts, _ = read_texts(c, piece, self.empty)
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
        path = shard_path(c.output, piece.name)
        write_multi_vector(path, ids, vectors, lengths, c.dtype, record, self.digest)
        return record


class PieceExportEmbedder:
    """An export's worker (``neobert export onnx``; or the export a model directory carries, where ``--backend
    auto`` measured it faster than PyTorch): its graph on ONNX Runtime or OpenVINO as the driver chose
    (``precision``: the runtime and its label, ``openvino bf16``), with the threads the engine gives a worker;
    each text's pooled vector as the graph computes it, cut at the export's max length (or ``max_length``)."""

    def __init__(self, *, config: EmbedConfig, precision: str, digest: str, empty: str = "refuse"):
        self.c, self.digest, self.empty, self.node, self.precision = config, digest, empty, _node(), precision
        runtime, label = precision.split()
        float_precision = label if label in ("fp32", "bf16") else "fp32"
        threads = torch.get_num_threads()  # the engine's per-worker threads (a Ray actor sets them)
        export = export_beside(config.model) or config.model  # a model directory's own export, auto chose
        self.encoder = open_export(export, runtime, config.onnx_variant, float_precision, threads).encoder
        self.window = min(config.max_length or self.encoder.max_length, self.encoder.max_length)
        if self.window < self.encoder.max_length:
            self.encoder.tokenizer.enable_truncation(self.window)
        self.counter = whole_texts(self.encoder.tokenizer)
        ranges = config.ranges()
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)

    def __call__(self, piece: Piece) -> dict:
        c = self.c
        ids, texts, blank = read_texts(c, piece, self.empty)
        # whole lengths: the export's tokenizer pads a batch to its longest text
        lengths = [len(e.ids) for e in self.counter.encode_batch(texts)]
        cut = [n > self.window for n in lengths]  # the tokenizer truncates at the window
        vectors = self.encoder.encode(texts, batch_size=c.batch_size, max_tokens=c.max_tokens)
        record = {
            "name": piece.name,
            "rows": len(texts),
            "tokens": int(sum(lengths)),
            "truncated": int(sum(cut)),
            "over_window": int(sum(cut)),
            "windows": len(texts),
            "dimensions": int(vectors.shape[1]),
            "precision": self.precision,
            "node": self.node,
            "pid": os.getpid(),
            **({"empty_rows": blank} if blank else {}),
        }
        write_single_vector(
            shard_path(c.output, piece.name),
            ids,
            quantize(vectors, c.dtype, self.ranges),
            lengths,
            cut,
            [1] * len(texts),
            record,
            self.digest,
        )
        return record


def read_texts(c: EmbedConfig, piece: Piece, empty: str) -> tuple[list[str], list[str], list[int]]:
    """A piece's ids (the id column's, or FILE:ROW), texts, and the rows of its blank texts."""
    ids, texts, blank = [], [], []
    for source, record in read_piece(piece, c.text_column, c.on_error, empty, c.id_column):
        ids.append(record.key if c.id_column is not None else f"{source}:{record.row}")
        texts.append(record.text)
        if not record.text.strip():
            blank.append(record.row)
    return ids, texts, blank


def _node() -> str:
    """Ray's node id in a Ray process, else this host's name. Ray is looked up, not imported: a Ray actor or
    driver has imported it already, and importing it in a local job only to learn that it is not running cost
    0.2-0.7 s of every ``neobert embed`` (issue 38 item 4)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return platform.node()
