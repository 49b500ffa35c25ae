"""``neobert bench serve``: the load generator against a real server, and the report arithmetic."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi")

from neobert.benchmarks.serve import (
    Cell,
    ServeBenchConfig,
    ServerProcess,
    ServerStartError,
    calls_by_threads,
    markdown,
    merged_counts,
    overload_goals,
    percentile_ms,
    pooled,
    request_texts,
    run_cell,
    run_serve_bench,
    speedups,
    thread_ratios,
    threads_used,
)
from neobert.serving import ServeConfig
from neobert.serving.server import BackgroundServer
from neobert.serving.service import Service

pytestmark = pytest.mark.usefixtures("one_thread")


def settled_metrics(service, timeout: float = 5.0) -> str:
    """The service's metrics once they stop changing: a response reaches the client just before the
    server counts it, so a render right after the last response can miss the last few."""
    previous, deadline = None, time.monotonic() + timeout
    while True:
        current = service.metrics.render().decode()
        counts = re.findall(r"^neobert_requests_total\{.*\} (\S+)$", current, re.MULTILINE)
        if counts == previous or time.monotonic() > deadline:
            return current
        previous = counts
        time.sleep(0.3)


def test_run_cell_counts_every_request_the_server_saw(model_dir):
    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32", model_process=False))
    texts = request_texts(20, 6)
    with BackgroundServer(service) as srv:
        result = run_cell(srv.port, concurrency=4, texts=texts, duration=30.0, max_requests=37)
        metrics = settled_metrics(service)
    assert (len(result["latencies"]), result["failed"], result["refused"]) == (37, 0, 0)
    assert 'neobert_requests_total{endpoint="/embed",status="200"} 37.0' in metrics
    total, calls = merged_counts(metrics)
    assert total == 37 and 1 <= calls <= 37  # every request ran in exactly one model call


def test_run_cell_stops_on_time(model_dir):
    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32", model_process=False))
    with BackgroundServer(service) as srv:
        result = run_cell(srv.port, concurrency=2, texts=["a b"], duration=0.5, max_requests=10**6)
    assert 0.4 < result["seconds"] < 10 and result["latencies"]


def test_report_arithmetic():
    assert percentile_ms([0.001 * i for i in range(1, 101)], 50) == pytest.approx(50.5)
    assert percentile_ms([], 99) is None
    cells = [
        Cell(False, 8, 10, 0, 0, 1.0, 10.0, 1, 2, 3, 1.0),
        Cell(True, 8, 40, 0, 0, 1.0, 40.0, 1, 2, 3, 4.0),
        Cell(False, 1, 5, 0, 0, 1.0, 5.0, 1, 2, 3, 1.0),
    ]
    assert speedups(cells) == {"1": None, "8": 4.0}
    text = markdown(
        {
            "config": {"model": "m", "precision": "bf16", "words": 3, "duration": 1, "max_requests": 9},
            "machine": {"cpus": 2, "platform": "p"},
            "cells": [c.__dict__ for c in cells],
            "speedup": speedups(cells),
        }
    )
    assert "| on | 8 | 40 | 40.0 |" in text and "concurrency 8: 4.0x" in text
    with pytest.raises(ValueError, match="concurrency"):
        ServeBenchConfig(concurrency=[0])


@pytest.mark.slow  # 13 s; test_serving_models.py runs a retry storm by default
def test_a_retry_storm_loses_nothing_and_its_refusals_are_paced(model_dir):
    """12 clients resending at once on 503 against a queue of 2, the model in its own process: every
    request is answered 200 or 503 (none lost), the 200s keep flowing, and each refusal waits
    refusal_delay, so the clients cannot send more than clients x seconds / delay of them."""
    config = ServeConfig(model=str(model_dir), precision="fp32", max_queue=2, refusal_delay=0.2, threads=1)
    texts = request_texts(50, 8)
    with BackgroundServer(Service.load(config)) as srv:
        result = run_cell(
            srv.port, concurrency=12, texts=texts, duration=3.0, max_requests=5000, backoff=False
        )
        metrics = settled_metrics(srv.service)
    accepted, refused = len(result["latencies"]), result["refused"]
    assert result["failed"] == 0 and accepted > 0 and refused > 0
    assert refused <= 12 * result["seconds"] / 0.2 + 12
    assert f'neobert_requests_total{{endpoint="/embed",status="200"}} {float(accepted)}' in metrics
    # a refusal still waiting out its delay when the clients stop is counted by the server, not the clients
    served_503 = float(
        re.search(r'neobert_requests_total\{endpoint="/embed",status="503"\} (\S+)', metrics)[1]
    )
    assert refused <= served_503 <= refused + 12
    assert result["client_cpu"] > 0


def test_overload_goals_and_report():
    def cell(label, concurrency, rate, p99, failed=0):
        return Cell(True, concurrency, int(rate * 10), failed, 5, 10.0, rate, 1, 2, p99, 4.0, label, 0.5, 1.5)

    cells = [
        cell("capacity", 1, 10, 100),
        cell("capacity", 32, 50, 800),
        cell("storm", 64, 41, 1500),
        cell("polite", 64, 48, 900),
    ]
    goals = overload_goals(cells)
    assert (goals["goodput_ratio"], goals["goodput_ok"], goals["p99_ok"], goals["lost_ok"]) == (
        0.82,
        True,
        True,
        True,
    )
    assert not overload_goals([*cells[:2], cell("storm", 64, 39, 1700, failed=1)])["goodput_ok"]
    assert overload_goals([*cells[:2], cell("storm", 64, 45, 1601)])["p99_ok"] is False
    results = {
        "config": {
            "model": "m",
            "precision": "fp32",
            "words": 3,
            "duration": 10,
            "max_requests": 9,
            "overload": True,
            "max_queue": 64,
            "storm_queue": 16,
            "storm_factor": 4,
        },
        "machine": {"cpus": 2, "platform": "p"},
        "cells": [c.__dict__ for c in cells],
        "goals": goals,
    }
    text = markdown(results)
    assert "| storm | 64 | 410 | 41.0 |" in text and "0.82 (>= 0.8: met)" in text


def test_thread_comparison_report():
    """Default against pinned thread counts: rounds pooled, the default's ratio to the best pinned."""

    def cell(label, concurrency, requests, seconds, p99, threads):
        rate = requests / seconds
        return Cell(
            True,
            concurrency,
            requests,
            0,
            0,
            seconds,
            rate,
            1,
            2,
            p99,
            2.0,
            label,
            0.1,
            1.0,
            rate * 4,
            str(threads),
        )

    rounds = [cell("default", 8, 100, 2.0, 30, 2), cell("default", 8, 140, 2.0, 50, 1)]
    merged = pooled(rounds)
    assert (merged.requests, merged.seconds, merged.requests_per_s, merged.texts_per_s) == (
        240,
        4.0,
        60.0,
        240.0,
    )
    assert merged.p99_ms == 40.0 and merged.threads == "2/1"
    cells = [
        merged,
        cell("--threads 1", 8, 100, 4.0, 90, 1),
        cell("--threads 2", 8, 250, 4.0, 35, 2),
        cell("default", 1, 50, 1.0, 5, 2),
        cell("--threads 1", 1, 40, 1.0, 6, 1),
    ]
    ratios = thread_ratios(cells)
    assert ratios == {"1": 1.25, "8": 0.96}  # 240 / 250 texts/s at 8 clients
    results = {
        "config": {
            "model": "m",
            "precision": "auto",
            "words": 16,
            "duration": 2,
            "max_requests": 9,
            "compare_threads": [1, 2],
            "texts_per_request": 4,
            "rounds": 2,
        },
        "machine": {"cpus": 2, "platform": "p"},
        "cells": [c.__dict__ for c in cells],
        "threads": {
            "chosen": {"default": ["2 thread(s): measured", "1 thread(s): measured"]},
            "default_over_best_pinned": ratios,
        },
    }
    text = markdown(results)
    assert "| default | 2/1 | 8 | 240 | 60.00 | 240.00 | 1.00 | 40.00 | 0 | 1.00 | 0.96 |" in text
    assert "| --threads 1 | 1 | 8 | 100 | 25.00 | 100.00 | 1 | 90 | 0 | 1.00 | n/a |" in text
    assert (
        "default: 2 thread(s): measured | 1 thread(s): measured" in text and "4 text(s) per request" in text
    )
    with pytest.raises(ValueError, match="compare_threads"):
        ServeBenchConfig(compare_threads=[0])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_each_variant_holds_each_place_once_and_follows_each_other_once(n):
    """Over n rounds: every variant runs in every round and holds each place once; for an even n each
    ordered pair of neighbours occurs once (no variant always runs after the same one)."""
    from neobert.benchmarks.serve import round_order

    names = [f"v{i}" for i in range(n)]
    orders = [round_order(names, r) for r in range(n)]
    assert all(sorted(order) == names for order in orders)
    for place in range(n):
        assert sorted(order[place] for order in orders) == names
    followed = [(a, b) for order in orders for a, b in itertools.pairwise(order)]
    if n % 2 == 0:
        assert sorted(followed) == sorted((a, b) for a in names for b in names if a != b)
    assert round_order(names, n) == orders[0]
    assert round_order([0, 1, 2, 3], 0) == [0, 1, 3, 2]


