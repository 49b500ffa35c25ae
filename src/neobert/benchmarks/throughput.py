"""Inference throughput of NeoBERT against BERT, RoBERTa and ModernBERT: tokens/s per model and length.

``run(BenchConfig(...))`` is the whole benchmark (``neobert bench throughput`` is a thin layer over it):

1. the machine's square-GEMM rate in bf16 and fp32, the ceiling each model's FLOP/s is compared with;
2. for each length, for each model: the best batch size among ``batch_tokens // length`` (one warm-up and
   one timed forward per candidate), then ``repeats`` rounds that time every model in turn at its best
   batch (interleaved, so drift and noise hit all models alike); the median is reported, with the peak
   memory of the first round;
3. optionally a realistic mode: one batch of sequences whose lengths are drawn uniformly (or read from a
   file), run padded to its longest sequence and, for NeoBERT, unpadded; real tokens/s.

Weights are held in the benchmark dtype (``model.to(bfloat16)``, no autocast), every forward runs under
``torch.inference_mode``. NeoBERT runs its inference fast path (unpadded attention, see docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..runtime.fastpath import fast_inference
from ..runtime.hardware import resolve_precision
from .measure import DTYPES, machine_info, matmul_peak, peak_memory, time_call
from .models import BUILDERS, Encoder, build_encoder, flops_per_token, linear_params, random_inputs, set_unpad
from .report import write_outputs


@dataclass
class BenchConfig:
    """Inference tokens/s by model and sequence length, best batch size per cell, models interleaved;
    reports the achieved share of the machine's matmul rate and peak memory. Models are built from their
    published shapes with random weights: nothing is downloaded.

    Lengths above a model's positions are skipped for that model.
    """

    # neobert, neobert-<preset>, neobert-unfused, bert-base/large, roberta-base/large, modernbert-base/large,
    # bert-tiny, modernbert-tiny
    models: list[str] = field(
        default_factory=lambda: ["neobert", "modernbert-base", "bert-base", "roberta-base"]
    )
    lengths: list[int] = field(default_factory=lambda: [128, 512, 1024])  # sequence lengths
    dtype: str = (
        "auto"  # weights and activations dtype: bf16 | fp32 | auto (the faster at the base shapes here)
    )
    device: str = "cpu"  # cpu | cuda
    output: str | None = None  # directory for results.json/.csv/.md/.png; None writes nothing
    batch_tokens: list[int] = field(
        default_factory=lambda: [2048, 4096, 8192]
    )  # tokens per batch to try: the batch sizes searched are these // length
    repeats: int = 3  # timed rounds (the median is reported)
    warmup: int = 1  # untimed forwards before timing
    time_budget: float | None = (
        None  # seconds for the whole run; (model, length) cells not started are skipped
    )
    compile: bool = False  # torch.compile each model (compile time is absorbed by the warm-up)
    realistic: bool = False  # also run a variable-length batch, padded/unpadded
    realistic_range: tuple[int, int] = (16, 512)  # lengths drawn uniformly in [lo, hi]
    lengths_file: str | None = None  # or read them, one integer per line
    realistic_tokens: int = 8192  # real tokens in the realistic batch (about)
    peak_sizes: tuple[int, ...] = (2048, 4096)  # square GEMM sizes for the matmul peak
    seed: int = 0  # seed of the random ids and lengths
    progress: bool = True  # a progress bar

    def __post_init__(self) -> None:
        unknown = [m for m in self.models if m not in BUILDERS]
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)}; available: {', '.join(BUILDERS)}")
        if self.dtype not in (*DTYPES, "auto"):
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("--device cuda, but torch sees no CUDA device")
        if not self.lengths or min(self.lengths) < 1 or min(self.batch_tokens, default=0) < 1:
            raise ValueError("lengths and batch_tokens must be positive")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        lo, hi = self.realistic_range
        if not 1 <= lo <= hi:
            raise ValueError(f"realistic_range must satisfy 1 <= lo <= hi, got {self.realistic_range}")


class _Clock:
    """The run's time budget."""

    def __init__(self, budget: float | None):
        self.start, self.budget = time.perf_counter(), budget

    def spent(self) -> bool:
        return self.budget is not None and time.perf_counter() - self.start > self.budget


