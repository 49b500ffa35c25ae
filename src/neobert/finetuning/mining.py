"""Hard-negative mining: ``neobert mine``, the first step of the retrieval training loop.

For each (query, positive) pair of a contrastive JSONL file, a retriever of ours ranks a corpus and the best
candidates that pass the filters become the row's ``negatives``; the output is the contrastive JSONL every
trainer reads (``query``, ``positive``, ``negatives``, ``scores``: the positive's, then each negative's).
The settings and their meaning are sentence-transformers' ``mine_hard_negatives`` (``output_format=
"labeled-list"``, ``output_scores=True``): the ``range_max`` + (most positives of a query) best candidates are
fetched; a query's positives (every row with the same query, matched by text) are never its negatives; a
candidate scoring above the query's lowest positive score less ``absolute_margin``, or less ``relative_margin``
x |that score|, above ``max_score`` or below ``min_score`` is dropped (a likely false negative, or too easy);
of the candidates left, ranks ``range_min`` to ``range_max`` are the window, of which the ``num_negatives``
best (``top``) or a seeded sample (``random``) are kept, best first.

The retriever is the model's kind: a dense model's corpus goes through the embed job (``neobert embed``:
parquet shards, resumable, any engine) and is searched exactly, shard by shard, with a running top-k (cosine
similarity, the vectors normalised as sentence-transformers mines); a late-interaction model searches an index
of ``neobert index`` (built from the embed job's token-vector shards where none is given); a SPLADE model's
corpus is encoded block by block and searched by the dot product. No step holds the corpus's vectors whole.

A cross-encoder ``teacher`` scores the positive and every kept negative (``scores`` are then its, for
distillation); given with a margin or a score bound, it scores every fetched candidate first and the filters
read its scores, as sentence-transformers does with ``cross_encoder``.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.io import write_text
from ..common.tables import fmt, markdown_table
from ..data.readers import ON_ERROR, DataError, ReadStats, expand_inputs, file_records, json_objects
from ..inference.cross_encoder import CrossEncoderScorer
from ..inference.kinds import kind_of, load_for_inference
from ..inference.late_interaction import load_late_interaction, maxsim_scores, token_vectors
from ..inference.long_documents import embed as embed_texts
from ..inference.sparse import encode_sparse
from ..jobs.embed import embed_corpus, with_declared_embedding
from ..jobs.embed_config import EmbedConfig
from ..jobs.embed_format import iter_single_vectors
from ..jobs.index import IndexConfig, build_index, load_index, search_vectors

SAMPLING = ("top", "random")


@dataclass
class MineConfig:
    """``neobert mine``: hard negatives for (query, positive) pairs from a corpus, with a dense, SPLADE or
    late-interaction model; sentence-transformers' ``mine_hard_negatives`` settings; writes the contrastive
    JSONL every ``finetune`` command reads, ``scores`` included."""

    model: str  # the retriever: a dense (sentence-transformers), SPLADE or late-interaction directory
    pairs: str  # JSONL of {"query", "positive"} (more fields are kept as they are)
    corpus: list[str] = field(
        metadata={"nargs": "+"}
    )  # the documents: .txt (one per line), .jsonl, .csv, .parquet
    output: str  # the mined JSONL
    text_column: str = "text"  # the corpus's column of texts (tables and JSONL)
    index: str | None = None  # late interaction: an index of the corpus (neobert index); default: built here
    work: str | None = None  # where the corpus's embeddings (and index) go; default OUTPUT.work (resumable)
    teacher: str | None = None  # a cross-encoder directory: its scores of the positive and each negative
    num_negatives: int = 3  # negatives per row (fewer where fewer pass)
    range_min: int = 0  # skip the best this many candidates that pass the filters
    range_max: int | None = None  # consider candidates up to this rank (default as sentence-transformers)
    absolute_margin: float | None = None  # drop candidates scoring above (lowest positive score - this)
    relative_margin: float | None = None  # drop candidates above (lowest positive score - |it| x this)
    max_score: float | None = None  # drop candidates scoring above this
    min_score: float | None = None  # drop candidates scoring below this
    sampling: str = field(default="top", metadata={"choices": SAMPLING})  # top: the best; random: a sample
    seed: int = 0  # seed of the random sampling
    # a bad row (its positive not in the corpus, no negative left): raise naming it, or skip and count it
    on_error: str = field(default="raise", metadata={"choices": ON_ERROR})
    batch_size: int = 32  # texts per model batch
    candidates: int = 64  # late interaction: nearest document tokens fetched per query token

    def __post_init__(self) -> None:
        if isinstance(self.corpus, str):
            self.corpus = [self.corpus]
        if self.num_negatives < 1:
            raise ValueError(f"num_negatives must be at least 1, got {self.num_negatives}")
        if self.range_min < 0:
            raise ValueError(f"range_min must be non-negative, got {self.range_min}")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")

    @property
    def filters(self) -> bool:
        """Whether a candidate's score is compared with anything (then a teacher rescores every candidate)."""
        bounds = (self.absolute_margin, self.relative_margin, self.max_score)
        return any(b is not None for b in bounds) or (self.teacher is not None and self.min_score is not None)

    def window(self, most_positives: int) -> int:
        """``range_max``, or sentence-transformers' default: room for 10x the negatives when filters drop some."""
        if self.range_max is not None:
            top = self.range_max
        else:
            spare = 10 * self.num_negatives if self.filters else self.num_negatives
            top = self.range_min + spare + most_positives
        if self.range_min >= top:
            raise ValueError(f"range_min ({self.range_min}) must be smaller than range_max ({top})")
        if self.num_negatives > top - self.range_min:
            raise ValueError(
                f"cannot mine {self.num_negatives} negatives from ranks {self.range_min} to {top}: lower "
                "num_negatives or range_min, or raise range_max"
            )
        return top


