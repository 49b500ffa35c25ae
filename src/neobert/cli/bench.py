"""``neobert bench``: the benchmarks, one subcommand each; its options are the fields of the benchmark's
config (:mod:`neobert.benchmarks`), its description that config's docstring, its report the benchmark's
Markdown.

- ``throughput``: inference tokens/s of NeoBERT beside BERT, RoBERTa and ModernBERT (random weights);
- ``training``: MLM pretraining-step tokens/s and the share of the matmul peak;
- ``encode``: :func:`neobert.inference.run.encode`'s batching settings (batch size, token budget) on
  variable-length texts, the measurement behind its CPU default;
- ``attention``: the attention kernels torch offers on NeoBERT's head shapes;
- ``precision``: fp32, bf16 and int8 inference for tokens/s and cosine to fp32;
- ``onnx``: ONNX Runtime fp32 and int8 beside the PyTorch fast path: tokens/s, ratios, parity;
- ``jobs``: corpus embedding and data preparation, the local engine beside the Ray engine;
- ``serve``: a load test of ``neobert serve`` (requests/s, p50/p95/p99) with and without dynamic batching.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from ..benchmarks import attention, encode, jobs, onnx, precision, report, serve, throughput, training
from ..common.config import PRECISIONS
from .common import add_command, make_console, quiet_transformers, say
from .options import config_from_args

COMMANDS = {  # name: (config class, run, its Markdown report)
    "throughput": (throughput.BenchConfig, throughput.run, report.markdown),
    "training": (training.TrainBenchConfig, training.run, training.markdown),
    "encode": (encode.EncodeBenchConfig, encode.run, encode.markdown),
    "precision": (precision.PrecisionBenchConfig, precision.run, precision.markdown),
    "attention": (attention.AttentionBenchConfig, attention.run, attention.markdown),
    "onnx": (onnx.OnnxBenchConfig, onnx.run, onnx.markdown),
    "serve": (serve.ServeBenchConfig, serve.run_serve_bench, serve.markdown),
    "jobs": (jobs.JobsBenchConfig, jobs.run, jobs.markdown),
}
HELP = {
    "throughput": "inference tokens/s by model and sequence length",
    "training": "tokens/s, MFU and peak memory of the pretraining step of the training core",
    "encode": "neobert.inference.run.encode (or an export's) tokens/s by batch size and token budget",
    "precision": "fp32 / bf16 / int8 inference: tokens/s and embedding cosine to fp32",
    "attention": "attention kernels (SDPA, compiled, matmul+softmax, flex_attention): TFLOP/s by length",
    "onnx": "ONNX Runtime fp32 / int8 beside the PyTorch fast path: tokens/s, ratios, parity",
    "serve": "load test of neobert serve: req/s and p50/p95/p99 latency, batching on vs off, or --overload",
    "jobs": "corpus embedding and data preparation: local engine beside Ray (workers, two nodes), rates and ratios",
}
CHOICES = {"dtype": ("auto", "bf16", "fp32"), "precision": PRECISIONS}
PLANS = {"serve": serve.plan}  # said before a run that takes minutes


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks", description="Benchmarks.")
    commands = bench.add_subparsers(title="benchmarks", dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (config, run, markdown) in COMMANDS.items():
        command = _command(config, run, markdown, PLANS.get(name))
        rename = {"length_range": "range"}
        add_command(commands, name, command, HELP[name], config=config, rename=rename, choices=CHOICES)


def _command(config_class: type, run: Callable[[Any], dict], markdown: Callable[[dict], str], plan=None):
    """Run the benchmark, print its Markdown report, say where the results went."""

    def command(args: argparse.Namespace, console: Console | None = None) -> int:
        console = make_console(console)
        quiet_transformers()
        config = config_from_args(config_class, args)
        if plan is not None:
            say(plan(config), console)
        say(markdown(run(config)), console)
        if config.output:
            say(f"results written to {config.output}/", console)
        return 0

    return command
