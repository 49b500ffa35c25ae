"""The on-disk format of prepared data: token shards, offsets and a manifest.

Layout of an output directory::

    manifest.json            settings, dtype, special ids, the finished shards and the totals
    tokenizer/               the tokenizer used (``save_pretrained``), so the data describes itself
    train-00000.bin          token ids of the shard's training documents, back to back: uint16 when the
                             vocabulary has at most 65,536 entries, else uint32; no padding is stored
    train-00000.idx          int64 offsets, one more than the documents, starting at 0:
                             document i is ``bin[idx[i]:idx[i + 1]]``, with [CLS] ... [SEP] as the
                             tokenizer adds them
    validation-00000.bin/.idx   the same for the held-out documents

Every file is written under a temporary name (``.tmp-...``, :mod:`neobert.common.io`) and renamed when complete; a shard is recorded in the
manifest, itself replaced atomically, only after its files are in place. Readers trust only recorded shards,
so an interrupted run never exposes a partial one.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..common.io import atomic_file, clean_temporaries
from .readers import DataError

MANIFEST = "manifest.json"
FORMAT = "neobert-token-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")
_SHARD_FILE = re.compile(r"^(train|validation)-\d{5,}\.(bin|idx)$")


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id below ``vocab_size``."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def shard_stem(out: Path, split: str, index: int) -> Path:
    return out / f"{split}-{index:05d}"


class ShardWriter:
    """Appends the token ids of one split of one shard to a temporary file; renames it when finished."""

    def __init__(self, out: Path, split: str, index: int, dtype: np.dtype):
        stem = shard_stem(out, split, index)
        self.bin_path, self.idx_path = stem.with_suffix(".bin"), stem.with_suffix(".idx")
        self.dtype = dtype
        self._bin = contextlib.ExitStack()
        self.file = self._bin.enter_context(atomic_file(self.bin_path, "wb"))
        self.offsets = [0]

    def add(self, docs: list[list[int]]) -> None:
        if not docs:
            return
        total = sum(map(len, docs))
        np.fromiter(itertools.chain.from_iterable(docs), dtype=self.dtype, count=total).tofile(self.file)
        for d in docs:
            self.offsets.append(self.offsets[-1] + len(d))

    def finish(self, thresholds: list[int]) -> dict:
        """Close, write the offsets, move both files into place; return the split's counts."""
        offsets = np.asarray(self.offsets, dtype=np.int64)
        self._bin.close()  # the .bin is in place before the .idx that makes it readable
        with atomic_file(self.idx_path, "wb") as handle:
            offsets.tofile(handle)
        lengths = np.diff(offsets)
        return {
            "documents": len(lengths),
            "tokens": int(offsets[-1]),
            "long_documents": {str(t): int((lengths > t).sum()) for t in thresholds},
        }

    def abort(self) -> None:
        """Drop the unfinished shard: its temporary file is removed, nothing is renamed."""
        aborted = RuntimeError("shard aborted")
        self._bin.__exit__(type(aborted), aborted, None)


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.exists():
        raise DataError(f"{out}: no {MANIFEST}; run `neobert data prepare` first")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest")
    return manifest


def remove_prepared(out: Path) -> None:
    """Delete what ``prepare`` wrote into ``out`` (and nothing else)."""
    for p in out.iterdir():
        if _SHARD_FILE.match(p.name) or p.name == MANIFEST:
            p.unlink()
    clean_temporaries(out)
    shutil.rmtree(out / "tokenizer", ignore_errors=True)


def totals(shards: list[dict]) -> dict:
    """Sums over the recorded shards, per split."""
    out: dict[str, Any] = {"input_documents": 0, "dropped_short": 0}
    for split in SPLITS:
        out[split] = {"documents": 0, "tokens": 0, "long_documents": {}}
    for s in shards:
        out["input_documents"] += s["input_documents"]
        out["dropped_short"] += s["dropped_short"]
        for split in SPLITS:
            t = out[split]
            t["documents"] += s[split]["documents"]
            t["tokens"] += s[split]["tokens"]
            for k, v in s[split]["long_documents"].items():
                t["long_documents"][k] = t["long_documents"].get(k, 0) + v
    return out