@dataclass
class MineResult:
    output: Path
    rows: int  # rows written
    negatives: int  # negatives written
    skipped: dict[str, int]  # rows skipped (on_error skip), by reason
    dropped: dict[str, int]  # candidates dropped, by filter
    retriever: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        rows = [
            ["rows written", f"{self.rows:,}"],
            [
                "negatives",
                f"{self.negatives:,} ({fmt(self.negatives / max(self.rows, 1), digits=2)} per row)",
            ],
            ["retriever", self.retriever],
            *([f"candidates dropped by {k}", f"{v:,}"] for k, v in self.dropped.items()),
            *([f"rows skipped: {k}", f"{v:,}"] for k, v in self.skipped.items()),
            ["time", f"{self.seconds:.1f} s"],
        ]
        return f"mined into {self.output}\n\n" + markdown_table(["", ""], rows)


@dataclass
class Pair:
    line: int  # the pairs file's line
    row: dict[str, Any]  # the line's object, written back with negatives and scores
    query: int  # the query's index among the distinct queries
    positive: int  # the positive's corpus row


def text_key(text: str) -> bytes:
    """A corpus text's key: 16 bytes of its BLAKE2b digest (a map of keys, not of texts, finds positives)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def corpus_texts(config: MineConfig) -> Iterator[str]:
    """The corpus's texts in the embed job's order (its reader, one text per line of a .txt, blank refused)."""
    stats = ReadStats()
    for spec in expand_inputs(config.corpus):
        for record in file_records(spec, config.text_column, "line", "raise", stats, "refuse"):
            yield record.text


def read_pairs(config: MineConfig, skipped: dict[str, int]) -> tuple[list[Pair], list[str], set[int], int]:
    """The pairs whose positive is in the corpus (the others: an error naming the line, or skipped and
    counted), the distinct queries, and the corpus rows that repeat an earlier row's text (never candidates:
    sentence-transformers mines a de-duplicated corpus), and the corpus's size."""
    rows = []
    for number, row in json_objects(config.pairs, what="pairs file"):
        missing = [k for k in ("query", "positive") if not isinstance(row.get(k), str)]
        if missing:
            raise DataError(f"{config.pairs}, line {number}: missing text field(s) {', '.join(missing)}")
        rows.append((number, row))
    wanted = {text_key(row["positive"]): None for _, row in rows}
    seen, repeats = set(), set()
    for i, text in enumerate(corpus_texts(config)):
        key = text_key(text)
        if key in seen:
            repeats.add(i)
            continue
        seen.add(key)
        if key in wanted:
            wanted[key] = i
    pairs, queries = [], {}
    for number, row in rows:
        positive = wanted[text_key(row["positive"])]
        if positive is None:
            _bad(
                config,
                skipped,
                "positive not in the corpus",
                f"line {number}: its positive is not in the corpus",
            )
            continue
        query = queries.setdefault(row["query"], len(queries))
        pairs.append(Pair(number, row, query, positive))
    return pairs, list(queries), repeats, len(seen) + len(repeats)


