"""Embeddings that fit a budget: ``int8``, ``uint8``, ``binary``, ``ubinary`` (sentence-transformers'
``quantize_embeddings`` semantics, which tests/test_quantization.py checks value for value).

- ``int8`` / ``uint8``: each dimension cut into 256 equal buckets between its calibration minimum and maximum
  (``ranges``, a (2, dim) array: row 0 the minima, row 1 the maxima), value = floor((x - min) / step) clipped to
  [0, 255], minus 128 for ``int8``. The ranges come from calibration embeddings and are stored with the output,
  so every shard, and every later query, uses the same buckets.
- ``binary`` / ``ubinary``: the sign of each dimension (x > 0 -> 1), 8 dimensions packed per byte (big-endian
  bit order, numpy's ``packbits``), minus 128 for ``binary``: dim / 8 bytes per vector.

A quantized vector is scored against a float query as sentence-transformers' users do: binary by Hamming
distance (:func:`hamming_scores`) to find candidates, then re-scored with int8 or float vectors
(:func:`rescore`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CALIBRATED",
    "QUANTIZED",
    "TYPES",
    "bytes_per_vector",
    "calibration_ranges",
    "hamming_scores",
    "quantize",
    "rescore",
    "stored_width",
]

QUANTIZED = ("int8", "uint8", "binary", "ubinary")
TYPES = ("float32", "float16", *QUANTIZED)  # every type an embedding is stored as
CALIBRATED = ("int8", "uint8")


def calibration_ranges(embeddings: np.ndarray) -> np.ndarray:
    """(2, dim) float32: per dimension the minimum and maximum of ``embeddings`` (N, dim), N >= 2."""
    embeddings = np.asarray(embeddings, dtype=np.float32)
    if embeddings.ndim != 2 or embeddings.shape[0] < 2:
        raise ValueError(f"calibration needs at least two embeddings (N, dim), got shape {embeddings.shape}")
    return np.vstack([embeddings.min(axis=0), embeddings.max(axis=0)]).astype(np.float32)


def quantize(embeddings: np.ndarray, dtype: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """``embeddings`` (N, dim) as ``dtype`` (float32, float16, or one of :data:`QUANTIZED`); ``int8`` and
    ``uint8`` need the calibration ``ranges`` (:func:`calibration_ranges`)."""
    embeddings = np.asarray(embeddings)
    if dtype not in TYPES:
        raise ValueError(f"unknown embedding type {dtype!r}; choose one of {', '.join(TYPES)}")
    if embeddings.dtype in (np.int8, np.uint8):
        raise ValueError("embeddings to quantize must be float, not already int8 or uint8")
    if dtype in ("float32", "float16"):
        return embeddings.astype(dtype)
    if dtype in CALIBRATED:
        if ranges is None:
            raise ValueError(f"{dtype} embeddings need calibration ranges (from calibration embeddings)")
        ranges = np.asarray(ranges, dtype=np.float32)
        if ranges.shape != (2, embeddings.shape[-1]):
            raise ValueError(
                f"calibration ranges {ranges.shape} do not fit {embeddings.shape[-1]} dimensions"
            )
        starts = ranges[0]
        steps = (ranges[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)  # a constant dimension: one bucket
        buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if dtype == "uint8" else (buckets - 128).astype(np.int8)
    packed = np.packbits(embeddings > 0, axis=-1)  # (N, ceil(dim / 8))
    return packed if dtype == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)


def stored_width(dim: int, dtype: str) -> int:
    """Numbers stored per vector: ``dim``, or ceil(dim / 8) bytes for the binary types."""
    return (dim + 7) // 8 if dtype in ("binary", "ubinary") else dim


def bytes_per_vector(dim: int, dtype: str) -> int:
    return stored_width(dim, dtype) * {"float32": 4, "float16": 2}.get(dtype, 1)


def _bits(packed: np.ndarray) -> np.ndarray:
    packed = np.asarray(packed)
    as_bytes = (
        (packed.astype(np.int16) + 128).astype(np.uint8)
        if packed.dtype == np.int8
        else packed.astype(np.uint8)
    )
    return np.unpackbits(as_bytes, axis=-1)


def hamming_scores(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """(Q, N) negative Hamming distances between packed binary (or ubinary) vectors: higher is closer."""
    q, d = _bits(queries).astype(np.int32), _bits(documents).astype(np.int32)
    agreements = q @ d.T + (1 - q) @ (1 - d).T
    return agreements - q.shape[1]


def rescore(
    queries: np.ndarray,
    documents: np.ndarray,
    candidates: np.ndarray,
    dtype: str,
    ranges: np.ndarray | None = None,
) -> np.ndarray:
    """Scores of each query's ``candidates`` (Q, K document indices) by the dot product of the float query with
    the documents stored as ``dtype`` (int8 / uint8 dequantized to bucket centres with ``ranges``; float as is)."""
    documents = np.asarray(documents)
    if dtype in CALIBRATED:
        ranges = np.asarray(ranges, dtype=np.float32)
        steps = np.where(ranges[1] - ranges[0] == 0, 1, (ranges[1] - ranges[0]) / 255)
        buckets = documents.astype(np.float32) + (128 if dtype == "int8" else 0)
        documents = ranges[0] + (buckets + 0.5) * steps
    documents = documents.astype(np.float32)
    return np.einsum("qd,qkd->qk", np.asarray(queries, dtype=np.float32), documents[candidates])
