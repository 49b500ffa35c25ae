"""``neobert export onnx``: a model directory as an ONNX directory (:mod:`neobert.export.onnx`)."""

from __future__ import annotations

import argparse

from rich.console import Console

from ..export.onnx import QUANTIZATIONS, OnnxExportConfig, run
from ..model.pooling import ONNX_POOLINGS
from .common import add_command, make_console, quiet_transformers, show
from .options import add_options, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export", help="deployable artefacts outside PyTorch", description="Export a model directory."
    )
    formats = export.add_subparsers(title="formats", dest="format", metavar="FORMAT", required=True)
    parser = add_command(
        formats,
        "onnx",
        onnx,
        "ONNX model + tokenizer + pooling config for ONNX Runtime",
        "Export NeoBERT or a BERT-family encoder (a sequence classifier: its logits) to ONNX: model.onnx with "
        "dynamic batch and sequence axes, optionally model_int8.onnx, tokenizer.json and onnx_config.json "
        "(pooling, labels), checked with onnx.checker and against PyTorch on a padded batch. Needs "
        "`pip install 'neobert[onnx]'`.",
    )
    add_options(parser, OnnxExportConfig, choices={"quantize": QUANTIZATIONS, "pooling": ONNX_POOLINGS})


def onnx(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    quiet_transformers()
    result = run(config_from_args(OnnxExportConfig, args))
    show(result, console)
    return 0