def _bad(config: MineConfig, skipped: dict[str, int], reason: str, message: str) -> None:
    if config.on_error == "raise":
        raise DataError(
            f"{config.pairs}, {message} ({', '.join(map(str, config.corpus))}); "
            "--on-error skip skips such rows and counts them"
        )
    skipped[reason] = skipped.get(reason, 0) + 1


class TopK:
    """The best ``k`` (score, corpus row) of each query over corpus blocks seen one at a time."""

    def __init__(self, queries: int, k: int):
        self.k = k
        self.scores = torch.full((queries, 0), float("-inf"))
        self.rows = torch.zeros((queries, 0), dtype=torch.long)

    def add(self, scores: torch.Tensor, first_row: int) -> None:
        """``scores`` (queries, block) of corpus rows ``first_row`` on."""
        rows = first_row + torch.arange(scores.shape[1]).expand_as(scores)
        merged, merged_rows = torch.cat([self.scores, scores.float()], 1), torch.cat([self.rows, rows], 1)
        best, at = torch.topk(merged, min(self.k, merged.shape[1]), dim=1)
        self.scores, self.rows = best, merged_rows.gather(1, at)


class Retriever:
    """Candidates of every distinct query over the corpus, and the query's score of given corpus rows."""

    name = ""

    def candidates(self, queries: list[str], k: int, wanted: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, corpus rows) of each query's ``k`` best documents, best first (row -1: none); the
        vectors of the corpus rows ``wanted`` (the positives) are kept for :meth:`pair_scores`."""
        raise NotImplementedError

    def pair_scores(self, queries: list[int], rows: list[int]) -> torch.Tensor:
        raise NotImplementedError


class DenseRetriever(Retriever):
    """Cosine similarity over the embed job's shards (vectors normalised, as sentence-transformers mines)."""

    name = "dense (cosine, exact, over the embed job's shards)"

    def __init__(self, config: MineConfig, work: Path):
        embed = with_declared_embedding(
            EmbedConfig(
                model=config.model,
                input=config.corpus,
                output=str(work / "corpus"),
                text_column=config.text_column,
                normalize=True,
                precision="fp32",
                batch_size=config.batch_size,
                show_progress=False,
            )
        )
        embed_corpus(embed)
        self.shards, self.config = work / "corpus", config
        self.encoder = load_for_inference(config.model, None, "base", precision=None)
        self.pooling = embed.pooling

    def candidates(self, queries: list[str], k: int, wanted: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
        model, tokenizer = self.encoder.model, self.encoder.tokenizer
        q, _ = embed_texts(model, tokenizer, queries, pooling=self.pooling, batch_size=self.config.batch_size)
        self.queries = torch.from_numpy(np.asarray(q, dtype=np.float32))
        top, first = TopK(len(queries), k), 0
        self.wanted: dict[int, torch.Tensor] = {}
        for vectors in iter_single_vectors(self.shards):
            block = torch.from_numpy(np.array(vectors, dtype=np.float32))
            top.add(self.queries @ block.T, first)
            for row in wanted:
                if first <= row < first + len(block):
                    self.wanted[row] = block[row - first]
            first += len(block)
        return top.scores, top.rows

    def pair_scores(self, queries: list[int], rows: list[int]) -> torch.Tensor:
        return torch.stack([self.queries[q] @ self.wanted[r] for q, r in zip(queries, rows)])


class SparseRetriever(Retriever):
    """SPLADE's dot product, the corpus encoded one block at a time."""

    name = "SPLADE (dot product, exact, the corpus in blocks)"
    block = 4096

    def __init__(self, config: MineConfig, work: Path):
        self.config = config
        self.encoder = load_for_inference(config.model, None, "mlm", precision=None, sparse=True)

    def _encode(self, texts: list[str]) -> Any:
        e = self.encoder
        return encode_sparse(e.model, e.tokenizer, texts, self.config.batch_size, max_length=e.max_length)

    def candidates(self, queries: list[str], k: int, wanted: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
        self.queries = self._encode(queries)
        top, first, self.wanted = TopK(len(queries), k), 0, {}
        texts = corpus_texts(self.config)
        while block := [t for _, t in zip(range(self.block), texts)]:
            vectors = self._encode(block)
            top.add(torch.from_numpy((self.queries @ vectors.T).toarray()), first)
            for row in wanted:
                if first <= row < first + len(block):
                    self.wanted[row] = vectors[row - first]
            first += len(block)
        return top.scores, top.rows

    def pair_scores(self, queries: list[int], rows: list[int]) -> torch.Tensor:
        return torch.tensor(
            [float(self.queries[q].multiply(self.wanted[r]).sum()) for q, r in zip(queries, rows)]
        )


class LateRetriever(Retriever):
    """MaxSim through an index of ``neobert index`` (built from the embed job's shards where none is given)."""

    name = "late interaction (an index of neobert index, exact MaxSim of its candidates)"

    def __init__(self, config: MineConfig, work: Path):
        self.config = config
        index = config.index
        if index is None:
            embed = EmbedConfig(
                model=config.model,
                input=config.corpus,
                output=str(work / "corpus"),
                text_column=config.text_column,
                batch_size=config.batch_size,
                show_progress=False,
            )
            embed_corpus(embed)
            index = str(work / "index")
            build_index(IndexConfig(input=embed.output, output=index))
        self.index = load_index(index)
        self.model, self.tokenizer, self.spec = load_late_interaction(config.model)

    def candidates(self, queries: list[str], k: int, wanted: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        self.queries = token_vectors(self.model, self.tokenizer, queries, self.spec, True, c.batch_size)
        found = search_vectors(self.index, self.queries, k, c.candidates, max(128, c.candidates))
        scores = torch.full((len(queries), k), float("-inf"))
        rows = torch.full((len(queries), k), -1, dtype=torch.long)
        for i, hits in enumerate(found):
            for j, (row, score) in enumerate(hits):
                rows[i, j], scores[i, j] = row, score
        return scores, rows

    def pair_scores(self, queries: list[int], rows: list[int]) -> torch.Tensor:
        documents = self.index.documents(rows)
        return torch.stack([maxsim_scores([self.queries[q]], [d])[0, 0] for q, d in zip(queries, documents)])


RETRIEVERS = {"dense": DenseRetriever, "sparse": SparseRetriever, "multi-vector": LateRetriever}


def mine(config: MineConfig) -> MineResult:
    """Mine ``config.pairs``' hard negatives from ``config.corpus`` into ``config.output``."""
    start = time.perf_counter()
    skipped: dict[str, int] = {}
    pairs, queries, repeats, size = read_pairs(config, skipped)
    if not pairs:
        raise DataError(f"{config.pairs}: no pair left to mine (skipped: {skipped})")
    positives: list[list[int]] = [[] for _ in queries]
    for pair in pairs:
        if pair.positive not in positives[pair.query]:
            positives[pair.query].append(pair.positive)
    top = config.window(max(len(p) for p in positives))
    k = min(top + max(len(p) for p in positives), size)
    retriever = _retriever(config, size)
    scores, rows = retriever.candidates(queries, k, {r for p in positives for r in p})
    owners = [q for q, p in enumerate(positives) for _ in p]
    positive_scores = retriever.pair_scores(owners, [r for p in positives for r in p])
    teacher = CrossEncoderScorer(config.teacher, config.batch_size) if config.teacher else None
    texts = CorpusTexts(config, rows, positives)
    if teacher is not None and config.filters:  # the teacher's scores decide the filters
        scores = _rescored(teacher, queries, rows, texts, scores)
        positive_scores = torch.tensor(
            teacher.scores([(queries[q], texts[r]) for q, p in enumerate(positives) for r in p])
        )
    lowest = torch.full((len(queries),), float("inf"))
    for q, s in zip(owners, positive_scores.tolist()):
        lowest[q] = min(lowest[q], s)
    kept, kept_scores, dropped = select(config, scores, rows, positives, lowest, top, repeats)
    lines, negatives = [], 0
    for pair in pairs:
        if not kept[pair.query]:
            where = f"ranks {config.range_min} to {top}"
            message = f"line {pair.line}: no candidate passes the filters in {where} (query {pair.row['query'][:60]!r})"
            _bad(config, skipped, "no negative in range", message)
            continue
        documents = [texts[r] for r in kept[pair.query]]
        values = [float(positive_scores[_position(positives, pair)]), *kept_scores[pair.query]]
        if teacher is not None and not config.filters:  # the teacher scores what was kept
            values = teacher.scores([(pair.row["query"], t) for t in [pair.row["positive"], *documents]])
        lines.append(json.dumps({**pair.row, "negatives": documents, "scores": values}, ensure_ascii=False))
        negatives += len(documents)
    write_text(config.output, "".join(line + "\n" for line in lines))
    seconds = time.perf_counter() - start
    result = MineResult(Path(config.output), len(lines), negatives, skipped, dropped, retriever.name, seconds)
    if teacher is not None:
        result.notes.append(f"scores: the teacher's ({config.teacher}, activation {teacher.activation})")
    return result


def _retriever(config: MineConfig, size: int) -> Retriever:
    """The retriever of the model's kind over the corpus (of ``size`` texts), its embeddings in the work folder."""
    work = Path(config.work or f"{config.output}.work")
    kind = kind_of(config.model).embedding
    if config.index is not None and kind != "multi-vector":
        raise ValueError(f"--index is a late-interaction index; {config.model} gives {kind} embeddings")
    retriever = RETRIEVERS[kind](config, work)
    if kind == "multi-vector" and len(retriever.index.ids) != size:
        raise ValueError(
            f"the index {config.index or work / 'index'} holds {len(retriever.index.ids):,} documents and the "
            f"corpus {', '.join(config.corpus)} {size:,}: give the corpus the index was built from"
        )
    return retriever


def _position(positives: list[list[int]], pair: Pair) -> int:
    """Where ``pair``'s positive score is in the flat list of every query's positives."""
    before = sum(len(p) for p in positives[: pair.query])
    return before + positives[pair.query].index(pair.positive)


def _rescored(
    teacher: CrossEncoderScorer, queries: list[str], rows: torch.Tensor, texts: Any, scores: torch.Tensor
):
    out = torch.full_like(scores, float("-inf"))
    for q in range(rows.shape[0]):
        valid = [j for j in range(rows.shape[1]) if rows[q, j] >= 0]
        values = teacher.scores([(queries[q], texts[int(rows[q, j])]) for j in valid])
        out[q, valid] = torch.tensor(values, dtype=out.dtype)
    return out


def select(
    config: MineConfig,
    scores: torch.Tensor,
    rows: torch.Tensor,
    positives: list[list[int]],
    lowest: torch.Tensor,
    top: int,
    repeats: set[int] = frozenset(),
) -> tuple[list[list[int]], list[list[float]], dict[str, int]]:
    """Per query, the corpus rows kept as negatives and their scores, best first; candidates dropped by filter.
    ``repeats``: rows whose text an earlier row holds (no candidates)."""
    scores = scores.clone()
    scores[rows < 0] = float("-inf")
    if repeats:
        scores[torch.isin(rows, torch.tensor(sorted(repeats)))] = float("-inf")
    for q, own in enumerate(positives):  # a query's positives are never its negatives
        scores[q, torch.isin(rows[q], torch.tensor(own))] = float("-inf")
    dropped = {}
    bounds = lowest[:, None].expand_as(scores)
    rules = {
        "absolute_margin": lambda m: scores + m > bounds,
        "relative_margin": lambda m: scores > bounds - bounds.abs() * m,
        "max_score": lambda m: scores > m,
        "min_score": lambda m: scores < m,
    }
    for name, rule in rules.items():
        value = getattr(config, name)
        if value is None:
            continue
        drop = rule(value) & torch.isfinite(scores)
        if int(drop.sum()):
            dropped[name] = int(drop.sum())
        scores[drop] = float("-inf")
    rng = random.Random(config.seed)
    kept, kept_scores = [], []
    for q in range(scores.shape[0]):
        order = torch.argsort(scores[q], descending=True, stable=True)[:top][config.range_min :]
        order = [int(j) for j in order if torch.isfinite(scores[q, j])]
        if config.sampling == "random" and len(order) > config.num_negatives:
            picked = sorted(rng.sample(range(len(order)), config.num_negatives))
            order = [order[i] for i in picked]
        order = order[: config.num_negatives]
        kept.append([int(rows[q, j]) for j in order])
        kept_scores.append([float(scores[q, j]) for j in order])
    return kept, kept_scores, dropped


class CorpusTexts:
    """The texts of the corpus rows mining needs (candidates and positives), read in one pass."""

    def __init__(self, config: MineConfig, rows: torch.Tensor, positives: list[list[int]]):
        wanted = {int(r) for r in rows.reshape(-1).tolist() if r >= 0} | {r for p in positives for r in p}
        self.texts = {i: t for i, t in enumerate(corpus_texts(config)) if i in wanted}

    def __getitem__(self, row: int) -> str:
        return self.texts[row]
