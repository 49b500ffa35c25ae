"""Which runtime runs an export: ONNX Runtime (:class:`.onnx_encoder.OnnxEncoder`) or OpenVINO
(:class:`.openvino_encoder.OpenVinoEncoder`), named or, for ``auto``, measured at start.

``auto`` loads every candidate that applies here (ONNX Runtime fp32, OpenVINO fp32, OpenVINO at the CPU's
bf16 hint where the CPU has it and the precision allows it), each checked against PyTorch fp32 as it loads
(a bf16 that misses the cosine floor is dropped, with its numbers in the reason), and times them with
:func:`neobert.runtime.hardware.choose_fastest` (warm calls only, two rounds, bf16 taken only by a margin) on
a job's own texts where there is a job (``neobert embed``), else on :data:`PROBE_SHAPES`, a service's range
of calls from one short text to a batch of long ones, each shape counting the same (:func:`measure`). The
workload is cut to about :data:`PROBE_SECONDS` a call at the first candidate's pace, so a large model's probe
costs seconds where a small model's stays whole.

A PyTorch model directory that carries its own export in ``DIR/onnx`` (sentence-transformers' layout, written
by ``neobert export onnx --model DIR --output DIR/onnx``) gets PyTorch's fast path among the candidates as well
(:func:`choose_runtime`): PyTorch fp32, PyTorch bf16 where the precision probe finds bf16 faster here, and
the export's runtimes, all timed on the same batch, so that ``auto`` is never slower than the fastest of them.
"""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..common import memory
from ..common.config import check_precision
from ..common.io import write_json
from ..model.pooling import pool
from ..runtime.hardware import (
    AUTO_PRECISION_ENV,
    PROBE_BUDGET,
    RuntimeChoice,
    choose_fastest,
    choose_precision,
    cpu_info,
    isa_cap,
    versions,
    warm_best,
)
from . import openvino_encoder  # its probe read through the module: a test forcing it forces it here too
from .batching import CPU_MAX_TOKENS, token_batches
from .directories import ONNX_CONFIG_FILE
from .encoders import apply_precision, matmul_shape, resolve_model_precision
from .kinds import load_for_inference
from .onnx_encoder import COSINE_FLOOR, FP32_TOLERANCE, REFERENCE_FILE, OnnxEncoder, padded_batch
from .openvino_encoder import STATIC_INT8, OpenVinoEncoder, ParityError, min_cosine, openvino_version

BACKENDS = ("auto", "torch", "onnx", "openvino")  # `neobert serve --backend`, `neobert embed --backend`
RUNTIMES = ("onnx", "openvino")  # the backends that run an export
EXPORT_VARIANTS = ("fp32", "int8", "int8-static")  # an export's graphs (onnx_config.json "files")
PROBE_BATCH, PROBE_LENGTH = 8, 128  # a service's merged call / an embedding job's batch, in tokens per text
# a service's probe: a single short request, a merged batch of short ones, a batch of long ones (texts, tokens)
PROBE_SHAPES = ((1, 16), (PROBE_BATCH, 16), (PROBE_BATCH, PROBE_LENGTH))
# a job's probe: at most this many padded tokens of its texts, in batches as the job runs them, spread over its
# lengths (a call of each candidate on a large model's long texts otherwise takes minutes: the 250M shape's
# fp32 over 160 texts of up to 512 tokens took 71 s)
PROBE_TOKENS = 2 * PROBE_BATCH * PROBE_LENGTH
# a probe call's target, in seconds of the first candidate's warm call: a service's shapes (each a share of it)
# and a job's batches are cut, never below one text, until they take about this at that candidate's pace per
# token. A small model's probe stays whole; a large one's costs seconds, not a minute (the 250M shape's 8 x
# 128 tokens took 1.3 s a call on one EPYC thread, its whole probe 43 s)
PROBE_SECONDS = 0.3
EXPORT_BESIDE = "onnx"  # a model directory's own export, DIR/onnx (sentence-transformers' layout)


