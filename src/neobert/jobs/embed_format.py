"""The on-disk format of ``neobert embed``'s output directory: its file names, the columns of its shards, the
footer every shard carries, the write (a shard is whole or absent) and the reads. The job writes it
(:mod:`neobert.jobs.embed`) and the search index reads it (:mod:`neobert.jobs.index`), both through here.

(Not ``shards.py``: :mod:`neobert.data.shards` is the other shard format of the package, pretraining token ids
in ``.bin`` / ``.idx`` files; this one is vectors in parquet, the output of one command.)

A directory::

    _manifest.json              the job's manifest (:class:`neobert.jobs.output.JobOutput`; "_": parquet readers
                                skip it when they read the directory): format, version, the settings and their
                                digest, versions, one record per shard, totals
    part-FFFFF-PPPPP.parquet    one piece's rows (input file F, piece P), in the order of the input

A single-vector shard (a pooled embedding per text)::

    id          string        the id column's value, or FILE:ROW (the input as expanded, the 1-based row or line)
    embedding   list<float>   float32 (or float16 with dtype float16), ``dimensions`` wide; int8 / uint8 with
                              dtype int8 / uint8 (the manifest's ``calibration_ranges`` are the buckets);
                              packed signs, ``dimensions / 8`` bytes, with dtype binary (int8) / ubinary (uint8)
    tokens      int32         the text's tokens, special ones included, before any cut
    truncated   bool          cut to the window (long-documents truncate)
    windows     int32         model rows the text took (chunk: more than one for a long text)

A multi-vector shard (a late-interaction model: a vector per kept token of the document)::

    id          string        as above
    vectors     list<list<float>>   ``length`` vectors, each ``dimensions`` wide, float32 or float16
    length      int32         the document's kept tokens (its vectors)
    tokens      int32         the text's tokens, document marker and special ones included, before any cut

Every shard's schema metadata holds, under :data:`FOOTER_KEY`, its record (the manifest's entry for it) and the
settings' digest, so a re-run recognises a finished shard whatever became of the manifest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..common.io import atomic_file, clean_temporaries

FORMAT = "neobert-embeddings"
VERSION = 1
MANIFEST = "_manifest.json"
FOOTER_KEY = b"neobert"
DIGEST = "digest"  # the footer's field for the settings' digest, beside the shard's record
# the columns of the two kinds of shard, in their order
ID, EMBEDDING, TOKENS, TRUNCATED, WINDOWS = "id", "embedding", "tokens", "truncated", "windows"
VECTORS, LENGTH = "vectors", "length"
SINGLE_VECTOR = (ID, EMBEDDING, TOKENS, TRUNCATED, WINDOWS)
MULTI_VECTOR = (ID, VECTORS, LENGTH, TOKENS)


def shard_path(directory: str | os.PathLike, name: str) -> Path:
    """The file of shard ``name`` (a piece's name, ``part-FFFFF-PPPPP``) in ``directory``."""
    return Path(directory) / f"{name}.parquet"


def write_single_vector(
    path: Path,
    ids: Sequence[str],
    vectors: np.ndarray,
    tokens: Sequence[int],
    truncated: Sequence[bool],
    windows: Sequence[int],
    record: dict,
    digest: str,
) -> None:
    """One single-vector shard: row i is text i, ``vectors`` (texts, width) as stored (quantized already)."""
    import pyarrow as pa

    columns = {
        ID: pa.array(ids, pa.string()),
        EMBEDDING: pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1]),
        TOKENS: pa.array(tokens, pa.int32()),
        TRUNCATED: pa.array(truncated, pa.bool_()),
        WINDOWS: pa.array(windows, pa.int32()),
    }
    _write(path, columns, record, digest)


