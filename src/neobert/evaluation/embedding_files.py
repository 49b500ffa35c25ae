"""``neobert eval embeddings``: read local task files, embed with one or more models, write the results.

Task files (UTF-8 JSONL, one object per line; a task's name is its file or directory name)::

    DIR/sts/NAME.jsonl                   {"sentence1", "sentence2", "score"}
    DIR/pair_classification/NAME.jsonl   {"sentence1", "sentence2", "label": 0|1}
    DIR/clustering/NAME.jsonl            {"text", "label"}
    DIR/classification/NAME/{train,test}.jsonl   {"text", "label"}
    DIR/retrieval/NAME/queries.jsonl     {"_id" (or "id"), "text"}
    DIR/retrieval/NAME/corpus.jsonl      {"_id" (or "id"), "text", optional "title"}
    DIR/retrieval/NAME/qrels.tsv         query-id <TAB> corpus-id <TAB> score (header optional; BEIR layout)
                      or qrels.jsonl     {"query-id", "corpus-id", "score"}

Late-interaction models (a ColBERT directory: :func:`neobert.inference.late_interaction.is_late_interaction_dir`) are
scored on the retrieval tasks by MaxSim over their token vectors.
Sparse models (a SPLADE ``SparseEncoder`` directory, or any masked-LM model with ``sparse=True``) are scored
on the retrieval tasks by the dot product of their SPLADE vectors (:func:`neobert.inference.sparse.encode_sparse`),
with the average non-zeros per query and per document beside nDCG@10 and MRR@10; the other families are
left out for them (a note says so).

Retrieval documents longer than the model's window are cut there (``long_documents="truncate"``) or read
whole in windows of the model's length overlapping by a quarter (``"chunk"``): a dense model's vector is the
mean over its windows (:mod:`neobert.inference.long_documents`' chunk policy), a SPLADE vector the entry-wise maximum
over its windows' (SPLADE's own max pooling, over all the document's tokens), a late-interaction document
keeps the token vectors of every window (MaxSim over the whole document). Queries are never chunked.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..cards import Result
from ..common.io import write_text
from ..common.tables import fmt, markdown_table
from ..data.readers import json_objects
from ..inference.encoders import Encoder, load_encoder, max_positions
from ..inference.kinds import kind_of
from ..inference.late_interaction import load_late_interaction, token_vectors
from ..inference.long_documents import LongDocuments, tokenize_rows
from ..inference.long_documents import embed as embed_long
from ..inference.run import encode
from ..inference.sparse import encode_sparse
from . import embeddings as E
from .instructions import TaskInstruction, apply_instruction
from .report import FAMILY_TASK_TYPES, defined, nan_mean, write_json

FAMILY_TITLES = {
    "classification": "Class.",
    "clustering": "Clust.",
    "pair_classification": "PairClass.",
    "retrieval": "Retr.",
    "sts": "STS",
}
NO_INSTRUCTION = TaskInstruction("", "")
# sparse and late-interaction retrieval's sizes: numbers of entries or vectors, not scores
COUNTS = ("nonzeros_query", "nonzeros_document", "vectors_document")


@dataclass(frozen=True)
class TaskSpec:
    family: str
    name: str
    path: Path


@dataclass
class EmbeddingReport:
    models: dict[str, list[E.TaskScore]] = field(default_factory=dict)
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)


def read_jsonl(path: str | os.PathLike, required: Sequence[str]) -> list[dict]:
    """Rows of a JSONL file holding the ``required`` keys; errors name the file, line and available keys."""
    rows = []
    for number, row in json_objects(path, what="task file"):
        missing = [k for k in required if k not in row]
        if missing:
            raise ValueError(
                f"{path}, line {number}: missing {', '.join(missing)}; available: {', '.join(sorted(row))}"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"task file {path} is empty")
    return rows


def _id(row: dict, path: Path) -> str:
    for key in ("_id", "id"):
        if key in row:
            return str(row[key])
    raise ValueError(f"{path}: a row has no '_id' or 'id' field; available: {', '.join(sorted(row))}")


def read_qrels(directory: Path) -> dict[str, dict[str, float]]:
    qrels: dict[str, dict[str, float]] = {}
    if (directory / "qrels.jsonl").is_file():
        triples = [
            (str(r["query-id"]), str(r["corpus-id"]), float(r["score"]))
            for r in read_jsonl(directory / "qrels.jsonl", ("query-id", "corpus-id", "score"))
        ]
    elif (directory / "qrels.tsv").is_file():
        lines = (directory / "qrels.tsv").read_text(encoding="utf-8").splitlines()
        fields = [line.split("\t") for line in lines if line.strip()]
        if fields and fields[0][-1].strip().lower() == "score":  # BEIR's header line
            fields = fields[1:]
        triples = [(f[0], f[1], float(f[2])) for f in fields]
    else:
        raise FileNotFoundError(f"{directory} holds neither qrels.tsv nor qrels.jsonl")
    for query, doc, score in triples:
        qrels.setdefault(query, {})[doc] = score
    return qrels


def discover_tasks(tasks_dir: str | os.PathLike) -> list[TaskSpec]:
    """Every task under ``tasks_dir`` in the layout of the module docstring."""
    root = Path(tasks_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"tasks directory {root} does not exist")
    unknown = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in E.FAMILIES)
    if unknown:
        raise ValueError(
            f"{root}: unknown task families {', '.join(unknown)}; known: {', '.join(E.FAMILIES)}"
        )
    specs = []
    for family in E.FAMILIES:
        folder = root / family
        if not folder.is_dir():
            continue
        if family in ("classification", "retrieval"):
            specs += [TaskSpec(family, p.name, p) for p in sorted(folder.iterdir()) if p.is_dir()]
        else:
            specs += [TaskSpec(family, p.stem, p) for p in sorted(folder.glob("*.jsonl"))]
    if not specs:
        raise ValueError(f"no task found under {root}; expected e.g. {root}/sts/NAME.jsonl")
    return specs


def select_tasks(tasks_dir: str | os.PathLike | None, files: dict[str, list[str]]) -> list[TaskSpec]:
    """The tasks under ``tasks_dir`` (if given) and the files named per family (family -> paths: a JSONL
    file, or a directory for classification and retrieval); at least one."""
    tasks = discover_tasks(tasks_dir) if tasks_dir else []
    for family, paths in files.items():
        for path in map(Path, paths or []):
            if not path.exists():
                raise FileNotFoundError(f"--{family.replace('_', '-')} {path} does not exist")
            tasks.append(TaskSpec(family, path.stem if path.is_file() else path.name, path))
    if not tasks:
        raise ValueError("no task given: pass --tasks-dir DIR or per-family options such as --sts FILE")
    return tasks


def evaluate_task(spec: TaskSpec, embed: E.Embed, instruction: TaskInstruction, seed: int = 0) -> E.TaskScore:
    """Read one task's files and score it."""
    path = spec.path
    if spec.family in ("sts", "pair_classification"):
        target = "score" if spec.family == "sts" else "label"
        rows = read_jsonl(path, ("sentence1", "sentence2", target))
        first, second = [r["sentence1"] for r in rows], [r["sentence2"] for r in rows]
        if spec.family == "sts":
            return E.evaluate_sts(
                embed, spec.name, first, second, [float(r["score"]) for r in rows], instruction
            )
        labels = [int(r["label"]) for r in rows]
        return E.evaluate_pair_classification(embed, spec.name, first, second, labels, instruction)
    if spec.family == "clustering":
        rows = read_jsonl(path, ("text", "label"))
        return E.evaluate_clustering(
            embed, spec.name, [r["text"] for r in rows], [r["label"] for r in rows], instruction, seed
        )
    if spec.family == "classification":
        train, test = (read_jsonl(path / f"{split}.jsonl", ("text", "label")) for split in ("train", "test"))
        return E.evaluate_classification(
            embed,
            spec.name,
            ([r["text"] for r in train], [r["label"] for r in train]),
            ([r["text"] for r in test], [r["label"] for r in test]),
            instruction,
            seed,
        )
    queries = {_id(r, path): r["text"] for r in read_jsonl(path / "queries.jsonl", ("text",))}
    corpus = {
        _id(r, path): (f"{r['title']} {r['text']}" if r.get("title") else r["text"]).strip()
        for r in read_jsonl(path / "corpus.jsonl", ("text",))
    }
    return E.evaluate_retrieval(embed, spec.name, queries, corpus, read_qrels(path), instruction)