@dataclass
class OpenedExport:
    """The encoder that runs, its runtime and precision, and why it was chosen."""

    encoder: Any  # an OnnxEncoder (OpenVinoEncoder) or, for torch, a TorchCandidate (its model)
    runtime: str  # torch | onnx | openvino
    precision: str  # fp32 | bf16 | int8 | int8-static: what /info and a manifest call it
    reason: str
    choice: RuntimeChoice | None = None  # the measurement, for backend auto

    @property
    def label(self) -> str:
        return f"{self.runtime} {self.precision}"


def open_export(
    directory: str,
    backend: str = "auto",
    variant: str = "fp32",
    precision: str = "auto",
    threads: int | None = None,
    cache: str | None = None,
    sample: JobSample | None = None,
) -> OpenedExport:
    """The export ``directory`` on ``backend`` (onnx | openvino | auto) with graph ``variant`` and, on
    OpenVINO, ``precision`` (fp32 | bf16 | auto: the measured faster; ``NEOBERT_AUTO_PRECISION`` pins it).
    ``cache``: a JSON file keeping auto's choice per model and machine (:func:`cache_key`); a choice found
    there is loaded (and checked against PyTorch) without measuring again. ``sample``: a job's own texts and
    batching to time ``auto``'s candidates on (:class:`JobSample`; default a service's probe shapes)."""
    if precision == "auto" and os.environ.get(AUTO_PRECISION_ENV):  # a process tree's pin (the test suite's)
        precision = check_precision(os.environ[AUTO_PRECISION_ENV], ValueError)
    if backend not in ("auto", *RUNTIMES):
        raise ValueError(f"an export runs on {', '.join(RUNTIMES)} or auto; got {backend!r}")
    if backend == "onnx" or (backend == "auto" and variant == "int8"):
        reason = "named" if backend == "onnx" else "ONNX Runtime runs the dynamic int8 graph"
        encoder = OnnxEncoder(directory, variant, threads=threads)
        return OpenedExport(encoder, "onnx", variant, reason)
    if variant != "fp32" or (backend == "openvino" and precision in ("fp32", "bf16")):
        encoder = OpenVinoEncoder(
            directory, variant, threads, "fp32" if variant == STATIC_INT8 else precision
        )
        why = "named" if backend == "openvino" else "OpenVINO runs the static int8 graph"
        return OpenedExport(encoder, "openvino", encoder.label, why)
    key = cache_key(directory, backend, precision, threads)
    cached = _read_cache(cache).get(key) if cache else None
    if cached:
        runtime, label = cached["name"].split()
        encoder = _open_one(directory, runtime, label, threads)
        reason = f"cached in {cache}: {cached['reason']}"
        return OpenedExport(encoder, runtime, label, reason)
    candidates, dropped = _candidates(directory, backend, precision, threads)
    if not candidates:
        raise ValueError(f"nothing runs {directory} at precision {precision} here: {'; '.join(dropped)}")
    if len(candidates) == 1:
        ((name, encoder),) = candidates.items()
        runtime, label = name.split()
        return OpenedExport(encoder, runtime, label, "; ".join(["the one candidate", *dropped]))
    return _measured(candidates, sample, dropped, cache, key)


def _measured(
    candidates: dict[str, Any], sample: Any, dropped: list[str], cache: Any, key: Any
) -> OpenedExport:
    """The fastest of ``candidates`` on ``sample`` (:func:`measure`), with its reason (and the candidates left
    out); written to ``cache`` under ``key`` where a cache is kept."""
    choice = measure(candidates, sample)
    runtime, label = choice.name.split()
    reason = "; ".join([f"measured: {choice.reason}", *dropped])
    if cache:
        _write_cache(cache, key, {"name": choice.name, "reason": reason, "timings_ms": choice.timings_ms})
    chosen = candidates.pop(choice.name)
    candidates.clear()  # the others' sessions and weights go now, their memory back to the system: a large
    gc.collect()  # model's left 1.3 GB resident in a service's model process (the 250M shape)
    memory.release()
    return OpenedExport(chosen, runtime, label, reason, choice)


