"""Index bytes and exhaustive search time of a dense, a SPLADE and a late-interaction model on one retrieval
task, and the late-interaction index stored as int8 or binary (what share of nDCG@10 each keeps).

    PYTHONPATH=src python docs/benchmarks/sparse_vs_dense/index_search.py DENSE SPARSE LATE TASK_DIR \
        [--long-documents truncate|chunk] [--output FILE.json]

The vectors are `neobert eval embeddings`' own (``neobert.evaluation.embedding_files.make_embed`` /
``make_sparse_embed`` / ``make_late_embed``, the same ``--long-documents`` policy), so the float32 nDCG@10
printed here equals the evaluation's. Index bytes: dense documents x width x 4 (float32); SPLADE non-zeros x 8
(int32 index + float32 value, as an inverted index stores them); late interaction token vectors x dim x 4
(float32), x dim x 1 (int8, plus the 2 x dim float32 calibration ranges) or x dim / 8 (binary, packed signs),
the types of ``neobert.inference.quantization`` (``neobert embed --dtype``'s; calibrated on the documents' own token
vectors). A quantized index is scored against float query vectors: int8 dequantized to its bucket centres,
binary as +-1 per dimension (asymmetric), both by MaxSim. Search time: one query (already encoded) scored
against every document on one thread (dense: a matrix product; SPLADE: a sparse one; MaxSim: padded blocks of
all token vectors in one matrix, each document's maximum by ``np.maximum.reduceat``: :func:`flat_maxsim`, equal
to ``neobert.inference.late_interaction.maxsim_scores`` without its padding to the longest document of a block), median
over the first 100 queries. Late-interaction rankings use the same function (the float32 nDCG@10 equals the
evaluation's).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from neobert.common.io import write_json
from neobert.common.tables import markdown_table
from neobert.evaluation import embedding_files as files
from neobert.evaluation.embeddings import ndcg_at_k, rank_documents
from neobert.inference.encoders import load_encoder
from neobert.inference.quantization import bytes_per_vector, calibration_ranges, quantize


def read_task(task: Path) -> tuple[dict, dict, dict]:
    rows = lambda name: [json.loads(line) for line in (task / name).read_text(encoding="utf-8").splitlines()]  # noqa: E731
    qrels: dict[str, dict[str, float]] = {}
    for line in (task / "qrels.tsv").read_text(encoding="utf-8").splitlines():
        q, d, score = line.split("\t")[:3]
        if q != "query-id":
            qrels.setdefault(q, {})[d] = float(score)
    return (
        {r["_id"]: r["text"] for r in rows("queries.jsonl")},
        {r["_id"]: r["text"] for r in rows("corpus.jsonl")},
        qrels,
    )


def flat_maxsim(queries, documents) -> np.ndarray:
    """(Q, N) MaxSim, equal to ``maxsim_scores``: every document's vectors in one matrix, each document's best
    match per query vector by ``np.maximum.reduceat`` over its rows (no padding to the longest document)."""
    flat = torch.cat(documents).float()
    starts = np.cumsum([0] + [len(d) for d in documents[:-1]])
    out = np.empty((len(queries), len(documents)), dtype=np.float32)
    for i, q in enumerate(queries):
        out[i] = np.maximum.reduceat((q.float() @ flat.T).numpy(), starts, axis=1).sum(0)
    return out


def ndcg(query_vectors, doc_vectors, doc_ids, query_ids, qrels, per_query: bool = False):
    if isinstance(doc_vectors, list):  # late interaction
        order = np.argsort(-flat_maxsim(query_vectors, doc_vectors), axis=1, kind="stable")[:, :10]
        rankings = [[doc_ids[j] for j in row] for row in order]
    else:
        rankings = rank_documents(query_vectors, doc_vectors, doc_ids, 10)
    values = [100 * ndcg_at_k(r, qrels[q], 10) for q, r in zip(query_ids, rankings)]
    return values if per_query else float(np.mean(values))


BUCKETS = ((0, 512, "<= 512"), (513, 4096, "513-4,096"), (4097, 10**9, "> 4,096"))


def by_length(values: list[float], query_ids, qrels, lengths: dict[str, int]) -> dict[str, list]:
    """nDCG@10 x 100 of the queries grouped by their relevant document's length in tokens: bucket -> [n, mean]."""
    out = {}
    for low, high, name in BUCKETS:
        kept = [v for v, q in zip(values, query_ids) if low <= max(lengths[d] for d in qrels[q]) <= high]
        out[name] = [len(kept), float(np.mean(kept)) if kept else float("nan")]
    return out


