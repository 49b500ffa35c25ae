"""``neobert classify``: run a sequence classifier over a text file or a table, one JSON line per row."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.markup import escape
from rich.table import Table

from ..encoders import PRECISIONS, apply_precision, check_precision, is_preset, load_model, resolve_tokenizer
from ..finetuning import data
from ..inference import classifier_rows, classify, is_regression, label_names
from ..io import write_text
from ..long_documents import TRUNCATE, LongDocuments, LongReport
from ..long_documents import classify as classify_long
from .common import (
    CLIError,
    add_command,
    add_model_arguments,
    empty_rows,
    make_console,
    note_empty_rows,
    quiet_transformers,
)
from .embed import read_texts
from .long_documents import add_long_document_arguments, long_document_settings, note_long_documents


@dataclass
class ClassifyResult:
    output: Path
    rows: int
    regression: bool
    label_counts: dict[str, int]  # predicted label -> rows, every label in id order; empty for regression
    value_range: tuple[float, float, float] | None  # min, mean, max of the predicted values (regression)
    seconds: float
    random_weights: bool  # a preset: the head and encoder are untrained
    empty_rows: list[int]  # 1-based rows whose text is empty or blank (classified as such, and reported)
    long: LongReport | None = None  # what the long-document policy did (None for pairs / explicit max_length)


def read_inputs(
    path: str | os.PathLike, text_column: str = "text", pair_column: str | None = None
) -> tuple[list[str], list[str] | None]:
    """Texts (and second texts) from a table (.csv/.tsv/.jsonl/.json/.parquet) or, for any other file, its
    lines (one text per line)."""
    path = Path(path)
    if path.suffix.lower() not in data.TABLE_SUFFIXES:
        if pair_column is not None:
            raise CLIError(
                f"--pair-column needs a table ({', '.join(data.TABLE_SUFFIXES)}); {path} is read as plain text, "
                "one text per line"
            )
        return read_texts(path), None
    frame = data.read_table(path)
    data.require_columns(frame, [text_column, pair_column], path)
    pairs = data.text_column(frame, pair_column, path) if pair_column is not None else None
    return data.text_column(frame, text_column, path), pairs


def _require_head(model: str, classifier: torch.nn.Module) -> None:
    """A checkpoint saved without a classification head loads with a random one: refuse it."""
    architectures = getattr(classifier.config, "architectures", None) or []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise CLIError(
            f"{model} is a {architectures[0]} checkpoint without a trained classification head (loading it "
            "as a classifier would add a random one); fine-tune a classifier first (`neobert finetune "
            "classify`) and pass its model directory"
        )


def run(
    model: str,
    input: str | os.PathLike,
    output: str | os.PathLike,
    text_column: str = "text",
    pair_column: str | None = None,
    batch_size: int = 32,
    max_tokens: int | None = None,
    max_length: int | None = None,
    tokenizer: str | None = None,
    show_progress: bool = True,
    precision: str = "bf16",
    long_documents: LongDocuments = TRUNCATE,
) -> ClassifyResult:
    """Classify every row of ``input`` with ``model`` and write one JSON object per row to ``output``.

    ``precision="bf16"`` (default) runs NeoBERT models on the fast path (bf16 weights, unpadded attention;
    probabilities within 0.05 of fp32, typically 0.01-0.02); ``fp32`` is exact. Other encoders run as loaded.
    """
    check_precision(precision)
    for name, value in (("batch size", batch_size), ("max tokens", max_tokens), ("max length", max_length)):
        if value is not None and value < 1:
            raise CLIError(f"{name} must be positive, got {value}")
    texts, pairs = read_inputs(input, text_column, pair_column)  # validate the input before loading the model
    start = time.perf_counter()
    tok = resolve_tokenizer(model, tokenizer)
    classifier = load_model(model, task="sequence-classification")
    _require_head(model, classifier)
    apply_precision(classifier, precision)
    report = None
    if pairs is None and max_length is None:  # single texts at the model's window: the policy decides
        logits, report = classify_long(classifier, tok, texts, long_documents, batch_size, max_tokens, show_progress)
    elif long_documents.policy != "truncate":
        raise CLIError(f"--long-documents {long_documents.policy} applies to single texts without --max-length")
    else:
        logits = classify(
            classifier,
            tok,
            texts,
            pairs,
            batch_size=batch_size,
            max_length=max_length,
            show_progress=show_progress,
            max_tokens=max_tokens,
        )
    config = classifier.config
    rows = classifier_rows(logits, config)
    path = write_text(output, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    regression = is_regression(config)
    counts: dict[str, int] = {}
    value_range = None
    if regression:
        values = logits.astype(np.float64)
        value_range = (float(values.min()), float(values.mean()), float(values.max()))
    else:
        predicted = Counter(row["label"] for row in rows)
        counts = {name: predicted[name] for name in dict.fromkeys(label_names(config))}
    seconds = time.perf_counter() - start
    empty = empty_rows(texts)
    return ClassifyResult(path, len(rows), regression, counts, value_range, seconds, is_preset(model), empty, report)


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = run(
        args.model,
        args.input,
        args.output,
        text_column=args.text_column,
        pair_column=args.pair_column,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_length=args.max_length,
        tokenizer=args.tokenizer,
        precision=args.precision,
        long_documents=long_document_settings(args),
    )
    console = make_console()
    console.print(
        f"classified {result.rows:,} rows in {result.seconds:.1f}s; wrote {escape(str(result.output))}",
        highlight=False,
        soft_wrap=True,
    )
    if result.regression:
        table = Table("min", "mean", "max", title="predicted values")
        table.add_row(*(f"{v:.4g}" for v in result.value_range))
    else:
        table = Table("label", "rows", "share", title="predicted labels")
        for name, count in result.label_counts.items():
            table.add_row(escape(name), f"{count:,}", f"{count / max(result.rows, 1):.1%}")
    console.print(table)
    note_empty_rows(console, result.empty_rows, "row", "their predictions say nothing about any text")
    note_long_documents(console, result.long, long_document_settings(args), "row")
    if result.random_weights:
        console.print("[yellow]note:[/] a preset has random weights: these predictions are meaningless")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "classify",
        _main,
        help="classify texts (a text file or a table) with a sequence classifier, into JSONL",
        description=(
            "Run a sequence classifier (e.g. the model directory written by `neobert finetune classify`) "
            "over a text file (one text per line) or a table; line i of the JSONL output is input row i."
        ),
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--input",
        required=True,
        help="a table (.csv, .tsv, .jsonl, .json, .parquet) or a UTF-8 text file, one text per line",
    )
    parser.add_argument("--text-column", default="text", help="the table's text column (default: text)")
    parser.add_argument(
        "--pair-column", help="the table's second-text column, for sentence-pair classifiers (tables only)"
    )
    parser.add_argument(
        "--output",
        required=True,
        help='where to write the .jsonl: {"label", "score", "probabilities"} per row, or {"value"} (regression)',
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per batch at most (default: 32)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="padded tokens per batch at most (default: 4,096 on the CPU, the fastest setting measured; "
        "no limit on a GPU)",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        help="truncate inputs to this many tokens (default: the model's position limit)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="bf16",
        help="bf16: NeoBERT fast path (bf16 weights, unpadded; probabilities within ~0.05 of fp32); fp32: exact",
    )
    add_long_document_arguments(parser)