def _candidates(
    directory: str, backend: str, precision: str, threads: int | None, onnx: OnnxEncoder | None = None
) -> tuple[dict[str, OnnxEncoder], list[str]]:
    """The encoders ``auto`` measures (each checked against PyTorch as it loads) and the ones left out, why;
    ``onnx``: ONNX Runtime's session on ``directory`` where one is open already."""
    candidates: dict[str, OnnxEncoder] = {}
    dropped: list[str] = []
    if backend == "auto" and precision != "bf16":
        candidates["onnx fp32"] = onnx or OnnxEncoder(directory, threads=threads)
    if precision != "bf16":
        candidates["openvino fp32"] = OpenVinoEncoder(directory, threads=threads)
    if precision != "fp32" and openvino_encoder.bf16_hint_available():
        try:
            candidates["openvino bf16"] = OpenVinoEncoder(directory, threads=threads, precision="bf16")
        except ParityError as error:
            dropped.append(f"openvino bf16 dropped: {error}")
    elif precision != "fp32":
        dropped.append("no bf16 on this CPU")
    return candidates, dropped


def cache_key(directory: str, backend: str, precision: str, threads: int | None) -> str:
    """What a cached choice holds for: the export (its path and graph's modification time), the machine
    (CPU model and flags), the thread count, the runtimes' versions and the setting asked."""
    path = Path(directory).resolve()
    graph = path / "model.onnx"
    stamp = graph.stat().st_mtime_ns if graph.is_file() else 0
    name, flags = cpu_info()
    relevant = sorted(f for f in flags if f.startswith(("avx", "amx")))
    cap = f"isa={isa_cap() or 'all'}/{os.environ.get('ATEN_CPU_CAPABILITY', 'default')}"  # emulated kinds
    return "|".join(
        [
            str(path),
            str(stamp),
            name,
            " ".join(relevant),
            cap,
            f"threads={threads or 0}",
            f"onnxruntime={versions().get('onnxruntime')}",
            f"openvino={openvino_version()}",
            f"{backend}/{precision}",
        ]
    )


def _read_cache(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"backend cache {path} is not JSON ({error}); delete it to measure again") from None
    if not isinstance(data, dict):
        raise ValueError(f"backend cache {path} holds no JSON object; delete it to measure again")
    return data


def _write_cache(path: str, key: str, entry: dict[str, Any]) -> None:
    data = _read_cache(path)
    data[key] = entry
    write_json(Path(path), data)


def export_beside(model: str | os.PathLike) -> Path | None:
    """The export a PyTorch model directory carries in ``DIR/onnx`` (None where it carries none)."""
    path = Path(model) / EXPORT_BESIDE
    return path if (path / ONNX_CONFIG_FILE).is_file() else None


class TorchCandidate:
    """PyTorch's fast path at one precision, a candidate of :func:`choose_runtime`: the model directory's base
    encoder run on the inputs an export's graph takes, giving what the graph gives (hidden states and pooled
    vectors, pooled as the export states), with ``threads`` threads while it runs."""

    def __init__(self, model: str, export: OnnxEncoder, precision: str, threads: int | None):
        import torch

        loaded = load_for_inference(model, None, "base", precision=None)
        self.model = apply_precision(loaded.model, precision).eval()
        self.precision, self.threads = precision, threads
        self.tokenizer, self.max_length = export.tokenizer, export.max_length  # probe_batch's, not the export
        self.pooling = export.config["pooling"]
        self._torch = torch

    def tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The graph's inputs for ``texts`` (:func:`job_batches`)."""
        return padded_batch(self.tokenizer, texts)

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        torch = self._torch
        threads = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                mask = torch.from_numpy(attention_mask)
                states = self.model(input_ids=torch.from_numpy(input_ids), attention_mask=mask)[0]
                vectors = pool(states, mask, self.pooling["method"]).float()
                if self.pooling["normalize"]:
                    vectors = torch.nn.functional.normalize(vectors, dim=-1)
        finally:
            torch.set_num_threads(threads)
        return [states.float().numpy(), vectors.numpy()]


