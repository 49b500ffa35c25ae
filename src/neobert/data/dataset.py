"""Read prepared shards (:mod:`neobert.data.shards`, written by :mod:`neobert.jobs.prepare`) as a map-style data set
of token-id arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .readers import DataError
from .shards import MANIFEST, SPLITS, read_manifest, shard_stem


class TokenDataset:
    """The documents of one split, memory-mapped; ``ds[i]`` is an int64 array of token ids.

    ``min_length`` keeps only documents longer than that many tokens ([CLS] and [SEP] included): the
    stage-2 sub-sets are ``min_length=1024`` and ``min_length=2048``. Sub-sets are index views over the same
    memory maps (see :meth:`subset`). Only shards recorded in the manifest are read, so a directory that is
    still being prepared (or was interrupted) serves its finished shards. Works as a PyTorch ``Dataset``
    (it has ``__len__`` and ``__getitem__``) and pickles cheaply for ``DataLoader`` workers: the maps are
    reopened on the other side instead of being copied.
    """

    def __init__(self, path: str | Path, split: str = "train", min_length: int | None = None):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        self.path, self.split = Path(path), split
        self.manifest = read_manifest(self.path)
        self.dtype = np.dtype(self.manifest["dtype"])
        self._offsets = [self._read_offsets(s) for s in self._shards()]
        counts = [len(o) - 1 for o in self._offsets]
        self._starts = np.concatenate(
            [[0], np.cumsum(counts, dtype=np.int64)]
        )  # first document of each shard
        self._all_lengths = np.concatenate([np.diff(o) for o in self._offsets] or [np.zeros(0, np.int64)])
        self._tokens: list[np.ndarray] | None = None
        self.min_length = min_length
        self.indices = (
            np.arange(len(self._all_lengths))
            if min_length is None
            else np.flatnonzero(self._all_lengths > min_length)
        )

    # --- metadata ---
    @property
    def complete(self) -> bool:
        """Whether ``prepare`` finished (otherwise only the shards done so far are visible)."""
        return bool(self.manifest.get("complete"))

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def special_token_ids(self) -> dict[str, int | None]:
        return dict(self.manifest["special_token_ids"])

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer the shards were made with (loads with ``AutoTokenizer.from_pretrained``)."""
        return self.path / "tokenizer"

    @property
    def lengths(self) -> np.ndarray:
        """Token count of each document of this view, in order."""
        return self._all_lengths[self.indices]

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    # --- access ---
    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self.indices)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        doc = int(self.indices[i])
        shard = int(np.searchsorted(self._starts, doc, side="right")) - 1
        local = doc - int(self._starts[shard])
        begin, end = self._offsets[shard][local], self._offsets[shard][local + 1]
        return self._maps()[shard][begin:end].astype(np.int64)

    def subset(self, min_length: int) -> TokenDataset:
        """A view holding only this view's documents longer than ``min_length`` tokens."""
        view = object.__new__(TokenDataset)
        view.__dict__.update(self.__dict__)
        view.min_length = min_length if self.min_length is None else max(min_length, self.min_length)
        view.indices = self.indices[self._all_lengths[self.indices] > min_length]
        return view

    # --- files ---
    def _shards(self) -> list[dict]:
        return sorted(self.manifest["shards"], key=lambda s: s["index"])

    def _read_offsets(self, shard: dict) -> np.ndarray:
        stem = shard_stem(self.path, self.split, shard["index"])
        offsets = np.fromfile(f"{stem}.idx", dtype=np.int64)
        expected = shard[self.split]
        size = Path(f"{stem}.bin").stat().st_size
        # A mismatch means the files were changed after the manifest recorded them.
        if len(offsets) != expected["documents"] + 1 or size != offsets[-1] * self.dtype.itemsize:
            raise DataError(f"{stem}.bin/.idx do not match {MANIFEST}; prepare the data again")
        return offsets

    def _maps(self) -> list[np.ndarray]:
        # Opened on first access, so that pickled copies (DataLoader workers) map the files themselves.
        if self._tokens is None:
            self._tokens = [
                np.memmap(f"{shard_stem(self.path, self.split, s['index'])}.bin", dtype=self.dtype, mode="r")
                if s[self.split]["tokens"]
                else np.zeros(0, self.dtype)  # mmap refuses empty files
                for s in self._shards()
            ]
        return self._tokens

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_tokens"] = None
        return state

    def __repr__(self) -> str:
        return (
            f"TokenDataset({str(self.path)!r}, split={self.split!r}, min_length={self.min_length}, "
            f"documents={len(self)}, tokens={self.num_tokens})"
        )
