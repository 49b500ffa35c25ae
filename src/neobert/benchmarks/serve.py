"""``neobert bench serve``: a bounded load test of ``neobert serve`` on 127.0.0.1.

For each mode (dynamic batching off, then on) a server process is started on a free port; closed-loop
clients (one thread and one keep-alive connection each) send single-text ``/embed`` requests back to back
at each concurrency for ``duration`` seconds or ``max_requests`` requests, whichever comes first; then the
server is stopped with SIGTERM. Reported per cell: requests/s, p50 / p95 / p99 latency, failed and refused
(503) requests, and the mean number of requests the server merged into one model call (from /metrics).

``overload``: a capacity run (batching on, every concurrency) and then, on a server with a small queue
(``storm_queue``), ``storm_factor`` x ``storm_queue`` clients that resend at once on a 503 (a retry storm)
and the same clients honouring Retry-After. Beside each cell: the CPU the load generator itself used and
the server's (HTTP process and model processes), in cores; on a machine this small the storm's clients
compete with the server for the same cores. The goals (issue 19) are checked in the report.

``compare_threads``: the server's default thread count (measured at start, :mod:`neobert.serving.threads`)
against each pinned ``--threads`` in one run, batching on, ``rounds`` interleaved rounds (every variant
started in turn per round, the order rotated by one each round, so slow drift on a shared machine and
the place in a round touch each alike); each variant's row
pools its rounds, and the report gives the default's rate over the best pinned one's per concurrency
(the issue-24 goal: within 5%). ``texts_per_request`` > 1 sends that many texts in each request. A cell's
``threads`` are the counts its model calls ran on (the server's ``neobert_model_calls{threads}``): the
default adapts them per call to the load.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..common.tables import markdown_table
from ..runtime.hardware import machine_summary
from ..serving.threads import HOLD_S
from .report import publish

T = TypeVar("T")

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
    """Starts `neobert serve` on a free port of 127.0.0.1 (once without, once with dynamic batching; with
    --overload: a capacity run, then a retry storm against a small queue), drives it with closed-loop
    clients, stops it. Every run is bounded in requests and time."""

    model: str = "small"  # model directory or preset (random weights)
    tokenizer: str | None = None  # tokenizer directory (default: the model's own)
    precision: str = "auto"  # the server's --precision
    backend: str = "auto"  # the server's --backend (torch, or onnx for a `neobert export onnx` directory)
    onnx_variant: str = "fp32"  # the server's --onnx-variant
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32])  # closed-loop clients per cell
    duration: float = 10.0  # seconds of measurement per cell (after a short warm-up)
    max_requests: int = 3000  # per cell: the cell also ends after this many requests
    words: int = 16  # words per request text
    max_queue: int = 64  # the server's --max-queue (capacity cells)
    startup_timeout: float = 180.0  # seconds for a server to answer /health
    output: str | None = "docs/benchmarks/serve"  # directory for results.json / results.md ('' : none)
    # the retry storm beside a capacity run (batching on) instead of batching off vs on
    overload: bool = False
    storm_queue: int = 16  # overload: the server's --max-queue during the storms
    storm_factor: int = 4  # overload: storm clients = this x storm_queue
    refusal_delay: float | None = None  # the server's --refusal-delay (default: the server's own)
    model_process: bool = True  # the server runs its model in a process of its own (off: in a thread)
    threads: int = 0  # the server's --threads (0: its default, measured at start)
    # compare the default thread count with each of these pinned --threads in one run (batching on)
    compare_threads: list[int] = field(default_factory=list)
    rounds: int = 1  # compare_threads: interleaved rounds (each variant started in turn per round)
    texts_per_request: int = 1  # texts in each /embed request

    def __post_init__(self) -> None:
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            raise ValueError(f"concurrency must be positive integers, got {self.concurrency!r}")
        if self.duration <= 0 or self.max_requests < 1 or self.words < 1:
            raise ValueError("duration, max_requests and words must be positive")
        if self.storm_queue < 1 or self.storm_factor < 1:
            raise ValueError("storm_queue and storm_factor must be positive")
        if any(not isinstance(n, int) or n < 1 for n in self.compare_threads) or self.rounds < 1:
            raise ValueError(
                f"compare_threads must be positive integers and rounds >= 1, got "
                f"{self.compare_threads!r}, {self.rounds!r}"
            )
        if self.texts_per_request < 1:
            raise ValueError(f"texts_per_request must be positive, got {self.texts_per_request}")


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
    label: str = ""  # overload: capacity | storm | polite
    client_cpu: float | None = None  # cores the load generator used (its CPU seconds / wall seconds)
    server_cpu: float | None = None  # cores the server used, its model processes included
    texts_per_s: float | None = None  # requests/s x texts per request
    # the server's model threads per round ("2/1"): the calls' counts from its metrics ("1: 93%, 2: 7%"
    # where they varied), else the start-up count from /info (older servers)
    threads: str | None = None


class ServerProcess:
    """``neobert serve`` in a child process on a free port of 127.0.0.1."""

    def __init__(
        self,
        config: ServeBenchConfig,
        batching: bool,
        max_queue: int | None = None,
        threads: int | None = None,
        extra: Sequence[str] = (),
    ):
        """``extra``: more `neobert serve` options, after the config's (the last of a repeated one wins)."""
        self.port = _free_port()
        command = _serve_command(config, self.port, batching, max_queue, threads) + list(extra)
        # its output to a file: a pipe nobody reads fills (64 KiB) and blocks a server that logs
        self.log = tempfile.TemporaryFile(mode="w+", prefix="neobert-serve-")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_stop_with(os.getpid()) if sys.platform == "linux" else None,
        )
        started = time.monotonic()
        while not self._healthy():
            if self.process.poll() is not None:
                raise ServerStartError(f"the server exited while starting:\n{self.output()}")
            if time.monotonic() - started > config.startup_timeout:
                said = self.output()[-4000:]
                self.stop()
                raise ServerStartError(
                    f"the server did not answer /health within {config.startup_timeout:.0f} s; "
                    f"its output ends:\n{said}"
                )
            time.sleep(0.2)
        self.start_s = time.monotonic() - started  # seconds from launch to /health (auto: its probe included)

    def output(self) -> str:
        """What the server has written so far (stdout and stderr)."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def _healthy(self) -> bool:
        try:
            return _request(self.port, "GET", "/health")[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        return _request(self.port, "GET", "/metrics")[1]

    def info(self) -> dict[str, Any]:
        return json.loads(_request(self.port, "GET", "/info")[1])

    def cpu_seconds(self) -> float | None:
        """CPU seconds the server and its children (model processes) have used so far (Linux /proc)."""
        return _tree_cpu(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def _serve_command(
    config: ServeBenchConfig, port: int, batching: bool, max_queue: int | None, threads: int | None
) -> list[str]:
    """`neobert serve` for ``config`` on ``port``: only options that differ from the server's defaults, so
    the command also drives older servers."""
    command = [
        sys.executable,
        "-m",
        "neobert.cli.main",
        "serve",
        "--model",
        config.model,
        "--port",
        str(port),
    ]
    command += ["--precision", config.precision, "--max-queue", str(max_queue or config.max_queue)]
    if not batching:
        command.append("--no-batching")
    if config.tokenizer:
        command += ["--tokenizer", config.tokenizer]
    if config.refusal_delay is not None:
        command += ["--refusal-delay", str(config.refusal_delay)]
    if not config.model_process:
        command.append("--no-model-process")
    threads = config.threads if threads is None else threads
    if threads:
        command += ["--threads", str(threads)]
    if config.backend != "auto":
        command += ["--backend", config.backend]
    if config.onnx_variant != "fp32":
        command += ["--onnx-variant", config.onnx_variant]
    return command


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the thread that started it ends


def _stop_with(parent: int) -> Callable[[], None]:
    """For the server's child, between fork and exec (Linux): SIGTERM it when ``parent`` (the thread that
    started it: the benchmarks start servers from the main thread) ends, so a benchmark killed mid-run
    (SIGTERM, SIGKILL, a closed terminal) leaves no server behind, which it did, each holding its model
    and a core's share."""

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it ended before the call above: nothing would signal
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a process and its descendants, from /proc (None elsewhere)."""
    try:
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = _stat(int(entry))
                except OSError:
                    continue
                children.setdefault(int(fields[1]), []).append(int(entry))
        total, stack = 0.0, [pid]
        while stack:
            current = stack.pop()
            fields = _stat(current)
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            stack += children.get(current, [])
        return total
    except (OSError, ValueError, IndexError):
        return None


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, ... (utime and stime at 11 and 12)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


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


def calls_by_placement(metrics_text: str) -> dict[str, float]:
    """Model calls per placement so far, from the ``neobert_model_calls{threads}`` counter: a thread count
    ("2"), or for a pair of runtimes (backend auto) the export's runtime ("openvino fp32"); empty for a
    server without it."""
    counts: dict[str, float] = {}
    prefix = 'neobert_model_calls_total{threads="'
    for line in metrics_text.splitlines():
        if line.startswith(prefix):
            label, value = line[len(prefix) :].split('"', 1)
            counts[label] = float(value.split()[-1])
    return counts


def calls_by_threads(metrics_text: str) -> dict[int, float]:
    """Model calls per thread count so far (:func:`calls_by_placement`'s counts)."""
    return {int(k): v for k, v in calls_by_placement(metrics_text).items() if k.isdigit()}


def threads_used(before: dict[Any, float], after: dict[Any, float]) -> str | None:
    """The thread counts (or placements, :func:`calls_by_placement`) of the calls between two scrapes: "2",
    or each one's share "1: 93%, 2: 7%" (None without calls)."""
    calls = {n: after[n] - before.get(n, 0.0) for n in after}
    calls = {n: c for n, c in sorted(calls.items()) if c > 0}
    total = sum(calls.values())
    if not total:
        return None
    if len(calls) == 1:
        return str(next(iter(calls)))
    return ", ".join(f"{n}: {100 * c / total:.0f}%" for n, c in calls.items())


def run_cell(
    port: int,
    concurrency: int,
    texts: list[str],
    duration: float,
    max_requests: int,
    backoff: bool = True,
    server: ServerProcess | None = None,
    per_request: int = 1,
) -> dict:
    """Closed-loop load: ``concurrency`` clients, each sending its next request when the last answered.

    A client refused with 503 waits the Retry-After seconds when ``backoff`` is on, and resends at once
    when it is off (a retry storm). Counted: latencies of the 200s, refusals, failures (anything else:
    errors, timeouts, other statuses), and the CPU seconds of this process (the load generator) and of
    ``server``.
    """
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
                body = json.dumps(
                    {"texts": [texts[(i + k) % len(texts)] for k in range(per_request)]}
                ).encode()
                i += concurrency * per_request
                start = time.perf_counter()
                conn, status, retry_after = _post(conn, port, body)
                elapsed = time.perf_counter() - start
                with lock:
                    if status == 200:
                        latencies.append(elapsed)
                    else:  # 503: refused (the queue was full); anything else, or no answer: failed
                        counts["refused" if status == 503 else "failed"] += 1
                if status == 503 and backoff:
                    time.sleep(min(float(retry_after or 1), max(0.0, stop_at - time.perf_counter())))
        finally:
            conn.close()

    return {"latencies": latencies, **_run_clients(client, concurrency, server), **counts}


def _run_clients(client: Callable[[int], None], concurrency: int, server: ServerProcess | None) -> dict:
    """Run ``concurrency`` client threads to their end; the wall seconds and the CPU share of this process
    and of ``server`` over them."""
    server_cpu = server.cpu_seconds() if server else None
    cpu, start = _own_cpu(), time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    client_cpu = (_own_cpu() - cpu) / seconds
    if server_cpu is not None:
        after = server.cpu_seconds()
        server_cpu = (after - server_cpu) / seconds if after is not None else None
    return {"seconds": seconds, "client_cpu": client_cpu, "server_cpu": server_cpu}


def _post(
    conn: http.client.HTTPConnection, port: int, body: bytes
) -> tuple[http.client.HTTPConnection, int | None, str | None]:
    """One ``POST /embed``: (the connection to use next, the status or None on a failure, Retry-After). A
    failed connection is replaced, so the client goes on."""
    try:
        conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return conn, response.status, response.getheader("Retry-After")
    except (OSError, http.client.HTTPException):
        conn.close()
        return http.client.HTTPConnection("127.0.0.1", port, timeout=60), None, None


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_cell(result: dict, batching: bool, concurrency: int, merged: float | None, label: str = "") -> Cell:
    latencies = result["latencies"]
    return Cell(
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
        mean_merged=merged,
        label=label,
        client_cpu=round(result["client_cpu"], 2),
        server_cpu=None if result["server_cpu"] is None else round(result["server_cpu"], 2),
    )


def measured_cell(
    server: ServerProcess,
    config: ServeBenchConfig,
    texts: list[str],
    batching: bool,
    concurrency: int,
    backoff: bool = True,
    label: str = "",
) -> Cell:
    before = merged_counts(server.metrics())
    result = run_cell(
        server.port,
        concurrency,
        texts,
        config.duration,
        config.max_requests,
        backoff,
        server,
        config.texts_per_request,
    )
    after = merged_counts(server.metrics())
    calls = after[1] - before[1]
    merged = round((after[0] - before[0]) / calls, 2) if calls else None
    cell = make_cell(result, batching, concurrency, merged, label)
    cell.texts_per_s = round(cell.requests_per_s * config.texts_per_request, 2)
    return cell


def measure_mode(config: ServeBenchConfig, batching: bool, texts: list[str], label: str = "") -> list[Cell]:
    server = ServerProcess(config, batching)
    try:
        run_cell(server.port, max(config.concurrency), texts, min(2.0, config.duration), 200)  # warm-up
        time.sleep(
            HOLD_S
        )  # the server forgets the warm-up's load: each cell starts in the state its own load makes
        return [measured_cell(server, config, texts, batching, c, label=label) for c in config.concurrency]
    finally:
        server.stop()


def measure_storms(config: ServeBenchConfig, texts: list[str]) -> list[Cell]:
    """The storm (clients resend at once on 503) and the same clients honouring Retry-After, on a server
    whose queue is ``storm_queue``."""
    clients = config.storm_factor * config.storm_queue
    server = ServerProcess(config, batching=True, max_queue=config.storm_queue)
    try:
        run_cell(server.port, config.storm_queue, texts, min(2.0, config.duration), 200)  # warm-up
        return [
            measured_cell(server, config, texts, True, clients, backoff=False, label="storm"),
            measured_cell(server, config, texts, True, clients, backoff=True, label="polite"),
        ]
    finally:
        server.stop()


def measure_threads(config: ServeBenchConfig, texts: list[str]) -> tuple[list[Cell], dict[str, list[str]]]:
    """The default against each pinned thread count, ``rounds`` interleaved rounds, batching on: one cell
    per variant and concurrency (its rounds pooled), and what the default chose and why (from /info)."""
    variants = [0, *config.compare_threads]
    runs: dict[tuple[int, int], list[Cell]] = {}
    reasons: dict[str, list[str]] = {}
    for round_ in range(config.rounds):
        for pinned in round_order(variants, round_):
            server = ServerProcess(config, batching=True, threads=pinned)
            try:
                info = server.info()
                label = variant_label(pinned)
                reasons.setdefault(label, []).append(
                    f"{info.get('threads')} thread(s): {info.get('threads_reason')}"
                )
                run_cell(
                    server.port,
                    max(config.concurrency),
                    texts,
                    min(2.0, config.duration),
                    200,
                    per_request=config.texts_per_request,
                )  # warm-up
                time.sleep(
                    HOLD_S
                )  # the default forgets the warm-up's load (threads.LoadMemory) before the cells
                for c in config.concurrency:
                    before = calls_by_threads(server.metrics())
                    cell = measured_cell(server, config, texts, True, c, label=label)
                    used = threads_used(before, calls_by_threads(server.metrics()))
                    cell.threads = used or str(info.get("threads"))
                    runs.setdefault((pinned, c), []).append(cell)
            finally:
                server.stop()
    return [pooled(cells) for cells in runs.values()], reasons


def round_order(variants: list[T], round_: int) -> list[T]:
    """The variants in round ``round_``'s order: a balanced (Williams) design, the zigzag ``0, 1, n-1, 2,
    n-2, ...`` shifted by one each round. Over ``n`` rounds each variant holds each place once (none always
    runs first, right after the last round's server stopped, or last), and for even ``n`` each runs right
    after each other once (none always follows the same neighbour, whose leftovers might slow it)."""
    n = len(variants)
    zigzag = [0]
    for k in range(1, n):
        zigzag.append((k + 1) // 2 if k % 2 else n - k // 2)
    return [variants[(i + round_) % n] for i in zigzag]


def variant_label(pinned: int) -> str:
    return "default" if pinned == 0 else f"--threads {pinned}"


def pooled(cells: list[Cell]) -> Cell:
    """One cell for several rounds of the same variant: rates over the summed time; latency percentiles as
    the median of the rounds' (the latencies themselves are not kept)."""
    if len(cells) == 1:
        return cells[0]
    seconds = sum(c.seconds for c in cells)
    requests = sum(c.requests for c in cells)
    first = cells[0]
    rate = round(requests / seconds, 2)
    per_request = (
        (first.texts_per_s or first.requests_per_s) / first.requests_per_s if first.requests_per_s else 1
    )
    return Cell(
        first.batching,
        first.concurrency,
        requests,
        sum(c.failed for c in cells),
        sum(c.refused for c in cells),
        round(seconds, 3),
        rate,
        *(_median([getattr(c, q) for c in cells]) for q in ("p50_ms", "p95_ms", "p99_ms")),
        _median([c.mean_merged for c in cells]),
        first.label,
        _median([c.client_cpu for c in cells]),
        _median([c.server_cpu for c in cells]),
        round(rate * per_request, 2),
        "/".join(str(c.threads) for c in cells),
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(float(np.median(present)), 2) if present else None


def thread_ratios(cells: list[Cell]) -> dict[str, float | None]:
    """Per concurrency: the default's texts/s over the best pinned variant's (1.0: as good as the best)."""
    out = {}
    for concurrency in sorted({c.concurrency for c in cells}):
        here = [c for c in cells if c.concurrency == concurrency]
        default = next((c.texts_per_s for c in here if c.label == "default"), None)
        pinned = [c.texts_per_s for c in here if c.label != "default" and c.texts_per_s]
        out[str(concurrency)] = round(default / max(pinned), 3) if default and pinned else None
    return out


def overload_goals(cells: list[Cell]) -> dict[str, Any]:
    """Issue 19's goals: storm goodput >= 80% of the capacity at the highest concurrency, the storm's
    accepted p99 <= 2x the capacity p99 there, and no accepted request lost."""
    capacity = max((c for c in cells if c.label == "capacity"), key=lambda c: c.concurrency)
    storm = next(c for c in cells if c.label == "storm")
    goodput = storm.requests_per_s / capacity.requests_per_s if capacity.requests_per_s else None
    p99 = storm.p99_ms / capacity.p99_ms if storm.p99_ms and capacity.p99_ms else None
    return {
        "capacity_concurrency": capacity.concurrency,
        "goodput_ratio": None if goodput is None else round(goodput, 3),
        "goodput_ok": goodput is not None and goodput >= 0.8,
        "p99_ratio": None if p99 is None else round(p99, 3),
        "p99_ok": p99 is not None and p99 <= 2.0,
        "lost": storm.failed,
        "lost_ok": storm.failed == 0,
    }


def threads_markdown(results: dict) -> list[str]:
    """The default thread count against each pinned one: a row per variant and concurrency."""
    config, threads = results["config"], results["threads"]
    ratios = threads["default_over_best_pinned"]
    rows = [
        [
            c["label"],
            c["threads"],
            c["concurrency"],
            c["requests"],
            c["requests_per_s"],
            c["texts_per_s"],
            c["p50_ms"],
            c["p99_ms"],
            c["failed"] + c["refused"],
            c["server_cpu"],
            ratios.get(str(c["concurrency"])) if c["label"] == "default" else None,
        ]
        for c in sorted(results["cells"], key=lambda c: (c["concurrency"], c["label"] != "default"))
    ]
    header = [
        "server",
        "threads",
        "clients",
        "requests",
        "req/s",
        "texts/s",
        "p50 ms",
        "p99 ms",
        "failed + 503",
        "server CPU",
        "default / best pinned",
    ]
    chosen = "; ".join(
        f"{label}: {' | '.join(why)}" for label, why in threads["chosen"].items() if label == "default"
    )
    return [
        f"Thread counts, batching on, {config['texts_per_request']} text(s) per request, "
        f"{config['rounds']} interleaved round(s) pooled (`threads`: per round, the counts the model calls ran on, "
        f"from the server's metrics, with each count's share of the calls where they varied). What the default "
        f"chose at start, per round: {chosen}.",
        "",
        markdown_table(header, rows, align="llrrrrrrrrr"),
    ]


def plan(config: ServeBenchConfig) -> str:
    """What a run of ``config`` will do, in one line (said before the minutes it takes)."""
    concurrency = ", ".join(map(str, config.concurrency))
    what = (
        f"capacity at {concurrency} clients, then a storm of {config.storm_factor * config.storm_queue} "
        f"clients against queue {config.storm_queue}"
        if config.overload
        else f"concurrency {concurrency}, batching off then on"
    )
    if config.compare_threads:
        pinned = ", ".join(map(str, config.compare_threads))
        what = f"default threads vs --threads {pinned} at {concurrency} clients, {config.rounds} round(s)"
    where = f"{config.model}, {config.precision}"
    return f"load test of neobert serve ({where}): {what}, {config.duration:g} s per cell"


def run_serve_bench(config: ServeBenchConfig | dict[str, Any]) -> dict:
    """Both modes at every concurrency; writes results.json / results.md to ``config.output`` if set."""
    if isinstance(config, dict):
        config = ServeBenchConfig(**config)
    texts = request_texts(512, config.words)
    reasons = None
    if config.compare_threads:
        cells, reasons = measure_threads(config, texts)
    elif config.overload:
        cells = measure_mode(config, True, texts, label="capacity") + measure_storms(config, texts)
    else:
        cells = [cell for batching in (False, True) for cell in measure_mode(config, batching, texts)]
    results = {
        "benchmark": "serve",
        "config": asdict(config),
        "machine": {
            "cpu": machine_summary(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "cells": [asdict(cell) for cell in cells],
        "speedup": speedups(cells),
    }
    if config.overload and not config.compare_threads:
        results["goals"] = overload_goals(cells)
    if reasons is not None:
        results["threads"] = {"chosen": reasons, "default_over_best_pinned": thread_ratios(cells)}
    return publish(results, markdown, config.output)


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
        f"`/embed` requests of {config.get('texts_per_request', 1)} text(s) of {config['words']} words, "
        "closed-loop clients on 127.0.0.1, "
        f"{config['duration']:g} s (at most {config['max_requests']} requests) per cell; "
        f"{results['machine']['cpus']} CPUs: {results['machine'].get('cpu', results['machine']['platform'])}.",
        "",
    ]
    if config.get("compare_threads"):
        return "\n".join(lines + threads_markdown(results))
    if config.get("overload"):
        return "\n".join(lines + overload_markdown(results))
    header = [
        "batching",
        "concurrency",
        "requests",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "failed",
        "503",
        "merged/call",
        "client CPU",
        "server CPU",
    ]
    rows = [
        [
            "on" if c["batching"] else "off",
            c["concurrency"],
            c["requests"],
            f"{c['requests_per_s']:.1f}",
            *_as_given(
                c,
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "failed",
                "refused",
                "mean_merged",
                "client_cpu",
                "server_cpu",
            ),
        ]
        for c in results["cells"]
    ]
    lines += markdown_table(header, rows, align="l" + "r" * 11).splitlines()
    lines += [
        "",
        "Speed-up of dynamic batching (requests/s, on / off): "
        + ", ".join(f"concurrency {k}: {v}x" for k, v in results["speedup"].items()),
        "",
    ]
    return "\n".join(lines)


def _as_given(cell: dict, *names: str) -> list[str | None]:
    """Cells printed as measured (rounded when stored); a missing one as tables' n/a."""
    return [None if cell[n] is None else str(cell[n]) for n in names]


def overload_markdown(results: dict) -> list[str]:
    config, goals = results["config"], results["goals"]
    lines = [
        f"Capacity: batching on, queue {config['max_queue']}. Storm: {config['storm_factor']} x "
        f"{config['storm_queue']} clients that resend at once on a 503, queue {config['storm_queue']}; polite: "
        "the same clients waiting Retry-After. CPU columns: cores used by the load generator and by the "
        "server (HTTP process and model processes).",
        "",
    ]
    header = [
        "run",
        "clients",
        "accepted",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "lost",
        "503",
        "503/s",
        "merged/call",
        "client CPU",
        "server CPU",
    ]
    rows = [
        [
            c["label"],
            c["concurrency"],
            c["requests"],
            f"{c['requests_per_s']:.1f}",
            *_as_given(c, "p50_ms", "p95_ms", "p99_ms", "failed", "refused"),
            f"{c['refused'] / c['seconds']:.0f}",
            *_as_given(c, "mean_merged", "client_cpu", "server_cpu"),
        ]
        for c in results["cells"]
    ]
    lines += markdown_table(header, rows, align="l" + "r" * 12).splitlines()
    ok = {True: "met", False: "NOT met"}
    lines += [
        "",
        f"Goals: storm goodput / capacity at concurrency {goals['capacity_concurrency']} = "
        f"{goals['goodput_ratio']} (>= 0.8: {ok[goals['goodput_ok']]}); storm p99 / capacity p99 = "
        f"{goals['p99_ratio']} (<= 2: {ok[goals['p99_ok']]}); accepted requests lost: {goals['lost']} "
        f"({ok[goals['lost_ok']]}).",
        "",
    ]
    return lines
