"""Token-classification data: CoNLL-style and JSONL readers, BIO / IOB2 checks, and sub-word labels.

CoNLL style: one token per line, its tag in the last whitespace-separated column (columns between, such
as CoNLL-2003's POS and chunk tags, are ignored), a blank line between sentences, ``-DOCSTART-`` lines
skipped. JSONL: one object per line with a list of tokens and a list of tags (``tokens`` / ``tags`` by
default; ``ner_tags`` is accepted too). Every error names the file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.readers import DataError, json_objects
from ..model.losses import IGNORE_INDEX

IGNORE = IGNORE_INDEX  # the label of special tokens and of every sub-word but a word's first
OUTSIDE = "O"


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    line: int  # where it starts in its file (1-based)


def read_sentences(path: str | Path) -> list[Sentence]:
    """Sentences from ``.jsonl`` / ``.json`` (JSON lines) or any other file (CoNLL style), tags checked."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist" if not path.exists() else f"{path} is not a file")
    sentences = read_jsonl(path) if path.suffix.lower() in (".jsonl", ".json") else read_conll(path)
    if not sentences:
        raise DataError(f"data file {path} holds no sentence")
    for sentence in sentences:
        check_tags(sentence, path)
    return sentences


def _lines(path: Path):
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}, line {number}: not valid UTF-8 (column {err.start + 1})") from None
            yield number, line.removeprefix("\ufeff") if number == 1 else line


def read_conll(path: str | Path) -> list[Sentence]:
    path = Path(path)
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0
    for number, line in _lines(path):
        columns = line.split()
        if not columns:
            if words:
                sentences.append(Sentence(words, tags, start))
            words, tags = [], []
            continue
        if columns[0] == "-DOCSTART-":
            continue
        if len(columns) < 2:
            raise DataError(
                f"{path}, line {number}: expected a token and its tag separated by whitespace, got {line.strip()!r}"
            )
        if not words:
            start = number
        words.append(columns[0])
        tags.append(columns[-1])
    if words:
        sentences.append(Sentence(words, tags, start))
    return sentences


def read_jsonl(
    path: str | Path, tokens_field: str = "tokens", tags_field: str | None = None
) -> list[Sentence]:
    sentences = []
    for number, row in json_objects(path, what="data file"):
        field = tags_field or next((f for f in ("tags", "ner_tags") if f in row), "tags")
        for name in (tokens_field, field):
            if name not in row:
                raise DataError(f"{path}, line {number}: no {name!r} field; fields: {', '.join(sorted(row))}")
            value = row[name]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise DataError(f"{path}, line {number}: {name!r} must be a list of strings")
        if len(row[tokens_field]) != len(row[field]):
            raise DataError(
                f"{path}, line {number}: {len(row[tokens_field])} tokens but {len(row[field])} tags"
            )
        if row[tokens_field]:
            sentences.append(Sentence(list(row[tokens_field]), list(row[field]), number))
    return sentences


def check_tags(sentence: Sentence, path: str | Path) -> None:
    """Each tag is ``O`` or ``B-TYPE`` / ``I-TYPE`` (BIO / IOB2)."""
    for offset, tag in enumerate(sentence.tags):
        prefix, _, kind = tag.partition("-")
        if tag != OUTSIDE and (prefix not in ("B", "I") or not kind):
            where = (
                f"line {sentence.line + offset}"
                if path and Path(path).suffix not in (".jsonl", ".json")
                else (f"line {sentence.line}, token {offset}")
            )
            raise DataError(f"{path}, {where}: tag {tag!r} is not BIO / IOB2 (O, B-TYPE or I-TYPE)")


def label_names(sentences: Sequence[Sentence]) -> list[str]:
    """``O`` then ``B-`` and ``I-`` of every entity type seen, types sorted."""
    kinds = sorted({tag[2:] for s in sentences for tag in s.tags if tag != OUTSIDE})
    return [OUTSIDE] + [f"{p}-{k}" for k in kinds for p in ("B", "I")]


def word_labels(word_ids: Sequence[int | None], tags: Sequence[int]) -> list[int]:
    """The label of each token: its word's tag on the word's first sub-word, :data:`IGNORE` elsewhere."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(IGNORE if word is None or word == previous else int(tags[word]))
        previous = word
    return labels


class TokenLabelDataset:
    """Sentences tokenized once (words pre-split), with per-token labels; truncated to ``max_length``."""

    def __init__(
        self,
        tokenizer: Any,
        sentences: Sequence[Sentence],
        label2id: dict[str, int],
        max_length: int,
        path: str | Path = "",
    ):
        unknown = sorted({t for s in sentences for t in s.tags} - set(label2id))
        if unknown:
            raise DataError(f"{path}: tag(s) not seen in training: {', '.join(unknown)}")
        encoded = tokenizer(
            [s.words for s in sentences], is_split_into_words=True, truncation=True, max_length=max_length
        )
        self.sentences = list(sentences)
        self.rows = []
        self.truncated = 0  # sentences whose last words did not fit
        for i, sentence in enumerate(sentences):
            word_ids = encoded.word_ids(i)
            tags = [label2id[t] for t in sentence.tags]
            labels = word_labels(word_ids, tags)
            kept = len({w for w in word_ids if w is not None})
            self.truncated += kept < len(sentence.words)
            row = {
                name: np.asarray(encoded[name][i], dtype=np.int64)
                for name in encoded
                if name != "offset_mapping"
            }
            row["labels"] = np.asarray(labels, dtype=np.int64)
            self.rows.append(row)
        self.labels = [row["labels"] for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.rows[index]


def collate_tokens(batch: list[dict[str, np.ndarray]], pad_token_id: int) -> dict[str, Any]:
    """Right-pad to the batch's longest row: input ids with the pad id, labels with :data:`IGNORE`."""
    length = max(len(item["input_ids"]) for item in batch)
    out = {}
    for name in batch[0]:
        fill = pad_token_id if name == "input_ids" else IGNORE if name == "labels" else 0
        padded = np.full((len(batch), length), fill, dtype=np.int64)
        for row, item in enumerate(batch):
            padded[row, : len(item[name])] = item[name]
        out[name] = torch.from_numpy(padded)  # (B, L)
    return out
