"""``neobert bench``: the benchmarks.

- ``throughput``: inference tokens/s of NeoBERT beside BERT, RoBERTa and ModernBERT (random weights);
- ``training``: MLM pretraining-step tokens/s and the share of the matmul peak;
- ``encode``: :func:`neobert.inference.encode`'s batching settings (batch size, token budget) on
  variable-length texts, the measurement behind its CPU default;
- ``attention``: the attention kernels torch offers (SDPA, compiled SDPA, chunked matmul + softmax,
  compiled flex_attention) on NeoBERT's head shapes;
- ``precision``: fp32, bf16 and int8 inference (torch and torchao quantization) for tokens/s and cosine to
  fp32;
- ``serve``: a load test of ``neobert serve`` (requests/s, p50/p95/p99) with and without dynamic batching.
"""

from __future__ import annotations

import argparse

from rich import box
from rich.console import Console
from rich.table import Table

from . import bench_serve
from .common import CLIError, make_console, quiet_transformers


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from err
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    try:
        return int(lo), int(hi)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected LO,HI, got {text!r}") from err


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks", description="Benchmarks.")
    commands = bench.add_subparsers(title="benchmarks", dest="benchmark", metavar="BENCHMARK", required=True)
    p = commands.add_parser(
        "throughput",
        help="inference tokens/s by model and sequence length",
        description="Inference tokens/s by model and sequence length, best batch size per cell, models "
        "interleaved; reports the achieved share of the machine's matmul rate and peak memory. Models are "
        "built from their published shapes with random weights: nothing is downloaded.",
    )
    p.add_argument(
        "--models",
        type=_names,
        default="neobert,modernbert-base,bert-base,roberta-base",
        help="comma-separated: neobert, neobert-<preset>, neobert-unfused, bert-base/large, roberta-base/large, "
        "modernbert-base/large, bert-tiny, modernbert-tiny",
    )
    p.add_argument("--lengths", type=_ints, default="128,512,1024", help="sequence lengths")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="weights and activations dtype")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--output", help="directory for results.json, .csv, .md and .png")
    p.add_argument(
        "--batch-tokens",
        type=_ints,
        default="2048,4096,8192",
        help="tokens per batch to try: the batch sizes searched are these // length",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (the median is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed forwards before timing")
    p.add_argument("--time-budget", type=float, help="seconds; cells not started by then are skipped")
    p.add_argument("--compile", action="store_true", help="torch.compile every model first")
    p.add_argument(
        "--realistic", action="store_true", help="also run a variable-length batch, padded/unpadded"
    )
    p.add_argument("--realistic-range", type=_range, default="16,512", help="LO,HI of the uniform lengths")
    p.add_argument("--lengths-file", help="realistic lengths read from this file, one integer per line")
    p.add_argument("--realistic-tokens", type=int, default=8192, help="real tokens in the realistic batch")
    p.add_argument(
        "--peak-sizes", type=_ints, default="2048,4096", help="square GEMM sizes for the matmul peak"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=throughput)

    t = commands.add_parser(
        "training",
        help="tokens/s, MFU and peak memory of the pretraining step of the training core",
        description="Whole pretraining steps of the product's training core (packed rows with per-document "
        "attention, 20% masking, forward, backward, clipping, AdamW) per preset and dtype; MFU against the "
        "matmul rate measured in the same run, or --peak-tflops.",
    )
    t.add_argument("--presets", type=_names, default="tiny,120m", help="comma-separated NeoBERT presets")
    t.add_argument("--dtypes", type=_names, default="fp32,bf16", help="fp32 and/or bf16 (autocast)")
    t.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    t.add_argument("--seq-len", type=int, default=512, help="row length (packed documents)")
    t.add_argument("--rows", type=int, default=8, help="rows per optimizer step")
    t.add_argument("--micro-batch-size", type=int, help="rows per forward (default: all rows at once)")
    t.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    t.add_argument("--warmup", type=int, default=2, help="untimed first steps (compilation happens there)")
    t.add_argument("--compile", action="store_true", help="compile the encoder blocks")
    t.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    t.add_argument("--peak-tflops", type=float, help="MFU denominator (default: the measured matmul peak)")
    t.add_argument(
        "--peak-sizes", type=_ints, default="2048,4096", help="square GEMM sizes for the matmul peak"
    )
    t.add_argument("--output", help="directory for results.json and results.md")
    t.set_defaults(func=training)

    e = commands.add_parser(
        "encode",
        help="neobert.inference.encode tokens/s by batch size and token budget",
        description="Real tokens/s of neobert.inference.encode on synthetic variable-length texts, for each "
        "batch size without a token budget and each --max-tokens budget (at --max-tokens-batch-size), "
        "beside the library default; settings interleaved in one process, median over rounds.",
    )
    e.add_argument(
        "--model", default="neobert", help="preset (random weights, default tokenizer) or model directory"
    )
    e.add_argument("--texts", type=int, default=96, help="number of texts")
    e.add_argument(
        "--range",
        dest="length_range",
        type=_range,
        default="16,512",
        help="LO,HI of the uniform token counts",
    )
    e.add_argument("--lengths-file", help="token counts drawn from this file instead, one integer per line")
    e.add_argument(
        "--batch-sizes", type=_ints, default="8,32", help="batch sizes measured without a token budget"
    )
    e.add_argument(
        "--max-tokens", type=_ints, default="1024,2048,4096,8192", help="padded-token budgets per batch"
    )
    e.add_argument(
        "--max-tokens-batch-size", type=int, default=256, help="batch size used with the --max-tokens budgets"
    )
    e.add_argument(
        "--precision",
        choices=("bf16", "fp32"),
        default="bf16",
        help="bf16: the fast path (bf16 weights, unpadded attention); fp32: the model as loaded",
    )
    e.add_argument("--repeats", type=int, default=2, help="timed rounds (the median is reported)")
    e.add_argument("--seed", type=int, default=0, help="seed of the lengths and texts")
    e.add_argument("--output", help="directory for results.json and results.md")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=encode)

    from ..benchmarks.precision import DEFAULT_VARIANTS, VARIANTS

    q = commands.add_parser(
        "precision",
        help="fp32 / bf16 / int8 inference: tokens/s and embedding cosine to fp32",
        description="Inference precisions side by side in one process on rows of real text: tokens/s, the "
        "ratio to bf16, and the cosine of mean-pooled embeddings to fp32 (an int8 path is worth keeping only "
        "above 0.99 and faster than bf16). The torchao variants need `pip install 'neobert[quantization]'`.",
    )
    q.add_argument(
        "--model", default="neobert", help="preset (random weights) or any encoder directory (real weights)"
    )
    q.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (default: the model's own)")
    q.add_argument(
        "--variants",
        type=_names,
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, from: {', '.join(VARIANTS)}",
    )
    q.add_argument("--length", type=int, default=512, help="tokens per row")
    q.add_argument("--batch", type=int, default=4, help="rows per forward")
    q.add_argument("--repeats", type=int, default=3, help="timed rounds (the median is reported)")
    q.add_argument("--output", help="directory for results.json and results.md")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=precision)

    a = commands.add_parser(
        "attention",
        help="attention kernels (SDPA, compiled, matmul+softmax, flex_attention): TFLOP/s by length",
        description="softmax(QK^T/sqrt(d))V in bf16 by each kernel torch offers, on NeoBERT's head shapes, "
        "checked against float32 and timed interleaved, beside the matmul peak.",
    )
    a.add_argument("--lengths", type=_ints, default="512,1024,2048", help="sequence lengths")
    a.add_argument("--tokens", type=int, default=2048, help="tokens per call (batch = tokens // length)")
    a.add_argument("--repeats", type=int, default=5, help="timed rounds (the median is reported)")
    a.add_argument("--kernels", type=_names, default="sdpa,sdpa-compile,math,flex-compile")
    a.add_argument("--output", help="directory for results.json and results.md")
    a.set_defaults(func=attention)
    bench_serve.register(commands)  # `bench serve` lives in its own module


def throughput(args: argparse.Namespace, console: Console | None = None) -> int:
    from ..benchmarks.report import markdown
    from ..benchmarks.throughput import BenchConfig, run

    console = make_console(console)
    quiet_transformers()
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CLIError("--device cuda, but torch sees no CUDA device")
    config = BenchConfig(
        models=args.models,
        lengths=args.lengths,
        dtype=args.dtype,
        device=args.device,
        output=args.output,
        batch_tokens=args.batch_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        time_budget=args.time_budget,
        compile=args.compile,
        realistic=args.realistic,
        realistic_range=args.realistic_range,
        lengths_file=args.lengths_file,
        realistic_tokens=args.realistic_tokens,
        peak_sizes=tuple(args.peak_sizes),
        progress=not args.no_progress,
    )
    results = run(config)
    console.print(_table(results))
    summary = markdown(results).split("\n\n")
    for paragraph in summary[-2:]:
        if paragraph.startswith(("NeoBERT", "Unpadded")):
            console.print(paragraph.strip(), highlight=False)
    if args.output:
        console.print(f"results written to {args.output}/results.{{json,csv,md,png}}", highlight=False)
    return 0


def training(args: argparse.Namespace, console: Console | None = None) -> int:
    from ..benchmarks.training import TrainBenchConfig, markdown, run
    from ..config import PRESETS

    console = make_console(console)
    unknown = [d for d in args.dtypes if d not in ("fp32", "bf16")]
    if unknown:
        raise CLIError(f"--dtypes must be fp32 and/or bf16, got {', '.join(unknown)}")
    missing = [p for p in args.presets if p not in PRESETS]
    if missing:
        raise CLIError(f"--presets: unknown {', '.join(missing)}; available: {', '.join(PRESETS)}")
    if args.micro_batch_size and args.rows % args.micro_batch_size:
        raise CLIError(f"--rows {args.rows} is not a multiple of --micro-batch-size {args.micro_batch_size}")
    bench = TrainBenchConfig(
        presets=args.presets,
        dtypes=args.dtypes,
        device=args.device,
        seq_len=args.seq_len,
        rows=args.rows,
        micro_batch_size=args.micro_batch_size,
        steps=args.steps,
        warmup=max(1, args.warmup),
        compile=args.compile,
        checkpointing=args.checkpointing,
        peak_tflops=args.peak_tflops,
        peak_sizes=list(args.peak_sizes),
        output=args.output,
    )
    console.print(markdown(run(bench)), highlight=False)
    return 0


def encode(args: argparse.Namespace, console: Console | None = None) -> int:
    from ..benchmarks.encode import EncodeBenchConfig, run

    console = make_console(console)
    quiet_transformers()
    config = EncodeBenchConfig(
        model=args.model,
        texts=args.texts,
        length_range=args.length_range,
        lengths_file=args.lengths_file,
        batch_sizes=tuple(args.batch_sizes),
        max_tokens=tuple(args.max_tokens),
        max_tokens_batch_size=args.max_tokens_batch_size,
        precision=args.precision,
        repeats=args.repeats,
        seed=args.seed,
        output=args.output,
        progress=not args.no_progress,
    )
    results = run(config)
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


def precision(args: argparse.Namespace, console: Console | None = None) -> int:
    from ..benchmarks.precision import PrecisionBenchConfig, markdown, run

    console = make_console(console)
    quiet_transformers()
    config = PrecisionBenchConfig(
        model=args.model,
        tokenizer=args.tokenizer,
        variants=tuple(args.variants),
        length=args.length,
        batch=args.batch,
        repeats=args.repeats,
        output=args.output,
        progress=not args.no_progress,
    )
    console.print(markdown(run(config)), highlight=False, soft_wrap=True)
    if args.output:
        console.print(f"results written to {args.output}/results.{{json,md}}", highlight=False)
    return 0


def attention(args: argparse.Namespace, console: Console | None = None) -> int:
    from ..benchmarks.attention import AttentionBenchConfig, markdown, run

    console = make_console(console)
    config = AttentionBenchConfig(
        lengths=tuple(args.lengths),
        tokens=args.tokens,
        kernels=tuple(args.kernels),
        repeats=args.repeats,
        output=args.output,
    )
    console.print(markdown(run(config)), highlight=False, soft_wrap=True)
    return 0


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
