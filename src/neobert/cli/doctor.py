"""``neobert doctor``: this machine's versions, CPU flags and GPU, every accelerated path's first-use check
and relative speed, and what ``auto`` picks here (:mod:`neobert.benchmarks.doctor`)."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from ..benchmarks.doctor import DoctorReport, diagnose
from .common import add_command, make_console


def show(report: DoctorReport, console) -> None:
    found = ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)
    console.print(f"[bold]versions[/]: {found}", highlight=False, soft_wrap=True)
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in report.cpu["flags"].items())
    console.print(
        f"[bold]cpu[/]: {report.cpu['model']}, {report.cpu['cores']} threads, torch capability "
        f"{report.cpu['capability']}; {flags}",
        highlight=False,
        soft_wrap=True,
    )
    gpu = report.gpu
    console.print(
        "[bold]gpu[/]: "
        + (
            f"{gpu['name']} (sm {gpu['capability']}, {gpu['memory_gb']} GB, bf16 {gpu['bf16']})"
            if gpu
            else "none"
        ),
        highlight=False,
    )
    table = Table(title="accelerated paths: first-use check against the reference; speed on a small input")
    for column in ("path", "device", "dtype", "status", "max error / tol.", "check s", "speed", "note"):
        table.add_column(column, no_wrap=column in ("path", "status"))
    for row in report.backends:
        c = row.check
        status = "ok" if c.ok else ("FAILED" if c.available else "not available")
        error = "-" if c.max_error is None else f"{c.max_error:.1e} / {c.tolerance:.0e}"
        speed = f"{row.speedup:.2f}x {row.reference}" if row.speedup is not None else "-"
        note = (c.error or "").splitlines()[0][:60] if c.error else ""
        table.add_row(c.name, c.device, c.dtype, status, error, f"{c.seconds:.2f}", speed, note)
    console.print(table)
    table = Table(title="what auto picks here")
    for column in ("use", "preset", "device", "precision", "why", "attention", "fused AdamW"):
        table.add_column(column)
    for row in report.auto:
        table.add_row(row["use"], row["preset"], row["device"], row["precision"], row["why"], row["attention"],
                      _yes(row["fused_adamw"]) if row["use"] == "training" else "-")  # fmt: skip
    console.print(table)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _main(args: argparse.Namespace) -> int:
    console = make_console()
    if args.json:
        print(json.dumps(diagnose(args.compile).as_dict(), indent=2))
        return 0
    with console.status("checking") as status:
        report = diagnose(args.compile, progress=lambda what: status.update(f"checking {what}"))
    show(report, console)
    failed = [row.check.name for row in report.backends if row.check.available and not row.check.ok]
    if failed:
        console.print(f"[yellow]failed checks[/]: {', '.join(failed)} (auto uses the reference path instead)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "doctor",
        _main,
        help="check this machine: versions, CPU flags, accelerated paths, what auto picks",
        description="Runs every accelerated path's first-use check (the same the library runs before using "
        "it) against its reference path, times it on a small input, and shows what precision and kernels "
        "`auto` takes here for inference and training.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for machines)")
    parser.add_argument(
        "--compile", action="store_true", help="also check compiled blocks on the CPU (~30 s of compilation)"
    )