def make_embed(
    encoder: Encoder, batch_size: int = 32, show_progress: bool = True, chunk: bool = False
) -> E.Embed:
    """Unit vectors of a dense encoder; with ``chunk``, retrieval documents are read whole (the module doc)."""

    def embed(texts: list[str], instruction: str) -> np.ndarray:
        texts = [apply_instruction(instruction, t) for t in texts]
        return encode(
            encoder.model,
            encoder.tokenizer,
            texts,
            batch_size,
            max_length=encoder.max_length,
            show_progress=show_progress,
        )

    def documents(texts: list[str], instruction: str) -> np.ndarray:
        texts = [apply_instruction(instruction, t) for t in texts]
        return embed_long(
            encoder.model,
            encoder.tokenizer,
            texts,
            LongDocuments("chunk"),
            batch_size=batch_size,
            show_progress=show_progress,
            window=encoder.max_length,
        )[0]

    return _with_queries(documents, embed) if chunk else embed


def make_sparse_embed(
    encoder: Encoder, batch_size: int = 32, show_progress: bool = True, chunk: bool = False
) -> E.Embed:
    """SPLADE rows (a SciPy CSR matrix) of a masked-LM encoder, instructions applied as for dense models;
    with ``chunk``, a document's row is the entry-wise maximum over its windows' rows."""

    def embed(texts: list[str], instruction: str) -> Any:
        texts = [apply_instruction(instruction, t) for t in texts]
        return encode_sparse(
            encoder.model,
            encoder.tokenizer,
            texts,
            batch_size,
            max_length=encoder.max_length,
            show_progress=show_progress,
        )

    def documents(texts: list[str], instruction: str) -> Any:
        window = encoder.max_length or max_positions(encoder.model, encoder.tokenizer)
        pieces, owners = window_texts(encoder.model, encoder.tokenizer, texts, window)
        rows = embed(pieces, instruction)
        return sp.vstack([rows[owners == i].max(axis=0) for i in range(len(texts))], format="csr")

    return _with_queries(documents, embed) if chunk else embed


