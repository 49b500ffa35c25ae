"""ONNX Runtime (fp32 and int8) beside the PyTorch fast path, offline and through ``neobert serve``.

The model (a preset with random weights, saved first, or a model directory) is exported with
:func:`neobert.export.onnx.export_onnx` (``quantize="int8"``). Texts are cut from the standard-library corpus
at lengths spread over [8, max_length] tokens, tokenized once by the exported tokenizer.json, and grouped by
length into batches of ``batch_size`` texts and at most ``CPU_MAX_TOKENS`` padded tokens (as `neobert embed`
batches on the CPU, on every backend); every
variant gets exactly these (input_ids, attention_mask) arrays, and computes the same output (the pooled
sentence embedding, or a classifier's logits). Timed round-robin after a warm-up, median of ``repeats``;
each variant's output is compared with PyTorch fp32 (max abs, cosine).

Then, for a base encoder, each variant behind the service (``neobert serve`` on the saved source directory
with ``--backend torch``, or on the export with ``--backend onnx``; dynamic batching on, the model in its own
process with the server's default thread count): all servers started, then ``repeats`` interleaved rounds
of ``serve_concurrency`` closed-loop clients sending single-text ``/embed`` requests for ``serve_duration``
seconds to each (the load generator of :mod:`neobert.benchmarks.serve`).
"""

from __future__ import annotations

import copy
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.progress import progress_bar
from ..common.tables import fmt, markdown_table
from ..data.corpus import iter_stdlib_documents
from ..export.onnx import ClassifierGraph, EncoderGraph, export_onnx, inspect_source
from ..export.openvino import NDCG_TOLERANCE, quantize_static
from ..inference.backends import EXPORT_BESIDE, JobSample, choose_runtime, export_beside, open_export
from ..inference.batching import CPU_MAX_TOKENS, token_batches
from ..inference.directories import ONNX_CONFIG_FILE
from ..inference.encoders import apply_precision, is_preset, load_encoder, save_pretrained
from ..inference.onnx_encoder import COSINE_FLOOR, OnnxEncoder
from ..inference.openvino_encoder import STATIC_INT8, STATIC_INT8_FILE, OpenVinoEncoder, bf16_hint_available
from .measure import machine_info
from .report import publish
from .serve import (
    Cell,
    ServeBenchConfig,
    ServerProcess,
    calls_by_placement,
    make_cell,
    merged_counts,
    request_texts,
    round_order,
    run_cell,
    threads_used,
)

VARIANTS = {
    "pytorch-fp32": "PyTorch fp32 on the fast path (NeoBERT: unpadded attention; others fp32 as loaded): the reference",
    "pytorch-bf16": "PyTorch bf16 (NeoBERT: the fast path; others cast; emulated, slow on CPUs without AVX-512 BF16 / AMX)",
    "onnx-fp32": "ONNX Runtime, model.onnx (padded attention, CPU provider)",
    "onnx-int8": "ONNX Runtime, model_int8.onnx (dynamic int8 MatMuls; FFN down-projections fp32)",
    "openvino-fp32": "OpenVINO, model.onnx at f32 inference precision (CPU plugin)",
    "openvino-bf16": "OpenVINO, model.onnx at the CPU's bf16 inference hint (AVX-512 BF16 / AMX only)",
    "openvino-int8-static": "OpenVINO, openvino_int8.xml: NNCF static int8 from stdlib calibration texts",
    "auto": "what `--backend auto` takes here on the model directory carrying its export (PyTorch and the "
    "export's runtimes measured at start: warm calls, two rounds)",
}

# the exact paths issue 43's goal compares `auto` with (int8 trades accuracy, so it is not among them)
FLOAT_VARIANTS = ("pytorch-fp32", "pytorch-bf16", "onnx-fp32", "openvino-fp32", "openvino-bf16")


def variant_of(backend: str, precision: str) -> str:
    """The bench's variant for a runtime and precision (``torch`` / ``bf16`` -> ``pytorch-bf16``)."""
    return f"{'pytorch' if backend == 'torch' else backend}-{precision}"


