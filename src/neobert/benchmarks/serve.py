"""``neobert bench serve``: a bounded load test of ``neobert serve`` on 127.0.0.1.

For each mode (dynamic batching off, then on) a server process is started on a free port; closed-loop
clients (one thread and one keep-alive connection each) send single-text ``/embed`` requests back to back
at each concurrency for ``duration`` seconds or ``max_requests`` requests, whichever comes first; then the
server is stopped with SIGTERM. Reported per cell: requests/s, p50 / p95 / p99 latency, failed and refused
(503) requests, and the mean number of requests the server merged into one model call (from /metrics).
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .report import write_json_and_markdown

WORDS = [
    "the",
    "model",
    "reads",
    "every",
    "token",
    "of",
    "a",
    "sentence",
    "and",
    "writes",
    "one",
    "vector",
    "that",
    "stands",
    "for",
    "its",
    "meaning",
    "so",
    "that",
    "similar",
    "texts",
    "end",
    "close",
    "together",
    "while",
    "unrelated",
    "ones",
    "drift",
    "apart",
    "in",
    "the",
    "space",
    "of",
    "embeddings",
]


class ServerStartError(OSError):
    """The server under test did not come up."""


@dataclass(kw_only=True)
class ServeBenchConfig:
    model: str = "small"
    tokenizer: str | None = None
    precision: str = "bf16"
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32])
    duration: float = 10.0  # seconds of measurement per cell (after a short warm-up)
    max_requests: int = 3000  # per cell: the cell also ends after this many requests
    words: int = 16  # words per request text
    max_queue: int = 64
    startup_timeout: float = 180.0
    output: str | None = "docs/benchmarks/serve"

    def __post_init__(self) -> None:
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            raise ValueError(f"concurrency must be positive integers, got {self.concurrency!r}")
        if self.duration <= 0 or self.max_requests < 1 or self.words < 1:
            raise ValueError("duration, max_requests and words must be positive")


def request_texts(count: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=words)) for _ in range(count)]


def percentile_ms(latencies: list[float], q: float) -> float | None:
    return round(float(np.percentile(latencies, q)) * 1000, 2) if latencies else None


@dataclass
class Cell:
    batching: bool
    concurrency: int
    requests: int
    failed: int  # errors and non-200 answers other than 503
    refused: int  # 503 (queue full)
    seconds: float
    requests_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_merged: float | None  # requests per model call, from the server's metrics


class ServerProcess:
    """``neobert serve`` in a child process on a free port of 127.0.0.1."""

    def __init__(self, config: ServeBenchConfig, batching: bool):
        self.port = _free_port()
        command = [
            sys.executable, "-m", "neobert.cli.main", "serve", "--model", config.model,
            "--port", str(self.port), "--precision", config.precision, "--max-queue", str(config.max_queue),
            "--batching" if batching else "--no-batching",
        ]  # fmt: skip
        if config.tokenizer:
            command += ["--tokenizer", config.tokenizer]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + config.startup_timeout
        while not self._healthy():
            if self.process.poll() is not None:
                raise ServerStartError(f"the server exited while starting:\n{self.process.stdout.read()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"the server did not answer /health within {config.startup_timeout:.0f} s"
                )
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return _request(self.port, "GET", "/health")[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        return _request(self.port, "GET", "/metrics")[1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def merged_counts(metrics_text: str) -> tuple[float, float]:
    """(sum, count) of the neobert_batch_requests histogram."""
    values = {}
    for line in metrics_text.splitlines():
        for name in ("neobert_batch_requests_sum", "neobert_batch_requests_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[1])
    return values.get("neobert_batch_requests_sum", 0.0), values.get("neobert_batch_requests_count", 0.0)


def run_cell(port: int, concurrency: int, texts: list[str], duration: float, max_requests: int) -> dict:
    """Closed-loop load: ``concurrency`` clients, each sending its next request when the last answered."""
    latencies: list[float] = []
    counts = {"sent": 0, "failed": 0, "refused": 0}
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        i = index
        try:
            while time.perf_counter() < stop_at:
                with lock:
                    if counts["sent"] >= max_requests:
                        return
                    counts["sent"] += 1
                body = json.dumps({"texts": [texts[i % len(texts)]]}).encode()
                i += concurrency
                start = time.perf_counter()
                try:
                    conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except (OSError, http.client.HTTPException):
                    status = None
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                elapsed = time.perf_counter() - start
                with lock:
                    if status == 200:
                        latencies.append(elapsed)
                    elif status == 503:
                        counts["refused"] += 1
                    else:
                        counts["failed"] += 1
        finally:
            conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"latencies": latencies, "seconds": time.perf_counter() - start, **counts}


def measure_mode(config: ServeBenchConfig, batching: bool, texts: list[str]) -> list[Cell]:
    server = ServerProcess(config, batching)
    cells = []
    try:
        run_cell(server.port, max(config.concurrency), texts, min(2.0, config.duration), 200)  # warm-up
        for concurrency in config.concurrency:
            before = merged_counts(server.metrics())
            result = run_cell(server.port, concurrency, texts, config.duration, config.max_requests)
            after = merged_counts(server.metrics())
            calls = after[1] - before[1]
            latencies = result["latencies"]
            cells.append(
                Cell(
                    batching=batching,
                    concurrency=concurrency,
                    requests=len(latencies),
                    failed=result["failed"],
                    refused=result["refused"],
                    seconds=round(result["seconds"], 3),
                    requests_per_s=round(len(latencies) / result["seconds"], 2),
                    p50_ms=percentile_ms(latencies, 50),
                    p95_ms=percentile_ms(latencies, 95),
                    p99_ms=percentile_ms(latencies, 99),
                    mean_merged=round((after[0] - before[0]) / calls, 2) if calls else None,
                )
            )
    finally:
        server.stop()
    return cells


def run_serve_bench(config: ServeBenchConfig | dict[str, Any]) -> dict:
    """Both modes at every concurrency; writes results.json / results.md to ``config.output`` if set."""
    if isinstance(config, dict):
        config = ServeBenchConfig(**config)
    texts = request_texts(512, config.words)
    cells = [cell for batching in (False, True) for cell in measure_mode(config, batching, texts)]
    results = {
        "benchmark": "serve",
        "config": asdict(config),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "cells": [asdict(cell) for cell in cells],
        "speedup": speedups(cells),
    }
    if config.output:
        write_json_and_markdown(results, markdown(results), config.output)
    return results


def speedups(cells: list[Cell]) -> dict[str, float | None]:
    """requests/s with batching over without, per concurrency."""
    rate = {(c.batching, c.concurrency): c.requests_per_s for c in cells}
    out = {}
    for concurrency in sorted({c.concurrency for c in cells}):
        off, on = rate.get((False, concurrency)), rate.get((True, concurrency))
        out[str(concurrency)] = round(on / off, 2) if off and on else None
    return out


def markdown(results: dict) -> str:
    config = results["config"]
    lines = [
        f"# neobert serve under load: {config['model']} ({config['precision']})",
        "",
        f"Single-text `/embed` requests of {config['words']} words, closed-loop clients on 127.0.0.1, "
        f"{config['duration']:g} s (at most {config['max_requests']} requests) per cell; "
        f"{results['machine']['cpus']} CPUs ({results['machine']['platform']}).",
        "",
        "| batching | concurrency | requests | req/s | p50 ms | p95 ms | p99 ms | failed | 503 | merged/call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in results["cells"]:
        lines.append(
            f"| {'on' if c['batching'] else 'off'} | {c['concurrency']} | {c['requests']} | "
            f"{c['requests_per_s']:.1f} | {c['p50_ms']} | {c['p95_ms']} | {c['p99_ms']} | {c['failed']} | "
            f"{c['refused']} | {c['mean_merged']} |"
        )
    lines += ["", "Speed-up of dynamic batching (requests/s, on / off): "
              + ", ".join(f"concurrency {k}: {v}x" for k, v in results["speedup"].items()), ""]  # fmt: skip
    return "\n".join(lines)
