"""Three servers of one model directory carrying its export, side by side: PyTorch named (``--backend torch
--precision P``), ``--backend auto`` measuring its candidates at start, and ``--backend auto`` reading the
choice from a ``--backend-cache`` filled beforehand (so no other runtime is ever loaded in its process).
Rounds at a client count, the order rotating; prints each round and the medians against the named server.

    OMP_NUM_THREADS=1 PYTHONPATH=src python docs/benchmarks/runtimes/probed_cached_servers.py \
        --model DIR_WITH_ONNX --precision bf16 --clients 8 --rounds 6

Where ``auto`` takes PyTorch, all three run the same runtime: what separates the probed server from the
cached one is what the measurement leaves in its process (the runtimes' thread pools, the heap).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from neobert.benchmarks.serve import _free_port, request_texts, run_cell


def start(model: str, args: list[str]) -> tuple[subprocess.Popen, int, float]:
    """A server of ``model`` with ``args``; waits for /health (30 minutes at most)."""
    port, started = _free_port(), time.monotonic()
    command = [
        sys.executable,
        "-m",
        "neobert.cli.main",
        "serve",
        "--model",
        model,
        "--port",
        str(port),
        *args,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.monotonic() - started < 1800:
        if process.poll() is not None:
            raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
            return process, port, time.monotonic() - started
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise TimeoutError(f"{' '.join(command)} did not answer /health in 30 minutes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model directory carrying its export (DIR/onnx)")
    parser.add_argument("--precision", default="bf16", help="the named server's precision")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="neobert-probed-cached-")) / "cache.json"
    filling, _, _ = start(args.model, ["--backend-cache", str(cache)])  # measures once, writes the cache
    filling.terminate()
    filling.wait()
    settings = {
        "named": ["--backend", "torch", "--precision", args.precision],
        "probed": [],
        "cached": ["--backend-cache", str(cache)],
    }
    servers = {}
    try:
        for name, extra in settings.items():
            servers[name] = start(args.model, extra)
            print(f"{name}: /health after {servers[name][2]:.1f} s", flush=True)
        texts = request_texts(200, 16)
        for _, port, _ in servers.values():
            run_cell(port, args.clients, texts, 2.0, 200)  # warm-up
        rates: dict[str, list[float]] = {name: [] for name in servers}
        names = list(servers)
        for round_ in range(args.rounds):
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                cell = run_cell(servers[name][1], args.clients, texts, args.seconds, 10**9)
                rates[name].append(len(cell["latencies"]) / cell["seconds"])
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.1f} req/s" for n, v in rates.items()))
    finally:
        for process, _, _ in servers.values():
            process.terminate()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(", ".join(f"{n} median {m:.2f} req/s ({m / medians['named']:.2f}x)" for n, m in medians.items()))


if __name__ == "__main__":
    main()
