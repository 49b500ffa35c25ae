"""Recall@10 of `neobert index` (voyager HNSW over token vectors + exact MaxSim) against exhaustive MaxSim,
index size and per-query latency (issue 33, item 2).

    python docs/benchmarks/late_interaction/index_recall.py MODEL PAIRS_DIR WORK_DIR

MODEL: a late-interaction directory; PAIRS_DIR: `neobert data docstring-pairs --output PAIRS_DIR`. The
documents are every docstring document there (training positives and held-out documents), the queries the
held-out ones. Runs `neobert embed`, `neobert index` and `neobert search` as a user would, then times the
search core (model excluded) against exhaustive MaxSim over the same stored vectors. Prints Markdown.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from neobert.cli.main import main as neobert
from neobert.common.tables import markdown_table
from neobert.inference.late_interaction import load_late_interaction, token_vectors
from neobert.jobs.index import exhaustive_search, load_index, search_vectors


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    model, pairs, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    task = pairs / "heldout" / "retrieval" / "docstrings"
    documents = [r["positive"] for r in _rows(pairs / "train.jsonl")] + [
        r["text"] for r in _rows(task / "corpus.jsonl")
    ]
    queries = [r["text"] for r in _rows(task / "queries.jsonl")]
    table = work / "documents.jsonl"
    table.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(documents)))
    (work / "queries.txt").write_text("".join(q.replace("\n", " ") + "\n" for q in queries))
    timings = {}
    for name, args in (("embed", ["embed", "--model", model, "--input", str(table), "--output", str(work / "shards"),
                                  "--id-column", "id", "--precision", "fp32"]),
                       ("index", ["index", "--input", str(work / "shards"), "--output", str(work / "index")]),
                       ("search", ["search", "--index", str(work / "index"), "--queries", str(work / "queries.txt"),
                                   "--output", str(work / "hits.jsonl")])):  # fmt: skip
        start = time.perf_counter()
        assert neobert(args) == 0
        timings[name] = time.perf_counter() - start
    index = load_index(work / "index")
    li, tokenizer, spec = load_late_interaction(model)
    query_vectors = token_vectors(li, tokenizer, queries, spec, True)
    start = time.perf_counter()
    exact = exhaustive_search(index, query_vectors, 10)
    exact_ms = 1000 * (time.perf_counter() - start) / len(queries)
    rows = []
    for candidates in (8, 32, 64):
        start = time.perf_counter()
        found = search_vectors(index, query_vectors, 10, candidates, max(128, candidates))
        ms = 1000 * (time.perf_counter() - start) / len(queries)
        recall = sum(len({d for d, _ in f} & {d for d, _ in e}) for f, e in zip(found, exact)) / (
            10 * len(queries)
        )
        rows.append([f"index, {candidates} candidates / query token", recall * 100, ms])
    rows.append(["exhaustive MaxSim (the reference)", 100.0, exact_ms])
    sizes = {f.name: f.stat().st_size for f in (work / "index").iterdir()}
    print(f"{len(documents):,} documents, {index.info['vectors']:,} token vectors ({index.info['dimensions']} dims), "
          f"{len(queries)} queries\n")  # fmt: skip
    print(
        markdown_table(
            ["search", "recall@10 vs exhaustive x 100", "ms / query (model excluded)"], rows, digits=1
        )
    )
    print()
    print(markdown_table(["index file", "bytes"], [[k, f"{v:,}"] for k, v in sorted(sizes.items())]
                         + [["total", f"{sum(sizes.values()):,}"]]))  # fmt: skip
    print()
    print(markdown_table(["command", "seconds"], [[k, v] for k, v in timings.items()], digits=1))


if __name__ == "__main__":
    main()
