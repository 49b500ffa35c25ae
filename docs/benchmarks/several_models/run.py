"""Several models in one `neobert serve` (issue 39): memory and throughput, adapters against full models.

Builds, in a scratch directory, a base model of ``--preset`` (random weights: memory and speed do not depend
on their values), ``max(--counts)`` LoRA adapters over it (peft, rank ``--rank``, NeoBERT's qkv / wo / w12 /
w3) and as many full models (each adapter merged into the base by peft: distinct weights of the base's
size). Then, each with `neobert serve` in a process of its own on 127.0.0.1:

* **memory**: for each count N, the base and N adapters, then N full models, served in one process
  (``--no-model-process``, everything loaded at start): the process's resident memory (VmRSS, after one
  request per model), and the models' weights as the server counts them (GET /v1/models ``bytes``). The
  ratios are over the base alone.
* **throughput**: closed-loop clients (``--concurrency``, one keep-alive connection each) send one-text
  ``/embed`` requests for ``--duration`` seconds, after ``--warmup`` seconds of the same traffic, to (a) one
  model, (b) ``--spread`` adapters of one base, round robin, (c) ``--spread`` full models, round robin; the
  three rows interleaved over ``--rounds`` rounds (the median round); requests/s, p50 / p95 latency, the ratio
  to one model, and how many adapters the server's model calls held on average (neobert_batch_adapters).
  ``--throughput-only`` keeps the memory rows of ``--output``'s results.json.

Prints the markdown table and writes results.json and results.md into ``--output``. The scratch directory
holds max(--counts) + 1 copies of the model on disk (the 250M shape: 1 GB each in fp32).

    python docs/benchmarks/several_models/run.py --output docs/benchmarks/several_models
    python docs/benchmarks/several_models/run.py --preset tiny --counts 1,2 --spread 2 --duration 3 \\
        --concurrency 4 --output /tmp/several   # a check of the script, in a minute
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from neobert.benchmarks.report import publish
from neobert.benchmarks.serve import percentile_ms, request_texts
from neobert.common.tables import markdown_table
from neobert.data import load_tokenizer
from neobert.inference.encoders import load_model, save_pretrained
from neobert.runtime.hardware import machine_summary

TARGETS = ["qkv", "wo", "w12", "w3"]


def build(scratch: Path, preset: str, count: int, rank: int) -> dict[str, Any]:
    """The base, ``count`` adapters and ``count`` full models (the adapters merged) under ``scratch``."""
    from peft import LoraConfig, PeftModel, get_peft_model

    done = {"base": scratch / "base", "adapters": [], "full": []}
    done["adapters"] = [scratch / f"adapter{i}" for i in range(count)]
    done["full"] = [scratch / f"full{i}" for i in range(count)]
    marks = [done["base"] / "config.json"] + [d / "adapter_config.json" for d in done["adapters"]]
    if all(m.is_file() for m in marks + [d / "config.json" for d in done["full"]]) and all(
        json.loads((d / "adapter_config.json").read_text())["r"] == rank for d in done["adapters"]
    ):
        print(f"kept the models of {scratch} (an earlier --keep run)", file=sys.stderr, flush=True)
        return done
    tokenizer = load_tokenizer()
    torch.manual_seed(0)
    base = save_pretrained(load_model(preset, "base", vocab_size=len(tokenizer)), tokenizer, scratch / "base")
    adapters, full = [], []
    for i in range(count):
        torch.manual_seed(i + 1)
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, init_lora_weights=False)
        wrapped = get_peft_model(load_model(str(base), "base"), config)
        wrapped.save_pretrained(str(scratch / f"adapter{i}"))
        adapters.append(scratch / f"adapter{i}")
        merged = PeftModel.from_pretrained(
            load_model(str(base), "base"), str(adapters[-1])
        ).merge_and_unload()
        full.append(save_pretrained(merged, tokenizer, scratch / f"full{i}"))
        print(f"built adapter and full model {i + 1}/{count}", file=sys.stderr, flush=True)
    return {"base": base, "adapters": adapters, "full": full}


class Server:
    """`neobert serve` with ``models`` (NAME=PATH) on a free port of 127.0.0.1."""

    def __init__(self, models: list[str], extra: list[str], timeout: float = 900):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        command = [sys.executable, "-m", "neobert.cli.main", "serve", "--port", str(self.port), *extra]
        for model in models:
            command += ["--model", model]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited while starting:\n{self.process.stdout.read()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not start in time")
            time.sleep(0.5)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, str]:
        return self.request("GET", path)

    def rss(self) -> int:
        """Resident bytes of the server process (it holds the models: --no-model-process)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def memory_row(label: str, models: list[str], names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The server's RSS and the weights' bytes with ``models`` loaded in one process."""
    server = Server(
        models, ["--no-model-process", "--precision", args.precision, "--threads", str(args.threads)]
    )
    try:
        for name in names:  # every model answers once: loaded and run
            status, text = server.request("POST", "/embed", {"texts": ["one request"], "model": name})
            if status != 200:
                raise RuntimeError(f"{name}: {status} {text}")
        listed = json.loads(server.get("/v1/models")[1])["data"]
        return {"served": label, "rss": server.rss(), "weights": sum(card["bytes"] or 0 for card in listed)}
    finally:
        server.stop()


def throughput_row(label: str, models: list[str], names: list[str], args: argparse.Namespace) -> dict:
    """Closed-loop clients spreading one-text requests over ``names`` round robin."""
    server = Server(models, ["--precision", args.precision, "--threads", str(args.threads)])
    texts = request_texts(256, 12)
    latencies: list[float] = []
    failed = [0]
    lock = threading.Lock()
    try:
        for name in names:  # loaded before the clock starts
            server.request("POST", "/embed", {"texts": texts[:4], "model": name})

        def client(index: int, stop: float, record: bool) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            i = index
            while time.perf_counter() < stop:
                body = json.dumps({"texts": [texts[i % len(texts)]], "model": names[i % len(names)]}).encode()
                i += args.concurrency
                start = time.perf_counter()
                try:
                    conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    response.read()
                    ok = response.status == 200
                except OSError:
                    conn.close()
                    conn, ok = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120), False
                if record:
                    with lock:
                        if ok:
                            latencies.append(time.perf_counter() - start)
                        else:
                            failed[0] += 1
            conn.close()

        def drive(seconds: float, record: bool) -> float:
            began = time.perf_counter()
            stop = began + seconds
            threads = [
                threading.Thread(target=client, args=(c, stop, record)) for c in range(args.concurrency)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return time.perf_counter() - began

        drive(args.warmup, False)  # the row's own traffic warms the server (shapes, threads, allocator) first
        seconds = drive(args.duration, True)
        metrics = server.get("/metrics")[1]
    finally:
        server.stop()
    sums = {}
    for line in metrics.splitlines():
        for name in ("neobert_batch_adapters_sum", "neobert_batch_adapters_count"):
            if line.startswith(name + " "):
                sums[name] = float(line.split()[1])
    calls = sums.get("neobert_batch_adapters_count", 0.0)
    return {
        "served": label,
        "requests_per_s": round(len(latencies) / seconds, 2),
        "p50_ms": percentile_ms(latencies, 50),
        "p95_ms": percentile_ms(latencies, 95),
        "failed": failed[0],
        "adapters_per_call": round(sums["neobert_batch_adapters_sum"] / calls, 2) if calls else None,
    }


def memory_rows(base: str, adapters: list[str], full: list[str], counts: list[int], args) -> list[dict]:
    memory = [memory_row("base alone", [base], ["base"], args)]
    for n in counts:
        names = [f"a{i}" for i in range(n)]
        memory.append(memory_row(f"base + {n} adapters", [base, *adapters[:n]], names, args))
        memory.append(memory_row(f"{n} full models", full[:n], [f"f{i}" for i in range(n)], args))
    for row in memory:
        row["rss_ratio"] = round(row["rss"] / memory[0]["rss"], 3)
        row["weights_ratio"] = round(row["weights"] / memory[0]["weights"], 3)
    return memory


def run(args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(n) for n in args.counts.split(",")]
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="several-models-"))
    try:
        built = build(scratch, args.preset, max([*counts, args.spread]), args.rank)
        base = f"base={built['base']}"
        adapters = [f"a{i}={path}" for i, path in enumerate(built["adapters"])]
        full = [f"f{i}={path}" for i, path in enumerate(built["full"])]
        if args.throughput_only:  # the memory rows of the earlier run in --output
            earlier = json.loads((Path(args.output) / "results.json").read_text())
            memory, memory_threads = earlier["memory"], earlier["settings"].get("memory_threads", 0)
        else:
            memory, memory_threads = memory_rows(base, adapters, full, counts, args), args.threads
        k = args.spread
        served = {
            "1 model": ([base], ["base"]),
            f"{k} adapters of one base": ([base, *adapters[:k]], [f"a{i}" for i in range(k)]),
            f"{k} full models": (full[:k], [f"f{i}" for i in range(k)]),
        }
        rounds = [  # the rows interleaved, round after round: a drift of the machine reaches every row alike
            [throughput_row(label, models, names, args) for label, (models, names) in served.items()]
            for _ in range(args.rounds)
        ]
        throughput = []
        for i in range(len(served)):
            runs = sorted((r[i] for r in rounds), key=lambda row: row["requests_per_s"])
            row = runs[(len(runs) - 1) // 2]  # the median round (the lower of two)
            row["rounds_requests_per_s"] = [r[i]["requests_per_s"] for r in rounds]
            throughput.append(row)
        for row in throughput:
            row["vs_one_model"] = round(row["requests_per_s"] / throughput[0]["requests_per_s"], 3)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "scratch", "keep")}
    settings["memory_threads"] = memory_threads
    results = {"machine": machine_summary(), "settings": settings, "memory": memory, "throughput": throughput}
    return publish(results, markdown, args.output)


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    memory_rows = [
        [
            r["served"],
            f"{r['rss'] / 2**20:,.0f}",
            f"{r['rss_ratio']:.2f}x",
            f"{r['weights'] / 2**20:,.1f}",
            f"{r['weights_ratio']:.2f}x",
        ]
        for r in results["memory"]
    ]
    speed_rows = [
        [
            r["served"],
            r["requests_per_s"],
            r["p50_ms"],
            r["p95_ms"],
            f"{r['vs_one_model']:.2f}x",
            r["adapters_per_call"] if r["adapters_per_call"] is not None else "-",
            r["failed"],
            " / ".join(str(v) for v in r.get("rounds_requests_per_s", [r["requests_per_s"]])),
        ]
        for r in results["throughput"]
    ]
    return "\n".join(
        [
            f"# Several models in one service: the {s['preset']} shape, LoRA rank {s['rank']}",
            "",
            f"{results['machine']}; precision {s['precision']}; the server's threads: "
            f"{s.get('memory_threads', s['threads']) or 'measured'} in the memory rows, "
            f"{s['threads'] or 'measured'} in the throughput rows ({s.get('rounds', 1)} rounds, rows interleaved, each "
            f"row's timing after {s.get('warmup', 0):g} s of its own traffic).",
            "",
            "## Memory (one process, everything loaded)",
            "",
            markdown_table(
                ["served", "RSS MiB", "RSS vs base", "weights MiB", "weights vs base"], memory_rows
            ),
            "",
            f"## Throughput ({s['concurrency']} clients, one-text /embed, {s['duration']} s each)",
            "",
            markdown_table(
                [
                    "served",
                    "requests/s",
                    "p50 ms",
                    "p95 ms",
                    "vs 1 model",
                    "adapters per call",
                    "failed",
                    "each round's requests/s",
                ],
                speed_rows,
            ),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="neobert", help="the model shape (neobert: the 250M one)")
    parser.add_argument("--counts", default="1,4,16", help="adapters / full models in the memory rows")
    parser.add_argument(
        "--spread", type=int, default=8, help="adapters / full models the traffic spreads over"
    )
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per throughput row")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds of a row's traffic before its clock"
    )
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds (rows interleaved; median)")
    parser.add_argument(
        "--throughput-only", action="store_true", help="keep the memory rows of --output's results.json"
    )
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", type=int, default=0, help="the server's --threads (0: measured)")
    parser.add_argument("--scratch", help="where the models are written (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--output", help="writes results.json and results.md here")
    results = run(parser.parse_args())
    print(markdown(results))


if __name__ == "__main__":
    main()
