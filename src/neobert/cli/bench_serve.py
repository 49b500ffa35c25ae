"""``neobert bench serve``: the load test of ``neobert serve`` (joins the ``bench`` command group). Options
are the fields of :class:`neobert.benchmarks.serve.ServeBenchConfig` (their comments are the help)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..benchmarks.serve import ServeBenchConfig, run_serve_bench
from ..config import PRECISIONS
from .common import add_command, make_console
from .options import add_options, config_from_args


def bench_serve(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    config = config_from_args(ServeBenchConfig, args)
    plan = (
        f"capacity at {', '.join(map(str, config.concurrency))} clients, then a storm of "
        f"{config.storm_factor * config.storm_queue} clients against queue {config.storm_queue}"
        if config.overload
        else f"concurrency {', '.join(map(str, config.concurrency))}, batching off then on"
    )
    console.print(
        f"load test of neobert serve ({escape(config.model)}, {config.precision}): {plan}, "
        f"{config.duration:g} s per cell",
        highlight=False,
    )
    results = run_serve_bench(config)
    table = Table(title="neobert serve: single-text /embed requests")
    names = ("run", "clients", "req/s", "p50 ms", "p95 ms", "p99 ms", "failed", "503", "merged", "client CPU",
             "server CPU")  # fmt: skip
    for name in names:
        table.add_column(name, justify="right")
    for c in results["cells"]:
        run = c["label"] or ("batching on" if c["batching"] else "batching off")
        table.add_row(
            run, str(c["concurrency"]), f"{c['requests_per_s']:.1f}", str(c["p50_ms"]), str(c["p95_ms"]),
            str(c["p99_ms"]), str(c["failed"]), str(c["refused"]), str(c["mean_merged"]), str(c["client_cpu"]),
            str(c["server_cpu"]),
        )  # fmt: skip
    console.print(table)
    if config.overload:
        console.print(f"goals: {results['goals']}", highlight=False)
    else:
        console.print(
            "speed-up of batching: " + ", ".join(f"x{v} at {k}" for k, v in results["speedup"].items()),
            highlight=False,
        )
    if config.output:
        console.print(f"wrote {escape(config.output)}/results.json and results.md")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    s = add_command(
        commands,
        "serve",
        bench_serve,
        help="load test of neobert serve: req/s and p50/p95/p99 latency, batching on vs off, or --overload",
        description="Starts `neobert serve` on a free port of 127.0.0.1 (once without, once with dynamic "
        "batching; with --overload: a capacity run, then a retry storm against a small queue), drives it "
        "with closed-loop clients, stops it. Every run is bounded in requests and time.",
    )
    add_options(s, ServeBenchConfig, choices={"precision": PRECISIONS})