def test_threads_used_per_cell_from_the_servers_metric():
    """A cell's ``threads``: the counts its model calls ran on, from ``neobert_model_calls{threads}``."""
    text = (
        "# HELP neobert_model_calls_total Model calls by the torch threads they ran on\n"
        'neobert_model_calls_total{threads="1"} 93.0\nneobert_model_calls_total{threads="2"} 12.0\n'
        'neobert_model_calls_total{threads="unknown"} 4.0\nneobert_model_calls_created{threads="1"} 1.7e9\n'
    )
    before = calls_by_threads(text)
    assert before == {1: 93.0, 2: 12.0}
    assert (
        calls_by_threads("neobert_batch_requests_count 3.0") == {}
    )  # an older server: /info's count instead
    assert threads_used(before, {1: 186.0, 2: 19.0}) == "1: 93%, 2: 7%"
    assert threads_used(before, {1: 93.0, 2: 40.0}) == "2"
    assert threads_used({}, {1: 5.0}) == "1" and threads_used(before, before) is None


@pytest.mark.slow  # two server processes (each imports torch, transformers and FastAPI)
def test_bench_serve_compares_thread_counts_end_to_end(model_dir, tmp_path):
    results = run_serve_bench(
        {
            "model": str(model_dir),
            "precision": "fp32",
            "concurrency": [2],
            "duration": 0.5,
            "max_requests": 40,
            "compare_threads": [1],
            "texts_per_request": 3,
            "output": str(tmp_path),
        }
    )
    assert [(c["label"], c["threads"]) for c in results["cells"]] == [("default", "1"), ("--threads 1", "1")]
    assert all(c["failed"] == 0 and c["requests"] > 0 for c in results["cells"])
    assert results["cells"][0]["texts_per_s"] == pytest.approx(
        3 * results["cells"][0]["requests_per_s"], 0.01
    )
    assert "pinned by NEOBERT_SERVE_THREADS" in results["threads"]["chosen"]["default"][0]  # the suite's pin


