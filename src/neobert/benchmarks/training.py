"""Training throughput: tokens/s of whole MLM pretraining steps, and the fraction of the matmul peak reached.

A step is what `neobert pretrain` does: packed rows of documents with per-document attention, 20% masking,
forward with logits at masked positions only, backward, gradient clipping and AdamW. fp32 keeps everything
in fp32; bf16 is autocast over fp32 master weights (mixed precision, as in pretraining).

    python -m neobert.benchmarks.training --presets tiny,120m --dtypes fp32,bf16 --output docs/benchmarks/training

FLOPs per trained token: 3 x the forward FLOPs (the backward costs twice the forward) of the encoder,
``2 * linear params + 4 * keys * hidden`` per layer (see :func:`forward_flops_per_token`, keys = the mean
document length seen by a token), plus 3 x ``2 * hidden * vocab`` for the decoder on the masked 20%.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..config import ModelConfig
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from ..training.batching import collate_packed, pack_documents
from ..training.masking import generator_for, mask_tokens
from .measure import DTYPES, matmul_peak, time_call
from .models import forward_flops_per_token
from .report import write_json_and_markdown


@dataclass
class TrainBenchConfig:
    presets: list[str] = field(default_factory=lambda: ["tiny", "120m"])  # NeoBERT presets
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16"])  # fp32 and/or bf16 (autocast)
    seq_len: int = 512  # row length
    rows: int = 8  # rows per step (one micro-batch)
    steps: int = 5  # timed steps (median), after `warmup`
    warmup: int = 2  # untimed steps first
    mask_rate: float = 0.2  # share of tokens masked
    peak_sizes: list[int] = field(default_factory=lambda: [2048, 4096])  # square GEMMs for the matmul peak
    output: str | None = None  # directory for results.json and results.md


def training_flops_per_token(config: ModelConfig, mean_keys: float, mask_rate: float) -> float:
    c, layers = config.hidden_size, config.num_hidden_layers
    linear = config.num_parameters() - config.vocab_size * c  # every weight but the embedding table
    linear -= (
        layers * 2 * c + c if config.norm == "rmsnorm" else layers * 4 * c + 2 * c
    )  # norms are not matmuls
    if config.position_embedding == "learned":
        linear -= config.max_length * c  # a table lookup too
    forward = forward_flops_per_token(linear, c, [int(mean_keys)] * layers)
    decoder = 2 * c * config.vocab_size * mask_rate
    return 3 * (forward + decoder)


def _batch(config: ModelConfig, bench: TrainBenchConfig, seed: int = 0) -> tuple[dict, float]:
    rng = np.random.default_rng(seed)
    docs = [
        rng.integers(5, config.vocab_size, int(n)) for n in rng.integers(32, bench.seq_len, 20 * bench.rows)
    ]
    rows = pack_documents(docs, bench.seq_len)[: bench.rows]
    batch = collate_packed(rows, config.pad_token_id, bench.seq_len)
    ids, labels = mask_tokens(
        batch["input_ids"],
        mask_token_id=4,
        vocab_size=config.vocab_size,
        special_ids=[0, 1, 2, 3, 4],
        rate=bench.mask_rate,
        generator=generator_for(seed, 0),
    )
    batch.update(input_ids=ids, labels=labels)
    lengths = np.diff(batch["cu_seqlens"].numpy())
    mean_keys = float((lengths**2).sum() / lengths.sum())  # each token attends to its own document
    return batch, mean_keys


def _measure(preset: str, dtype: str, bench: TrainBenchConfig, peaks: dict) -> dict:
    torch.manual_seed(0)
    config = ModelConfig.from_name(preset, max_length=max(bench.seq_len, 128))
    model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    batch, mean_keys = _batch(config, bench)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            out = model(
                input_ids=batch["input_ids"],
                cu_seqlens=batch["cu_seqlens"],
                max_seqlen=batch["max_seqlen"],
                position_ids=batch["position_ids"],
                labels=batch["labels"],
                masked_only=True,
            )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(bench.warmup):
        step()
    seconds = statistics.median(time_call(step, "cpu") for _ in range(bench.steps))
    tokens = int(batch["attention_mask"].sum())
    flops = training_flops_per_token(config, mean_keys, bench.mask_rate)
    rate = tokens / seconds
    return {
        "preset": preset,
        "dtype": dtype,
        "parameters": config.num_parameters(mlm_head=True),
        "tokens_per_step": tokens,
        "seconds_per_step": seconds,
        "tokens_per_second": rate,
        "flops_per_token": flops,
        "achieved_flops": flops * rate,
        "fraction_of_peak": flops * rate / peaks[dtype]["flops"],
    }


def run(bench: TrainBenchConfig) -> dict:
    peaks = {d: matmul_peak(DTYPES[d], "cpu", tuple(bench.peak_sizes)) for d in bench.dtypes}
    rows = [_measure(p, d, bench, peaks) for p in bench.presets for d in bench.dtypes]
    results = {"config": asdict(bench), "peaks": peaks, "threads": torch.get_num_threads(), "results": rows}
    if bench.output:
        write_json_and_markdown(results, markdown(results), bench.output)
    return results


def markdown(results: dict) -> str:
    peaks = results["peaks"]
    lines = [
        "Matmul peak measured in the same run: "
        + ", ".join(f"{d} {p['flops'] / 1e9:.0f} GFLOP/s" for d, p in peaks.items())
        + f" ({results['threads']} threads).",
        "",
        "| preset | dtype | params | tokens/step | s/step | tokens/s | GFLOP/s | % of matmul peak |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["results"]:
        lines.append(
            f"| {r['preset']} | {r['dtype']} | {r['parameters'] / 1e6:.1f}M | {r['tokens_per_step']:,} | "
            f"{r['seconds_per_step']:.3f} | {r['tokens_per_second']:,.0f} | {r['achieved_flops'] / 1e9:.1f} | "
            f"{100 * r['fraction_of_peak']:.1f}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MLM training-step throughput on this machine")
    parser.add_argument("--presets", default="tiny,120m")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    bench = TrainBenchConfig(
        presets=args.presets.split(","),
        dtypes=args.dtypes.split(","),
        seq_len=args.seq_len,
        rows=args.rows,
        steps=args.steps,
        output=args.output,
    )
    print(markdown(run(bench)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