def run(config: BenchConfig) -> dict:
    """Run the benchmark; return (and, with ``output``, write) the results. See the module docstring."""
    from rich.progress import Progress

    torch.manual_seed(config.seed)
    device = config.device
    # auto: measured at the base models' widths (768 x 3072), the same for every model of the run
    name = resolve_precision(config.dtype, 768, 3072, device) if config.dtype == "auto" else config.dtype
    dtype = DTYPES[name]
    clock = _Clock(config.time_budget)
    results: dict = {
        "config": {**dataclasses.asdict(config), "dtype": name, "requested_dtype": config.dtype},
        "machine": machine_info(device),
    }
    results["matmul_peak"] = {name: matmul_peak(dt, device, config.peak_sizes) for name, dt in DTYPES.items()}
    peak = results["matmul_peak"][name]["flops"]

    encoders = [build_encoder(name, dtype, device) for name in config.models]
    results["models"] = {
        e.name: {"params": e.num_params, "linear_params": linear_params(e.model), "max_length": e.max_length}
        for e in encoders
    }
    if config.compile:
        for e in encoders:
            e.model = fast_inference(e.model, None, compile=True) if e.is_neobert else torch.compile(e.model)

    cells = sum(1 for n in config.lengths for e in encoders if n <= e.max_length)
    with Progress(disable=not config.progress, transient=True) as progress, torch.inference_mode():
        task = progress.add_task("throughput", total=cells + (len(encoders) if config.realistic else 0))
        results["fixed"] = []
        for length in sorted(config.lengths):
            fit = [e for e in encoders if length <= e.max_length]
            results["fixed"] += _measure_length(fit, length, config, peak, clock, progress, task)
        results["realistic"] = (
            _realistic(encoders, config, peak, clock, progress, task) if config.realistic else []
        )
    results["summary"] = summarize(results)
    results["seconds"] = time.perf_counter() - clock.start
    if config.output:
        write_outputs(results, Path(config.output))
    return results


def _forward(encoder: Encoder, ids: torch.Tensor, mask: torch.Tensor):
    return lambda: encoder.model(input_ids=ids, attention_mask=mask)