def make_late_embed(
    source: str, device: str | None, batch_size: int = 32, show_progress: bool = True, chunk: bool = False
) -> E.Embed:
    """Token vectors of a late-interaction directory: documents by the returned function, queries by its
    ``.query`` (each with its marker; queries expanded), scored by MaxSim in :func:`E.rank_documents`; with
    ``chunk``, a document's vectors are those of all its windows (of ``document_length`` tokens)."""
    model, tokenizer, spec = load_late_interaction(source, device=device)

    def side(is_query: bool) -> E.Embed:
        def embed(texts: list[str], instruction: str) -> list:
            texts = [apply_instruction(instruction, t) for t in texts]
            return token_vectors(model, tokenizer, texts, spec, is_query, batch_size, show_progress)

        return embed

    def documents(texts: list[str], instruction: str) -> list:
        # the window less the document marker, which token_vectors adds to every piece
        pieces, owners = window_texts(model.encoder, tokenizer, texts, spec.document_length - 1)
        vectors = side(False)(pieces, instruction)
        return [torch.cat([vectors[j] for j in np.flatnonzero(owners == i)]) for i in range(len(texts))]

    return _with_queries(documents if chunk else side(False), side(True))


def _with_queries(documents: E.Embed, queries: E.Embed) -> E.Embed:
    documents.query = queries  # evaluate_retrieval encodes queries by .query where there is one
    return documents


