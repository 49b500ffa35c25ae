"""A model over a file of texts, one result per row: the tasks behind ``neobert embed``, ``classify`` and ``tag``.

Each task takes a config dataclass, whose fields are the command's options (``cli/options.py`` derives
them), and returns what the command prints. Inputs are validated before the model loads; outputs are
written atomically. Row i of every output is row (or line) i of the input.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..common.io import write_text
from ..common.tables import markdown_table
from ..data.text_files import read_texts
from ..inference.encoders import is_preset, load_model, resolve_tokenizer
from ..inference.kinds import load_for_inference
from ..inference.long_documents import LongReport
from ..inference.long_documents import classifier_logits as classifier_logits_long
from ..inference.registration import declared_head
from ..inference.run import classifier_logits, classifier_rows, fill_mask, is_regression, label_names
from ..token_classification.tagging import Entity, tag
from .file_job import MAX_TOKENS_HELP, FileJob, empty_rows, notes, precision_field

# -- classify ------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ClassifyFileConfig(FileJob):
    """``neobert classify``: run a sequence classifier (e.g. the model directory written by ``neobert finetune
    classify``) over a text file (one text per line) or a table; line i of the JSONL output is input row i."""

    input: str  # a table (.csv, .tsv, .jsonl, .json, .parquet) or a UTF-8 text file, one text per line
    text_column: str = "text"  # the table's text column
    pair_column: str | None = (
        None  # the table's second-text column, for sentence-pair classifiers (tables only)
    )
    output: str = field(
        metadata={
            "help": 'where to write the .jsonl: {"label", "score", "probabilities"} per '
            'row, or {"value"} (regression)'
        }
    )
    max_tokens: int | None = field(default=None, metadata={"help": MAX_TOKENS_HELP})
    max_length: int | None = None  # truncate inputs to this many tokens (default: the model's position limit)
    precision: str = precision_field("probabilities within ~0.05 of fp32")


@dataclass
class FileClassification:
    """What ``neobert classify`` did (the rows themselves are in the output file)."""

    output: Path
    rows: int
    regression: bool
    label_counts: dict[str, int]  # predicted label -> rows, every label in id order; empty for regression
    value_range: tuple[float, float, float] | None  # min, mean, max of the predicted values (regression)
    seconds: float
    random_weights: bool  # a preset: the head and encoder are untrained
    empty_rows: list[int]  # 1-based rows whose text is empty or blank (classified as such, and reported)
    long_report: LongReport | None = (
        None  # what the long-document policy did (None for pairs / explicit max_length)
    )
    notes: list[str] = field(default_factory=list)  # empty rows, long texts, random weights

    @property
    def summary(self) -> str:
        """What was written, and the predicted labels (rows and share) or the range of predicted values."""
        if self.regression:
            table = markdown_table(["min", "mean", "max"], [[f"{v:.4g}" for v in self.value_range]])
        else:
            rows = [[name, f"{n:,}", f"{n / max(self.rows, 1):.1%}"] for name, n in self.label_counts.items()]
            table = markdown_table(["label", "rows", "share"], rows)
        what = "predicted values" if self.regression else "predicted labels"
        done = f"classified {self.rows:,} rows in {self.seconds:.1f}s; wrote {self.output}"
        return f"{done}\n\n{what}:\n\n{table}"


def _require_head(model: str, classifier: torch.nn.Module) -> None:
    """A checkpoint saved without a classification head loads with a random one: refuse it."""
    architectures = getattr(classifier.config, "architectures", None) or []
    if architectures and declared_head(classifier.config) != "sequence-classification":
        raise ValueError(
            f"{model} is a {architectures[0]} checkpoint without a trained classification head (loading it "
            "as a classifier would add a random one); fine-tune a classifier first (`neobert finetune "
            "classify`) and pass its model directory"
        )


def classify_file(config: ClassifyFileConfig) -> FileClassification:
    """Classify every row of ``config.input`` and write one :func:`~neobert.inference.run.classifier_rows` object
    per row to ``config.output``.

    ``precision="bf16"`` runs NeoBERT models on the fast path (bf16 weights, unpadded attention;
    probabilities within 0.05 of fp32, typically 0.01-0.02); ``fp32`` is exact; ``auto`` (default) takes the
    one that is faster for this model on this machine (measured). Other encoders are cast to that precision.
    """
    c = config
    texts, pairs = read_texts(c.input, c.text_column, c.pair_column)  # validate before loading the model
    if (pairs is not None or c.max_length is not None) and c.long_documents != "truncate":
        raise ValueError(f"--long-documents {c.long_documents} applies to single texts without --max-length")
    start = time.perf_counter()
    loaded = load_for_inference(c.model, c.tokenizer, "sequence-classification", c.precision)
    classifier, tok = loaded.model, loaded.tokenizer
    _require_head(c.model, classifier)
    budget = {"batch_size": c.batch_size, "max_tokens": c.max_tokens, "show_progress": c.show_progress}
    report = None
    if pairs is None and c.max_length is None:  # single texts at the model's window: the policy decides
        logits, report = classifier_logits_long(classifier, tok, texts, c.long_policy, **budget)
    else:
        logits = classifier_logits(classifier, tok, texts, pairs, max_length=c.max_length, **budget)
    rows = classifier_rows(logits, classifier.config)
    path = write_text(c.output, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    regression = is_regression(classifier.config)
    counts: dict[str, int] = {}
    value_range = None
    if regression:
        values = logits.astype(np.float64)
        value_range = (float(values.min()), float(values.mean()), float(values.max()))
    else:
        predicted = Counter(row["label"] for row in rows)
        counts = {name: predicted[name] for name in dict.fromkeys(label_names(classifier.config))}
    seconds, empty = time.perf_counter() - start, empty_rows(texts)
    found = notes(empty, "row", "their predictions say nothing about any text", report, c.long_documents)
    if is_preset(c.model):
        found.append("a preset has random weights: these predictions are meaningless")
    return FileClassification(
        path, len(rows), regression, counts, value_range, seconds, is_preset(c.model), empty, report, found
    )


# -- tag -----------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class TagConfig(FileJob):
    """``neobert tag``: one JSON line per input text: {text, entities: [{label, start, end, text, score}]};
    offsets are characters of the text, end exclusive."""

    model: str  # fine-tuned token-classification model directory
    tokenizer: str | None = None  # tokenizer directory (default: the model's)
    input: (
        str  # text file (one text per line) or a table with a text column (.jsonl: a 'text' field per line)
    )
    output: str  # output .jsonl


@dataclass
class TagResult:
    output: Path
    texts: int
    entities: list[list[Entity]]
    seconds: float
    long_report: LongReport | None = None
    notes: list[str] = field(default_factory=list)  # long texts

    @property
    def summary(self) -> str:
        found = sum(len(row) for row in self.entities)
        return f"tagged {self.texts:,} texts: {found:,} entities in {self.seconds:.1f} s -> {self.output}"


def tag_file(config: TagConfig) -> TagResult:
    """Tag every text of ``config.input``; one ``{text, entities}`` JSON line per text in ``config.output``."""
    c = config
    if not Path(c.model).is_dir():
        raise ValueError(f"--model {c.model}: expected a fine-tuned token-classification model directory")
    texts = read_texts(c.input)[0]
    start = time.perf_counter()
    loaded = load_for_inference(c.model, c.tokenizer, "token-classification", precision=None)  # as trained
    model, tokenizer = loaded.model, loaded.tokenizer
    entities, report = tag(model, tokenizer, texts, c.long_policy, batch_size=c.batch_size)
    lines = [
        json.dumps({"text": text, "entities": [e.to_dict() for e in row]}, ensure_ascii=False)
        for text, row in zip(texts, entities)
    ]
    path = write_text(c.output, "\n".join(lines) + "\n")
    return TagResult(
        path,
        len(texts),
        entities,
        time.perf_counter() - start,
        report,
        notes([], "text", "", report, c.long_documents),
    )


# -- fill-mask -----------------------------------------------------------------------------------------------


@dataclass
class FillMaskResult:
    text: str
    predictions: list[list[tuple[str, float]]]  # one list per [MASK], best first
    random_weights: bool  # a preset: the predictions mean nothing

    @property
    def summary(self) -> str:
        """One row per prediction: the [MASK]'s number (on its first row), rank, token, probability."""
        rows = [
            [str(number) if rank == 1 else "", rank, token, f"{prob:.3g}"]
            for number, predictions in enumerate(self.predictions, start=1)
            for rank, (token, prob) in enumerate(predictions, start=1)
        ]
        header = ["[MASK] #", "rank", "token", "probability"]
        return f"fill-mask: {self.text}\n\n" + markdown_table(header, rows)

    @property
    def notes(self) -> list[str]:
        return [RANDOM_WEIGHTS_NOTE] if self.random_weights else []


RANDOM_WEIGHTS_NOTE = (
    "weights are random (a preset, not a trained checkpoint): predictions are meaningless until pretraining"
)


def fill_mask_text(model: str, text: str, top_k: int = 5, tokenizer: str | None = None) -> FillMaskResult:
    """The ``top_k`` most likely tokens for each [MASK] of ``text`` (``neobert fill-mask``).

    Args:
        model: model directory, preset name (random weights) or hub id
        text: text holding one or more [MASK], e.g. "Paris is the [MASK] of France."
        top_k: predictions per [MASK]
        tokenizer: tokenizer directory (default: the model directory's, or bert-base-uncased for presets)
    """
    mlm = load_model(model, head="mlm")
    return FillMaskResult(
        text, fill_mask(mlm, resolve_tokenizer(model, tokenizer), text, top_k=top_k), is_preset(model)
    )
