"""Requests in turn: each ``--server 'NAME MODEL [neobert serve options]'`` is started (as in
``servers_side_by_side.py``), then ``--requests`` single-text ``/embed`` requests go to every server in turn,
one at a time, each round in an order that changes (``round_order``), so what one request meets (the
machine's state, the text) every server meets within milliseconds. Prints each server's median latency and
its median paired difference to the first server's: a cost per request that rounds of seconds cannot tell
from the spread between server processes.

    OMP_NUM_THREADS=1 PYTHONPATH=src python docs/benchmarks/runtimes/requests_in_turn.py \\
        --server 'named DIR/onnx --backend openvino --precision bf16' --server 'pair DIR' \\
        --server 'named-b DIR/onnx --backend openvino --precision bf16'
"""

from __future__ import annotations

import argparse
import http.client
import json
import shlex
import statistics
import time

from servers_side_by_side import start

from neobert.benchmarks.serve import request_texts, round_order

WARM_UP = 200  # requests per server left out of the figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True, help="'NAME MODEL [serve options]'")
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    texts = request_texts(200, 16)
    servers = {}
    try:
        for spec in args.server:
            name, model, *options = shlex.split(spec)
            servers[name] = start(model, options)
            info = servers[name].info()
            print(f"{name}: {info['backend']} {info['precision']}, alone on {info.get('runtime_alone')}")
        names = list(servers)
        connections = {n: http.client.HTTPConnection("127.0.0.1", s.port) for n, s in servers.items()}
        seconds: dict[str, list[float]] = {n: [] for n in names}
        for i in range(WARM_UP + args.requests):
            body = json.dumps({"texts": [texts[i % len(texts)]]}).encode()
            for name in round_order(names, i):
                started = time.perf_counter()
                connections[name].request("POST", "/embed", body, {"Content-Type": "application/json"})
                connections[name].getresponse().read()
                seconds[name].append(time.perf_counter() - started)
    finally:
        for server in servers.values():
            server.stop()
    first = seconds[names[0]][WARM_UP:]
    for name in names:
        mine = seconds[name][WARM_UP:]
        paired = statistics.median(a - b for a, b in zip(mine, first, strict=True))
        print(
            f"{name}: median {statistics.median(mine) * 1e3:.3f} ms over {len(mine)} requests, "
            f"paired difference to {names[0]} {paired * 1e3:+.3f} ms"
        )


if __name__ == "__main__":
    main()
