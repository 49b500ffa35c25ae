"""Benchmark outputs: results.json, results.csv, a Table-9-style Markdown table, a Figure-3-style plot."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from ..common.io import atomic_file, write_json, write_text
from ..common.tables import markdown_table

CSV_FIELDS = [
    "mode",
    "model",
    "length",
    "batch_size",
    "sequences",
    "real_tokens",
    "padded_tokens",
    "tokens_per_s",
    "real_tokens_per_s",
    "seconds",
    "flops_per_token",
    "tflops",
    "peak_fraction",
    "peak_memory_mb",
    "skipped",
]


def write_json_and_markdown(results: dict, markdown_text: str, output: str | Path) -> Path:
    """``output/results.json`` and ``output/results.md``: what every benchmark command writes."""
    out = Path(output)
    write_json(out / "results.json", results, default=str)
    write_text(out / "results.md", markdown_text)
    return out


def publish(results: dict, markdown: Callable[[dict], str], output: str | Path | None) -> dict:
    """``results``, first written to ``output`` (when given) as results.json and ``markdown(results)`` as
    results.md: the end of every benchmark's ``run``."""
    if output:
        write_json_and_markdown(results, markdown(results), output)
    return results


def write_outputs(results: dict, output: Path) -> dict[str, Path]:
    """Write the four files into ``output``; return their paths by kind."""
    paths = {kind: output / f"results.{kind}" for kind in ("json", "csv", "md", "png")}
    write_json(paths["json"], results, default=str)
    with atomic_file(paths["csv"], newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in results["fixed"] + results.get("realistic", []):
            writer.writerow({"mode": "fixed", **row})
    write_text(paths["md"], markdown(results))
    plot(results, paths["png"])
    return paths


def _lengths_and_models(results: dict) -> tuple[list[int], list[str]]:
    rows = results["fixed"]
    lengths = sorted({r["length"] for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    return lengths, models


def _grid(results: dict, cell) -> list[str]:
    """A models x lengths Markdown table; ``cell(row)`` formats one measured cell."""
    lengths, models = _lengths_and_models(results)
    found = {(r["model"], r["length"]): r for r in results["fixed"]}
    rows = []
    for model in models:
        cells = []
        for n in lengths:
            row = found.get((model, n))
            cells.append(None if row is None else ("skipped" if "skipped" in row else cell(row)))
        rows.append([model, *cells])
    header = ["model", *(str(n) for n in lengths)]
    return markdown_table(header, rows, align="l" + "r" * len(lengths)).splitlines()


def markdown(results: dict) -> str:
    """Tables: tokens/s (best batch size), % of the matmul peak, peak memory; then the realistic mode."""
    machine, peak = results["machine"], results["matmul_peak"]
    dtype = results["config"]["dtype"]
    lines = [
        f"Machine: {machine.get('cpu')}, {machine['threads']} threads, torch {machine['torch']}, "
        f"device {machine['device']}, dtype {dtype}.",
        "",
        "Square-GEMM rate (the ceiling): "
        + ", ".join(f"{k} {v['flops'] / 1e12:.2f} TFLOP/s (n={v['size']})" for k, v in peak.items())
        + ".",
        "",
        "**Inference tokens/s** (best batch size in brackets), by sequence length:",
        "",
        *_grid(results, lambda r: f"{r['tokens_per_s']:,.0f} ({r['batch_size']})"),
        "",
        f"**Achieved FLOP/s as % of the {dtype} matmul peak** (analytic FLOPs/token, see models.py):",
        "",
        *_grid(results, lambda r: f"{100 * r['peak_fraction']:.0f}%"),
        "",
        "**GFLOPs per token** (2 x matmul weights + 4 x keys x hidden per layer):",
        "",
        *_grid(results, lambda r: f"{r['flops_per_token'] / 1e9:.3f}"),
        "",
        "**Peak memory added by one forward** at the best batch size, MiB:",
        "",
        *_grid(results, lambda r: f"{r['peak_memory_mb']:,.0f}"),
    ]
    if results.get("realistic"):
        first = results["realistic"][0]
        lines += [
            "",
            f"**Realistic mode**: one batch of {first['sequences']} sequences, {first['real_tokens']:,} real "
            f"tokens ({first['padded_tokens']:,} when padded to the longest), lengths "
            + _realistic_source(results["config"])
            + ".",
            "",
        ]
        rows = [
            [
                r["model"],
                r["mode"],
                f"{r['real_tokens_per_s']:,.0f}",
                f"{100 * r['peak_fraction']:.0f}%",
                f"{r['peak_memory_mb']:,.0f}",
            ]
            for r in results["realistic"]
        ]
        header = ["model", "path", "real tokens/s", "% of peak (useful FLOPs)", "peak memory MiB"]
        lines += markdown_table(header, rows, align="llrrr").splitlines()
    summary = results.get("summary", {})
    if summary.get("neobert_over_modernbert"):
        ratios = ", ".join(f"{n}: {v:.2f}x" for n, v in summary["neobert_over_modernbert"].items())
        lines += ["", f"NeoBERT / ModernBERT-base tokens/s: {ratios}."]
    if summary.get("unpadded_over_padded"):
        ratios = ", ".join(f"{m}: {v:.2f}x" for m, v in summary["unpadded_over_padded"].items())
        lines += ["", f"Unpadded / padded real tokens/s: {ratios}."]
    return "\n".join(lines) + "\n"


def _realistic_source(config: dict) -> str:
    if config.get("lengths_file"):
        return f"from {config['lengths_file']}"
    lo, hi = config["realistic_range"]
    return f"uniform in [{lo}, {hi}]"


def plot(results: dict, path: Path) -> None:
    """tokens/s against sequence length, one line per model (log-log), as Figure 3 of the paper."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    lengths, models = _lengths_and_models(results)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in models:
        points = [
            (r["length"], r["tokens_per_s"])
            for r in results["fixed"]
            if r["model"] == model and "tokens_per_s" in r
        ]
        if points:
            ax.plot(*zip(*points), marker="o", label=model)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("tokens / s")
    machine = results["machine"]
    ax.set_title(f"Inference throughput, {results['config']['dtype']}, {machine['threads']} threads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_file(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
