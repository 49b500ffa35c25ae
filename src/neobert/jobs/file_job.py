"""What every task over a file of texts takes (``neobert embed``, ``classify``, ``tag``): a model, an input, an
output and the long-document policy (:class:`FileJob`), and what such a task tells its user beside the result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..common.config import PRECISIONS, check_precision
from ..inference.long_documents import EXTEND_METHODS, POLICIES, LongDocuments, LongReport

MAX_TOKENS_HELP = "padded tokens per batch at most (default: 4,096 on the CPU, the fastest setting measured; no limit on a GPU)"


@dataclass(kw_only=True)
class FileJob:
    """What every file task takes: a model, an input file, an output file, and the long-document policy."""

    model: str  # model directory, preset name (random weights) or hub id
    tokenizer: str | None = (
        None  # tokenizer directory (default: the model directory's, or bert-base-uncased for presets)
    )
    input: str  # UTF-8 text file, one text per line
    output: str  # the output file
    batch_size: int = 32  # texts per batch at most
    long_documents: str = field(
        default="truncate",
        metadata={
            "choices": POLICIES,
            "help": (
                "truncate (counted and reported) | chunk (windows, results pooled / averaged) | "
                "extend (NeoBERT: RoPE scaled to the text's length)"
            ),
        },
    )
    stride: int | None = None  # chunk: tokens shared by neighbouring windows (default: a quarter)
    rope_scaling: str = field(
        default="yarn", metadata={"choices": EXTEND_METHODS, "help": "extend: RoPE scaling method"}
    )
    show_progress: bool = True  # a progress bar on stderr

    def __post_init__(self) -> None:
        for name in (
            "model",
            "tokenizer",
        ):  # a Path is taken as its string (manifests and digests hold strings)
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))
        for name in ("batch_size", "max_tokens", "max_length", "stride"):
            value = getattr(self, name, None)
            if value is not None and value < 1:
                raise ValueError(f"{name.replace('_', ' ')} must be positive, got {value}")
        if "precision" in self.__dataclass_fields__:
            check_precision(self.precision)

    @property
    def long_policy(self) -> LongDocuments:
        return LongDocuments(self.long_documents, self.stride, self.rope_scaling)


def precision_field(what: str) -> Any:
    """The ``precision`` field of a task: auto, bf16 (``what``: how close it comes to fp32) or fp32."""
    return field(
        default="auto",
        metadata={
            "choices": PRECISIONS,
            "help": "auto: the faster of fp32 and bf16 for this model here (measured); "
            f"bf16: NeoBERT fast path (bf16 weights, unpadded; {what}); fp32: exact",
        },
    )


def empty_rows(texts: list[str]) -> list[int]:
    """1-based positions of the texts that are empty or blank."""
    return [i + 1 for i, text in enumerate(texts) if not text.strip()]


def notes(
    empty: list[int], noun: str, consequence: str, long_report: LongReport | None, policy: str
) -> list[str]:
    """What a file task tells its user beside the result: the empty rows (the first ten), and how many texts
    exceeded the model window and what the long-document policy did with them."""
    found = []
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
        found.append(f"{len(empty):,} {noun}(s) have an empty text ({noun}s {shown}); {consequence}")
    if long_report is not None and long_report.over_window:
        if long_report.truncated:
            what = "truncated to the window (--long-documents chunk or extend keeps all of them)"
        else:
            what = f"handled by '{policy}' ({long_report.rows:,} model rows in all)"
        found.append(f"{long_report.over_window:,} {noun}(s) longer than the model window: {what}")
    return found