def window_texts(model: Any, tokenizer: Any, texts: list[str], window: int) -> tuple[list[str], np.ndarray]:
    """Each text cut into windows of at most ``window`` tokens, special ones included, overlapping by a
    quarter (:func:`neobert.inference.long_documents.plan_rows`), as the text each window's tokens span; and, per
    window, the index of its text."""
    rows, encoding = tokenize_rows(model, tokenizer, texts, LongDocuments("chunk"), window)
    pieces = []
    for owner, start, size in zip(rows.owner, rows.start, rows.size):
        offsets = encoding["offset_mapping"][owner]
        span = (offsets[start][0], offsets[start + size - 1][1]) if size else (0, 0)
        pieces.append(texts[owner][span[0] : span[1]])
    return pieces, np.asarray(rows.owner)


LONG_POLICIES = ("truncate", "chunk")  # what eval embeddings does with a retrieval document past the window
SPARSE_FAMILIES = ("retrieval",)  # what sparse and late-interaction vectors are scored on


def embedding_of(model: str, sparse: bool = False) -> str:
    """How ``model`` is scored: its directory kind's embeddings (dense, sparse or multi-vector: a SPLADE
    directory is sparse, a ColBERT one multi-vector), or sparse from its MLM head where ``sparse`` asks it of a
    dense model. A directory whose settings cannot be reproduced raises, naming what."""
    kind = kind_of(model)
    if Path(model).is_dir():
        kind.validate(Path(model))
    return "sparse" if sparse and kind.embedding == "dense" else kind.embedding


def run(
    models: Sequence[str],
    tasks: Sequence[TaskSpec],
    output: str | os.PathLike | None = None,
    instructions: dict[str, TaskInstruction] | None = None,
    tokenizer: str | None = None,
    batch_size: int = 32,
    seed: int = 0,
    device: str | None = None,
    show_progress: bool = True,
    sparse: bool = False,
    long_documents: str = "truncate",
) -> EmbeddingReport:
    """Score every model on every task (zero-shot: no instruction unless given per task).

    Args:
        models: model directories, NeoBERT presets or hub ids, each scored on every task
        seed: for k-means and logistic regression
        tokenizer: tokenizer directory (default: the model's own)
        batch_size: texts per batch
        sparse: score every model as SPLADE from its masked-LM head (a SparseEncoder directory always is)
        long_documents: retrieval documents past the window: truncate | chunk (read whole in windows: dense
            vectors averaged, SPLADE vectors max-pooled, late-interaction token vectors all kept)
    """
    if long_documents not in LONG_POLICIES:
        raise ValueError(f"long_documents must be one of {', '.join(LONG_POLICIES)}; got {long_documents!r}")
    chunk = long_documents == "chunk"
    start = time.perf_counter()
    report = EmbeddingReport()
    for model in models:
        embedding = embedding_of(model, sparse)
        is_late, is_sparse = embedding == "multi-vector", embedding == "sparse"
        if is_late:
            embed = make_late_embed(model, device, batch_size, show_progress, chunk)
        else:
            encoder = load_encoder(model, tokenizer, head="mlm" if is_sparse else "base", device=device)
            embed = (make_sparse_embed if is_sparse else make_embed)(
                encoder, batch_size, show_progress, chunk
            )
        report.models[model] = [
            evaluate_task(spec, embed, (instructions or {}).get(spec.name, NO_INSTRUCTION), seed)
            if not (is_sparse or is_late) or spec.family in SPARSE_FAMILIES
            else _not_for_sparse(spec, "late-interaction" if is_late else "sparse")
            for spec in tasks
        ]
    report.seconds = time.perf_counter() - start
    if output is not None:
        report.files = write_report(report, Path(output))
    return report


def _not_for_sparse(spec: TaskSpec, kind: str = "sparse") -> E.TaskScore:
    return E.TaskScore(
        spec.family,
        spec.name,
        {E.MAIN_METRIC[spec.family]: math.nan},
        0,
        [f"a {kind} model is scored on retrieval only"],
    )


