"""``neobert bench serve``: the load test of ``neobert serve`` (joins the ``bench`` command group)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..benchmarks.serve import ServeBenchConfig, run_serve_bench
from .common import make_console


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def bench_serve(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    fields = ("model", "tokenizer", "precision", "concurrency", "duration", "max_requests", "words", "max_queue",
              "output")  # fmt: skip
    config = ServeBenchConfig(
        **{name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    )
    console.print(
        f"load test of neobert serve ({escape(config.model)}, {config.precision}): concurrency "
        f"{', '.join(map(str, config.concurrency))}, {config.duration:g} s per cell, batching off then on",
        highlight=False,
    )
    results = run_serve_bench(config)
    table = Table(title="neobert serve: single-text /embed requests")
    for name in ("batching", "concurrency", "req/s", "p50 ms", "p95 ms", "p99 ms", "failed", "503", "merged"):
        table.add_column(name, justify="right")
    for c in results["cells"]:
        table.add_row(
            "on" if c["batching"] else "off", str(c["concurrency"]), f"{c['requests_per_s']:.1f}",
            str(c["p50_ms"]), str(c["p95_ms"]), str(c["p99_ms"]), str(c["failed"]), str(c["refused"]),
            str(c["mean_merged"]),
        )  # fmt: skip
    console.print(table)
    console.print(
        "speed-up of batching: " + ", ".join(f"x{v} at {k}" for k, v in results["speedup"].items()),
        highlight=False,
    )
    if config.output:
        console.print(f"wrote {escape(config.output)}/results.json and results.md")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    s = commands.add_parser(
        "serve",
        help="load test of neobert serve: req/s and p50/p95/p99 latency, batching on vs off",
        description="Starts `neobert serve` on a free port of 127.0.0.1 (once without, once with dynamic "
        "batching), drives it with closed-loop clients at each concurrency, stops it. Defaults: the "
        "ServeBenchConfig's.",
    )
    s.add_argument("--model", help="model directory or preset (default: small, random weights)")
    s.add_argument("--tokenizer", help="tokenizer directory")
    s.add_argument("--precision", choices=["bf16", "fp32"])
    s.add_argument("--concurrency", type=_ints, help="comma-separated client counts (default 1,8,32)")
    s.add_argument("--duration", type=float, help="seconds per cell (default 10)")
    s.add_argument("--max-requests", type=int, help="requests per cell at most (default 3000)")
    s.add_argument("--words", type=int, help="words per request text (default 16)")
    s.add_argument("--max-queue", type=int, help="the server's queue limit (default 64)")
    s.add_argument("--output", help="directory for results.json / results.md (default docs/benchmarks/serve)")
    s.set_defaults(func=bench_serve)
