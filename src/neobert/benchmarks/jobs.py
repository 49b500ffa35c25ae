"""The batch jobs on this machine, the local engine beside the Ray engine, with the real job code.

Corpus embedding (``neobert embed --output DIR``) of the same texts (paragraphs of the offline stdlib corpus),
per model: the local engine (one process, every core), Ray with one worker holding every core (the engine's
own overhead), Ray with one single-core worker per core (the data-parallel layout), Ray with one single-core
worker (the base of scaling) and, with ``two_nodes``, a two-node cluster on this machine (``ray start --head``
and ``ray start --address``, one core each, one worker per node). Data preparation (``neobert data prepare``)
of copies of the same corpus: the local engine, Ray with one single-core worker and with one per core, beside
the Rust tokenizer alone on the same documents with the same threads (``encode_batch``, nothing written).

Rates are steady ones: texts (tokens) over the span from the first piece's start to the last piece's end,
which leaves out what a job pays once (starting Ray and its workers, loading the model, planning the inputs);
the wall time of each whole run is reported beside them.

    neobert bench jobs --output docs/benchmarks/jobs
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..common.config import check_precision
from ..common.io import write_text
from ..common.tables import markdown_table
from ..data import default_tokenizer_dir, iter_stdlib_documents
from ..jobs.embed import embed, embed_corpus
from ..jobs.embed_config import EmbedConfig
from ..jobs.engine import EngineSettings, engine_of
from ..jobs.prepare import PrepareConfig, prepare
from ..runtime.hardware import load_average
from .measure import machine_info
from .report import publish


@dataclass
class JobsBenchConfig:
    """Corpus embedding and data preparation: the local engine beside the Ray engine on this machine (one
    worker with every core, one worker per core, one worker, two nodes), steady texts/s and tokens/s and
    their ratios; preparation's tokens/s per worker beside the Rust tokenizer alone."""

    models: list[str] = field(default_factory=lambda: ["small", "neobert"])  # presets or model directories
    texts: int = 1024  # texts embedded per run (paragraphs of the stdlib corpus)
    shard_rows: int = 32  # texts per piece
    precision: str = "auto"  # of the embedding runs
    prepare_copies: int = 4  # copies of the stdlib corpus prepared (about 0.66M tokens each)
    two_nodes: bool = True  # also a two-node cluster on this machine (ray start)
    # only neobert embed's two outputs of the same texts, local engine: a .npy file beside a directory
    compare_outputs: bool = False
    rounds: int = 2  # --compare-outputs: runs of each output, alternated (the best one counts)
    output: str | None = None  # directory for results.json and results.md

    def __post_init__(self) -> None:
        check_precision(self.precision, ValueError)
        if self.texts < 1 or self.shard_rows < 1 or self.prepare_copies < 1:
            raise ValueError("texts, shard rows and prepare copies must be positive")
        if self.rounds < 1:
            raise ValueError(f"rounds must be positive, got {self.rounds}")


def paragraphs(count: int) -> list[str]:
    """The first ``count`` paragraphs (blank-line separated, non-empty) of the stdlib corpus."""
    found: list[str] = []
    for document in iter_stdlib_documents():
        found += [p.strip() for p in document.split("\n\n") if p.strip()]
        if len(found) >= count:
            return found[:count]
    return found