def write_multi_vector(
    path: Path,
    ids: Sequence[str],
    vectors: Sequence[Any],
    tokens: Sequence[int],
    dtype: str,
    record: dict,
    digest: str,
) -> None:
    """One multi-vector shard: row i is text i, ``vectors[i]`` its (kept tokens, ``record["dimensions"]``)
    vectors (arrays or CPU tensors), stored as ``dtype`` (float32 or float16)."""
    import pyarrow as pa

    dim = record["dimensions"]
    counts = [len(v) for v in vectors]
    flat = np.concatenate([np.asarray(v) for v in vectors]) if vectors else np.zeros((0, dim), np.float32)
    rows = pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(dtype).reshape(-1)), dim)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    columns = {
        ID: pa.array(ids, pa.string()),
        VECTORS: pa.ListArray.from_arrays(offsets, rows),
        LENGTH: pa.array(counts, pa.int32()),
        TOKENS: pa.array(tokens, pa.int32()),
    }
    _write(path, columns, record, digest)


def _write(path: Path, columns: dict, record: dict, digest: str) -> None:
    """The table of ``columns`` with its footer, written under a temporary name and renamed into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    footer = json.dumps({**record, DIGEST: digest}).encode()
    table = pa.table(columns).replace_schema_metadata({FOOTER_KEY: footer})
    with atomic_file(path, "wb") as handle:
        pq.write_table(table, handle)


def shard_record(path: Path, digest: str) -> dict | None:
    """The record in the footer of the shard at ``path`` if it was written under the settings' ``digest``;
    None for a missing file, another digest, or a file that is not a shard of ours."""
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        record = json.loads((pq.read_schema(path).metadata or {})[FOOTER_KEY])
    except (OSError, KeyError, ValueError):
        return None
    return record if record.pop(DIGEST, None) == digest else None


def read_manifest(directory: str | os.PathLike) -> dict:
    """The manifest of an output directory (ValueError when it holds none)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{directory} holds no {MANIFEST}: not the output of neobert embed")
    return json.loads(path.read_text(encoding="utf-8"))


def shard_records(directory: str | os.PathLike) -> list[dict]:
    """The records of an output's shards, in the order of its inputs."""
    return read_manifest(directory)["shards"]


def iter_single_vectors(directory: str | os.PathLike) -> Iterator[np.ndarray]:
    """Each shard's stored vectors of a single-vector output, in order, as a (rows, width) array of the stored
    type: one shard in memory at a time."""
    import pyarrow.parquet as pq

    for shard in shard_records(directory):
        table = pq.read_table(shard_path(directory, shard["name"]), columns=[EMBEDDING])
        flat = table.column(EMBEDDING).combine_chunks().flatten().to_numpy(zero_copy_only=False)
        yield flat.reshape(shard["rows"], -1)  # packed bits (binary) are narrower than dimensions


def read_single_vectors(directory: str | os.PathLike) -> np.ndarray:
    """Every stored vector of a single-vector output in order, as one (texts, width) array of the stored type."""
    return np.concatenate(list(iter_single_vectors(directory)))


def read_multi_vectors(directory: str | os.PathLike) -> tuple[list[str], list[np.ndarray], dict]:
    """Document ids, each document's (kept tokens, dimensions) float32 vectors, and the manifest's settings, of
    a multi-vector output."""
    import pyarrow.parquet as pq

    manifest = read_manifest(directory)
    ids: list[str] = []
    vectors: list[np.ndarray] = []
    for shard in manifest["shards"]:
        table = pq.read_table(shard_path(directory, shard["name"]))
        if VECTORS not in table.column_names:
            raise ValueError(
                f"{directory}: single-vector shards; index needs a late-interaction model's shards"
            )
        ids.extend(table.column(ID).to_pylist())
        documents = table.column(VECTORS).combine_chunks()
        flat = documents.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        ends = np.cumsum(documents.value_lengths().to_numpy(zero_copy_only=False))
        vectors.extend(np.split(flat.reshape(-1, shard["dimensions"]), ends[:-1]) if len(ends) else [])
    return ids, vectors, manifest["settings"]


def remove_output(directory: Path) -> None:
    """An earlier output's shards, manifest and temporaries (``--overwrite``)."""
    for path in directory.glob("part-*.parquet"):
        path.unlink()
    (directory / MANIFEST).unlink(missing_ok=True)
    clean_temporaries(directory)