def sparse_markdown(report: EmbeddingReport) -> str:
    """The sparse models' retrieval scores beside their sizes ('' without a sparse model)."""
    rows = [
        [
            model,
            s.task,
            s.scores["ndcg_at_10"] * 100,
            s.scores["mrr_at_10"] * 100,
            s.scores["nonzeros_query"],
            s.scores["nonzeros_document"],
        ]
        for model, scores in report.models.items()
        for s in scores
        if "nonzeros_query" in s.scores
    ]
    late = [
        [
            model,
            s.task,
            s.scores["ndcg_at_10"] * 100,
            s.scores["mrr_at_10"] * 100,
            s.scores["vectors_document"],
        ]
        for model, scores in report.models.items()
        for s in scores
        if "vectors_document" in s.scores
    ]
    out = ""
    if rows:
        header = [
            "model",
            "task",
            "nDCG@10 x 100",
            "MRR@10 x 100",
            "non-zeros / query",
            "non-zeros / document",
        ]
        out += (
            "\n## Sparse retrieval (index size and query cost: average non-zeros per vector)\n\n"
            + markdown_table(header, rows, digits=1)
        )
    if late:
        header = ["model", "task", "nDCG@10 x 100", "MRR@10 x 100", "token vectors / document"]
        out += (
            "\n## Late-interaction retrieval (MaxSim; index size: token vectors per document)\n\n"
            + markdown_table(header, late, digits=1)
        )
    return out


def family_averages(scores: Sequence[E.TaskScore]) -> dict[str, float]:
    """Mean main score per family present, and ``average`` over all tasks (MTEB's convention)."""
    out = {}
    for family in E.FAMILIES:
        values = [s.main_score for s in scores if s.family == family]
        if values:
            out[family] = nan_mean(values)
    out["average"] = nan_mean([s.main_score for s in scores])
    return out


def to_markdown(report: EmbeddingReport) -> str:
    """A summary in Table 4's style (one row per model, one column per family) and a per-task table."""
    first = next(iter(report.models.values()), [])  # every model runs the same tasks
    families = [f for f in E.FAMILIES if any(s.family == f for s in first)]
    header = [
        "model",
        *(f"{FAMILY_TITLES[f]} ({sum(s.family == f for s in first)})" for f in families),
        "Avg.",
    ]
    summary = []
    for model, scores in report.models.items():
        averages = family_averages(scores)
        summary.append([model, *(averages[f] for f in families), averages["average"]])
    rows = []
    for model, scores in report.models.items():
        for s in scores:
            others = ", ".join(
                f"{k} {fmt(v, 100)}" for k, v in s.scores.items() if k != s.main_metric and k not in COUNTS
            )
            rows.append(
                [model, s.family, s.task, s.main_metric, s.main_score, others, s.size, "; ".join(s.notes)]
            )
    return (
        "## Summary (main score x 100)\n\n"
        + markdown_table(header, summary, scale=100)
        + "\n## Tasks (x 100)\n\n"
        + markdown_table(
            ["model", "family", "task", "metric", "score", "other metrics", "n", "notes"], rows, scale=100
        )
        + sparse_markdown(report)
    )


def write_report(report: EmbeddingReport, output: Path) -> list[Path]:
    data = {
        model: {
            "averages": family_averages(scores),
            "tasks": [
                {
                    "family": s.family,
                    "task": s.task,
                    "main_metric": s.main_metric,
                    "main_score": s.main_score,
                    "scores": s.scores,
                    "size": s.size,
                    "notes": s.notes,
                }
                for s in scores
            ],
        }
        for model, scores in report.models.items()
    }
    return [
        write_json(output / "embedding_results.json", data),
        write_text(output / "embedding_results.md", to_markdown(report)),
    ]


def card_results(report: EmbeddingReport) -> dict[str, list[Result]]:
    """Each model's scores as model-card entries (every defined metric of every task, as in the JSON)."""
    return {
        model: [
            Result(
                FAMILY_TASK_TYPES[s.family],
                s.task,
                s.task,
                s.task,
                metric,
                value,
                None,
                "neobert eval embeddings",
            )
            for s in scores
            for metric, value in s.scores.items()
            if defined(value)
        ]
        for model, scores in report.models.items()
    }
