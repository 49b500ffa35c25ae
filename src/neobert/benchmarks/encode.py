"""Batching settings of :func:`neobert.inference.run.encode` (or of a model directory's export, run by
:meth:`~neobert.inference.onnx_encoder.OnnxEncoder.encode` on ONNX Runtime or OpenVINO), timed on
variable-length texts.

The measurement behind :data:`neobert.inference.batching.CPU_MAX_TOKENS`: ``texts`` synthetic texts whose token
counts are drawn uniformly from ``length_range`` (or from a lengths file, one integer per line), embedded
with each setting in turn, interleaved round-robin over ``repeats`` rounds in one process. A setting is a
``batch_size`` alone (no token budget) or ``max_tokens_batch_size`` with a ``max_tokens`` budget; the
library default (``encode``'s ``batch_size`` with ``CPU_MAX_TOKENS``) is always measured, and rates are
compared with batch 32 without a budget (the default before the budget) when that setting is present.

    neobert bench encode --model neobert --texts 96 --range 16,512 --output docs/benchmarks/encode

A text is made of random whole words of the tokenizer's vocabulary, each one token, so its token count
is the drawn one (checked with the tokenizer; inputs beyond the model's ``max_length`` are truncated, as
``encode`` does). Only the real tokens count in tokens/s; padding is reported beside them.
"""

from __future__ import annotations

import inspect
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..common.config import check_precision
from ..common.progress import progress_bar
from ..common.tables import markdown_table
from ..inference.backends import export_beside, open_export
from ..inference.batching import CPU_MAX_TOKENS, token_batches
from ..inference.encoders import check_vocab, load_model, max_positions, resolve_tokenizer
from ..inference.run import TOKENIZE_CHUNK, encode
from ..runtime.fastpath import fast_inference
from ..runtime.hardware import resolve_precision
from .measure import machine_info, time_call
from .report import publish
from .throughput import read_lengths

BACKENDS = ("torch", "onnx", "openvino")  # what runs the settings: PyTorch's encode, or an export's runtime
NO_BUDGET = 10**9  # passed as max_tokens for "no token budget": encode's None means CPU_MAX_TOKENS on the CPU
BASELINE = (32, None)  # batch 32, no budget: encode's default before the token budget
WARMUP_TEXTS = 8


@dataclass
class EncodeBenchConfig:
    """Real tokens/s of neobert.inference.run.encode on synthetic variable-length texts, for each batch size
    without a token budget and each --max-tokens budget (at --max-tokens-batch-size), beside the library
    default; settings interleaved in one process, median over rounds. --backend onnx | openvino times the
    export the model directory carries in DIR/onnx instead (padded attention: its best budget can differ)."""

    model: str = "neobert"  # a preset (random weights) or a model directory (with its tokenizer)
    texts: int = 96  # number of texts
    length_range: tuple[int, int] = (16, 512)  # token counts (with [CLS] and [SEP]) drawn uniformly
    lengths_file: str | None = None  # or drawn from this file's values, one integer per line
    batch_sizes: tuple[int, ...] = (8, 32)  # measured without a token budget
    max_tokens: tuple[int, ...] = (1024, 2048, 4096, 8192)  # padded-token budgets per batch
    max_tokens_batch_size: int = 256  # batch size used with the max_tokens budgets
    precision: str = "auto"  # bf16: fast_inference (bf16 weights, unpadded attention); fp32: as loaded; auto: the faster here
    backend: str = (
        "torch"  # torch: encode; onnx | openvino: the model directory's export (DIR/onnx), padded attention
    )
    repeats: int = 2  # timed rounds; the median rate is reported
    seed: int = 0  # seed of the lengths and texts
    output: str | None = None  # directory for results.json and results.md
    progress: bool = True  # a progress bar

    def __post_init__(self) -> None:
        self.length_range = tuple(self.length_range)
        self.batch_sizes = tuple(self.batch_sizes)
        self.max_tokens = tuple(self.max_tokens)
        check_precision(self.precision, ValueError)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.backend == "onnx" and self.precision == "bf16":
            raise ValueError("ONNX Runtime runs the export at fp32: bf16 runs on --backend openvino or torch")
        if self.texts < 1 or self.repeats < 1:
            raise ValueError(f"texts and repeats must be positive, got {self.texts} and {self.repeats}")
        if len(self.length_range) != 2 or not 1 <= self.length_range[0] <= self.length_range[1]:
            raise ValueError(f"length_range must be (lo, hi) with 1 <= lo <= hi, got {self.length_range}")
        if min((*self.batch_sizes, *self.max_tokens, self.max_tokens_batch_size)) < 1:
            raise ValueError("batch sizes and max_tokens must be positive")


def target_lengths(config: EncodeBenchConfig) -> list[int]:
    """The token count of each text: uniform over ``length_range``, or drawn from ``lengths_file``."""
    rng = random.Random(config.seed)
    if config.lengths_file is None:
        return [rng.randint(*config.length_range) for _ in range(config.texts)]
    return [rng.choice(read_lengths(config.lengths_file)) for _ in range(config.texts)]


