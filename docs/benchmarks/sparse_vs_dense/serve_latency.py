"""Query latency through the service: start `neobert serve` on 127.0.0.1 for one model, send the held-out
queries one per request from one client (keep-alive), and print p50 / p90 / p99 milliseconds.

    PYTHONPATH=src python docs/benchmarks/sparse_vs_dense/serve_latency.py MODEL_DIR {embed,embed_sparse,multivector} \
        QUERIES_JSONL [--precision fp32] [--threads 1]

``multivector`` asks a late-interaction model for a query's token vectors: ``POST /v1/embeddings`` with Jina's
``return_multivector: true`` and ``task: retrieval.query`` (the ``[Q]`` marker, expanded to ``query_length``).

The server runs with its defaults (a model process of its own, batching on) except for the precision (fp32
by default: the vectors `neobert eval embeddings` scored) and the model threads (pinned to 1 by default, the
same for both models: the start-up measurement of `--threads 0` is noisy when other jobs share the cores). After 10 warm-up
requests each query is timed from sending the request to having parsed the answer. The server's start-up
line (precision, threads) and `/info`'s thread fields are printed with the numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(conn: http.client.HTTPConnection, method: str, path: str, body: dict | None = None) -> object:
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})  # fmt: skip
    response = conn.getresponse()
    text = response.read()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {text[:300]!r}")
    return json.loads(text)


# endpoint -> (path, request body of one query, entries of the answer: numbers a search reads)
ROUTES = {
    "embed": ("/embed", lambda q: {"inputs": q}, lambda a: len(a[0])),
    "embed_sparse": ("/embed_sparse", lambda q: {"inputs": q}, lambda a: len(a[0])),
    "multivector": (
        "/v1/embeddings",
        lambda q: {"input": [q], "return_multivector": True, "task": "retrieval.query"},
        lambda a: sum(len(v) for v in a["data"][0]["embeddings"]),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("endpoint", choices=list(ROUTES))
    parser.add_argument("queries", type=Path)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", default="1")
    parser.add_argument(
        "--output", type=Path, help="also write the numbers (and the server's start-up lines) here"
    )
    args = parser.parse_args()
    queries = [json.loads(line)["text"] for line in args.queries.read_text(encoding="utf-8").splitlines()]
    port = free_port()
    command = [sys.executable, "-m", "neobert.cli.main", "serve", "--model", args.model, "--host", "127.0.0.1",
               "--port", str(port), "--precision", args.precision, "--threads", args.threads]  # fmt: skip
    env = {**os.environ, "NEOBERT_API_KEY": ""}
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        startup = ""
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                request(conn, "GET", "/health")
                break
            except (OSError, RuntimeError):
                if server.poll() is not None:
                    raise SystemExit(f"the server stopped: {server.stdout.read()[-3000:]}") from None
                time.sleep(0.5)
        else:
            raise SystemExit("the server did not answer /health in 300 s")
        info = request(conn, "GET", "/info")
        path, body, entries = ROUTES[args.endpoint]
        for q in queries[:10]:
            request(conn, "POST", path, body(q))
        times, nonzeros = [], []
        for q in queries:
            start = time.perf_counter()
            answer = request(conn, "POST", path, body(q))
            times.append(1000 * (time.perf_counter() - start))
            nonzeros.append(entries(answer))
        conn.close()
    finally:
        server.terminate()
        try:
            out, _ = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            out, _ = server.communicate()
        startup = "\n".join(line for line in out.splitlines() if "thread" in line or "precision" in line)[
            :2000
        ]
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    fields = {
        k: v for k, v in info.items() if "thread" in k or k in ("precision", "model_id", "max_input_length")
    }
    result = {"model": args.model, "endpoint": ROUTES[args.endpoint][0], "requests": len(times), "p50_ms": p50,
              "p90_ms": p90, "p99_ms": p99, "mean_ms": float(np.mean(times)),
              "vector_entries_mean": float(np.mean(nonzeros)), "info": fields}  # fmt: skip
    print(json.dumps(result, indent=2))
    print("server:", startup)
    if args.output:
        args.output.write_text(
            json.dumps({**result, "server": startup, "load_average_at_end": os.getloadavg()}, indent=2)
        )


if __name__ == "__main__":
    main()
