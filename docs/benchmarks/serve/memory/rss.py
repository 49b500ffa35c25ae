"""RSS of both server processes around bursts of the largest answers allowed (issue 31, item 1).

    python docs/benchmarks/serve/memory/rss.py [--model small] [--bursts 3] [--clients 6] [--output DIR]

For each setting of ``--release-memory`` (on, the default; then off) a ``neobert serve`` is started on a free
port of 127.0.0.1; warmed up (two of the largest answers one after another, then ten small requests); its
warm idle RSS is read (the HTTP process and the model process, from /proc); then ``bursts`` times
``clients`` clients ask at once for the largest ``/embed_all`` answer the budget allows (JSON floats:
``max_answer_bytes`` / (window x hidden x 20 bytes) texts, each longer than the window), the peak RSS
sampled every 50 ms; after ``settle`` seconds idle the RSS is read again. The goal: settled within 15% of
the warm idle RSS. Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from neobert.benchmarks.serve import WORDS, _free_port, _request, _stat
from neobert.common.io import write_json, write_text
from neobert.common.memory import rss_bytes
from neobert.common.tables import markdown_table
from neobert.runtime.hardware import machine_summary

MB = 1e6


def start(model: str, release: bool, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "neobert.cli.main", "serve", "--model", model, "--port", str(port),
               "--precision", "fp32", "--threads", "1", *([] if release else ["--no-release-memory"])]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if _request(port, "GET", "/health")[0] == 200:
                return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("the server did not start")


def model_pid(pid: int) -> int:
    """The HTTP process's child: the model process."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat(int(entry.name))[1]) == pid:
                    return int(entry.name)
            except OSError:
                continue
    raise RuntimeError("no model process")


def largest_request(info: dict) -> bytes:
    """The largest /embed_all answer the budget allows, as JSON floats: texts longer than the window."""
    window, hidden = info["max_input_tokens"], info["dimensions"]
    count = min(info["limits"]["max_texts"], info["limits"]["max_answer_bytes"] // (window * hidden * 20))
    text = " ".join(WORDS[i % len(WORDS)] for i in range(window * 2))
    return json.dumps({"inputs": [text] * count}).encode()


def sample(pids: dict[str, int], stop: threading.Event, peaks: dict[str, int]) -> None:
    while not stop.is_set():
        for name, pid in pids.items():
            peaks[name] = max(peaks.get(name, 0), rss_bytes(pid))
        time.sleep(0.05)


def burst(port: int, body: bytes, clients: int) -> list[int]:
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(_request(port, "POST", "/embed_all", body)[0]))
               for _ in range(clients)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def measure(model: str, release: bool, bursts: int, clients: int, settle: float) -> dict:
    port = _free_port()
    server = start(model, release, port)
    try:
        pids = {"http": server.pid, "model": model_pid(server.pid)}
        info = json.loads(_request(port, "GET", "/info")[1])
        body = largest_request(info)
        for _ in range(2):
            assert _request(port, "POST", "/embed_all", body)[0] == 200
        for _ in range(10):
            _request(port, "POST", "/embed", json.dumps({"texts": ["a short warm-up text"]}).encode())
        time.sleep(settle)
        idle = {name: rss_bytes(pid) for name, pid in pids.items()}
        peaks: dict[str, int] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=sample, args=(pids, stop, peaks))
        sampler.start()
        statuses = [s for _ in range(bursts) for s in burst(port, body, clients)]
        stop.set()
        sampler.join()
        time.sleep(settle)
        settled = {name: rss_bytes(pid) for name, pid in pids.items()}
        answer = len(_request(port, "POST", "/embed_all", body)[1])
        return {"release_memory": release, "idle": idle, "peak": peaks, "settled": settled,
                "statuses": sorted(set(statuses)), "answer_bytes": answer, "request_texts": len(json.loads(body)["inputs"]),
                "limits": info["limits"], "window": info["max_input_tokens"], "hidden": info["dimensions"]}  # fmt: skip
    finally:
        server.terminate()
        server.wait(60)


def markdown(rows: list[dict], command: str) -> str:
    table = []
    for row in rows:
        for name in ("http", "model"):
            idle, peak, settled = row["idle"][name], row["peak"][name], row["settled"][name]
            table.append(["on" if row["release_memory"] else "off", name, idle / MB, peak / MB, settled / MB,
                          f"{settled / idle:.2f}", "yes" if settled <= 1.15 * idle else "**no**"])  # fmt: skip
    first = rows[0]
    return "\n".join(
        [
            "# RSS around bursts of the largest answers",
            "",
            f"```bash\n{command}\n```",
            "",
            f"Machine: {machine_summary()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
            f"{os.getloadavg()[0]:.1f} at the end (a machine shared with other work: RSS is this server's own, but "
            "timings are not measured here).",
            "",
            f"Each request: {first['request_texts']} texts cut to the window ({first['window']} tokens x "
            f"{first['hidden']} numbers), answered as JSON floats: {first['answer_bytes']:,} bytes (budget "
            f"{first['limits']['max_answer_bytes']:,}).",
            "",
            markdown_table(
                [
                    "release_memory",
                    "process",
                    "warm idle MB",
                    "peak MB",
                    "settled MB",
                    "settled / idle",
                    "within 15%",
                ],
                table,
                digits=1,
            ),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--output", default=str(Path(__file__).parent))
    args = parser.parse_args()
    rows = [measure(args.model, release, args.bursts, args.clients, args.settle) for release in (True, False)]
    command = "python docs/benchmarks/serve/memory/rss.py " + " ".join(sys.argv[1:])
    write_json(Path(args.output) / "results.json", {"command": command, "machine": machine_summary(), "rows": rows},
               indent=2)  # fmt: skip
    text = markdown(rows, command.strip())
    write_text(Path(args.output) / "results.md", text)
    print(text)


if __name__ == "__main__":
    main()
