"""Interleaved capacity A/B: the server before issue 19 (a785fb5) beside this one, in rounds, same machine state.

    git worktree add /tmp/before a785fb5
    python docs/benchmarks/serve/capacity-ab/ab.py /tmp/before/src src docs/benchmarks/serve/capacity-ab

Each round starts every variant's server in turn (the `small` preset, fp32), warms it up, and measures
single-text /embed requests at concurrency 1, 8 and 32 (6 s each) with the load generator of
neobert.benchmarks.serve; rows.json holds every cell, the printed table the medians over rounds.
"""

import json
import os
import statistics
import sys
from dataclasses import asdict

from neobert.benchmarks.serve import ServeBenchConfig, ServerProcess, measured_cell, request_texts, run_cell
from neobert.runtime.hardware import machine_summary

before, after, output = sys.argv[1:4]
VARIANTS = {  # name: (source tree, environment, model in its own process, the model's --threads)
    "before (a785fb5)": (before, {}, True, 0),
    "before, OMP_NUM_THREADS=1": (before, {"OMP_NUM_THREADS": "1"}, True, 0),
    "now, model process (default: 1 thread)": (after, {}, True, 0),
    "now, model process, --threads 2": (after, {}, True, 2),
    "now, model thread": (after, {}, False, 0),
}
texts = request_texts(512, 16)
rows = []
base_env = dict(os.environ)
for rnd in range(3):
    for name, (path, env, process, threads) in VARIANTS.items():
        os.environ.clear()
        os.environ.update({**base_env, **env, "PYTHONPATH": os.path.abspath(path)})
        config = ServeBenchConfig(
            model="small", precision="fp32", duration=6.0, output="", model_process=process, threads=threads
        )
        server = ServerProcess(config, batching=True)
        try:
            run_cell(server.port, 32, texts, 2.0, 200)
            for c in (1, 8, 32):
                cell = measured_cell(server, config, texts, True, c, label=name)
                rows.append({"round": rnd, **asdict(cell)})
                print(rnd, name, c, cell.requests_per_s, cell.p99_ms, cell.server_cpu, flush=True)
        finally:
            server.stop()
os.environ.clear()
os.environ.update(base_env)
with open(os.path.join(output, "rows.json"), "w") as f:
    json.dump({"machine": machine_summary(), "rows": rows}, f, indent=1)
print(f"\nmedian req/s over 3 rounds (p99 ms); {machine_summary()}")
print("| server | c=1 | c=8 | c=32 |\n|---|---:|---:|---:|")
for name in VARIANTS:
    cells = []
    for c in (1, 8, 32):
        mine = [r for r in rows if r["label"] == name and r["concurrency"] == c]
        rate = statistics.median(r["requests_per_s"] for r in mine)
        p99 = statistics.median(r["p99_ms"] or 0 for r in mine)
        cells.append(f"{rate:.1f} ({p99:,.0f})")
    print(f"| {name} | " + " | ".join(cells) + " |")
