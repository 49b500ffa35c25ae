"""``neobert doctor``: what this machine has, which accelerated paths pass their first-use checks, how fast
each is against its reference, and what ``auto`` picks here for inference and for training.

The checks are the very ones the library runs before a path's first use (:mod:`neobert.model.checks`), so
a path that doctor reports failed is one that ``auto`` will not take.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..common.config import ModelConfig
from ..common.tables import MISSING, markdown_table
from ..inference.backends import choose_runtime, export_beside, open_export
from ..inference.openvino_encoder import bf16_hint_available
from ..model import attention
from ..model.checks import BackendCheck
from ..model.execution import check_compiled_blocks
from ..runtime.fastpath import check_cpu_epilogues
from ..runtime.hardware import choose_precision, cpu_flags, cpu_info, cpu_kind, versions
from ..training.optim import check_fused_adamw

SPEED_LENGTHS = (128, 100, 128, 97)  # the small input of the speed comparisons
PRECISION_PRESETS = ("small", "neobert")  # the shapes whose "auto" precision is reported


@dataclass
class BackendRow:
    check: BackendCheck
    speedup: float | None = None  # reference seconds / path seconds on a small input (> 1: faster)
    reference: str = ""


@dataclass
class DoctorReport:
    versions: dict[str, str | None]
    cpu: dict
    gpu: dict | None
    backends: list[BackendRow] = field(default_factory=list)
    auto: list[dict] = field(default_factory=list)  # one row per (use, preset): precision and kernels
    runtimes: dict = field(default_factory=dict)  # what `--backend auto` chooses among here (and for a model)

    @property
    def failed(self) -> list[str]:
        """The paths available here whose first-use check failed (``auto`` takes their reference instead)."""
        return [row.check.name for row in self.backends if row.check.available and not row.check.ok]

    def markdown(self) -> str:
        """Versions, CPU and GPU lines, then the accelerated paths and what ``auto`` picks, as tables."""
        cpu, gpu = self.cpu, self.gpu
        flags = ", ".join(f"{k} {_yes(v)}" for k, v in cpu["flags"].items())
        lines = [
            "versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items() if v),
            f"cpu: {cpu['model']} (kind {cpu['kind']}), {cpu['cores']} threads, torch capability "
            f"{cpu['capability']}; {flags}",
            "gpu: "
            + (
                f"{gpu['name']} (sm {gpu['capability']}, {gpu['memory_gb']} GB, bf16 {gpu['bf16']})"
                if gpu
                else "none"
            ),
            "",
            "accelerated paths: first-use check against the reference; speed on a small input",
            "",
        ]
        rows = []
        for row in self.backends:
            c = row.check
            status = "ok" if c.ok else ("FAILED" if c.available else "not available")
            error = MISSING if c.max_error is None else f"{c.max_error:.1e} / {c.tolerance:.0e}"
            speed = f"{row.speedup:.2f}x {row.reference}" if row.speedup is not None else MISSING
            note = (c.error or "").splitlines()[0][:60] if c.error else ""
            rows.append([c.name, c.device, c.dtype, status, error, f"{c.seconds:.2f}", speed, note])
        header = ["path", "device", "dtype", "status", "max error / tol.", "check s", "speed", "note"]
        auto = [
            [
                r["use"],
                r["preset"],
                r["device"],
                r["precision"],
                r["why"],
                r["attention"],
                _yes(r["fused_adamw"]) if r["use"] == "training" else MISSING,
            ]
            for r in self.auto
        ]
        columns = ["use", "preset", "device", "precision", "why", "attention", "fused AdamW"]
        tables = markdown_table(header, rows) + "\nwhat auto picks here\n\n" + markdown_table(columns, auto)
        runtimes = self.runtimes
        if runtimes:
            tables += f"\nbackend auto: {runtimes['auto']}\n"
            if runtimes.get("model"):
                tables += (
                    f"backend auto for {runtimes['model']}: {runtimes['choice']} ({runtimes['reason']})\n"
                )
        return "\n".join(lines) + "\n" + tables

    def as_dict(self) -> dict:
        rows = [
            {**row.check.as_dict(), "speedup": row.speedup, "reference": row.reference}
            for row in self.backends
        ]
        return {
            "versions": self.versions,
            "cpu": self.cpu,
            "gpu": self.gpu,
            "backends": rows,
            "auto": self.auto,
            "runtimes": self.runtimes,
        }


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def diagnose(
    compile_on_cpu: bool = False, progress: Callable[[str], None] | None = None, model: str | None = None
) -> DoctorReport:
    """Run every check (and its speed comparison) for this machine's devices; with ``model`` (an export),
    also what ``--backend auto`` takes for it here and why."""
    name, _ = cpu_info()
    cpu = {
        "model": name,
        "cores": torch.get_num_threads(),
        "flags": cpu_flags(),
        "kind": cpu_kind(),
        "capability": torch.backends.cpu.get_cpu_capability(),
    }
    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gb": round(props.total_memory / 2**30, 1),
            "bf16": torch.cuda.is_bf16_supported(),
        }
    report = DoctorReport(versions(), cpu, gpu)
    say = progress or (lambda _: None)
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    for device in devices():
        for backend, dtype in _attention_cases(device):
            say(f"attention {backend} on {device} ({dtype})")
            report.backends.append(_attention_row(backend, device, dtype))
        say(f"fused AdamW on {device}")
        report.backends.append(
            BackendRow(check_fused_adamw(device), _adamw_speedup(device), "for-each AdamW")
        )
        if device == "cuda" or compile_on_cpu:
            for dtype in (torch.float32, torch.bfloat16):
                say(f"compiled blocks on {device} ({dtype})")
                report.backends.append(BackendRow(check_compiled_blocks(device, dtype), None, "eager blocks"))
    say("fused CPU epilogues")
    epilogues = check_cpu_epilogues()
    report.backends.append(
        BackendRow(epilogues, _epilogue_speedup() if epilogues.ok else None, "unfused bf16 ops")
    )
    say("precision")
    report.auto = auto_choices()
    say("runtimes")
    report.runtimes = runtime_choices(model)
    return report


def runtime_choices(model: str | None = None) -> dict:
    """The runtimes ``--backend auto`` measures for an export here (ONNX Runtime, OpenVINO, OpenVINO's bf16
    hint where the CPU has it) and, for ``model`` (an export directory), the one it takes and why."""
    import importlib.util

    candidates = []
    if importlib.util.find_spec("onnxruntime"):
        candidates.append("onnx fp32")
    if importlib.util.find_spec("openvino"):
        candidates += ["openvino fp32"] + (["openvino bf16"] if bf16_hint_available() else [])
    found = {
        "candidates": candidates,
        "auto": "for a `neobert export onnx` directory the fastest of "
        + (", ".join(candidates) or "no runtime installed (neobert[onnx], neobert[openvino])")
        + ", measured at start on the model's own shape; for a model directory carrying its export in "
        "DIR/onnx, those and PyTorch (fp32, and bf16 where the precision probe takes it); PyTorch for "
        "another model directory",
    }
    if model:
        opened = choose_runtime(model) if export_beside(model) else open_export(model, "auto")
        found.update(model=model, choice=opened.label, reason=opened.reason)
    return found


def _attention_cases(device: str) -> list[tuple[str, torch.dtype]]:
    if device == "cpu":
        return [("flex", torch.float32), ("flex", torch.bfloat16)]
    names = ["flex", "varlen"] + (["flash_attn"] if attention.flash_attn_available() else [])
    return [(n, d) for n, d in itertools.product(names, (torch.bfloat16, torch.float16))]


def _attention_row(backend: str, device: str, dtype: torch.dtype) -> BackendRow:
    backward = device != "cpu"  # FlexAttention has no CPU backward
    try:
        attention.explicit_candidate(backend, torch.device(device), dtype)
    except attention.AttentionBackendError as err:
        check = BackendCheck(
            f"attention:{backend}", device, str(dtype).removeprefix("torch."), False, error=str(err)
        )
        return BackendRow(check, None, "SDPA")
    check = attention.check_attention(backend, device, dtype, backward)
    return BackendRow(check, _attention_speedup(backend, device, dtype) if check.ok else None, "SDPA")


def _attention_speedup(backend: str, device: str, dtype: torch.dtype) -> float:
    g = torch.Generator().manual_seed(0)
    total, heads, dim = sum(SPEED_LENGTHS), 12, 64
    q, k, v = (torch.randn(total, heads, dim, generator=g).to(device, dtype) for _ in range(3))
    offsets = torch.tensor([0, *itertools.accumulate(SPEED_LENGTHS)], device=device)
    contexts = {
        name: attention.packed_context(offsets, max(SPEED_LENGTHS), name) for name in (backend, "sdpa")
    }
    with torch.no_grad():
        seconds = {
            name: _best_time(lambda c=ctx: attention.attend(q, k, v, c), device)
            for name, ctx in contexts.items()
        }
    return seconds["sdpa"] / seconds[backend]


def _adamw_speedup(device: str) -> float:
    params = [torch.randn(256, 256, device=device, requires_grad=True) for _ in range(16)]
    for p in params:
        p.grad = torch.randn_like(p)
    fused = torch.optim.AdamW(params, lr=1e-3, fused=True)
    loop = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    return _best_time(loop.step, device) / _best_time(fused.step, device)


def _epilogue_speedup() -> float:
    op = torch.ops.mkldnn._linear_pointwise
    g = torch.Generator().manual_seed(0)
    x, other = (torch.randn(512, 768, generator=g).bfloat16() for _ in range(2))
    w = torch.randn(768, 768, generator=g).bfloat16()
    with torch.inference_mode():
        plain = _best_time(lambda: torch.nn.functional.linear(x, w) + other, "cpu")
        fused = _best_time(lambda: op.binary(x, other, w, None, "add"), "cpu")
    return plain / fused


def _best_time(fn: Callable[[], object], device: str, runs: int = 5) -> float:
    best = float("inf")
    for run in range(runs + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        if run:  # the first run warms up
            best = min(best, time.perf_counter() - started)
    return best


def auto_choices() -> list[dict]:
    """What ``auto`` picks on the default device (the GPU when there is one), for inference and training,
    for the shapes of :data:`PRECISION_PRESETS`."""
    device = devices()[-1]
    rows = []
    for preset, training in itertools.product(PRECISION_PRESETS, (False, True)):
        config = ModelConfig.from_name(preset)
        choice = choose_precision(config.hidden_size, config.intermediate_size, device, training)
        dtype = torch.bfloat16 if choice.precision == "bf16" else torch.float32
        with torch.set_grad_enabled(training):  # training also checks the kernel's backward
            kernel = attention.resolve_backend("auto", torch.device(device), dtype)
        rows.append(
            {
                "use": "training" if training else "inference",
                "preset": preset,
                "device": device,
                "precision": choice.precision,
                "why": choice.reason,
                "fp32_ms": choice.fp32_ms,
                "bf16_ms": choice.bf16_ms,
                "attention": kernel,
                "fused_adamw": training and device == "cuda" and check_fused_adamw(device).ok,
            }
        )
    return rows
