"""Servers side by side: each ``--server 'NAME MODEL [neobert serve options]'`` is started and warmed up for
a round's length, then all are driven in rounds of ``--seconds`` at ``--clients`` closed-loop clients, in an
order that changes every round (``round_order``); prints what each server runs (a pair's placements and their probe), each round,
where a pair's calls ran, then each server's median against the first server's.

    OMP_NUM_THREADS=1 PYTHONPATH=src python docs/benchmarks/runtimes/servers_side_by_side.py --clients 8 \\
        --server 'named DIR --backend torch --precision bf16' --server 'probed DIR' \\
        --server 'cached DIR --backend-cache {cache}'

``DIR`` is a model directory; one carrying its export (DIR/onnx) is what ``--backend auto`` measures at
start. ``{cache}`` stands for a ``--backend-cache`` file that a server of that model fills before the
others start (it measures, writes the choice and stops), so the server reading it never loads another
runtime. Used in docs/benchmarks.md to tell a server's shortfall from the spread between servers: two
servers of one runtime, `auto` probed against `auto` cached, the runtimes of a close call.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
from pathlib import Path

from neobert.benchmarks.serve import (
    ServeBenchConfig,
    ServerProcess,
    calls_by_placement,
    request_texts,
    round_order,
    run_cell,
    threads_used,
)

START_LIMIT = 1800.0  # seconds for a server to answer /health (`auto` measures its candidates first)


def start(model: str, options: list[str]) -> ServerProcess:
    return ServerProcess(
        ServeBenchConfig(model=model, output=None, startup_timeout=START_LIMIT), True, extra=options
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True, help="'NAME MODEL [serve options]'")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    cache = str(Path(tempfile.mkdtemp(prefix="neobert-side-by-side-")) / "cache.json")
    specs = {}
    for spec in args.server:
        name, model, *options = shlex.split(spec)
        specs[name] = (model, [cache if option == "{cache}" else option for option in options])
    for model, options in specs.values():
        if cache in options and not Path(cache).exists():
            start(model, ["--backend-cache", cache]).stop()  # measures once and writes the cache
    texts = request_texts(200, 16)
    servers: dict[str, ServerProcess] = {}
    rates: dict[str, list[float]] = {name: [] for name in specs}
    warm: dict[str, dict[str, float]] = {}  # each server's calls by placement after its warm-up
    try:
        for name, (model, options) in specs.items():
            servers[name] = start(model, options)
            info = servers[name].info()
            print(
                f"{name}: {info['backend']} {info['precision']}, /health after {servers[name].start_s:.1f} s"
            )
            if info.get("runtime_alone"):  # a pair: auto's export with PyTorch beside it
                print(f"  {name}'s pair: {info['threads_reason']}")
            run_cell(servers[name].port, args.clients, texts, args.seconds, 10**9)  # warm-up
            warm[name] = calls_by_placement(servers[name].metrics())
        names = list(servers)
        for round_ in range(args.rounds):
            for name in round_order(names, round_):
                cell = run_cell(
                    servers[name].port, args.clients, texts, args.seconds, 10**9, server=servers[name]
                )
                rates[name].append(len(cell["latencies"]) / cell["seconds"])
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.1f} req/s" for n, v in rates.items()))
        for name, server in servers.items():
            info = server.info()
            if info.get("runtime_alone"):
                shares = threads_used(warm[name], calls_by_placement(server.metrics()))
                print(
                    f"{name}'s calls in the rounds: {shares} (HTTP side {info['http_ms_per_text']} ms a text)"
                )
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    first = medians[names[0]]
    print(", ".join(f"{n} median {m:.2f} req/s ({m / first:.2f}x)" for n, m in medians.items()))


if __name__ == "__main__":
    main()