@dataclass
class OnnxBenchConfig:
    """Exports the model (a preset is saved first) with `neobert export onnx --quantize int8`, then runs
    PyTorch fp32 (the fast path), optionally bf16, and ONNX Runtime fp32 and int8 on the same batches of
    stdlib-corpus texts of mixed lengths, interleaved, with the same thread count: real tokens/s, the ratio
    to PyTorch fp32, and each output's max abs difference and cosine to PyTorch fp32. Needs
    `pip install 'neobert[onnx]'`."""

    model: str = "small"  # a NeoBERT preset (random weights) or a model directory (e.g. real weights)
    texts: int = 64  # texts of the standard-library corpus
    max_length: int = 256  # the longest text in tokens; lengths are spread evenly from 8 up to it
    batch_size: int = 16  # texts per forward, grouped by length
    threads: int = 1  # intra-op threads, for torch, onnxruntime and OpenVINO alike
    repeats: int = 3  # timed rounds (the median is reported)
    bf16: bool = False  # add the PyTorch bf16 fast path (slow where bf16 is emulated)
    output: str | None = None  # directory for results.json and results.md
    progress: bool = True  # a progress bar
    serve_concurrency: list[int] = field(
        default_factory=lambda: [32]
    )  # clients per service cell, one cell per count (0: offline only)
    openvino: bool = True  # add OpenVINO (fp32; bf16 with --bf16 where the CPU has it) and backend auto
    int8_static: bool = False  # add NNCF's static int8 on OpenVINO, its cosine and nDCG@10 beside it
    calibration_texts: int = 300  # int8_static: stdlib-corpus texts after the timed ones
    serve_duration: float = 5.0  # seconds of each variant's service run per round (repeats rounds)

    def __post_init__(self) -> None:
        if isinstance(self.serve_concurrency, int):
            self.serve_concurrency = [self.serve_concurrency]
        if any(c < 0 for c in self.serve_concurrency):
            raise ValueError(f"serve_concurrency must be >= 0 clients, got {self.serve_concurrency}")
        if self.texts < 1 or self.batch_size < 1 or self.repeats < 1 or self.threads < 1:
            raise ValueError("texts, batch_size, repeats and threads must be >= 1")
        if self.max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {self.max_length}")


