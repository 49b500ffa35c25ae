"""Training throughput: tokens/s of the product's own pretraining step, MFU and peak memory.

What is timed is :meth:`neobert.training.trainer.Trainer.train_step` driving the pretraining task
(:class:`neobert.training.mlm_task.MLMTask`), built by the same functions ``neobert pretrain`` uses: packed
rows of documents with per-document attention, 20% masking, forward with logits at masked positions only,
backward, clipping, the NaN guard, AdamW (fused on CUDA) and the schedule. fp32 keeps everything in fp32;
bf16 is autocast over fp32 master weights. Data preparation (packing, masking, collation) runs before the
clock starts; each timed step reuses the same micro-batches.

    neobert bench training --presets neobert --seq-len 1024 --rows 32 --dtypes bf16 --device cuda --compile

FLOPs per trained token: 3 x the forward FLOPs (the backward costs twice the forward) of the encoder,
``2 * linear params + 4 * keys * hidden`` per layer (see :func:`forward_flops_per_token`, keys = the mean
document length seen by a token: sum of squared document lengths / tokens), plus 3 x ``2 * hidden * vocab``
for the decoder on the masked fraction. Norms, RoPE and the embedding lookup are not counted. MFU is the
achieved FLOP/s over the peak: ``--peak-tflops`` (e.g. the datasheet's dense bf16 rate) when given, else the
square-GEMM rate measured in the same run.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..common.config import PRESETS, ModelConfig
from ..common.tables import markdown_table
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from ..training.config import PretrainConfig
from ..training.data_setup import TrainingData
from ..training.mlm_task import MLMTask, prepare_trainer, trainer_settings
from ..training.stream import RowStream
from ..training.trainer import Trainer
from .measure import DTYPES, machine_info, matmul_peak, process_peak_rss, time_call
from .models import forward_flops_per_token
from .report import publish

SPECIAL_IDS = [0, 1, 2, 3, 4]  # pad, unk, cls, sep, mask of the synthetic vocabulary
MASK_ID = 4


@dataclass
class TrainBenchConfig:
    """Whole pretraining steps of the product's training core (packed rows with per-document attention, 20%
    masking, forward, backward, clipping, AdamW) per preset and dtype; MFU against the matmul rate measured
    in the same run, or --peak-tflops."""

    presets: list[str] = field(default_factory=lambda: ["tiny", "120m"])  # NeoBERT presets
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16"])  # fp32 and/or bf16 (autocast)
    device: str | None = None  # cpu | cuda; None: cuda when available
    seq_len: int = 512  # row length
    rows: int = 8  # rows per optimizer step
    micro_batch_size: int | None = None  # rows per forward; None: all rows in one micro-batch
    steps: int = 5  # timed steps (median), after `warmup`
    warmup: int = 2  # untimed steps first
    mask_rate: float = 0.2  # share of tokens masked
    compile: bool = False  # torch.compile the blocks (regional)
    checkpointing: bool = False  # activation checkpointing
    peak_tflops: float | None = None  # MFU denominator; None: the measured matmul peak
    peak_sizes: list[int] = field(default_factory=lambda: [2048, 4096])  # square GEMMs for the matmul peak
    output: str | None = None  # directory for results.json and results.md

    def __post_init__(self) -> None:
        unknown = [d for d in self.dtypes if d not in ("fp32", "bf16")]
        if unknown:
            raise ValueError(f"--dtypes must be fp32 and/or bf16, got {', '.join(unknown)}")
        missing = [p for p in self.presets if p not in PRESETS]
        if missing:
            raise ValueError(f"--presets: unknown {', '.join(missing)}; available: {', '.join(PRESETS)}")
        if self.micro_batch_size and self.rows % self.micro_batch_size:
            raise ValueError(
                f"--rows {self.rows} is not a multiple of --micro-batch-size {self.micro_batch_size}"
            )
        self.warmup = max(1, self.warmup)  # the first step compiles and allocates: never timed

    def resolved_device(self) -> str:
        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")


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


def pretrain_config(preset: str, dtype: str, bench: TrainBenchConfig, output: str) -> PretrainConfig:
    """The pretraining config of one measurement: one step of ``rows`` rows of ``seq_len`` tokens."""
    model = {}
    if bench.seq_len > PRESETS[preset].get("max_length", ModelConfig().max_length):
        model["max_length"] = bench.seq_len
    return PretrainConfig.from_dict(
        {
            "preset": preset,
            "model": model,
            "data": {"seq_len": bench.seq_len, "mask_rate": bench.mask_rate},
            "tokens_per_step": bench.rows * bench.seq_len,
            "micro_batch_size": bench.micro_batch_size or bench.rows,
            "precision": dtype,
            "compile": bench.compile,
            "activation_checkpointing": bench.checkpointing,
            "schedule": {"kind": "constant", "warmup_steps": 0},
            "max_steps": bench.warmup + bench.steps,
            "output": output,
            "report_to": [],
        }
    )


def synthetic_data(config: ModelConfig, bench: TrainBenchConfig, seed: int = 0) -> TrainingData:
    """Random documents of 32 to ``seq_len`` tokens over the model's vocabulary, packed by the product."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(32, max(33, bench.seq_len), 20 * bench.rows)
    docs = [rng.integers(len(SPECIAL_IDS), config.vocab_size, int(n)) for n in lengths]
    return TrainingData(docs, None, None, config.pad_token_id, MASK_ID, SPECIAL_IDS, config.vocab_size, None)