@contextlib.contextmanager
def nodes_on_this_machine(count: int = 2, cpus: int = 1) -> Iterator[str]:
    """A Ray cluster of ``count`` nodes on loopback (``ray start --head``, then ``ray start --address``), each
    with ``cpus`` CPUs, without token authentication (loopback only); its address. Stopped on exit."""
    port = 6400 + os.getpid() % 500
    address = f"127.0.0.1:{port}"
    flags = ["--num-cpus", str(cpus), "--disable-usage-stats", "--node-ip-address", "127.0.0.1"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        _ray("start", "--head", "--port", str(port), "--include-dashboard", "false", *flags, env=env)
        for _ in range(count - 1):
            _ray("start", "--address", address, *flags, env=env)
        yield address
    finally:
        _ray("stop", "--force", env=env)
        if mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = mode


def _ray(*args: str, env: dict) -> None:
    command = Path(sys.executable).with_name("ray")
    base = [str(command)] if command.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    subprocess.run([*base, *args], capture_output=True, text=True, timeout=180, check=True, env=env)


@contextlib.contextmanager
def _in_process_cluster(cpus: int) -> Iterator[None]:
    import ray

    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level="warning",
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


LOCAL_RUN = "local"  # the label of the runs on the local engine, the base of the ratios


def _embed_run(name: str, model: str, inputs: Path, work: Path, c: JobsBenchConfig, **engine) -> dict:
    output = work / f"embed-{len(list(work.iterdir()))}"
    config = EmbedConfig(
        model=model,
        input=[str(inputs)],
        output=str(output),
        precision=c.precision,
        shard_rows=c.shard_rows,
        show_progress=False,
        **engine,
    )
    start = time.perf_counter()
    result = embed_corpus(config)
    wall = time.perf_counter() - start
    shutil.rmtree(output)
    cpus = engine_of(config).worker_threads()
    return {
        "model": model,
        "run": name,
        "workers": result.workers,
        "cpus_per_worker": cpus,
        "texts": result.texts,
        "tokens": result.tokens,
        "precision": result.precision,
        "work_seconds": result.work_seconds,
        "wall_seconds": wall,
        "load": load_average(),
        "texts_per_second": result.texts / result.work_seconds,
        "tokens_per_second": result.tokens / result.work_seconds,
    }


def _prepare_run(name: str, inputs: Path, work: Path, shard_size: int, engine: EngineSettings) -> dict:
    output = work / f"prepare-{len(list(work.iterdir()))}"
    config = PrepareConfig(
        inputs=[str(inputs)],
        tokenizer=str(default_tokenizer_dir()),
        output=str(output),
        shard_size=shard_size,
        progress=False,
        **asdict(engine),
    )
    start = time.perf_counter()
    result = prepare(config)
    wall = time.perf_counter() - start
    shutil.rmtree(output)
    tokens = result.train_tokens + result.validation_tokens
    work_seconds = result.work_seconds or result.seconds
    workers = engine.workers or 1
    threads = engine_of(engine).worker_threads()
    return {
        "run": name,
        "workers": workers,
        "cpus_per_worker": threads,
        "tokens": tokens,
        "work_seconds": work_seconds,
        "wall_seconds": wall,
        "load": load_average(),
        "tokens_per_second": tokens / work_seconds,
        "per_worker": tokens / work_seconds / workers,
    }


RUST_RATE = """
import sys, time
from neobert.data import load_tokenizer
backend = load_tokenizer(sys.argv[1], neobert=False).backend_tokenizer
docs = open(sys.argv[2], encoding="utf-8").read().split("\\n\\n")
backend.encode_batch(docs[:200])
start, tokens = time.perf_counter(), 0
for i in range(0, len(docs), 1000):
    tokens += sum(len(e.ids) for e in backend.encode_batch(docs[i:i + 1000]))
print(tokens / (time.perf_counter() - start))
"""


def rust_tokenizer_rate(corpus: Path, threads: int) -> float:
    """Tokens/s of the Rust tokenizer alone (``encode_batch`` in batches of 1,000) with ``threads`` threads."""
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    args = [sys.executable, "-c", RUST_RATE, str(default_tokenizer_dir()), str(corpus)]
    return float(subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout.split()[-1])


def compare_outputs(c: JobsBenchConfig) -> dict:
    """``neobert embed`` of the same texts into a .npy file and into a directory, alternated ``rounds`` times
    after one untimed job per model: whole jobs (model load, plan, pieces; the .npy's gathering of its shards)
    on the local engine."""
    results: dict = {
        "config": asdict(c),
        "machine": machine_info("cpu"),
        "cores": os.cpu_count(),
        "outputs": [],
    }
    with tempfile.TemporaryDirectory(prefix="neobert-bench-outputs-") as tmp:
        texts = Path(tmp) / "texts.txt"
        write_text(texts, "".join(t.replace("\n", " ") + "\n" for t in paragraphs(c.texts)))
        for model in c.models:  # untimed: what a first job in a process pays once (imports, auto precision)
            embed(
                EmbedConfig(
                    model=model,
                    input=[str(texts)],
                    output=str(Path(tmp) / f"warm-{Path(model).name}"),
                    precision=c.precision,
                    shard_rows=c.shard_rows,
                    show_progress=False,
                )
            )
        for model, round, kind in itertools.product(c.models, range(c.rounds), ("npy", "directory")):
            output = Path(tmp) / (f"{kind}-{round}.npy" if kind == "npy" else f"{kind}-{round}")
            config = EmbedConfig(
                model=model,
                input=[str(texts)],
                output=str(output),
                precision=c.precision,
                shard_rows=c.shard_rows,
                show_progress=False,
            )
            start = time.perf_counter()
            embed(config)
            seconds = time.perf_counter() - start
            (output.unlink if kind == "npy" else functools.partial(shutil.rmtree, output))()
            results["outputs"].append(
                {
                    "model": model,
                    "output": kind,
                    "round": round,
                    "texts": c.texts,
                    "seconds": seconds,
                    "texts_per_second": c.texts / seconds,
                    "load": load_average(),
                }
            )
    return results


def _model_name(model: str) -> str:
    """A preset's name, or a model directory's (its package's when the directory is a package's ``model/``)."""
    path = Path(model)
    return path.parent.name if path.name == "model" else path.name or model


def outputs_markdown(results: dict) -> str:
    machine = results["machine"]
    rows = []
    for model in results["config"]["models"]:
        best = {
            kind: max(
                r["texts_per_second"]
                for r in results["outputs"]
                if (r["model"], r["output"]) == (model, kind)
            )
            for kind in ("npy", "directory")
        }
        for kind, rate in best.items():
            runs = [
                f"{r['texts_per_second']:,.1f}"
                for r in results["outputs"]
                if (r["model"], r["output"]) == (model, kind)
            ]
            rows.append(
                [_model_name(model), kind, ", ".join(runs), f"{rate:,.1f}", f"{rate / best['directory']:.3f}"]
            )
    header = ["model", "output", "texts/s per run (alternated)", "best texts/s", "best / directory"]
    return (
        f"# neobert embed: a .npy output beside a directory output ({machine['cpu']}, {results['cores']} cores, "
        f"torch {machine['torch']})\n\n"
        + markdown_table(header, rows)
        + "\n\nLoad average after each run: "
        + ", ".join(f"{r['load']:.1f}" for r in results["outputs"])
        + f" ({results['cores']} cores; a load above them means other processes competed for the cores and the "
        "rates carry their noise).\n"
    )


def run(config: JobsBenchConfig) -> dict:
    if config.compare_outputs:
        return publish(compare_outputs(config), markdown, config.output)
    c, cores = config, os.cpu_count() or 1
    results: dict = {
        "config": asdict(c),
        "machine": machine_info("cpu"),
        "cores": cores,
        "embed": [],
        "prepare": [],
    }
    with tempfile.TemporaryDirectory(prefix="neobert-bench-jobs-") as tmp:
        work = Path(tmp)
        shard_size = _write_inputs(work, c, cores)
        runs = work / "runs"
        runs.mkdir()
        for model in c.models:
            results["embed"].append(_embed_run(LOCAL_RUN, model, work / "texts", runs, c))
        results["prepare"].append(
            _prepare_run(LOCAL_RUN, work / "corpus", runs, shard_size, EngineSettings())
        )
        # two nodes first: a process that started a cluster of its own does not join another one well
        if c.two_nodes:
            _two_node_runs(results, work, runs, shard_size, c)
        _one_node_runs(results, work, runs, shard_size, c, cores)
        rust = work / "corpus" / "copy-0.txt"
        results["rust_tokenizer"] = {
            "1": rust_tokenizer_rate(rust, 1),
            str(cores): rust_tokenizer_rate(rust, cores),
        }
    return publish(results, markdown, c.output)


def _write_inputs(work: Path, c: JobsBenchConfig, cores: int) -> int:
    """The texts to embed and the corpus copies to prepare under ``work``; returns the prepare shard size."""
    (work / "texts").mkdir()
    write_text(
        work / "texts" / "texts.txt", "".join(t.replace("\n", " ") + "\n" for t in paragraphs(c.texts))
    )
    corpus = "\n\n".join(iter_stdlib_documents()) + "\n"
    (work / "corpus").mkdir()
    for i in range(c.prepare_copies):
        write_text(work / "corpus" / f"copy-{i}.txt", corpus)
    documents = corpus.count("\n\n") * c.prepare_copies
    return max(1, documents // (4 * cores))


def _two_node_runs(results: dict, work: Path, runs: Path, shard_size: int, c: JobsBenchConfig) -> None:
    """Embed and prepare on a two-node Ray cluster started on this machine."""
    with nodes_on_this_machine(2, 1) as address:
        for model in c.models:
            run = _embed_run(
                "ray, two nodes", model, work / "texts", runs, c, engine="ray", workers=2, address=address
            )
            results["embed"].append(run)
        engine = EngineSettings(engine="ray", workers=2, address=address)
        results["prepare"].append(_prepare_run("ray, two nodes", work / "corpus", runs, shard_size, engine))


def _one_node_runs(
    results: dict, work: Path, runs: Path, shard_size: int, c: JobsBenchConfig, cores: int
) -> None:
    """Embed and prepare on an in-process Ray cluster: one worker, a worker per core, every core."""
    with _in_process_cluster(cores):
        for model in c.models:
            for name, workers, cpus in (
                ("ray, one worker, every core", 1, cores),
                ("ray, a worker per core", cores, 1),
                ("ray, one worker", 1, 1),
            ):
                run = _embed_run(
                    name, model, work / "texts", runs, c, engine="ray", workers=workers, cpus_per_worker=cpus
                )
                results["embed"].append(run)
        for name, workers in (("ray, one worker", 1), ("ray, a worker per core", cores)):
            engine = EngineSettings(engine="ray", workers=workers, cpus_per_worker=1)
            results["prepare"].append(_prepare_run(name, work / "corpus", runs, shard_size, engine))


def markdown(results: dict) -> str:
    if "outputs" in results:
        return outputs_markdown(results)
    machine = results["machine"]
    lines = [
        f"# Batch jobs: local engine and Ray engine ({machine['cpu']}, {results['cores']} cores, torch "
        f"{machine['torch']})\n",
        "## Corpus embedding\n",
        _embed_table(results),
        "\n## Data preparation\n",
        _prepare_table(results),
    ]
    return "\n".join(lines)


def _embed_table(results: dict) -> str:
    rows = []
    for r in results["embed"]:
        local = next(x for x in results["embed"] if x["model"] == r["model"] and x["run"] == LOCAL_RUN)
        single = next(
            (x for x in results["embed"] if x["model"] == r["model"] and x["run"] == "ray, one worker"), None
        )
        base = single if r["run"] == "ray, two nodes" and single else local
        against = "one worker" if base is single and base is not local else "local"
        rows.append(
            [
                r["model"],
                r["run"],
                f"{r['workers']} x {r['cpus_per_worker']}",
                ", ".join(r["precision"]),
                f"{r['texts_per_second']:,.1f}",
                f"{r['tokens_per_second']:,.0f}",
                f"{r['texts_per_second'] / base['texts_per_second']:.2f}x {against}",
                f"{r['wall_seconds']:.1f}",
                f"{r['load']:.1f}",
            ]
        )
    header = ["model", "run", "workers x CPUs", "precision", "texts/s", "tokens/s", "ratio"]
    return markdown_table([*header, "wall s (all in)", "load after"], rows)


def _prepare_table(results: dict) -> str:
    rust = results["rust_tokenizer"]
    rows = []
    for r in results["prepare"]:
        alone = rust.get(str(r["cpus_per_worker"]))
        ratio = f"{r['per_worker'] / alone:.2f}" if alone else None
        rows.append(
            [
                r["run"],
                f"{r['workers']} x {r['cpus_per_worker']}",
                f"{r['tokens_per_second']:,.0f}",
                f"{r['per_worker']:,.0f}",
                f"{alone:,.0f}" if alone else None,
                ratio,
                f"{r['wall_seconds']:.1f}",
                f"{r['load']:.1f}",
            ]
        )
    header = ["run", "workers x CPUs", "tokens/s", "per worker", "Rust tokenizer alone, same threads"]
    return markdown_table([*header, "per worker / alone", "wall s (all in)", "load after"], rows)