def _warm_seconds(encoder: Any, ids: np.ndarray, mask: np.ndarray) -> float:
    """The best warm call of ``encoder`` on one batch (the weights of :func:`measure`'s shapes)."""

    def call() -> float:
        started = time.perf_counter()
        encoder.run(ids, mask)
        return time.perf_counter() - started

    return warm_best(call, budget=PROBE_BUDGET).seconds


def choose_runtime(
    model: str,
    precision: str = "auto",
    threads: int | None = None,
    cache: str | None = None,
    sample: JobSample | None = None,
) -> OpenedExport:
    """``--backend auto`` for a PyTorch model directory that carries its export (:func:`export_beside`): the
    fastest of PyTorch fp32, PyTorch bf16 (where ``precision`` allows it and the precision probe finds bf16
    faster here) and ONNX Runtime and OpenVINO on the export; measured on one batch (:func:`measure`), bf16
    taken only by a margin and only where its vectors keep the cosine floor. Refused where PyTorch fp32 does
    not reproduce the export's check batch (another model's export, or a stale one). A classifier's export
    (not embeddings) leaves PyTorch at the probed precision. ``sample``: as :func:`open_export`'s."""
    if precision == "auto" and os.environ.get(AUTO_PRECISION_ENV):
        precision = check_precision(os.environ[AUTO_PRECISION_ENV], ValueError)
    probed = resolve_model_precision(model, "auto")
    export = export_beside(model)
    if export is None:
        raise ValueError(f"{model} carries no export in {Path(model) / EXPORT_BESIDE}")
    key = cache_key(str(export), "auto+torch", precision, threads)
    cached = _read_cache(cache).get(key) if cache else None
    if cached:
        runtime, label = cached["name"].split()
        encoder = None if runtime == "torch" else _open_one(str(export), runtime, label, threads)
        return OpenedExport(encoder, runtime, label, f"cached in {cache}: {cached['reason']}")
    head = json.loads((export / ONNX_CONFIG_FILE).read_text(encoding="utf-8")).get("head")
    if head != "base":  # read before any session opens
        why = f"{export} exports the {head} head, not embeddings"
        chosen = probed if precision == "auto" else precision
        return OpenedExport(None, "torch", chosen, f"precision {chosen}; {why}")
    reference = OnnxEncoder(export, threads=threads)  # the graph's inputs; a candidate where fp32 runs
    candidates, dropped = _torch_candidates(model, export, reference, precision, probed, threads)
    exported, left_out = _candidates(str(export), "auto", precision, threads, reference)
    del reference  # kept only as a candidate: released with the others that lose
    candidates.update(exported)
    return _measured(candidates, sample, dropped + left_out, cache, key)


def _torch_candidates(
    model: str, export: Path, reference: OnnxEncoder, precision: str, probed: str, threads: int | None
) -> tuple[dict[str, Any], list[str]]:
    """PyTorch fp32 and bf16 as :func:`choose_runtime`'s candidates (bf16 where ``precision`` allows it and
    the probe took it, dropped below the cosine floor), each run on the export's check batch: fp32 must
    reproduce it (else the export is not this model's: refused by name)."""
    candidates: dict[str, Any] = {}
    dropped: list[str] = []
    # bf16 first where the precision probe took it: it sets the pace the slower candidates give up against
    # (choose_fastest), so they cost fewer calls
    if precision != "fp32" and probed == "bf16":
        candidates["torch bf16"] = TorchCandidate(model, reference, "bf16", threads)
    elif precision != "fp32":
        dropped.append(f"torch bf16 not timed: {_probe_reason(model)}")
    if precision != "bf16":
        candidates["torch fp32"] = TorchCandidate(model, reference, "fp32", threads)
    check = np.load(export / REFERENCE_FILE)
    expected = check[reference.config["outputs"][-1]]
    for name in list(candidates):
        got = candidates[name].run(check["input_ids"], check["attention_mask"])[-1]
        if name == "torch fp32" and float(np.abs(got - expected).max()) > FP32_TOLERANCE:
            worst = float(np.abs(got - expected).max())
            raise ValueError(
                f"{export} is not {model}'s export: PyTorch fp32 differs from its check batch by {worst:.2e} "
                f"(> {FP32_TOLERANCE}); export the model again (`neobert export onnx --model {model} --output {export} "
                "--force`) or remove it"
            )
        if name == "torch bf16" and (cosine := min_cosine(got, expected)) < COSINE_FLOOR:
            dropped.append(f"torch bf16 dropped: min cosine {cosine:.4f} to fp32 (< {COSINE_FLOOR})")
            del candidates[name]
    return candidates, dropped


