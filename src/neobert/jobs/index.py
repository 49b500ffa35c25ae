"""A search index over a late-interaction model's multi-vector shards: ``neobert index`` and ``neobert search``.

PLAID (``fast-plaid``) is the index PyLate and sentence-transformers build, but no ``fast-plaid`` release
installs beside torch 2.13 (each build is tied to one torch version; the newest asks for torch 2.11), so the
index is the fallback the issue names: every token vector in a ``voyager`` HNSW graph (inner product), plus
the documents' token vectors themselves for exact re-scoring. A query's token vectors each fetch their
``candidates`` nearest document tokens; the documents those belong to are scored exactly by MaxSim, the best
``top_k`` returned. The shards are read through :mod:`neobert.jobs.embed_format`, the format ``neobert embed``
writes them in.

Index directory: ``tokens.voyager`` (the graph; item i is token vector i), ``vectors.npy`` (all token vectors,
float16 or float32 as the shards stored them), ``offsets.npy`` (document d's vectors are rows offsets[d] to
offsets[d + 1]), ``ids.json`` (document ids) and ``index.json`` (model, sizes, settings).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.io import atomic_file, write_dir, write_json, write_text
from ..common.tables import markdown_table
from ..inference.late_interaction import load_late_interaction, maxsim_scores, token_vectors
from .embed_format import read_multi_vectors

__all__ = ["IndexConfig", "SearchConfig", "build_index", "exhaustive_search", "load_index", "search"]


@dataclass
class IndexConfig:
    """``neobert index``: build a search index (voyager HNSW over token vectors, exact MaxSim re-scoring) from
    the multi-vector shards ``neobert embed`` writes with a late-interaction model."""

    input: str  # a directory of multi-vector shards (neobert embed --model COLBERT_DIR --output DIR)
    output: str  # the index directory
    m: int = 16  # HNSW: links per node
    ef_construction: int = 200  # HNSW: candidates kept while building


@dataclass
class SearchConfig:
    """``neobert search``: the best documents of each query (one per line of a text file) in an index built by
    ``neobert index``, as JSON lines (``query``, ``results``: ``id`` and MaxSim ``score``, best first)."""

    index: str  # an index directory (neobert index)
    queries: str  # a text file, one query per line
    output: str  # JSON lines, line i: query i's results
    model: str | None = None  # the late-interaction model (default: the one the index names)
    top_k: int = 10  # documents per query
    candidates: int = (
        64  # nearest document tokens fetched per query token (32: recall@10 0.75 in the benchmark)
    )
    ef: int = 128  # HNSW: candidates kept while searching (at least ``candidates``)
    batch_size: int = 32  # queries per model batch


@dataclass
class IndexResult:
    output: Path
    documents: int
    vectors: int
    bytes: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        rows = [
            ["documents", f"{self.documents:,}"],
            ["token vectors", f"{self.vectors:,}"],
            ["index bytes", f"{self.bytes:,}"],
            ["time", f"{self.seconds:.1f} s"],
        ]
        return f"indexed into {self.output}\n\n" + markdown_table(["", ""], rows)


def build_index(config: IndexConfig) -> IndexResult:
    from voyager import Index, Space

    start = time.perf_counter()
    ids, vectors, settings = read_multi_vectors(config.input)
    dim = vectors[0].shape[1] if vectors else 0
    flat = np.concatenate(vectors).astype(np.float32) if vectors else np.zeros((0, dim), np.float32)
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int64)
    graph = Index(Space.InnerProduct, num_dimensions=dim, M=config.m, ef_construction=config.ef_construction)
    graph.add_items(flat, ids=list(range(len(flat))))
    info = {
        "model": settings.get("model"),
        "dimensions": dim,
        "documents": len(ids),
        "vectors": len(flat),
        "dtype": settings.get("dtype", "float32"),
        "settings": asdict(config),
    }

    def fill(tmp: Path) -> None:
        graph.save(str(tmp / "tokens.voyager"))
        for name, array in (("vectors.npy", flat.astype(info["dtype"])), ("offsets.npy", offsets)):
            with atomic_file(tmp / name, "wb") as handle:
                np.save(handle, array)
        write_text(tmp / "ids.json", json.dumps(ids))
        write_json(tmp / "index.json", info, indent=2)

    output = write_dir(fill, Path(config.output))
    size = sum(f.stat().st_size for f in output.iterdir())
    return IndexResult(output, len(ids), len(flat), size, time.perf_counter() - start)


@dataclass
class LoadedIndex:
    graph: Any
    vectors: np.ndarray
    offsets: np.ndarray
    ids: list[str]
    info: dict

    def documents(self, indices: Any) -> list[torch.Tensor]:
        return [
            torch.from_numpy(self.vectors[self.offsets[d] : self.offsets[d + 1]].astype(np.float32))
            for d in indices
        ]


def load_index(directory: str | os.PathLike) -> LoadedIndex:
    from voyager import Index

    path = Path(directory)
    if not (path / "index.json").is_file():
        raise ValueError(f"{path} is not an index directory (neobert index)")
    return LoadedIndex(
        Index.load(str(path / "tokens.voyager")),
        np.load(path / "vectors.npy"),
        np.load(path / "offsets.npy"),
        json.loads((path / "ids.json").read_text(encoding="utf-8")),
        json.loads((path / "index.json").read_text(encoding="utf-8")),
    )


def search_vectors(
    index: LoadedIndex, queries: list[torch.Tensor], top_k: int, candidates: int, ef: int
) -> list[list[tuple[int, float]]]:
    """Per query, (document index, MaxSim) of its ``top_k`` best among the documents its tokens' nearest
    ``candidates`` document tokens belong to, best first."""
    document_of = np.searchsorted(index.offsets, np.arange(len(index.vectors)), side="right") - 1
    out = []
    for query in queries:
        tokens, _ = index.graph.query(
            query.numpy(), k=min(candidates, len(index.vectors)), query_ef=max(ef, candidates)
        )
        pool = np.unique(document_of[np.asarray(tokens).reshape(-1)])
        scores = maxsim_scores([query], index.documents(pool))[0]
        order = torch.argsort(scores, descending=True, stable=True)[:top_k]
        out.append([(int(pool[i]), float(scores[i])) for i in order])
    return out


def exhaustive_search(
    index: LoadedIndex, queries: list[torch.Tensor], top_k: int
) -> list[list[tuple[int, float]]]:
    """The exact answer: MaxSim of each query against every document."""
    scores = maxsim_scores(queries, index.documents(range(len(index.ids))))
    top = torch.topk(scores, min(top_k, scores.shape[1]), dim=1)
    return [
        [(int(i), float(s)) for i, s in zip(row_i, row_s)] for row_i, row_s in zip(top.indices, top.values)
    ]


@dataclass
class SearchResult:
    output: Path
    queries: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        per_query = 1000 * self.seconds / max(self.queries, 1)
        return f"searched {self.queries:,} queries into {self.output} ({per_query:.1f} ms per query, model included)"


def search(config: SearchConfig) -> SearchResult:
    index = load_index(config.index)
    model_source = config.model or index.info.get("model")
    if not model_source:
        raise ValueError("the index names no model: pass --model")
    queries = [line for line in Path(config.queries).read_text(encoding="utf-8").splitlines() if line.strip()]
    start = time.perf_counter()
    model, tokenizer, spec = load_late_interaction(model_source)
    vectors = token_vectors(model, tokenizer, queries, spec, True, config.batch_size)
    found = search_vectors(index, vectors, config.top_k, config.candidates, config.ef)
    lines = [
        json.dumps({"query": q, "results": [{"id": index.ids[d], "score": s} for d, s in hits]})
        for q, hits in zip(queries, found)
    ]
    write_text(config.output, "".join(line + "\n" for line in lines))
    return SearchResult(Path(config.output), len(queries), time.perf_counter() - start)
