"""``neobert bench serve``: the load generator against a real server, and the report arithmetic."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from neobert.benchmarks.serve import (
    Cell,
    ServeBenchConfig,
    markdown,
    merged_counts,
    percentile_ms,
    request_texts,
    run_cell,
    run_serve_bench,
    speedups,
)
from neobert.serving import ServeConfig
from neobert.serving.server import BackgroundServer
from neobert.serving.service import Service

pytestmark = pytest.mark.usefixtures("one_thread")


def test_run_cell_counts_every_request_the_server_saw(model_dir):
    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32"))
    texts = request_texts(20, 6)
    with BackgroundServer(service) as srv:
        result = run_cell(srv.port, concurrency=4, texts=texts, duration=30.0, max_requests=37)
        metrics = service.metrics.render().decode()
    assert (len(result["latencies"]), result["failed"], result["refused"]) == (37, 0, 0)
    assert 'neobert_requests_total{endpoint="/embed",status="200"} 37.0' in metrics
    total, calls = merged_counts(metrics)
    assert total == 37 and 1 <= calls <= 37  # every request ran in exactly one model call


def test_run_cell_stops_on_time(model_dir):
    service = Service.load(ServeConfig(model=str(model_dir), precision="fp32"))
    with BackgroundServer(service) as srv:
        result = run_cell(srv.port, concurrency=2, texts=["a b"], duration=0.5, max_requests=10**6)
    assert 0.4 < result["seconds"] < 10 and result["latencies"]


def test_report_arithmetic():
    assert percentile_ms([0.001 * i for i in range(1, 101)], 50) == pytest.approx(50.5)
    assert percentile_ms([], 99) is None
    cells = [Cell(False, 8, 10, 0, 0, 1.0, 10.0, 1, 2, 3, 1.0), Cell(True, 8, 40, 0, 0, 1.0, 40.0, 1, 2, 3, 4.0),
             Cell(False, 1, 5, 0, 0, 1.0, 5.0, 1, 2, 3, 1.0)]  # fmt: skip
    assert speedups(cells) == {"1": None, "8": 4.0}
    text = markdown({"config": {"model": "m", "precision": "bf16", "words": 3, "duration": 1, "max_requests": 9},
                     "machine": {"cpus": 2, "platform": "p"}, "cells": [c.__dict__ for c in cells],
                     "speedup": speedups(cells)})  # fmt: skip
    assert "| on | 8 | 40 | 40.0 |" in text and "concurrency 8: 4.0x" in text
    with pytest.raises(ValueError, match="concurrency"):
        ServeBenchConfig(concurrency=[0])


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