def _open_one(export: str, runtime: str, label: str, threads: int | None) -> OnnxEncoder:
    if runtime == "onnx":
        return OnnxEncoder(export, threads=threads)
    return OpenVinoEncoder(export, threads=threads, precision=label)


def _probe_reason(model: str) -> str:
    from transformers import AutoConfig

    return choose_precision(*matmul_shape(AutoConfig.from_pretrained(model)), "cpu", False).reason


def probe_batch(encoder: OnnxEncoder, texts: int = PROBE_BATCH, length: int = PROBE_LENGTH) -> tuple:
    """(input_ids, attention_mask) of ``texts`` rows of ``min(length, max_length)`` real token ids of the
    tokenizer, no padding."""
    length = min(length, encoder.max_length)
    ids = np.array(encoder.tokenizer.encode("the model's own shape " * length).ids[:length], dtype=np.int64)
    ids = np.resize(ids, length)
    return np.tile(ids, (texts, 1)), np.ones((texts, length), dtype=np.int64)


def probe_windows(shapes: list[tuple[int, int]], budget: int) -> list[tuple[int, int]]:
    """Which of a job's batches its probe runs and how many rows of each, (index, rows): ``shapes`` are the
    job's batches as (rows, width), shortest first. Every batch where they all fit in ``budget`` padded
    tokens; else as many as fit, spread evenly from the shortest to the longest (the job's padding and batch
    size over its range of lengths); else the one batch holding the job's median padded token (where the job
    spends its time, which its long texts dominate: a middle text by count is short), cut to the rows that
    fit, at least one."""
    if not shapes:
        raise ValueError("no texts to probe")
    n = len(shapes)
    padded = [rows * width for rows, width in shapes]
    if sum(padded) <= budget:
        return [(i, rows) for i, (rows, _) in enumerate(shapes)]
    for count in range(n - 1, 1, -1):
        picks = sorted({round(k * (n - 1) / (count - 1)) for k in range(count)})
        if sum(padded[i] for i in picks) <= budget:
            return [(i, shapes[i][0]) for i in picks]
    median = int(np.searchsorted(np.cumsum(padded), sum(padded) / 2))
    rows, width = shapes[median]
    return [(median, max(1, min(rows, budget // width)))]


def probe_shapes(token_seconds: float) -> list[tuple[int, int]]:
    """:data:`PROBE_SHAPES` (texts, tokens), each cut to the texts (at least one) that a call takes about its
    share of :data:`PROBE_SECONDS` for at ``token_seconds`` a token."""
    share = PROBE_SECONDS / len(PROBE_SHAPES)
    return [
        (max(1, min(texts, int(share / (token_seconds * length)))), length) for texts, length in PROBE_SHAPES
    ]


def _token_seconds(encoder: Any) -> float:
    """Seconds a token of ``encoder``'s best warm call on one text of :data:`PROBE_LENGTH` tokens."""
    ids, mask = probe_batch(encoder, 1, PROBE_LENGTH)
    return max(_warm_seconds(encoder, ids, mask) / ids.shape[1], 1e-9)  # never 0: the cuts divide by it


@dataclass(frozen=True)
class JobSample:
    """A job's own texts and how the job cuts them into calls (``neobert embed``'s ``--batch-size`` and
    ``--max-tokens``): what ``auto`` times its candidates on (:func:`job_batches`)."""

    texts: list[str]
    batch_size: int = PROBE_BATCH
    max_tokens: int | None = None  # None: CPU_MAX_TOKENS, the default where the candidates run (the CPU)

    def batches(self, encoder: Any) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
        """The texts through ``encoder``'s tokenizer, (ids, mask), and the job's batches of their rows
        (:func:`~neobert.inference.batching.token_batches`), shortest first, each longest row first."""
        ids, mask = encoder.tokenize(self.texts)
        bound = self.max_tokens or CPU_MAX_TOKENS
        return ids, mask, list(reversed(token_batches(mask.sum(axis=1).tolist(), self.batch_size, bound)))


def job_batches(encoder: Any, sample: JobSample, token_seconds: float) -> tuple[list[tuple], str]:
    """A job's probe: its texts cut into the job's own batches (:meth:`JobSample.batches`), each padded to
    its longest text, at most :data:`PROBE_TOKENS` padded tokens of them and no more than a
    :data:`PROBE_SECONDS` call takes at ``token_seconds`` a token (:func:`probe_windows`); the batches and
    what they are, in words."""
    ids, mask, groups = sample.batches(encoder)
    lengths = mask.sum(axis=1)
    widths = [int(lengths[rows[0]]) for rows in groups]
    budget = max(1, min(PROBE_TOKENS, int(PROBE_SECONDS / token_seconds)))
    picks = probe_windows([(len(rows), width) for rows, width in zip(groups, widths)], budget)
    batches = [(ids[groups[i][:kept], : widths[i]], mask[groups[i][:kept], : widths[i]]) for i, kept in picks]
    count, tokens = sum(len(b[0]) for b in batches), sum(int(b[1].sum()) for b in batches)
    of = (
        f"{count} of the job's texts"
        if count == len(sample.texts)
        else f"{count} of the job's {len(sample.texts)} texts (its batches, spread over their lengths)"
    )
    return batches, f"{of} in {len(batches)} batches ({tokens} tokens)"


def measure(candidates: dict[str, Any], sample: JobSample | None = None) -> RuntimeChoice:
    """:func:`~neobert.runtime.hardware.choose_fastest` over the candidates' calls, on a workload cut to
    about :data:`PROBE_SECONDS` a call at the first candidate's pace. With ``sample`` (a job's own texts):
    :func:`job_batches`. Without (a service, whose traffic is not known at start): each of
    :data:`PROBE_SHAPES` (a single short text, a merged batch of short ones, a batch of long ones;
    :func:`probe_shapes`), each shape counting the same: a candidate's time on a shape is divided by the
    first candidate's there, so that neither the per-call cost of single requests nor the arithmetic of long
    batches alone decides."""
    first = next(iter(candidates.values()))
    token_seconds = _token_seconds(first)
    if sample:
        batches, workload = job_batches(first, sample, token_seconds)
        weights = [1.0] * len(batches)
    else:
        batches = [probe_batch(first, texts, length) for texts, length in probe_shapes(token_seconds)]
        reference = [_warm_seconds(first, ids, mask) for ids, mask in batches]
        total = sum(reference)
        weights = [total / (len(batches) * r) for r in reference]  # each shape a share of the first's total
        workload = " + ".join(f"{ids.shape[0]}x{ids.shape[1]}" for ids, _ in batches) + (
            " tokens, each shape weighted equally"
        )

    def timed(encoder: OnnxEncoder):
        def call() -> float:
            seconds = 0.0
            for (ids, mask), weight in zip(batches, weights):
                started = time.perf_counter()
                encoder.run(ids, mask)
                seconds += weight * (time.perf_counter() - started)
            return seconds

        return call

    exact = {name for name in candidates if name.endswith("fp32")}
    return choose_fastest({name: timed(e) for name, e in candidates.items()}, exact, workload)
