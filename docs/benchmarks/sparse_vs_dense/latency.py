"""Offline encode latency and index size of a dense and a sparse model on the held-out docstring queries.

    PYTHONPATH=src python docs/benchmarks/sparse_vs_dense/latency.py DENSE_DIR SPARSE_DIR TASK_DIR

One query at a time (batch 1, as a search request), after 10 warm-up queries, on one thread; median and 90th
percentile in milliseconds; then the whole corpus in batches of 32 for the index size: dense rows x width x
4 bytes (float32), sparse non-zeros x 8 bytes (int32 index + float32 value, as an inverted index stores them).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from neobert.common.tables import markdown_table
from neobert.inference.encoders import load_encoder
from neobert.inference.run import encode
from neobert.inference.sparse import encode_sparse


def texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def timed(call, queries: list[str]) -> tuple[float, float]:
    for q in queries[:10]:
        call([q])
    times = []
    for q in queries:
        start = time.perf_counter()
        call([q])
        times.append(1000 * (time.perf_counter() - start))
    return float(np.median(times)), float(np.percentile(times, 90))


def main(dense_dir: str, sparse_dir: str, task: str) -> None:
    torch.set_num_threads(1)
    queries, corpus = texts(Path(task) / "queries.jsonl"), texts(Path(task) / "corpus.jsonl")
    dense, sparse = load_encoder(dense_dir), load_encoder(sparse_dir, head="mlm")
    dense_call = lambda t: encode(dense.model, dense.tokenizer, t, batch_size=1, show_progress=False)  # noqa: E731
    sparse_call = lambda t: encode_sparse(sparse.model, sparse.tokenizer, t, batch_size=1)  # noqa: E731
    rows = []
    for name, call, encoder in (("dense", dense_call, dense), ("sparse (SPLADE)", sparse_call, sparse)):
        median, p90 = timed(call, queries)
        start = time.perf_counter()
        if name == "dense":
            index = encode(encoder.model, encoder.tokenizer, corpus, batch_size=32, show_progress=False)
            entries, size = index.size, index.size * 4
        else:
            index = encode_sparse(encoder.model, encoder.tokenizer, corpus, batch_size=32)
            entries, size = index.nnz, index.nnz * 8
        seconds = time.perf_counter() - start
        rows.append([name, median, p90, len(corpus), seconds, entries, size / 1e6])
    header = [
        "model",
        "query encode median ms",
        "p90 ms",
        "documents",
        "corpus encode s",
        "index entries",
        "index MB",
    ]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main(*sys.argv[1:4])