def search_ms(score_one, queries) -> float:
    from threadpoolctl import threadpool_limits

    times, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        for q in queries[:100]:
            start = time.perf_counter()
            score_one(q)
            times.append(1000 * (time.perf_counter() - start))
    torch.set_num_threads(threads)
    return float(np.median(times))


def late_budget(query_vectors, doc_vectors, doc_ids, query_ids, qrels) -> list[list]:
    """nDCG@10 and bytes of the late-interaction index stored as float32, int8 and binary."""
    flat = torch.cat(doc_vectors).numpy()
    counts = [len(v) for v in doc_vectors]
    ranges = calibration_ranges(flat)
    steps = np.where(ranges[1] - ranges[0] == 0, 1, (ranges[1] - ranges[0]) / 255)
    stored = {
        "float32": flat,
        "int8": ranges[0] + (quantize(flat, "int8", ranges).astype(np.float32) + 128.5) * steps,
        "binary": np.where(flat > 0, 1.0, -1.0).astype(np.float32),
    }
    rows = []
    for dtype, vectors in stored.items():
        if dtype == "float32":  # the float32 index is the one already scored
            rows.append([dtype, float("nan"), len(flat) * bytes_per_vector(flat.shape[1], dtype)])
            continue
        docs = list(torch.split(torch.from_numpy(np.ascontiguousarray(vectors)), counts))
        extra = ranges.nbytes if dtype == "int8" else 0
        size = len(flat) * bytes_per_vector(flat.shape[1], dtype) + extra
        rows.append([dtype, ndcg(query_vectors, docs, doc_ids, query_ids, qrels), size])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("dense", "sparse", "late", "task"):
        parser.add_argument(name)
    parser.add_argument("--long-documents", default="truncate", choices=files.LONG_POLICIES)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    queries, corpus, qrels = read_task(Path(args.task))
    query_ids, doc_ids = [q for q in queries if q in qrels], list(corpus)
    chunk = args.long_documents == "chunk"
    embeds = {
        "dense": files.make_embed(load_encoder(args.dense), show_progress=False, chunk=chunk),
        "SPLADE": files.make_sparse_embed(
            load_encoder(args.sparse, head="mlm"), show_progress=False, chunk=chunk
        ),
        "late interaction": files.make_late_embed(args.late, "cpu", show_progress=False, chunk=chunk),
    }
    rows, result = [], {"task": args.task, "long_documents": args.long_documents, "documents": len(doc_ids)}
    tokenizer = load_encoder(args.dense).tokenizer
    lengths = {d: len(tokenizer(corpus[d], verbose=False)["input_ids"]) for d in doc_ids}
    result["by_length"] = {}
    for name, embed in embeds.items():
        start = time.perf_counter()
        docs = embed([corpus[d] for d in doc_ids], "")
        encode_s = time.perf_counter() - start
        q = getattr(embed, "query", embed)([queries[i] for i in query_ids], "")
        if name == "dense":
            size, entries, one = docs.nbytes, docs.size, lambda v, d=docs: v[None] @ d.T
        elif name == "SPLADE":
            size, entries, one = docs.nnz * 8, docs.nnz, lambda v, d=docs: (v @ d.T).toarray()
        else:
            entries = sum(v.numel() for v in docs)
            size, one = entries * 4, lambda v, d=docs: flat_maxsim([v], d)
        per_query = [q[i] for i in range(q.shape[0] if name != "late interaction" else len(q))]
        values = ndcg(q, docs, doc_ids, query_ids, qrels, per_query=True)
        result["by_length"][name] = by_length(values, query_ids, qrels, lengths)
        row = [name, float(np.mean(values)), entries, size, search_ms(one, per_query), encode_s]
        rows.append(row)
        if name == "late interaction":
            result["late_budget"] = late_budget(q, docs, doc_ids, query_ids, qrels)
            result["late_budget"][0][1] = row[1]
    header = ["model", "nDCG@10 x 100", "index entries", "index bytes", "search ms / query (1 thread)",
              "corpus encode s"]  # fmt: skip
    result["rows"], result["header"] = rows, header
    print(markdown_table(header, rows))
    print(markdown_table(["late-interaction index", "nDCG@10 x 100", "bytes"], result["late_budget"]))
    print(
        markdown_table(
            ["model"] + [f"relevant document {b[2]} tokens: n, nDCG@10" for b in BUCKETS],
            [
                [m] + [f"{n}, {v:.2f}" for n, v in groups.values()]
                for m, groups in result["by_length"].items()
            ],
        )
    )
    if args.output:
        write_json(args.output, result, indent=2)


if __name__ == "__main__":
    main()
