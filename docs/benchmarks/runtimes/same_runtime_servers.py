"""Two servers that run one runtime, side by side: a model served at a named backend and precision, and the
same model directory carrying its export under ``--backend auto`` (which measures its candidates at start).
Alternating rounds at a client count, each server first in turn; prints each round and the medians.

    OMP_NUM_THREADS=1 PYTHONPATH=src python docs/benchmarks/runtimes/same_runtime_servers.py \
        --named MODEL_DIR --carrying DIR_WITH_ONNX --backend torch --precision bf16 --clients 8 --rounds 6

Used for the 250M table's service half (docs/benchmarks.md): whether `auto`'s shortfall beside the runtime
it took is the servers' spread or its own.
"""

from __future__ import annotations

import argparse
import statistics

from neobert.benchmarks.serve import ServeBenchConfig, ServerProcess, request_texts, run_cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--named", required=True, help="model directory served at --backend/--precision")
    parser.add_argument(
        "--carrying", required=True, help="the model directory carrying its export (DIR/onnx)"
    )
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    texts = request_texts(200, 16)
    settings = {
        "named": (args.named, args.backend, args.precision),
        "auto": (args.carrying, "auto", "auto"),
    }
    servers: dict[str, ServerProcess] = {}
    rates: dict[str, list[float]] = {name: [] for name in settings}
    try:
        for name, (model, backend, precision) in settings.items():
            config = ServeBenchConfig(
                model=model, output=None, backend=backend, precision=precision, startup_timeout=1800
            )
            servers[name] = ServerProcess(config, True)
            info = servers[name].info()
            print(
                f"{name}: {info['backend']} {info['precision']}, /health after {servers[name].start_s:.1f} s"
            )
            run_cell(servers[name].port, args.clients, texts, 2.0, 200)  # warm-up, as bench onnx did
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
            for name in order:
                cell = run_cell(
                    servers[name].port, args.clients, texts, args.seconds, 10**9, server=servers[name]
                )
                rates[name].append(len(cell["latencies"]) / cell["seconds"])
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.1f} req/s" for n, v in rates.items()))
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(", ".join(f"{n} median {m:.2f} req/s" for n, m in medians.items()))
    print(f"auto / named: {medians['auto'] / medians['named']:.2f}x")


if __name__ == "__main__":
    main()
