"""Interleaved capacity A/B: today's server vs this branch's, in rounds, same machine state."""
import json, os, sys, time
from dataclasses import asdict
from neobert.benchmarks.serve import ServeBenchConfig, ServerProcess, measured_cell, request_texts, run_cell

VARIANTS = {
    "today": ("/tmp/before/src", {}, True),
    "today, OMP_NUM_THREADS=1": ("/tmp/before/src", {"OMP_NUM_THREADS": "1"}, True),
    "branch, model process": ("/work/wt-serve/src", {}, True),
    "branch, model thread": ("/work/wt-serve/src", {}, False),
}
texts = request_texts(512, 16)
rows = []
base_env = dict(os.environ)
for rnd in range(3):
    for name, (path, env, process) in VARIANTS.items():
        os.environ.clear(); os.environ.update(base_env); os.environ.update(env); os.environ["PYTHONPATH"] = path
        config = ServeBenchConfig(model="small", precision="fp32", duration=6.0, output="", model_process=process)
        server = ServerProcess(config, batching=True)
        try:
            run_cell(server.port, 32, texts, 2.0, 200)
            for c in (1, 8, 32):
                cell = measured_cell(server, config, texts, True, c, label=name)
                rows.append({"round": rnd, **asdict(cell)})
                print(rnd, name, c, cell.requests_per_s, cell.p99_ms, cell.server_cpu, flush=True)
        finally:
            server.stop()
json.dump(rows, open("/tmp/ab/rows.json", "w"), indent=1)