def whole_words(tokenizer: Any) -> list[str]:
    """Alphabetic vocabulary entries longer than 3 characters that the tokenizer keeps as one token."""
    vocab = tokenizer.get_vocab()
    words = sorted((w for w in vocab if w.isalpha() and len(w) > 3), key=vocab.get)
    ids = tokenizer(words, add_special_tokens=False)["input_ids"] if words else []
    words = [w for w, row in zip(words, ids) if len(row) == 1]
    if not words:
        raise ValueError("the tokenizer's vocabulary has no whole-word entries to build texts from")
    return words


def synthetic_texts(tokenizer: Any, lengths: list[int], seed: int = 0) -> list[str]:
    """One text per length: random whole words, as many as the length less the special tokens."""
    rng = random.Random(seed)
    words = whole_words(tokenizer)
    special = tokenizer.num_special_tokens_to_add(pair=False)
    return [" ".join(rng.choices(words, k=max(1, n - special))) for n in lengths]


def token_lengths(tokenizer: Any, texts: list[str], max_length: int) -> list[int]:
    """Token counts as ``encode`` sees them (special tokens included, truncated at ``max_length``)."""
    ids = tokenizer(
        texts,
        truncation=True,
        max_length=max_length,
        return_attention_mask=False,
        return_token_type_ids=False,
    )["input_ids"]
    return [len(row) for row in ids]


def plan(texts: list[str], lengths: list[int], batch_size: int, max_tokens: int | None) -> list[list[int]]:
    """The batches ``encode`` forms (as text indices): tokenized in chunks in character-length order, each
    chunk cut by :func:`token_batches`; one chunk, i.e. plain ``token_batches(lengths)``, up to 4,096 texts."""
    by_chars = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    batches = []
    for start in range(0, len(by_chars), TOKENIZE_CHUNK):
        chunk = by_chars[start : start + TOKENIZE_CHUNK]
        batches += [
            [chunk[j] for j in b] for b in token_batches([lengths[i] for i in chunk], batch_size, max_tokens)
        ]
    return batches


def settings(config: EncodeBenchConfig) -> list[dict]:
    """The (batch_size, max_tokens) pairs measured, in order; max_tokens None = no token budget.

    The library default (``encode``'s ``batch_size`` with :data:`CPU_MAX_TOKENS`) is added last unless
    asked for already. The baseline of the ratios is batch 32 without a budget if measured, else the first.
    """
    default = (inspect.signature(encode).parameters["batch_size"].default, CPU_MAX_TOKENS)
    pairs = [(b, None) for b in config.batch_sizes]
    pairs += [(config.max_tokens_batch_size, m) for m in config.max_tokens]
    pairs = list(dict.fromkeys([*pairs, default]))
    baseline = BASELINE if BASELINE in pairs else pairs[0]
    rows = []
    for b, m in pairs:
        flags = {
            "default": (b, m) == default,
            "previous_default": (b, m) == BASELINE,
            "baseline": (b, m) == baseline,
        }
        note = ", ".join(name.replace("_", " ") for name, hit in flags.items() if hit)
        rows.append({"batch_size": b, "max_tokens": m, "label": _label(b, m), **flags, "note": note})
    return rows


def _label(batch_size: int, max_tokens: int | None) -> str:
    return f"batch {batch_size}, max_tokens {max_tokens or 'none'}"


@dataclass
class Runner:
    """What the settings are timed on: ``encode(texts, batch_size, max_tokens)`` and what it is."""

    encode: Callable[[list[str], int, int], Any]
    tokenizer: Any  # the transformers tokenizer the texts are made and counted with
    precision: str  # what runs: bf16 | fp32 (PyTorch), or the export's runtime and precision
    max_length: int
    parameters: int | None  # PyTorch's count (an export's graph is not counted)


def _load(config: EncodeBenchConfig) -> Runner:
    """The model (on the bf16 fast path where that precision was chosen) or its export on ``config.backend``,
    and its tokenizer."""
    tokenizer = resolve_tokenizer(config.model, None)
    if config.backend != "torch":
        export = export_beside(config.model)
        if export is None:
            raise ValueError(
                f"--backend {config.backend} times the export a model directory carries in DIR/onnx; "
                f"{config.model} carries none (`neobert export onnx --model {config.model} --output "
                f"{config.model}/onnx`)"
            )
        precision = "fp32" if config.backend == "onnx" and config.precision == "auto" else config.precision
        threads = torch.get_num_threads()
        opened = open_export(str(export), config.backend, precision=precision, threads=threads)
        encoder = opened.encoder

        def run_export(items: list[str], batch_size: int, max_tokens: int) -> Any:
            return encoder.encode(items, batch_size=batch_size, max_tokens=max_tokens)

        return Runner(run_export, tokenizer, opened.label, encoder.max_length, None)
    model = load_model(config.model)
    check_vocab(model, tokenizer)
    precision = resolve_precision(config.precision, model.config.hidden_size, model.config.intermediate_size)
    if precision == "bf16":
        model = fast_inference(model)

    def run_torch(items: list[str], batch_size: int, max_tokens: int) -> Any:
        return encode(
            model, tokenizer, items, batch_size=batch_size, max_tokens=max_tokens, show_progress=False
        )

    parameters = sum(p.numel() for p in model.parameters())
    return Runner(run_torch, tokenizer, precision, max_positions(model, tokenizer), parameters)


