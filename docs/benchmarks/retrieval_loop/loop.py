"""The retrieval loop, measured: for dense, SPLADE and late interaction from one starting encoder at matched budgets
(the same pairs, steps, batch, learning rate, schedule, input length), over several seeds, nDCG@10 and MRR@10 on
the held-out docstring pairs and on the whole-module long documents of:

1. the first stage trained on in-batch negatives;
2. the same trained on hard negatives mined with (1) (``neobert mine``, relative margin swept);
3. the same distilled from a reranker (``neobert finetune rerank`` on the negatives the dense first stage mined
   at the first margin, one reranker per seed teaching all three kinds, so that they learn from the same teacher;
   its scores on each kind's own candidates mined back with ``neobert mine --teacher``, then ``--distillation`` /
   ``--margin-mse``);
4. each followed by the reranker on its top 50 (its scores of a (query, document) pair kept per seed, appended
   to RERANKER/pair_scores.jsonl: the steps' top 50s overlap, and a pair is scored once);

and the reranker's added latency per query through the service (``POST /rerank`` of a query's top 50, one client),
measured last, once per seed's reranker.

    PYTHONPATH=src python docs/benchmarks/retrieval_loop/loop.py RUN_DIR --model MODEL [--sparse-model MLM_MODEL] \\
        [--steps 200] [--seeds 0 1 2] [--margins 0 0.05 0.1] [--kinds dense sparse late]
    PYTHONPATH=src python docs/benchmarks/retrieval_loop/loop.py RUN_DIR --tiny   # the check: minutes, not results

Every stage skips what RUN_DIR already holds (a stopped run continues). It writes RUN_DIR/results.json, and
results.md and results.png beside this file (``--report-dir`` elsewhere; ``--tiny`` writes them into RUN_DIR).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import time
from pathlib import Path

from neobert.common.tables import markdown_table
from neobert.data.docstring_pairs import write_docstring_retrieval
from neobert.evaluation.embedding_files import read_jsonl, read_qrels
from neobert.evaluation.embeddings import mrr_at_k, ndcg_at_k
from neobert.finetuning import contrastive, late_interaction, rerank, sparse
from neobert.finetuning.mining import RETRIEVERS, MineConfig, mine
from neobert.inference.cross_encoder import CrossEncoderScorer
from neobert.inference.kinds import kind_of
from neobert.runtime.hardware import machine_summary

HERE = Path(__file__).parent
TRAINERS = {
    "dense": (contrastive.ContrastiveConfig, contrastive.run),
    "sparse": (sparse.SparseConfig, sparse.run),
    "late": (late_interaction.LateInteractionConfig, late_interaction.run),
}
TASKS = {"docstrings": "pairs/heldout/retrieval/docstrings", "modules": "pairs/long/retrieval/modules"}
DEPTH = 50  # the reranker reads a first stage's top 50
# a mined negative this close to its row's positive (word-set Jaccard) is counted as a likely false negative: the
# docstrings hold near-copies (a method documented again on its override, a family of functions described alike)
NEAR_COPY = 0.5


def train(kind: str, model: str, data: Path, output: Path, seed: int, a: argparse.Namespace, **extra) -> Path:
    if (output / "modules.json").is_file():
        return output
    config_class, run = TRAINERS[kind]
    budget = dict(steps=a.steps, batch_size=a.batch_size, lr=a.lr, warmup_steps=max(1, a.steps // 10))
    config = config_class(
        model=model,
        data=[f"docstrings={data}"],
        output=str(output),
        seed=seed,
        max_length=a.max_length,
        log_every=max(1, a.steps // 5),
        show_progress=False,
        precision="fp32",
        **budget,
        **extra,
    )
    run(config)
    return output


def mined(retriever: Path, run: Path, name: str, a: argparse.Namespace, **settings) -> Path:
    """The training pairs' hard negatives from ``retriever``'s ranking of every training positive."""
    out = run / f"{name}.jsonl"
    if not out.is_file():
        pairs = a.run / "pairs" / "train.jsonl"
        mine(
            MineConfig(
                model=str(retriever),
                pairs=str(pairs),
                corpus=[str(pairs)],
                text_column="positive",
                output=str(out),
                num_negatives=a.negatives,
                on_error="skip",
                **settings,
            )
        )
    return out


def evaluate(model: Path, task: Path, reranker: Path, work: Path, count: int | None = None) -> dict:
    """nDCG@10 and MRR@10 of ``model``'s ranking of the task's corpus, and of ``reranker`` on its top 50 (the
    first ``count`` held-out queries, default all; the corpus whole)."""
    queries = read_jsonl(task / "queries.jsonl", ("_id", "text"))[:count]
    ids = [str(r["_id"]) for r in read_jsonl(task / "corpus.jsonl", ("_id", "text"))]
    texts = {str(r["_id"]): r["text"] for r in read_jsonl(task / "corpus.jsonl", ("_id", "text"))}
    qrels = read_qrels(task)
    config = MineConfig(
        model=str(model),
        pairs="-",
        corpus=[str(task / "corpus.jsonl")],
        output="-",
        work=str(work),
        candidates=256,
    )
    retriever = RETRIEVERS[kind_of(model).embedding](config, work)
    start = time.perf_counter()
    _, rows = retriever.candidates([q["text"] for q in queries], min(DEPTH, len(ids)), set())
    search_ms = 1000 * (time.perf_counter() - start) / len(queries)
    scorer = cached_scorer(reranker)
    first, second = [], []
    for query, top in zip(queries, rows.tolist()):
        ranking = [ids[r] for r in top if r >= 0]
        scores = scorer([(query["text"], texts[d]) for d in ranking])
        reranked = [d for _, d in sorted(zip(scores, ranking), key=lambda x: -x[0])]
        relevance = qrels.get(str(query["_id"]), {})
        first.append((ndcg_at_k(ranking, relevance), mrr_at_k(ranking, relevance)))
        second.append((ndcg_at_k(reranked, relevance), mrr_at_k(reranked, relevance)))
    mean = lambda pairs, i: statistics.fmean(p[i] for p in pairs)  # noqa: E731
    return {
        "ndcg@10": mean(first, 0),
        "mrr@10": mean(first, 1),
        "reranked ndcg@10": mean(second, 0),
        "reranked mrr@10": mean(second, 1),
        "search ms/query": search_ms,
    }


_SCORERS: dict[Path, object] = {}


def cached_scorer(reranker: Path):
    """``reranker``'s scores of (query, document) pairs, each pair scored once per reranker: kept in memory and
    appended to ``reranker/pair_scores.jsonl`` (one ``[pair digest, score]`` line per pair, flushed per call: a
    stopped run continues, and a line torn by a kill is dropped and scored again)."""
    if reranker not in _SCORERS:
        store = reranker / "pair_scores.jsonl"
        known = _read_scores(store)
        model = CrossEncoderScorer(reranker)

        def scores(pairs: list[tuple[str, str]]) -> list[float]:
            keys = [_digest(pair) for pair in pairs]
            new = {k: pair for k, pair in zip(keys, pairs) if k not in known}
            if new:
                scored = dict(zip(new, model.scores(list(new.values()))))
                with store.open("a", encoding="utf-8") as f:
                    f.writelines(json.dumps([k, v]) + "\n" for k, v in scored.items())
                known.update(scored)
            return [known[k] for k in keys]

        _SCORERS[reranker] = scores
    return _SCORERS[reranker]


def _digest(pair: tuple[str, str]) -> str:
    return hashlib.sha256(json.dumps(pair).encode()).hexdigest()[:32]


def _read_scores(store: Path) -> dict[str, float]:
    """The scores ``store`` holds; a torn last line (a kill mid-write) is dropped, and cut off the file so that
    the next append starts a line of its own."""
    known: dict[str, float] = {}
    if not store.is_file():
        return known
    text = store.read_text(encoding="utf-8")
    whole = text[: text.rfind("\n") + 1]
    for line in whole.splitlines():
        key, score = json.loads(line)
        known[key] = score
    if len(whole) < len(text):
        with store.open("r+", encoding="utf-8") as f:
            f.truncate(len(whole.encode("utf-8")))
    return known


def rerank_latency(reranker: Path, task: Path, queries: int = 20) -> float:
    """Median ms of one POST /rerank of a query and 50 documents, through the service (one client)."""
    from neobert.serving import ServeConfig
    from neobert.serving.server import BackgroundServer
    from neobert.serving.service import Service

    rows = read_jsonl(task / "queries.jsonl", ("_id", "text"))[:queries]
    documents = [r["text"] for r in read_jsonl(task / "corpus.jsonl", ("_id", "text"))][:DEPTH]
    import http.client

    times = []
    service = Service.load(ServeConfig(model=str(reranker), precision="fp32", model_process=False))
    with BackgroundServer(service) as server:
        host, port = server.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        for i, row in enumerate([rows[0]] * 3 + rows):  # three warm-ups
            body = json.dumps({"query": row["text"], "documents": documents}).encode()
            start = time.perf_counter()
            conn.request("POST", "/rerank", body=body, headers={"Content-Type": "application/json"})
            conn.getresponse().read()
            if i >= 3:
                times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def one_seed(kind: str, seed: int, run: Path, a: argparse.Namespace) -> dict:
    """Every step of the loop for one retriever kind and seed; the results by step and task."""
    start_model = a.sparse_model if kind == "sparse" else a.model
    d = run / f"{kind}-seed{seed}"
    pairs = run / "pairs" / "train.jsonl"
    steps = {"in-batch": train(kind, start_model, pairs, d / "inbatch", seed, a)}
    kept = {}  # margin -> its mined file, where a row kept a negative
    for margin in a.margins:
        data = mined(steps["in-batch"], d, f"mined-margin{margin}", a, relative_margin=margin or None)
        if not data.read_text().strip():  # the margin dropped every candidate (a weak first stage)
            print(f"{kind} seed {seed}: relative margin {margin} kept no row; its step is left out")
            continue
        kept[margin] = data
        steps[f"hard negatives (margin {margin or 'none'})"] = train(
            kind, start_model, data, d / f"hard-margin{margin}", seed, a, hard_negatives=a.negatives
        )
    if not kept:
        raise SystemExit(
            f"{kind} seed {seed}: no margin kept a row; the reranker has no negatives to learn from"
        )
    # one reranker per seed for all three kinds: it learns from the dense first stage's negatives at the first
    # margin that kept rows (the kinds run in the order dense, sparse, late, so dense's exist by now)
    reranker = run / f"reranker-seed{seed}"
    dense = run / f"dense-seed{seed}"
    if kind == "dense":
        data = next(iter(kept.values()))
    else:
        data = next((f for m in a.margins if (f := dense / f"mined-margin{m}.jsonl").is_file()), None)
        if data is None:
            raise SystemExit(
                f"{kind} seed {seed}: the dense kind runs first (its mined negatives train the reranker)"
            )
    if not (reranker / "config_sentence_transformers.json").is_file():
        rerank.run(
            rerank.RerankConfig(
                model=a.model,
                data=[f"docstrings={data}"],
                output=str(reranker),
                seed=seed,
                steps=a.reranker_steps or a.steps,
                batch_size=a.reranker_batch or max(2, a.batch_size // 4),
                lr=a.reranker_lr or a.lr,
                warmup_steps=max(1, (a.reranker_steps or a.steps) // 10),
                max_length=2 * a.max_length,
                hard_negatives=a.negatives,
                loss="lambdaloss",
                show_progress=False,
                precision="fp32",
            )
        )
    scored = mined(steps["in-batch"], d, "scored", a, teacher=str(reranker))
    steps["distilled"] = train(
        kind,
        start_model,
        scored,
        d / "distilled",
        seed,
        a,
        hard_negatives=a.negatives,
        distillation=1.0,
        margin_mse=a.margin_mse,
    )
    results = {}
    for step, model in steps.items():
        for task, where in TASKS.items():
            key = f"{step} | {task}"
            work = d / "eval" / f"{model.name}-{task}"
            results[key] = evaluate(model, run / where, reranker, work, a.eval_queries)
    return results


def report(results: dict, out: Path) -> str:
    """Mean and spread (min-max over seeds) per kind, step and task; the plot."""
    rows, plot = [], {}
    for kind, seeds in results.items():
        if kind == "latency":
            continue
        keys = [k for k in seeds[0] if " | " in k]
        for key in keys:
            step, task = key.split(" | ")
            cell = []
            for metric in ("ndcg@10", "mrr@10", "reranked ndcg@10", "reranked mrr@10"):
                values = [100 * s[key][metric] for s in seeds]
                cell.append(f"{statistics.fmean(values):.1f} ({min(values):.1f}-{max(values):.1f})")
            search = statistics.fmean(s[key]["search ms/query"] for s in seeds)
            rows.append([kind, step, task, *cell, f"{search:.1f}"])
            plot.setdefault((kind, task), []).append(
                (
                    step,
                    [100 * s[key]["ndcg@10"] for s in seeds],
                    [100 * s[key]["reranked ndcg@10"] for s in seeds],
                )
            )
    if "rerank ms/query" in results.get("latency", {}):
        latency = results["latency"]["rerank ms/query"]
        rows.append(
            [
                "all",
                "the seeds' rerankers, top 50 through the service",
                "docstrings",
                "",
                "",
                "",
                "",
                f"{statistics.fmean(latency):.1f} (added; {min(latency):.1f}-{max(latency):.1f})",
            ]
        )
    header = [
        "retriever",
        "step",
        "task",
        "nDCG@10",
        "MRR@10",
        "nDCG@10 reranked",
        "MRR@10 reranked",
        "ms / query",
    ]
    table = markdown_table(header, rows)
    _plot(plot, out / "results.png")
    return table


def paid(results: dict) -> str:
    """What each step pays over the in-batch first stage, in nDCG@10 x 100: the difference within each seed
    (the steps of a seed share its pairs' order), mean and min-max over the seeds, and whether every seed agrees;
    the reranker's row is the in-batch first stage reranked. The step that pays most is marked per kind and task."""
    rows = []
    for kind, seeds in results.items():
        if kind == "latency":
            continue
        for task in TASKS:
            base = [s[f"in-batch | {task}"]["ndcg@10"] for s in seeds]
            deltas = {
                key.split(" | ")[0]: [100 * (s[key]["ndcg@10"] - b) for s, b in zip(seeds, base)]
                for key in seeds[0]
                if key.endswith(f" | {task}") and not key.startswith("in-batch")
            }
            deltas["reranker on in-batch"] = [
                100 * (s[f"in-batch | {task}"]["reranked ndcg@10"] - b) for s, b in zip(seeds, base)
            ]
            best = max(deltas, key=lambda step: statistics.fmean(deltas[step]))
            for step, values in deltas.items():
                if len(values) < 2:
                    verdict = "one seed"
                elif min(values) > 0:
                    verdict = "pays (every seed)"
                elif max(values) < 0:
                    verdict = "costs (every seed)"
                else:
                    verdict = "within the seeds' spread"
                mean = statistics.fmean(values)
                rows.append(
                    [
                        kind,
                        task,
                        step + (" **(most)**" if step == best and mean > 0 else ""),
                        f"{mean:+.1f} ({min(values):+.1f} to {max(values):+.1f})",
                        verdict,
                    ]
                )
    header = ["retriever", "task", "step", "nDCG@10 x 100 over in-batch", "verdict"]
    return markdown_table(header, rows)


def false_negatives(run: Path, results: dict, pairs: int) -> str:
    """Per retriever and relative margin, over the seeds finished: the rows mining kept (of the input pairs; a
    query without a candidate in range is dropped) and the share of its negatives that are near-copies of their
    row's positive (:data:`NEAR_COPY`), the likely false negatives the margin is there to skip."""

    def words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.lower()))

    rows = []
    for kind, seeds in results.items():
        if kind == "latency":
            continue
        files = [
            f for seed in seeds for f in (run / f"{kind}-seed{seed['seed']}").glob("mined-margin*.jsonl")
        ]
        for margin in sorted({f.name[len("mined-margin") : -len(".jsonl")] for f in files}, key=float):
            kept, near, negatives = [], 0, 0
            for seed in seeds:
                path = run / f"{kind}-seed{seed['seed']}" / f"mined-margin{margin}.jsonl"
                empty = not path.is_file() or not path.read_text().strip()  # the margin kept no row
                mined_rows = [] if empty else read_jsonl(path, ["positive", "negatives"])
                kept.append(len(mined_rows))
                for row in mined_rows:
                    positive = words(row["positive"])
                    for negative in row["negatives"]:
                        other = words(negative)
                        negatives += 1
                        near += len(positive & other) >= NEAR_COPY * max(1, len(positive | other))
            rows.append(
                [
                    kind,
                    "none" if float(margin) == 0 else margin,
                    f"{statistics.fmean(kept):.0f} of {pairs} ({100 * statistics.fmean(kept) / pairs:.0f}%)",
                    f"{100 * near / max(1, negatives):.1f}% ({near} of {negatives})",
                ]
            )
    header = [
        "retriever",
        "relative margin",
        "rows kept (mean over seeds)",
        "negatives near-copies of the positive",
    ]
    return markdown_table(header, rows)