def _mean_keys(batches: list[dict]) -> float:
    lengths = np.concatenate([np.diff(b["cu_seqlens"].numpy()) for b in batches])
    return float((lengths**2).sum() / lengths.sum())  # each token attends to its own document


def _measure(preset: str, dtype: str, bench: TrainBenchConfig, peaks: dict, scratch: str) -> dict:
    device = bench.resolved_device()
    config = pretrain_config(preset, dtype, bench, scratch)
    settings = trainer_settings(config, progress_bar=False, device=device)
    settings.output = settings.log_dir = None  # no checkpoints, no logs
    trainer = Trainer(settings)
    model_config = config.model_config()
    data = synthetic_data(model_config, bench)
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    trainer.set_accumulation(bench.rows // config.micro_batch_size)
    prepare_trainer(trainer, config, NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(model_config)))
    stream = RowStream(data.train, np.array([len(d) for d in data.train]), bench.seq_len, 0)
    task = MLMTask(config, data, trainer, stream)
    batches = task.batches(0)

    def step() -> None:
        trainer.train_step(task, batches)

    started = time.perf_counter()
    first = time_call(step, device)
    for _ in range(bench.warmup - 1):
        step()
    warm = time.perf_counter() - started
    process_peak_rss(reset=True)
    seconds = statistics.median(time_call(step, device) for _ in range(bench.steps))
    memory = torch.cuda.max_memory_allocated() if device == "cuda" else process_peak_rss()
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    flops = training_flops_per_token(model_config, _mean_keys(batches), bench.mask_rate)
    rate = tokens / seconds
    peak = bench.peak_tflops * 1e12 if bench.peak_tflops else peaks[dtype]["flops"]
    return {
        "preset": preset,
        "dtype": dtype,
        "device": device,
        "compile": bench.compile,
        "checkpointing": bench.checkpointing,
        "parameters": model_config.num_parameters(mlm_head=True),
        "seq_len": bench.seq_len,
        "rows": bench.rows,
        "tokens_per_step": tokens,
        "seconds_per_step": seconds,
        "tokens_per_second": rate,
        "flops_per_token": flops,
        "achieved_flops": flops * rate,
        "mfu": flops * rate / peak,
        "peak_memory_bytes": memory,
        "first_step_seconds": first,
        # compilation happens in the first step(s): what the warm-up took beyond ordinary steps
        "compile_seconds": max(0.0, warm - bench.warmup * seconds) if bench.compile else None,
    }


def run(bench: TrainBenchConfig) -> dict:
    device = bench.resolved_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but CUDA is not available")
    peaks = {d: matmul_peak(DTYPES[d], device, tuple(bench.peak_sizes)) for d in bench.dtypes}
    with tempfile.TemporaryDirectory(prefix="neobert-bench-") as scratch:
        rows = [_measure(p, d, bench, peaks, scratch) for p in bench.presets for d in bench.dtypes]
    results = {
        "config": asdict(bench),
        "machine": machine_info(device),  # torch, threads, CPU, device, GPU: as every benchmark records it
        "peaks": peaks,
        "mfu_peak": "given" if bench.peak_tflops else "measured matmul peak",
        "results": rows,
    }
    return publish(results, markdown, bench.output)


def markdown(results: dict) -> str:
    peaks = results["peaks"]
    machine = results["machine"]
    gpu = machine.get("gpu")
    where = gpu or f"CPU ({machine['cpu']}), {machine['threads']} threads"
    denominator = "the given peak" if results["mfu_peak"] == "given" else "the measured matmul peak"
    lines = [
        f"Device: {where}; torch {machine['torch']}. Matmul peak measured in the same run: "
        + ", ".join(f"{d} {p['flops'] / 1e12:.2f} TFLOP/s" for d, p in peaks.items())
        + f". MFU against {denominator}. Memory: "
        + ("peak allocated (max_memory_allocated)." if gpu else "peak resident set of the process."),
        "",
    ]
    rows = []
    for r in results["results"]:
        compiled = None if r["compile_seconds"] is None else f"{r['compile_seconds']:.1f}"
        memory = None if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**30:.2f} GiB"
        flags = " +ckpt" if r["checkpointing"] else ""
        rows.append(
            [
                f"{r['preset']}{flags}",
                r["dtype"],
                f"{r['seq_len']} x {r['rows']}",
                f"{r['parameters'] / 1e6:.1f}M",
                f"{r['seconds_per_step']:.3f}",
                f"{r['tokens_per_second']:,.0f}",
                f"{r['achieved_flops'] / 1e12:.3f}",
                f"{100 * r['mfu']:.1f}%",
                memory,
                compiled,
            ]
        )
    header = [
        "preset",
        "dtype",
        "seq x rows",
        "params",
        "s/step",
        "tokens/s",
        "TFLOP/s",
        "MFU",
        "peak memory",
        "compile s",
    ]
    return "\n".join(lines) + "\n" + markdown_table(header, rows, align="lll" + "r" * 7)