def _time_settings(runner: Runner, rows: list[dict], texts: list[str], config: EncodeBenchConfig) -> None:
    """Append to each row's ``seconds`` the time ``encode`` takes over ``texts`` with its setting, once per
    round; the settings run round-robin so a shared machine's drift falls on all of them alike."""

    def call(row: dict, items: list[str]) -> None:
        runner.encode(items, row["batch_size"], NO_BUDGET if row["max_tokens"] is None else row["max_tokens"])

    default = next(row for row in rows if row["default"])
    call(default, texts[:WARMUP_TEXTS])  # untimed: first-call costs (allocator, oneDNN kernels)
    with progress_bar(total=config.repeats * len(rows), unit="run", disable=not config.progress) as progress:
        for r in range(config.repeats):
            for k in range(len(rows)):  # round-robin, starting one setting later each round
                row = rows[(r + k) % len(rows)]
                progress.set_postfix_str(row["label"])
                row["seconds"].append(time_call(lambda row=row: call(row, texts), "cpu"))
                progress.update()


def run(config: EncodeBenchConfig) -> dict:
    runner = _load(config)
    max_length = runner.max_length
    targets = target_lengths(config)
    texts = synthetic_texts(runner.tokenizer, targets, config.seed)
    lengths = token_lengths(runner.tokenizer, texts, max_length)
    real = sum(lengths)
    rows = settings(config)
    for row in rows:
        batches = plan(texts, lengths, row["batch_size"], row["max_tokens"])
        row.update(
            batches=len(batches),
            real_tokens=real,
            padded_tokens=sum(len(b) * lengths[b[0]] for b in batches),
            seconds=[],
        )
    _time_settings(runner, rows, texts, config)
    for row in rows:
        row["real_tokens_per_s"] = statistics.median(real / s for s in row["seconds"])
        row["padding"] = row["padded_tokens"] / real
    baseline = next(row for row in rows if row["baseline"])
    for row in rows:
        row["ratio"] = row["real_tokens_per_s"] / baseline["real_tokens_per_s"]
    results = {
        "config": asdict(config),
        "machine": machine_info("cpu"),
        "model": {
            "name": config.model,
            "parameters": runner.parameters,
            "max_length": max_length,
            "precision": runner.precision,
        },
        "texts": {
            "count": len(texts),
            "target_tokens": sum(targets),
            "real_tokens": real,
            "off_target": sum(n != min(t, max_length) for n, t in zip(lengths, targets)),
            "truncated": sum(t > max_length for t in targets),
            "min": min(lengths),
            "max": max(lengths),
            "lengths": lengths,
        },
        "default": next(row for row in rows if row["default"])["label"],
        "baseline": baseline["label"],
        "settings": rows,
    }
    return publish(results, markdown, config.output)


def _size(model: dict) -> str:
    return "" if model["parameters"] is None else f"{model['parameters'] / 1e6:.0f}M parameters, "


def markdown(results: dict) -> str:
    cfg, machine, texts, model = results["config"], results["machine"], results["texts"], results["model"]
    source = cfg["lengths_file"] or "uniform {}-{}".format(*cfg["length_range"])
    fastest = max(results["settings"], key=lambda r: r["real_tokens_per_s"])
    lines = [
        f"`encode` batching settings: {model['name']} ({_size(model)}{model['precision']}), {texts['count']} texts of {source} tokens ({texts['real_tokens']:,} real "
        f"tokens, {texts['min']}-{texts['max']} per text), median of {cfg['repeats']} interleaved rounds. "
        f"{machine['cpu']}, {machine['threads']} threads, torch {machine['torch']}.",
        "",
    ]
    rows = [
        [
            r["batch_size"],
            r["max_tokens"] or "none",
            r["batches"],
            f"{r['padded_tokens']:,}",
            f"{r['padding']:.2f}",
            f"{r['real_tokens_per_s']:,.0f}",
            f"{r['ratio']:.2f}x",
            r["note"],
        ]
        for r in results["settings"]
    ]
    header = [
        "batch size",
        "max tokens",
        "batches",
        "padded tokens",
        "padded / real",
        "real tokens/s",
        "vs baseline",
        "",
    ]
    lines += markdown_table(header, rows, align="r" * 7 + "l").splitlines()
    lines += [
        "",
        f"Baseline: {results['baseline']}. Fastest: {fastest['label']} ({fastest['ratio']:.2f}x). "
        f"Library default on the CPU: {results['default']}.",
    ]
    return "\n".join(lines) + "\n"