def _plot(points: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for _, t in points})
    kinds = sorted({k for k, _ in points})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, kind in enumerate(kinds):
            steps = points.get((kind, task), [])
            for j, (_, first, second) in enumerate(steps):
                x = j + 0.25 * i
                for values, marker in ((first, "o"), (second, "^")):
                    mean = statistics.fmean(values)
                    ax.errorbar(
                        x,
                        mean,
                        yerr=[[mean - min(values)], [max(values) - mean]],
                        fmt=marker,
                        color=f"C{i}",
                        label=f"{kind}{' + reranker' if marker == '^' else ''}" if j == 0 else None,
                    )
            ax.set_xticks(range(len(steps)), [s[0] for s in steps], rotation=20, ha="right", fontsize=7)
        ax.set_title(task)
        ax.set_ylabel("nDCG@10 x 100 (mean, min-max over seeds)")
    # one legend below both panels: inside one it covered points
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument(
        "--model", default=None, help="the starting encoder (dense, late interaction, reranker)"
    )
    parser.add_argument(
        "--sparse-model", default=None, help="SPLADE's start: a masked-LM model (default --model)"
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--negatives", type=int, default=3)
    parser.add_argument("--margin-mse", type=float, default=0.1)
    parser.add_argument(
        "--reranker-steps", type=int, default=None, help="the reranker's steps (default --steps)"
    )
    parser.add_argument(
        "--reranker-lr",
        type=float,
        default=None,
        help="the reranker's peak learning rate (default --lr; a cross-encoder's head starts from nothing)",
    )
    parser.add_argument(
        "--reranker-batch",
        type=int,
        default=None,
        help="queries per reranker step (default --batch-size / 4)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--margins", type=float, nargs="+", default=[0.05, 0.0, 0.1])
    parser.add_argument("--kinds", nargs="+", default=["dense", "sparse", "late"], choices=list(TRAINERS))
    parser.add_argument("--modules", nargs="*", default=None, help="stdlib modules (default: all)")
    parser.add_argument(
        "--eval-queries",
        type=int,
        default=None,
        help="score the first N held-out queries of each task (default: all)",
    )
    parser.add_argument("--report-dir", type=Path, default=HERE)
    parser.add_argument(
        "--tiny", action="store_true", help="the check: a tiny random NeoBERT, 3 steps, 5 modules"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write results.md and .png from RUN_DIR/results.json as it stands (the seeds finished so far)",
    )
    a = parser.parse_args()
    if a.tiny:
        a.model, a.steps, a.batch_size, a.max_length, a.report_dir = "tiny", 3, 8, 32, a.run
        a.modules = a.modules or ["json", "csv", "textwrap", "string", "email"]
    if a.model is None:
        parser.error("--model is required (or --tiny)")
    a.sparse_model = a.sparse_model or a.model
    a.kinds = sorted(set(a.kinds), key=list(TRAINERS).index)  # dense first: its negatives train the reranker
    a.run.mkdir(parents=True, exist_ok=True)
    if not (a.run / "pairs" / "long" / "retrieval" / "modules" / "qrels.tsv").is_file():
        write_docstring_retrieval(
            a.run / "pairs", heldout_share=0.4 if a.tiny else 0.3, modules=a.modules, module_documents=True
        )
    saved = a.run / "results.json"
    results = json.loads(saved.read_text()) if saved.is_file() else {}
    asked = list(a.seeds)
    if a.report_only:
        a.seeds = sorted({r["seed"] for rows in results.values() if isinstance(rows, list) for r in rows})
        if not a.seeds:
            raise SystemExit(f"{saved}: no seed has finished yet; nothing to report")
    # seed by seed (every kind of a seed before the next seed): a stopped run has whole seeds to report
    for seed in [] if a.report_only else a.seeds:
        for kind in a.kinds:
            if seed not in {r["seed"] for r in results.get(kind, [])}:
                results.setdefault(kind, []).append({"seed": seed, **one_seed(kind, seed, a.run, a)})
                saved.write_text(json.dumps(results, indent=2))
    if not a.report_only and "rerank ms/query" not in results.get("latency", {}):  # last, on a quiet machine
        rerankers = [a.run / f"reranker-seed{seed}" for seed in a.seeds]
        docstrings = a.run / TASKS["docstrings"]
        results["latency"] = {"rerank ms/query": [rerank_latency(r, docstrings) for r in rerankers]}
        saved.write_text(json.dumps(results, indent=2))
    a.report_dir.mkdir(parents=True, exist_ok=True)
    table = report(results, a.report_dir)
    settings = (
        f"Start: {a.model} (SPLADE: {a.sparse_model}); {a.steps} steps of {a.batch_size} pairs, lr {a.lr:g}, "
        f"{a.max_length} tokens, {a.negatives} hard negative(s) per pair, margin-MSE weight {a.margin_mse:g}; "
        f"the reranker: {a.reranker_steps or a.steps} steps of {a.reranker_batch or max(2, a.batch_size // 4)} "
        f"queries, lr {a.reranker_lr or a.lr:g}; "
        f"seeds {', '.join(map(str, a.seeds))}; relative margins {', '.join(f'{m:g}' for m in a.margins)}; "
        f"{a.eval_queries or 'all'} held-out queries per task. Machine: {machine_summary()}.\n\n"
    )
    done = {kind: sorted(r["seed"] for r in rows) for kind, rows in results.items() if kind != "latency"}
    if any(done.get(kind) != sorted(asked) for kind in a.kinds):
        settings += f"**A run in progress**: the seeds finished so far, per retriever: {done}.\n\n"
    pairs = len(read_jsonl(a.run / "pairs" / "train.jsonl", ["query", "positive"]))
    sections = [
        table,
        "## What each step pays\n\n" + paid(results),
        f"## Mining's likely false negatives, by relative margin (word-set Jaccard to the positive >= {NEAR_COPY})\n\n"
        + false_negatives(a.run, results, pairs),
    ]
    text = "\n\n".join(section.strip() for section in sections)
    (a.report_dir / "results.md").write_text(settings + text + "\n")
    print(text)


if __name__ == "__main__":
    main()
