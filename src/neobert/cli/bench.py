"""``neobert bench``: the benchmarks.

- ``throughput``: inference tokens/s of NeoBERT beside BERT, RoBERTa and ModernBERT (random weights);
- ``training``: MLM pretraining-step tokens/s and the share of the matmul peak;
- ``encode``: :func:`neobert.inference.encode`'s batching settings (batch size, token budget) on
  variable-length texts, the measurement behind its CPU default;
- ``attention``: the attention kernels torch offers (SDPA, compiled SDPA, chunked matmul + softmax,
  compiled flex_attention) on NeoBERT's head shapes;
- ``precision``: fp32, bf16 and int8 inference (torch and torchao quantization) for tokens/s and cosine to
  fp32;
- ``onnx``: ONNX Runtime fp32 and int8 (``neobert export onnx``) beside the PyTorch fast path on the same
  texts: real tokens/s, ratios, and the distance of each output to PyTorch fp32;
- ``serve``: a load test of ``neobert serve`` (requests/s, p50/p95/p99) with and without dynamic batching.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from rich import box
from rich.console import Console
from rich.table import Table

from ..benchmarks.attention import AttentionBenchConfig
from ..benchmarks.attention import markdown as attention_markdown
from ..benchmarks.attention import run as run_attention
from ..benchmarks.encode import EncodeBenchConfig
from ..benchmarks.encode import run as run_encode
from ..benchmarks.onnx import OnnxBenchConfig
from ..benchmarks.onnx import markdown as onnx_markdown
from ..benchmarks.onnx import run as run_onnx
from ..benchmarks.precision import PrecisionBenchConfig
from ..benchmarks.precision import markdown as precision_markdown
from ..benchmarks.precision import run as run_precision
from ..benchmarks.report import markdown as throughput_markdown
from ..benchmarks.throughput import BenchConfig
from ..benchmarks.throughput import run as run_throughput
from ..benchmarks.training import TrainBenchConfig
from ..benchmarks.training import markdown as training_markdown
from ..benchmarks.training import run as run_training
from ..config import PRECISIONS, PRESETS
from . import bench_serve
from .common import CLIError, add_command, make_console, quiet_transformers
from .options import add_options, config_from_args

COMMANDS = {  # name: (config class, help, description)
    "throughput": (
        BenchConfig,
        "inference tokens/s by model and sequence length",
        "Inference tokens/s by model and sequence length, best batch size per cell, models interleaved; "
        "reports the achieved share of the machine's matmul rate and peak memory. Models are built from their "
        "published shapes with random weights: nothing is downloaded.",
    ),
    "training": (
        TrainBenchConfig,
        "tokens/s, MFU and peak memory of the pretraining step of the training core",
        "Whole pretraining steps of the product's training core (packed rows with per-document attention, 20% "
        "masking, forward, backward, clipping, AdamW) per preset and dtype; MFU against the matmul rate "
        "measured in the same run, or --peak-tflops.",
    ),
    "encode": (
        EncodeBenchConfig,
        "neobert.inference.encode tokens/s by batch size and token budget",
        "Real tokens/s of neobert.inference.encode on synthetic variable-length texts, for each batch size "
        "without a token budget and each --max-tokens budget (at --max-tokens-batch-size), beside the library "
        "default; settings interleaved in one process, median over rounds.",
    ),
    "precision": (
        PrecisionBenchConfig,
        "fp32 / bf16 / int8 inference: tokens/s and embedding cosine to fp32",
        "Inference precisions side by side in one process on rows of real text: tokens/s, the ratio to bf16, "
        "and the cosine of mean-pooled embeddings to fp32 (an int8 path is worth keeping only above 0.99 and "
        "faster than bf16). The torchao variants need `pip install 'neobert[quantization]'`.",
    ),
    "attention": (
        AttentionBenchConfig,
        "attention kernels (SDPA, compiled, matmul+softmax, flex_attention): TFLOP/s by length",
        "softmax(QK^T/sqrt(d))V in bf16 by each kernel torch offers, on NeoBERT's head shapes, checked against "
        "float32 and timed interleaved, beside the matmul peak.",
    ),
    "onnx": (
        OnnxBenchConfig,
        "ONNX Runtime fp32 / int8 beside the PyTorch fast path: tokens/s, ratios, parity",
        "Exports the model (a preset is saved first) with `neobert export onnx --quantize int8`, then runs "
        "PyTorch fp32 (the fast path), optionally bf16, and ONNX Runtime fp32 and int8 on the same batches of "
        "stdlib-corpus texts of mixed lengths, interleaved, with the same thread count: real tokens/s, the "
        "ratio to PyTorch fp32, and each output's max abs difference and cosine to PyTorch fp32. Needs "
        "`pip install 'neobert[onnx]'`.",
    ),
}
CHOICES = {"dtype": ("auto", "bf16", "fp32"), "precision": PRECISIONS}


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks", description="Benchmarks.")
    commands = bench.add_subparsers(title="benchmarks", dest="benchmark", metavar="BENCHMARK", required=True)
    runners = {
        "throughput": throughput,
        "training": training,
        "encode": encode,
        "precision": _report(run_precision, precision_markdown, PrecisionBenchConfig),
        "onnx": _report(run_onnx, onnx_markdown, OnnxBenchConfig),
        "attention": _report(run_attention, attention_markdown, AttentionBenchConfig),
    }
    for name, (config, help_text, description) in COMMANDS.items():
        parser = add_command(commands, name, runners[name], help_text, description)
        add_options(parser, config, rename={"length_range": "range"}, choices=CHOICES)
        parser.set_defaults(config_class=config)
    bench_serve.register(commands)  # `bench serve` lives in its own module


def throughput(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    quiet_transformers()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CLIError("--device cuda, but torch sees no CUDA device")
    results = run_throughput(config_from_args(BenchConfig, args))
    console.print(_table(results))
    summary = throughput_markdown(results).split("\n\n")
    for paragraph in summary[-2:]:
        if paragraph.startswith(("NeoBERT", "Unpadded")):
            console.print(paragraph.strip(), highlight=False)
    if args.output:
        console.print(f"results written to {args.output}/results.{{json,csv,md,png}}", highlight=False)
    return 0


def training(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    unknown = [d for d in args.dtypes if d not in ("fp32", "bf16")]
    if unknown:
        raise CLIError(f"--dtypes must be fp32 and/or bf16, got {', '.join(unknown)}")
    missing = [p for p in args.presets if p not in PRESETS]
    if missing:
        raise CLIError(f"--presets: unknown {', '.join(missing)}; available: {', '.join(PRESETS)}")
    if args.micro_batch_size and args.rows % args.micro_batch_size:
        raise CLIError(f"--rows {args.rows} is not a multiple of --micro-batch-size {args.micro_batch_size}")
    bench = config_from_args(TrainBenchConfig, args, warmup=max(1, args.warmup))
    console.print(training_markdown(run_training(bench)), highlight=False)
    return 0


def encode(args: argparse.Namespace, console: Console | None = None) -> int:
    console = make_console(console)
    quiet_transformers()
    results = run_encode(config_from_args(EncodeBenchConfig, args))
    console.print(_encode_table(results))
    fastest = max(results["settings"], key=lambda r: r["real_tokens_per_s"])
    console.print(
        f"baseline: {results['baseline']}; fastest: {fastest['label']} ({fastest['ratio']:.2f}x); "
        f"library default: {results['default']}",
        highlight=False,
    )
    if args.output:
        console.print(f"results written to {args.output}/results.{{json,md}}", highlight=False)
    return 0


def _report(run: Callable[[Any], dict], markdown: Callable[[dict], str], config_class: type) -> Callable:
    """The command of a benchmark whose report is its Markdown: run it, print that, say where it went."""

    def command(args: argparse.Namespace, console: Console | None = None) -> int:
        console = make_console(console)
        quiet_transformers()
        results = run(config_from_args(config_class, args))
        console.print(markdown(results), highlight=False, soft_wrap=True)
        if args.output:
            console.print(f"results written to {args.output}/results.{{json,md}}", highlight=False)
        return 0

    return command


def _encode_table(results: dict) -> Table:
    texts, model = results["texts"], results["model"]
    table = Table(
        title=f"encode, {model['name']} {model['precision']}: {texts['count']} texts, "
        f"{texts['real_tokens']:,} real tokens ({texts['min']}-{texts['max']} per text)",
        box=box.SIMPLE_HEAD,
    )
    for name in ("batch", "budget", "batches", "padded", "pad/real", "real tok/s", "ratio"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("note", min_width=8)
    for r in results["settings"]:
        table.add_row(
            str(r["batch_size"]),
            str(r["max_tokens"] or "none"),
            str(r["batches"]),
            f"{r['padded_tokens']:,}",
            f"{r['padding']:.2f}",
            f"{r['real_tokens_per_s']:,.0f}",
            f"{r['ratio']:.2f}x",
            r["note"],
        )
    return table


def _table(results: dict) -> Table:
    lengths = sorted({r["length"] for r in results["fixed"]})
    table = Table(title=f"tokens/s ({results['config']['dtype']}; % of matmul peak)")
    table.add_column("model")
    for n in lengths:
        table.add_column(str(n), justify="right")
    found = {(r["model"], r["length"]): r for r in results["fixed"]}
    for model in dict.fromkeys(r["model"] for r in results["fixed"]):
        cells = []
        for n in lengths:
            r = found.get((model, n))
            ok = r is not None and "tokens_per_s" in r
            cells.append(f"{r['tokens_per_s']:,.0f} ({100 * r['peak_fraction']:.0f}%)" if ok else "-")
        table.add_row(model, *cells)
    for r in results.get("realistic", []):
        table.add_row(f"{r['model']} realistic {r['mode']}", f"{r['real_tokens_per_s']:,.0f} real tok/s")
    return table
