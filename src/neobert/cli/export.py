"""``neobert export onnx``: a model directory as an ONNX directory (:mod:`neobert.export.onnx`);
``neobert export openvino-int8``: its static int8 for OpenVINO (:mod:`neobert.export.openvino`)."""

from __future__ import annotations

import argparse

from rich.console import Console

from ..export.onnx import QUANTIZATIONS, OnnxExportConfig, run
from ..export.openvino import StaticInt8Config, run_static_int8
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
    parser = add_command(
        formats,
        "openvino-int8",
        openvino_int8,
        "static int8 of an ONNX export for OpenVINO (NNCF), kept only if it keeps the vectors",
        "Quantize a base encoder's `neobert export onnx` directory to static int8 with NNCF (weights and "
        "activations, ranges from your calibration texts, every 5th held out) and write openvino_int8.xml "
        "into it (served by `neobert serve --backend openvino --onnx-variant int8-static`), only if against "
        "fp32 the minimum cosine on the held-out texts reaches --cosine-floor and nDCG@10 on held-out "
        "docstring pairs stays within --ndcg-tolerance; otherwise refused with the numbers. Needs `pip "
        "install 'neobert[openvino]'`.",
    )
    add_options(parser, StaticInt8Config)


def onnx(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    quiet_transformers()
    result = run(config_from_args(OnnxExportConfig, args))
    show(result, console)
    return 0


def openvino_int8(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    check = run_static_int8(config_from_args(StaticInt8Config, args))  # a refusal: its numbers, exit 1
    console.print(f"{check.summary}: accepted, wrote openvino_int8.xml into {args.model}", highlight=False)
    return 0