def corpus_texts(tokenizer: Any, count: int, max_length: int) -> list[str]:
    """``count`` texts cut from stdlib documents at token lengths spread over [8, max_length - 2]."""
    rng = random.Random(0)
    lengths = [8 + (max_length - 10) * i // max(count - 1, 1) for i in range(count)]
    rng.shuffle(lengths)
    texts: list[str] = []
    for document, length in zip(iter_stdlib_documents(), lengths):
        ids = tokenizer(document, add_special_tokens=False, truncation=True, max_length=length)["input_ids"]
        texts.append(tokenizer.decode(ids))
    if len(texts) < count:
        raise ValueError(f"the stdlib corpus holds only {len(texts)} documents; {count} needed")
    return texts


def batches(
    onnx_encoder: OnnxEncoder, texts: list[str], batch_size: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The bench's texts cut into forwards as a job on the CPU cuts them (:func:`token_batches`: at most
    ``batch_size`` texts and :data:`CPU_MAX_TOKENS` padded tokens a call, longest first), shortest first."""
    ids, mask = onnx_encoder.tokenize(texts)
    lengths = mask.sum(axis=1)
    out = []
    for rows in reversed(token_batches(lengths.tolist(), batch_size, CPU_MAX_TOKENS)):
        width = int(lengths[rows[0]])
        out.append((ids[rows, :width], mask[rows, :width]))
    return out


def _torch_forward(graph: torch.nn.Module):
    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = graph(torch.from_numpy(ids), torch.from_numpy(mask))
        return (out[-1] if isinstance(out, tuple) else out).float().numpy()

    return forward


def _onnx_forward(encoder: OnnxEncoder):
    return lambda ids, mask: encoder.run(ids, mask)[-1]


def run(config: OnnxBenchConfig) -> dict:
    torch.set_num_threads(config.threads)
    with tempfile.TemporaryDirectory(prefix="neobert-onnx-bench-") as tmp:
        source = Path(config.model)
        if is_preset(config.model):
            torch.manual_seed(0)
            preset = load_encoder(config.model)
            source = save_pretrained(preset.model, preset.tokenizer, Path(tmp) / "model")
        start = time.perf_counter()
        exported = export_onnx(source, Path(tmp) / "onnx", quantize="int8")
        export_s = time.perf_counter() - start
        sizes = {
            v: (exported.output / f).stat().st_size / 1e6
            for v, f in (("fp32", "model.onnx"), ("int8", "model_int8.onnx"))
        }
        carrying = _carrying(source, exported.output, Path(tmp) / "carrying")
        extra = _openvino_extras(config, exported, carrying) if config.openvino else {}
        results = _measure(config, source, exported, export_s, sizes, extra, carrying)
        if any(config.serve_concurrency) and exported.head == "base":
            publish(results, markdown, config.output)  # the offline table kept if the service's part fails
            results["service"] = measure_service(config, source, exported.output, extra, carrying)
    return publish(results, markdown, config.output)


def _carrying(source: Path, export: Path, directory: Path) -> Path:
    """The model directory as ``--backend auto`` measures it beside its export: ``source``'s files and the
    export in DIR/onnx (links, nothing copied)."""
    directory.mkdir()
    for item in source.iterdir():
        if item.name != EXPORT_BESIDE:
            (directory / item.name).symlink_to(item.resolve())
    (directory / EXPORT_BESIDE).symlink_to(export.resolve())
    return directory


def _forwards(
    config: OnnxBenchConfig,
    task: str,
    fp32: torch.nn.Module,
    exported: Any,
    onnx_fp32: OnnxEncoder,
    carrying: Path,
    texts: list[str],
    chosen: dict[str, Any],
) -> dict[str, Any]:
    """variant -> forward(ids, mask) -> outputs: the PyTorch model (fp32, and bf16 if asked) wrapped as the
    export's graph, so both sides compute the same outputs, and the exported fp32 and int8 graphs."""

    def graph(model: torch.nn.Module) -> torch.nn.Module:
        if task != "base":
            return ClassifierGraph(model).eval()
        return EncoderGraph(model, exported.pooling["method"], exported.pooling["normalize"]).eval()

    forwards = {"pytorch-fp32": _torch_forward(graph(apply_precision(copy.deepcopy(fp32), "fp32")))}
    if config.bf16:
        bf16 = apply_precision(copy.deepcopy(fp32), "bf16")  # NeoBERT: the fast path; others cast
        forwards["pytorch-bf16"] = _torch_forward(graph(bf16))
    forwards["onnx-fp32"] = _onnx_forward(onnx_fp32)
    forwards["onnx-int8"] = _onnx_forward(OnnxEncoder(exported.output, "int8", threads=config.threads))
    if config.openvino:
        for name in _openvino_variants(config, exported.output):
            if name == "auto":
                opened = _auto(carrying, config.threads, JobSample(texts, config.batch_size, CPU_MAX_TOKENS))
                chosen["auto"] = opened.reason
                chosen["auto_runs"] = variant_of(opened.runtime, opened.precision)
                if opened.runtime == "torch":  # what a job then runs: PyTorch's own path at that precision
                    copied = apply_precision(copy.deepcopy(fp32), opened.precision)
                    forwards[name] = _torch_forward(graph(copied))
                else:
                    forwards[name] = _onnx_forward(opened.encoder)
                continue
            variant = STATIC_INT8 if name.endswith(STATIC_INT8) else "fp32"
            precision = "bf16" if name.endswith("bf16") else "fp32"
            forwards[name] = _onnx_forward(
                OpenVinoEncoder(exported.output, variant, threads=config.threads, precision=precision)
            )
    return forwards


def _openvino_variants(config: OnnxBenchConfig, directory: Path) -> list[str]:
    """The OpenVINO rows that apply here: fp32, bf16 (asked and the CPU has it), the static int8 (written),
    and backend auto."""
    names = ["openvino-fp32"]
    if config.bf16 and bf16_hint_available():
        names.append("openvino-bf16")
    if (directory / STATIC_INT8_FILE).is_file():
        names.append("openvino-int8-static")
    return [*names, "auto"]


def _auto(carrying: Path, threads: int, sample: JobSample) -> Any:
    """``--backend auto`` on the model directory carrying its export: PyTorch and the export's runtimes,
    timed on ``sample`` (the bench's texts, as `neobert embed` times them on a job's own)."""
    export = export_beside(carrying)
    if (
        json.loads((export / ONNX_CONFIG_FILE).read_text())["head"] != "base"
    ):  # a classifier: the export alone
        return open_export(str(export), "auto", threads=threads, sample=sample)
    return choose_runtime(str(carrying), threads=threads, sample=sample)


def _openvino_extras(config: OnnxBenchConfig, exported: Any, carrying: Path) -> dict[str, Any]:
    """What auto takes here and why (measured once more in the service, at each server's start); with
    ``int8_static``, NNCF's static int8 written and its check (its numbers, and whether the defaults of
    ``neobert export openvino-int8`` accept it: the bench keeps it either way, to time it)."""
    from transformers import AutoTokenizer

    extra: dict[str, Any] = {}
    if config.int8_static and exported.head == "base":
        tokenizer = AutoTokenizer.from_pretrained(exported.output)
        count = config.texts + config.calibration_texts
        calibration = corpus_texts(tokenizer, count, min(config.max_length, exported.max_length))[
            config.texts :
        ]
        check = quantize_static(
            exported.output,
            calibration,
            cosine_floor=-1.0,
            ndcg_tolerance=float("inf"),
            threads=config.threads,
        )
        defaults = replace(check, cosine_floor=COSINE_FLOOR, ndcg_tolerance=NDCG_TOLERANCE)
        extra["int8_static"] = {**asdict(defaults), "accepted": defaults.accepted}
    return extra


def _time(forwards: dict[str, Any], work: list, repeats: int, progress: bool) -> dict[str, list[float]]:
    """variant -> seconds of each of ``repeats`` passes over every batch of ``work``."""
    times: dict[str, list[float]] = {name: [] for name in forwards}
    with progress_bar(total=repeats * len(forwards), desc="timing", disable=not progress) as rounds:
        for round_ in range(repeats):
            # interleaved, in an order that changes each round: drift on a shared machine hits all alike
            for name in round_order(list(forwards), round_):
                start = time.perf_counter()
                for ids, mask in work:
                    forwards[name](ids, mask)
                times[name].append(time.perf_counter() - start)
                rounds.update()
    return times


def _rows(
    outputs: dict[str, np.ndarray], times: dict[str, list[float]], real_tokens: int, sizes: dict
) -> list[dict]:
    """One row per variant: its speed (median pass) against PyTorch fp32's, and its outputs' distance to them."""
    reference = outputs["pytorch-fp32"]
    base = real_tokens / statistics.median(times["pytorch-fp32"])
    rows = []
    for name, out in outputs.items():
        cosine = (out * reference).sum(1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(reference, axis=1))
        speed = real_tokens / statistics.median(times[name])
        rows.append(
            {
                "variant": name,
                "what": VARIANTS[name],
                "real_tokens_per_s": speed,
                "vs_pytorch_fp32": speed / base,
                "rounds_per_s": [real_tokens / t for t in times[name]],
                "max_abs": float(np.abs(out - reference).max()),
                "cosine_min": float(cosine.min()),
                "cosine_mean": float(cosine.mean()),
                "file_mb": sizes.get(name.removeprefix("onnx-")) if name.startswith("onnx") else None,
            }
        )
    return rows


def _measure(
    config: OnnxBenchConfig,
    source: Path,
    exported: Any,
    export_s: float,
    sizes: dict,
    extra: dict,
    carrying: Path,
) -> dict:
    info = inspect_source(source)
    encoder = load_encoder(info.path, head=info.head)
    fp32 = encoder.model.float().eval()
    onnx_fp32 = OnnxEncoder(exported.output, threads=config.threads)
    texts = corpus_texts(encoder.tokenizer, config.texts, min(config.max_length, exported.max_length))
    forwards = _forwards(config, info.head, fp32, exported, onnx_fp32, carrying, texts, extra)
    # batches from the export's tokenizer: every variant sees the same ids
    work = batches(onnx_fp32, texts, config.batch_size)
    real_tokens = int(sum(mask.sum() for _, mask in work))
    outputs = {
        name: np.concatenate([f(ids, mask) for ids, mask in work]) for name, f in forwards.items()
    }  # warm-up
    rows = _rows(outputs, _time(forwards, work, config.repeats, config.progress), real_tokens, sizes)
    lengths = [int(mask.sum(axis=1).min()) for _, mask in work] + [
        int(mask.sum(axis=1).max()) for _, mask in work
    ]
    parameters = sum(p.numel() for p in fp32.parameters())
    return {
        "config": asdict(config),
        "machine": machine_info("cpu"),
        "model": {"type": exported.model_type, "head": exported.head, "parameters": parameters},
        "texts": {
            "count": len(texts),
            "real_tokens": real_tokens,
            "min": min(lengths),
            "max": max(lengths),
            "batches": len(work),
            "max_tokens": CPU_MAX_TOKENS,  # padded tokens a call at most, as a job on the CPU
        },
        "export_s": export_s,
        "export_parity": exported.parity,
        "rows": rows,
        **extra,
    }


# variant: the server's settings (``neobert serve`` options) on the source or the exported directory
SERVED = {
    "pytorch-fp32": {"backend": "torch", "precision": "fp32"},
    "pytorch-bf16": {"backend": "torch", "precision": "bf16"},
    "onnx-fp32": {"backend": "onnx", "onnx_variant": "fp32"},
    "onnx-int8": {"backend": "onnx", "onnx_variant": "int8"},
    "openvino-fp32": {"backend": "openvino", "precision": "fp32"},
    "openvino-bf16": {"backend": "openvino", "precision": "bf16"},
    "openvino-int8-static": {"backend": "openvino", "onnx_variant": "int8-static"},
    "auto": {"backend": "auto"},  # on the model directory carrying its export: measured at the server's start
}
# seconds a server may take to answer /health: `auto` times every candidate on the model's own shapes at its
# start, warm calls in two rounds (the 250M shape on one thread: 89 s here, each fp32 call seconds long)
SERVER_START_LIMIT = 1800.0


def measure_service(
    config: OnnxBenchConfig, source: Path, exported: Path, extra: dict, carrying: Path
) -> list[dict]:
    """Each variant behind its own ``neobert serve``, all started first, then measured round-robin
    (``repeats`` rounds of ``serve_duration`` seconds at each of ``serve_concurrency`` client counts), so
    drift on a shared machine hits every variant alike; a variant's cell pools its rounds."""
    texts = request_texts(512, 16)
    variants = [
        v for v in SERVED if (config.bf16 or v != "pytorch-bf16") and not v.startswith(("openvino", "auto"))
    ]
    if config.openvino:
        variants += _openvino_variants(config, exported)
    return [
        row
        for clients in config.serve_concurrency
        if clients
        for row in _service_rows(config, source, exported, variants, texts, clients, carrying)
    ]


def _service_rows(
    config: OnnxBenchConfig,
    source: Path,
    exported: Path,
    variants: list[str],
    texts: list[str],
    clients: int,
    carrying: Path,
) -> list[dict]:
    servers: dict[str, ServerProcess] = {}
    try:
        _start_servers(servers, config, variants, (source, exported, carrying), texts, clients)
        infos = {name: server.info() for name, server in servers.items()}  # what runs (auto: its choice)
        scraped = {name: server.metrics() for name, server in servers.items()}
        before = {name: merged_counts(text) for name, text in scraped.items()}
        placed = {name: calls_by_placement(text) for name, text in scraped.items()}
        rounds = _timed_rounds(servers, config, texts, clients)
        scraped = {name: server.metrics() for name, server in servers.items()}
        rows = [
            {
                **asdict(
                    _pooled_cell(name, rounds[name], before[name], merged_counts(scraped[name]), clients)
                ),
                "clients": clients,
                "backend": _runs(infos[name], placed[name], calls_by_placement(scraped[name])),
                "runs_variant": variant_of(infos[name]["backend"], infos[name]["precision"]),
                "rounds_per_s": [len(r["latencies"]) / r["seconds"] for r in rounds[name]],
                "backend_reason": infos[name].get("backend_reason"),
                "threads_reason": infos[name].get("threads_reason"),  # a pair's: its probe times
                "start_s": round(server.start_s, 1),
            }
            for name, server in servers.items()
        ]
    finally:
        for server in servers.values():
            server.stop()
    base = next(r["requests_per_s"] for r in rows if r["label"] == "pytorch-fp32")  # at this client count
    for row in rows:
        row["vs_pytorch_fp32"] = row["requests_per_s"] / base if base else None
    return rows


def _timed_rounds(
    servers: dict[str, ServerProcess], config: OnnxBenchConfig, texts: list[str], clients: int
) -> dict[str, list[dict]]:
    """Each server's cells: ``repeats`` rounds of ``serve_duration`` seconds at ``clients`` clients, every
    server in each round, in an order that changes from round to round (:func:`.serve.round_order`)."""
    rounds: dict[str, list[dict]] = {name: [] for name in servers}
    total = config.repeats * len(servers)
    with progress_bar(total=total, desc="service", disable=not config.progress) as bar:
        for round_ in range(config.repeats):
            for name in round_order(list(servers), round_):
                server = servers[name]
                cell = run_cell(
                    server.port, clients, texts, config.serve_duration, max_requests=10**9, server=server
                )
                rounds[name].append(cell)
                bar.update()
    return rounds


def _start_servers(
    servers: dict[str, ServerProcess],
    config: OnnxBenchConfig,
    variants: list[str],
    models: tuple[Path, Path, Path],
    texts: list[str],
    clients: int,
) -> None:
    """A server per variant into ``servers`` (the caller stops them), each warmed up for a round's length:
    `auto`'s server, fresh from its probe, served its first seconds below a server of the runtime it took and
    then matched it (docs/benchmarks.md, the 250M shape). ``models``: the source, its export, the source
    carrying its export."""
    source, exported, carrying = models
    for name in progress_bar(variants, desc="starting servers", disable=not config.progress):
        settings = SERVED[name]
        model = {"torch": source, "auto": carrying}.get(settings["backend"], exported)
        served = ServeBenchConfig(
            model=str(model), output=None, startup_timeout=SERVER_START_LIMIT, **settings
        )
        servers[name] = ServerProcess(served, True)
        run_cell(servers[name].port, clients, texts, config.serve_duration, 10**9)


def _runs(info: dict, before: dict[str, float], after: dict[str, float]) -> str:
    """What a server ran: its runtime and precision; for a pair (auto keeping PyTorch beside the export it
    took), each placement's share of the timed rounds' model calls (a thread count is PyTorch's)."""
    runs = f"{info['backend']} {info['precision']}"
    if info.get("runtime_under_load") is None:
        return runs
    shares = threads_used(before, after)
    return f"{runs}, PyTorch beside it (calls: {shares})" if shares else runs


def _pooled_cell(name: str, rounds: list[dict], before: tuple, after: tuple, clients: int) -> Cell:
    """One cell from several rounds: their requests over their seconds, percentiles of all latencies."""
    pooled = {
        "latencies": [t for r in rounds for t in r["latencies"]],
        "seconds": sum(r["seconds"] for r in rounds),
        "failed": sum(r["failed"] for r in rounds),
        "refused": sum(r["refused"] for r in rounds),
        "client_cpu": statistics.mean(r["client_cpu"] for r in rounds),
        "server_cpu": None
        if None in [r["server_cpu"] for r in rounds]
        else statistics.mean(r["server_cpu"] for r in rounds),
    }
    calls = after[1] - before[1]
    merged = round((after[0] - before[0]) / calls, 2) if calls else None
    return make_cell(pooled, True, clients, merged, label=name)


def paired(ours: list[float], theirs: list[float]) -> dict[str, float] | None:
    """``ours`` over ``theirs`` round by round (both timed in each round, so drift between rounds cancels):
    the median ratio and its range (None where ``theirs`` answered nothing in any round)."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b]
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def goal_rows(results: dict) -> list[dict]:
    """Issue 43's goal, per place (offline, then each client count through the service): `auto` against
    the fastest float variant there (by its rate in the tables) and against the variant of the runtime it
    runs: the ratio of the tables' rates, and paired round by round (:func:`paired`)."""
    places = [("offline", results["rows"], "real_tokens_per_s", results.get("auto_runs"))]
    service = results.get("service") or []
    for clients in dict.fromkeys(r["clients"] for r in service):
        rows = [r for r in service if r["clients"] == clients]
        auto = next((r for r in rows if r["label"] == "auto"), None)
        where = f"{clients} client{'s' if clients > 1 else ''}"
        places.append((where, rows, "requests_per_s", auto and auto["runs_variant"]))
    goals = []
    for where, rows, rate, runs in places:
        by_name = {r.get("variant", r.get("label")): r for r in rows}
        floats = [by_name[n] for n in FLOAT_VARIANTS if n in by_name]
        auto = by_name.get("auto")
        if auto is None or not floats or "rounds_per_s" not in auto:
            continue
        fastest = max(floats, key=lambda r: r[rate])
        own = by_name.get(runs)
        goals.append(
            {
                "where": where,
                "fastest": fastest.get("variant", fastest.get("label")),
                "fastest_rate": fastest[rate],
                "auto_runs": runs,
                "auto_rate": auto[rate],
                "of_rates": auto[rate] / fastest[rate],
                "vs_fastest": paired(auto["rounds_per_s"], fastest["rounds_per_s"]),
                "vs_own": None if own is None else paired(auto["rounds_per_s"], own["rounds_per_s"]),
            }
        )
    return goals


def goal_markdown(results: dict) -> list[str]:
    """The goal's table (:func:`goal_rows`); nothing where `auto` was not run."""
    goals = goal_rows(results)
    if not goals:
        return []

    def ratio(r: dict | None) -> str:
        return "" if r is None else f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"

    header = ["where", "fastest float path", "its rate", "auto runs", "auto's rate", "auto / fastest"]
    header += ["rounds: auto / fastest", "rounds: auto / its runtime's own row"]
    rows = [
        [
            g["where"],
            g["fastest"],
            f"{g['fastest_rate']:,.1f}",
            g["auto_runs"] or "",
            f"{g['auto_rate']:,.1f}",
            f"{g['of_rates']:.2f}x",
            ratio(g["vs_fastest"]),
            ratio(g["vs_own"]),
        ]
        for g in goals
    ]
    return [
        "",
        "## The goal: `auto` at least the fastest float path",
        "",
        "The fastest of PyTorch fp32 / bf16, ONNX Runtime fp32 and OpenVINO fp32 / bf16 (int8 trades accuracy) "
        "by its rate in the tables above (offline: the median round's real tokens/s; served: requests/s over "
        "all rounds), and `auto`'s over it: of those rates, then round by round (each round times every "
        "variant, in an order that changes from round to round; the median of the rounds' ratios, their range "
        "in brackets), and so over the row of the runtime it runs.",
        "",
        markdown_table(header, rows).rstrip("\n"),
    ]


def _token_bound(texts: dict) -> str:
    """How the bench's batches were bounded in padded tokens (runs before the bound: none)."""
    bound = texts.get("max_tokens")
    return f" (at most {bound:,} padded tokens each, as a job on the CPU)" if bound else ""


def markdown(results: dict) -> str:
    c, t, m = results["config"], results["texts"], results["model"]
    name = c["model"] if not Path(c["model"]).is_absolute() else "/".join(Path(c["model"]).parts[-2:])
    lines = [
        f"# ONNX Runtime and OpenVINO beside PyTorch: {name} ({m['type']}, {m['parameters'] / 1e6:.1f}M parameters, {m['head']})",
        "",
        f"{t['count']} stdlib-corpus texts, {t['real_tokens']:,} real tokens ({t['min']}-{t['max']} per text), "
        f"{t['batches']} batches of {c['batch_size']} grouped by length{_token_bound(t)}; the same token arrays "
        "for every variant. "
        f"{c['threads']} thread(s) for torch, onnxruntime and OpenVINO, torch {results['machine']['torch']}, "
        f"{results['machine'].get('cpu', '?')}; median of {c['repeats']} interleaved rounds. Outputs compared: "
        f"{'logits' if m['head'] != 'base' else 'pooled sentence embeddings'} against PyTorch fp32. Export: "
        f"{results['export_s']:.0f} s.",
        "",
    ]
    header = [
        "variant",
        "real tokens/s",
        "vs PyTorch fp32",
        "max abs",
        "cosine min",
        "cosine mean",
        "file MB",
    ]
    rows = [
        [
            r["variant"],
            f"{r['real_tokens_per_s']:,.0f}",
            f"{r['vs_pytorch_fp32']:.2f}x",
            f"{r['max_abs']:.1e}",
            f"{r['cosine_min']:.5f}",
            f"{r['cosine_mean']:.5f}",
            "" if r["file_mb"] is None else f"{r['file_mb']:.1f}",
        ]
        for r in results["rows"]
    ]
    lines.append(markdown_table(header, rows))
    lines += ["Variants:", ""] + [f"- `{r['variant']}`: {r['what']}" for r in results["rows"]]
    if results.get("auto"):
        lines += ["", f"`auto` here: {results['auto']}."]
    check = results.get("int8_static")
    if check:
        verdict = "accepted" if check["accepted"] else "refused"
        lines += [
            "",
            f"Static int8 (NNCF, {check['calibration_texts']} calibration texts) against fp32 on "
            f"{check['heldout_texts']} held-out texts: minimum cosine {check['cosine_min']:.4f} (floor "
            f"{check['cosine_floor']}); nDCG@10 on {check['pairs']} held-out docstring pairs "
            f"{check['ndcg_int8']:.4f} against {check['ndcg_float']:.4f} (within {check['ndcg_tolerance']:.0%} "
            f"needed): `neobert export openvino-int8` would have {verdict} it; timed here either way.",
        ]
    if results.get("service"):
        lines += service_markdown(results)
    lines += goal_markdown(results)
    return "\n".join(lines) + "\n"


def service_markdown(results: dict) -> list[str]:
    c = results["config"]
    lines = [
        "",
        "## Through the service: single-text `/embed` requests of 16 words",
        "",
        f"`neobert serve` with each variant (dynamic batching on, the model in its own process with the "
        f"server's default threads), all started, warmed up for a round's length, then {c['repeats']} "
        f"interleaved rounds of {c['serve_duration']:g} s each per client count (in an order that changes "
        "each round); a row pools its rounds. "
        "`runs` is what the server said it runs (/info: for `auto`, its measured choice; where it keeps "
        "PyTorch beside the export it took, each placement's share of the timed calls); `start s` the "
        "seconds from its launch to /health (`auto`'s probe included).",
        "",
    ]
    header = [
        "clients",
        "variant",
        "runs",
        "requests",
        "req/s",
        "vs PyTorch fp32",
        "p50 ms",
        "p99 ms",
        "failed",
        "start s",
    ]
    rows = [
        [
            r.get("clients", c["serve_concurrency"]),
            r["label"],
            r.get("backend", ""),
            r["requests"],
            f"{r['requests_per_s']:.1f}",
            fmt(r["vs_pytorch_fp32"]) + "x",
            r["p50_ms"],
            r["p99_ms"],
            r["failed"],
            r.get("start_s", ""),
        ]
        for r in results["service"]
    ]
    return [*lines, markdown_table(header, rows).rstrip("\n")]
