"""``neobert doctor``: this machine's versions, CPU flags and GPU, every accelerated path's first-use check
and relative speed, and what ``auto`` picks here (:mod:`neobert.benchmarks.doctor`)."""

from __future__ import annotations

import argparse
import json

from ..benchmarks.doctor import diagnose
from ..runtime.hardware import cpu_kind
from .common import add_command, make_console, note, say

DESCRIPTION = (
    "Runs every accelerated path's first-use check (the same the library runs before using it) against its "
    "reference path, times it on a small input, and shows what precision and kernels `auto` takes here for "
    "inference and training."
)


def _main(args: argparse.Namespace) -> int:
    if args.cpu_kind:
        print(cpu_kind())
        return 0
    if args.json:
        print(json.dumps(diagnose(args.compile, model=args.model).as_dict(), indent=2))
        return 0
    console = make_console()
    with console.status("checking") as status:
        report = diagnose(
            args.compile, progress=lambda what: status.update(f"checking {what}"), model=args.model
        )
    say(report.markdown(), console)
    if report.failed:
        note(f"{', '.join(report.failed)} (auto uses the reference path instead)", console, "failed checks")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    help = "check this machine: versions, CPU flags, accelerated paths, what auto picks"
    parser = add_command(subparsers, "doctor", _main, help, DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for machines)")
    what = (
        "print only this CPU's kind and stop (maker, widest vector ISA, bf16 units: e.g. intel-avx512-bf16-amx, "
        "amd-avx2), the folder name of its tables in docs/benchmarks/runtimes/"
    )
    parser.add_argument("--cpu-kind", action="store_true", help=what)
    what = "also check compiled blocks on the CPU (~30 s of compilation)"
    parser.add_argument("--compile", action="store_true", help=what)
    what = (
        "a `neobert export onnx` directory: also measure which runtime `--backend auto` takes for it, and why"
    )
    parser.add_argument("--model", default=None, help=what)