@pytest.mark.slow  # two server processes (each imports torch, transformers and FastAPI)
def test_bench_serve_end_to_end(model_dir, tmp_path):
    results = run_serve_bench(
        {
            "model": str(model_dir),
            "precision": "fp32",
            "concurrency": [1, 4],
            "duration": 1.0,
            "max_requests": 50,
            "output": str(tmp_path),
        }
    )
    assert [(c["batching"], c["concurrency"]) for c in results["cells"]] == [
        (False, 1),
        (False, 4),
        (True, 1),
        (True, 4),
    ]
    assert all(c["failed"] == 0 and c["refused"] == 0 and c["requests"] > 0 for c in results["cells"])
    assert all(c["mean_merged"] == 1.0 for c in results["cells"] if not c["batching"])
    assert json.loads((tmp_path / "results.json").read_text())["speedup"].keys() == {"1", "4"}
    assert "| off | 1 |" in (tmp_path / "results.md").read_text()


def test_a_server_that_cannot_start_is_reported_with_what_it_said(tmp_path):
    """The server's output goes to a file (a pipe nobody reads would block a server that logs); a start
    that fails raises with that output, which names the problem."""
    missing = tmp_path / "no-such-model"
    with pytest.raises(ServerStartError, match="exited while starting") as raised:
        ServerProcess(ServeBenchConfig(model=str(missing), output=None, startup_timeout=120), True)
    assert "no-such-model" in str(raised.value)


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's (prctl)")
def test_a_killed_benchmark_leaves_no_server_behind(tmp_path, model_dir):
    """The process that started a server is SIGKILLed, so none of its cleanup runs: the server ends too."""
    script = tmp_path / "bench.py"
    script.write_text(
        "import time\n"
        "from neobert.benchmarks.serve import ServeBenchConfig, ServerProcess\n"
        f"config = ServeBenchConfig(model={str(model_dir)!r}, output=None, startup_timeout=300)\n"
        "print(ServerProcess(config, True).process.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    bench = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    server = 0
    try:
        server = int(bench.stdout.readline())
        assert running(server)
        bench.kill()
        bench.wait(30)
        deadline = time.monotonic() + 60
        while running(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(server)
    finally:
        bench.kill()
        bench.stdout.close()
        if server and running(server):  # the failure above: stop what it left
            os.kill(server, signal.SIGTERM)


def test_extra_serve_options_reach_the_server_after_the_configs(tmp_path):
    """``extra`` (docs/benchmarks/runtimes/servers_side_by_side.py's options) is passed to `neobert serve`."""
    config = ServeBenchConfig(model=str(tmp_path), output=None, startup_timeout=120)
    with pytest.raises(ServerStartError, match="unrecognized arguments: --no-such-option"):
        ServerProcess(config, True, extra=["--no-such-option"])
