"""How much held-out retrieval each embedding type keeps (issue 33, item 5): float32, int8, binary (Hamming),
and binary candidates re-scored with int8 or float32, against float32 on the held-out docstring pairs.

    python docs/benchmarks/late_interaction/quantization.py MODEL PAIRS_DIR [--rescore 40]

MODEL: a dense embedding model; PAIRS_DIR: `neobert data docstring-pairs --output PAIRS_DIR` (int8's buckets
come from the *training* pairs' documents, not from the held-out ones). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from neobert.common.tables import markdown_table
from neobert.evaluation.embeddings import ndcg_at_k
from neobert.inference.kinds import load_for_inference
from neobert.inference.quantization import (
    bytes_per_vector,
    calibration_ranges,
    hamming_scores,
    quantize,
    rescore,
)
from neobert.inference.run import encode


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("pairs")
    parser.add_argument("--rescore", type=int, default=40, help="binary candidates re-scored per query")
    args = parser.parse_args()
    task = Path(args.pairs) / "heldout" / "retrieval" / "docstrings"
    queries, corpus = _rows(task / "queries.jsonl"), _rows(task / "corpus.jsonl")
    qrels: dict[str, dict[str, float]] = {}
    for line in (task / "qrels.tsv").read_text().splitlines():
        q, d, r = line.split("\t")[:3]
        if r.isdigit():
            qrels.setdefault(q, {})[d] = float(r)
    loaded = load_for_inference(args.model, None, "base", "fp32")

    def embed(texts: list[str]) -> np.ndarray:
        return encode(loaded.model, loaded.tokenizer, texts, 32, max_length=256)

    q = embed([r["text"] for r in queries])
    d = embed([r["text"] for r in corpus])
    calibration = embed([r["positive"] for r in _rows(Path(args.pairs) / "train.jsonl")])
    ranges = calibration_ranges(calibration)
    doc_ids, query_ids = [r["_id"] for r in corpus], [r["_id"] for r in queries]

    def ndcg(scores: np.ndarray) -> float:
        order = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        return float(
            np.mean(
                [ndcg_at_k([doc_ids[j] for j in row], qrels[qid], 10) for qid, row in zip(query_ids, order)]
            )
        )

    def reranked(dtype: str) -> np.ndarray:
        coarse = hamming_scores(quantize(q, "binary"), quantize(d, "binary"))
        candidates = np.argsort(-coarse, axis=1, kind="stable")[:, : args.rescore]
        stored = quantize(d, dtype, ranges if dtype == "int8" else None)
        fine = rescore(q, stored, candidates, dtype, ranges)
        scores = np.full(coarse.shape, -np.inf)
        np.put_along_axis(scores, candidates, fine, axis=1)
        return scores

    dim = d.shape[1]
    int8_docs = quantize(d, "int8", ranges)
    results = [
        ("float32", q @ d.T, bytes_per_vector(dim, "float32")),
        ("int8 (float query, documents at bucket centres)",
         rescore(q, int8_docs, np.tile(np.arange(len(d)), (len(q), 1)), "int8", ranges), bytes_per_vector(dim, "int8")),
        ("binary (Hamming)", hamming_scores(quantize(q, "binary"), quantize(d, "binary")).astype(float),
         bytes_per_vector(dim, "binary")),
        (f"binary, top {args.rescore} re-scored with int8", reranked("int8"),
         bytes_per_vector(dim, "binary") + bytes_per_vector(dim, "int8")),
        (f"binary, top {args.rescore} re-scored with float32", reranked("float32"),
         bytes_per_vector(dim, "binary") + bytes_per_vector(dim, "float32")),
    ]  # fmt: skip
    reference = ndcg(results[0][1])
    rows = [[name, 100 * ndcg(s), 100 * ndcg(s) / reference, size, size / bytes_per_vector(dim, "float32")]
            for name, s, size in results]  # fmt: skip
    header = ["stored as", "nDCG@10 x 100", "share of float32's (%)", "bytes / document", "of float32's size"]
    print(f"{len(q)} held-out queries, {len(d)} documents, {dim} dimensions\n")
    print(markdown_table(header, rows, digits=2))


if __name__ == "__main__":
    main()
