"""Tabular inputs for fine-tuning: read CSV / TSV / JSONL / JSON / parquet, check columns, encode labels,
tokenize once, and pad each batch only to its own longest example."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.progress import progress_bar
from ..data.readers import DataError


@dataclass
class LabelMap:
    """Class names <-> ids, fixed by the training labels (sorted: numbers numerically, else as text).

    ``values`` are the labels as read (ints stay ints); ``names`` their text form, used in the saved
    config's ``id2label`` / ``label2id``.
    """

    values: list

    @classmethod
    def from_labels(cls, labels: Sequence) -> LabelMap:
        unique = sorted(set(labels), key=lambda v: (isinstance(v, str), v))
        return cls([v.item() if isinstance(v, np.generic) else v for v in unique])

    @property
    def names(self) -> list[str]:
        return [_label_name(v) for v in self.values]

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    def encode(self, labels: Sequence, path: str | Path) -> list[int]:
        """Ids of ``labels``; raises naming every label the training data never showed."""
        index = self.label2id
        names = [_label_name(v) for v in labels]
        unseen = sorted({n for n in names if n not in index})
        if unseen:
            counts = {u: names.count(u) for u in unseen}
            shown = ", ".join(f"{u!r} ({counts[u]} rows)" for u in unseen[:10])
            raise DataError(
                f"{path}: label(s) not seen in training: {shown}; the training labels are "
                f"{', '.join(repr(n) for n in self.names)}"
            )
        return [index[n] for n in names]


def _label_name(value: Any) -> str:
    # 1 and 1.0 (pandas reads an int column with a gap as float) are the same class.
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return str(value.item() if isinstance(value, np.generic) else value)


def class_labels(frame: Any, column: str, path: str | Path) -> list:
    values = frame[column]
    if values.isna().any():
        row = int(np.flatnonzero(values.isna().to_numpy())[0]) + 1
        raise DataError(f"{path}: label column {column!r} is empty in row {row}")
    raw = values.tolist()
    fractional = [v for v in raw if isinstance(v, float) and not float(v).is_integer()]
    if fractional:
        raise DataError(
            f"{path}: label column {column!r} holds fractional values (e.g. {fractional[0]}); "
            "for a real-valued target use task type 'regression'"
        )
    return raw


def regression_targets(frame: Any, column: str, path: str | Path) -> list[float]:
    import pandas as pd

    values = pd.to_numeric(frame[column], errors="coerce")
    bad = np.flatnonzero(~np.isfinite(values.to_numpy(dtype=np.float64)))
    if len(bad):
        row = int(bad[0])
        raise DataError(
            f"{path}: regression target {column!r} is not a finite number in row {row + 1}: "
            f"{frame[column].iloc[row]!r}"
        )
    return values.astype(float).tolist()


TOKENIZE_CHUNK = 8192  # examples per tokenizer call: bounds the Python lists it returns (MNLI has 393k)


class EncodedDataset(torch.utils.data.Dataset):
    """Texts (or text pairs) tokenized once up front, with their labels (int ids or float targets).

    Token ids live in one flat int32 array per model input with row offsets, not in Python lists: a
    full MNLI training set then takes tens of MB instead of gigabytes.
    """

    def __init__(
        self,
        tokenizer: Any,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        labels: Sequence,
        max_length: int,
        show_progress: bool = True,
    ):
        if len(texts) == 0:
            raise DataError("no examples")
        pieces: dict[str, list[np.ndarray]] = {}
        lengths: list[np.ndarray] = []
        starts = range(0, len(texts), TOKENIZE_CHUNK)
        for start in progress_bar(
            starts, desc="tokenizing", unit="chunk", disable=not show_progress or len(starts) < 2
        ):
            end = start + TOKENIZE_CHUNK
            chunk_pairs = list(pairs[start:end]) if pairs is not None else None
            encoded = tokenizer(list(texts[start:end]), chunk_pairs, truncation=True, max_length=max_length)
            names = [n for n in tokenizer.model_input_names if n in encoded]
            for name in names:
                flat = itertools.chain.from_iterable(encoded[name])
                pieces.setdefault(name, []).append(np.fromiter(flat, dtype=np.int32))
            lengths.append(np.fromiter(map(len, encoded["input_ids"]), dtype=np.int64))
        self.columns = {name: np.concatenate(parts) for name, parts in pieces.items()}
        self.offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
        self.labels = list(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        start, end = self.offsets[index], self.offsets[index + 1]
        return {**{n: column[start:end] for n, column in self.columns.items()}, "labels": self.labels[index]}


def collate(batch: list[dict[str, Any]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the batch's longest example; labels become long (classes) or float (regression)."""
    length = max(len(item["input_ids"]) for item in batch)
    out: dict[str, torch.Tensor] = {}
    for name in batch[0]:
        if name == "labels":
            continue
        padded = np.full((len(batch), length), pad_token_id if name == "input_ids" else 0, dtype=np.int64)
        for row, item in enumerate(batch):
            padded[row, : len(item[name])] = item[name]
        out[name] = torch.from_numpy(padded)  # (B, L)
    labels = [item["labels"] for item in batch]
    dtype = torch.float32 if isinstance(labels[0], float) else torch.long
    out["labels"] = torch.tensor(labels, dtype=dtype)
    return out