def _measure_length(
    encoders: list[Encoder], length: int, config: BenchConfig, peak: float, clock: _Clock, progress, task
) -> list[dict]:
    """Batch search per model, then interleaved timing rounds at each model's best batch size."""
    rows, calls = [], {}
    for e in encoders:
        progress.update(task, description=f"{e.name} @ {length}: batch search")
        if clock.spent():
            rows.append({"model": e.name, "length": length, "skipped": "time budget"})
            progress.advance(task)
            continue
        candidates = {}
        for batch in sorted({max(1, n // length) for n in config.batch_tokens}):
            fn = _forward(e, *random_inputs(e, batch, length, config.device, config.seed))
            for _ in range(config.warmup):
                fn()
            candidates[batch] = batch * length / time_call(fn, config.device)
        best = max(candidates, key=candidates.get)
        calls[e.name] = (e, best, _forward(e, *random_inputs(e, best, length, config.device, config.seed)))
        rows.append({"model": e.name, "length": length, "batch_size": best, "candidates": candidates})
    memory = {name: peak_memory(fn, config.device)[1] for name, (_, _, fn) in calls.items()}  # untimed
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(config.repeats):
        for name, (_, _, fn) in calls.items():
            progress.update(task, description=f"{name} @ {length}: timing")
            times[name].append(time_call(fn, config.device))
    for row in rows:
        if "skipped" in row:
            continue
        e, batch, _ = calls[row["model"]]
        seconds = statistics.median(times[row["model"]])
        tokens_per_s = batch * length / seconds
        flops = flops_per_token(e, length)
        row.update(
            mode="fixed",
            tokens_per_s=tokens_per_s,
            seconds=seconds,
            times=times[row["model"]],
            flops_per_token=flops,
            tflops=flops * tokens_per_s / 1e12,
            peak_fraction=flops * tokens_per_s / peak,
            peak_memory_mb=memory[row["model"]] / 2**20,
        )
        progress.advance(task)
    return rows


def read_lengths(path: str | Path) -> list[int]:
    """Positive integers, one per line (blank lines skipped); errors name the file and line."""
    values = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = int(line)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{path}:{number}: expected a positive integer, got {line.strip()!r}")
        values.append(value)
    if not values:
        raise ValueError(f"{path}: no lengths (expected positive integers, one per line)")
    return values


def realistic_lengths(config: BenchConfig) -> list[int]:
    """Sequence lengths for the realistic batch: drawn uniformly, or cycled from ``lengths_file``."""
    rng = random.Random(config.seed)
    if config.lengths_file:
        pool = read_lengths(config.lengths_file)
        draw = lambda: rng.choice(pool)  # noqa: E731
    else:
        draw = lambda: rng.randint(*config.realistic_range)  # noqa: E731
    lengths: list[int] = []
    while sum(lengths) < config.realistic_tokens:
        lengths.append(draw())
    return lengths


def _realistic(
    encoders: list[Encoder], config: BenchConfig, peak: float, clock: _Clock, progress, task
) -> list[dict]:
    """Padded (every model) and unpadded (NeoBERT) forwards of one variable-length batch, interleaved."""
    lengths = realistic_lengths(config)
    runs = []
    for e in encoders:
        progress.advance(task)
        seq = [min(n, e.max_length) for n in lengths]
        ids, _ = random_inputs(e, len(seq), max(seq), config.device, config.seed)
        mask = (torch.arange(max(seq))[None, :] < torch.tensor(seq)[:, None]).long().to(config.device)
        ids = ids.masked_fill(mask == 0, e.pad_token_id)
        for mode in ("padded", "unpadded") if e.is_neobert else ("padded",):
            runs.append((e, mode, seq, _forward(e, ids, mask)))
    times: dict[int, list[float]] = {i: [] for i in range(len(runs))}
    memory: dict[int, int] = {}
    for round_ in range(1 + config.warmup + config.repeats):  # memory, warm-up, then timed rounds
        if clock.spent() and round_ > config.warmup + 1:
            break
        for i, (e, mode, _, fn) in enumerate(runs):
            progress.update(task, description=f"{e.name} realistic {mode}")
            if e.is_neobert:
                set_unpad(e, mode == "unpadded")
            if round_ == 0:
                memory[i] = peak_memory(fn, config.device)[1]
            elif round_ <= config.warmup:
                fn()
            else:
                times[i].append(time_call(fn, config.device))
    rows = []
    for i, (e, mode, seq, _) in enumerate(runs):
        if e.is_neobert:
            set_unpad(e, True)  # back to the fast path
        if not times[i]:
            continue
        seconds = statistics.median(times[i])
        useful = sum(n * flops_per_token(e, n) for n in seq)  # FLOPs of the real tokens only
        rows.append(
            dict(
                mode=mode,
                model=e.name,
                sequences=len(seq),
                real_tokens=sum(seq),
                padded_tokens=len(seq) * max(seq),
                real_tokens_per_s=sum(seq) / seconds,
                seconds=seconds,
                times=times[i],
                tflops=useful / seconds / 1e12,
                peak_fraction=useful / seconds / peak,
                peak_memory_mb=memory[i] / 2**20,
            )
        )
    return rows


def summarize(results: dict) -> dict:
    """Ratios the issue's targets are stated in: NeoBERT / ModernBERT-base, % of peak, unpadded / padded."""
    fixed = {(r["model"], r["length"]): r for r in results["fixed"] if "tokens_per_s" in r}
    summary: dict = {"neobert_over_modernbert": {}, "peak_fraction": {}}
    for (model, length), row in fixed.items():
        summary["peak_fraction"].setdefault(model, {})[length] = row["peak_fraction"]
        if model == "neobert" and ("modernbert-base", length) in fixed:
            other = fixed[("modernbert-base", length)]["tokens_per_s"]
            summary["neobert_over_modernbert"][length] = row["tokens_per_s"] / other
    real = {(r["model"], r["mode"]): r["real_tokens_per_s"] for r in results.get("realistic", [])}
    summary["unpadded_over_padded"] = {
        model: real[(model, "unpadded")] / real[(model, "padded")]
        for model, mode in real
        if mode == "unpadded" and (model, "padded") in real
    }
    return summary
