"""Attention kernels on one layer's shapes: which way of computing softmax(QK^T/sqrt(d))V is fastest here.

On CPU the profile puts a third of NeoBERT's forward in attention at ~0.6 TFLOP/s, a quarter of the bf16
matmul rate. This benchmark asks whether anything torch offers does better, on NeoBERT's head shapes:

- ``sdpa``: ``F.scaled_dot_product_attention`` (on CPU its blockwise flash kernel; what the model uses);
- ``sdpa-compile``: the same under ``torch.compile``;
- ``math``: scores by a bf16 batched matmul, softmax, a second matmul, ``chunk`` (batch x head) slices at
  a time so the score tensor stays small;
- ``flex-compile``: ``flex_attention`` compiled (inductor's CPU template).

Each is checked against a float32 reference (max abs error) and timed interleaved, median of repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..common.tables import markdown_table
from .measure import machine_info, matmul_peak
from .report import publish

KERNELS = ("sdpa", "sdpa-compile", "math", "flex-compile")


@dataclass
class AttentionBenchConfig:
    """softmax(QK^T/sqrt(d))V in bf16 by each kernel torch offers, on NeoBERT's head shapes, checked against
    float32 and timed interleaved, beside the matmul peak."""

    lengths: tuple[int, ...] = (512, 1024, 2048)  # sequence lengths
    tokens: int = 2048  # batch = tokens // length sequences
    heads: int = 12  # attention heads (NeoBERT's)
    head_dim: int = 64  # head dimension (NeoBERT's)
    kernels: tuple[str, ...] = KERNELS  # from KERNELS
    math_chunk: int = 2  # (batch x head) slices per matmul+softmax call
    repeats: int = 5  # timed rounds (the median is reported)
    peak_sizes: tuple[int, ...] = (2048, 4096)  # square bf16 GEMMs for the matmul peak
    output: str | None = None  # directory for results.json and results.md

    def __post_init__(self) -> None:
        unknown = [k for k in self.kernels if k not in KERNELS]
        if unknown:
            raise ValueError(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(KERNELS)}")


def _math(chunk: int) -> Callable:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
        out = torch.empty_like(q)
        for i in range(0, b * h, chunk):
            scores = torch.bmm(q[i : i + chunk], k[i : i + chunk].transpose(1, 2)).mul_(d**-0.5)
            torch.bmm(scores.softmax(dim=-1), v[i : i + chunk], out=out[i : i + chunk])
        return out.view(b, h, n, d)

    return attention


def kernel(name: str, math_chunk: int) -> Callable:
    if name == "sdpa":
        return F.scaled_dot_product_attention
    if name == "sdpa-compile":
        return torch.compile(F.scaled_dot_product_attention)
    if name == "math":
        return _math(math_chunk)
    if name == "flex-compile":
        from torch.nn.attention.flex_attention import flex_attention

        return torch.compile(flex_attention)
    raise ValueError(f"unknown kernel {name!r}")


def run(config: AttentionBenchConfig) -> dict:
    torch.manual_seed(0)
    kernels = {name: kernel(name, config.math_chunk) for name in config.kernels}
    rows = []
    for length in config.lengths:
        batch = max(1, config.tokens // length)
        shape = (batch, config.heads, length, config.head_dim)
        q, k, v = (torch.randn(shape, dtype=torch.bfloat16) for _ in range(3))
        reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        flops = 4 * batch * config.heads * length * length * config.head_dim
        times: dict[str, list[float]] = {}
        with torch.inference_mode():
            errors = {}
            for name, fn in kernels.items():  # warm-up (compiles) and the accuracy check
                fn(q, k, v)
                errors[name] = (fn(q, k, v).float() - reference).abs().max().item()
                times[name] = []
            for _ in range(config.repeats):
                for name, fn in kernels.items():
                    start = time.perf_counter()
                    fn(q, k, v)
                    times[name].append(time.perf_counter() - start)
        for name in kernels:
            seconds = statistics.median(times[name])
            rows.append(
                {
                    "kernel": name,
                    "length": length,
                    "batch": batch,
                    "ms": 1e3 * seconds,
                    "tflops": flops / seconds / 1e12,
                    "max_abs_error": errors[name],
                }
            )
    results = {
        "config": asdict(config),
        "machine": machine_info("cpu"),
        "matmul_peak_tflops": matmul_peak(torch.bfloat16, "cpu", config.peak_sizes)["flops"] / 1e12,
        "rows": rows,
    }
    return publish(results, markdown, config.output)


def markdown(results: dict) -> str:
    c = results["config"]
    lengths = list(c["lengths"])
    found = {(r["kernel"], r["length"]): r for r in results["rows"]}
    lines = [
        f"# Attention kernels, bf16, {c['heads']} heads x {c['head_dim']}, {c['tokens']} tokens per call",
        "",
        f"torch {results['machine']['torch']}, {results['machine']['threads']} threads; bf16 matmul peak "
        f"{results['matmul_peak_tflops']:.2f} TFLOP/s in the same run; median of {c['repeats']} interleaved "
        "rounds. Cells: TFLOP/s (max abs error against float32).",
        "",
    ]
    rows = [
        [
            name,
            *(
                f"{found[name, n]['tflops']:.2f} ({found[name, n]['max_abs_error']:.4f})"
                if (name, n) in found
                else None
                for n in lengths
            ),
        ]  # a kernel not run at a length: n/a
        for name in c["kernels"]
    ]
    header = ["kernel", *(str(n) for n in lengths)]
    return "\n".join(lines) + "\n" + markdown_table(header, rows, align="l" + "r" * len(lengths))
