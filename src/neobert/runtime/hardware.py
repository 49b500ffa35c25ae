"""What this machine is and what runs fastest on it, measured rather than assumed.

Machines of one project differ: an AVX2-only CPU emulates bf16 (a bf16 matmul there runs several to 60x
slower than fp32), a CPU with AVX-512 + AMX runs it natively, a GPU runs it on tensor cores. So the
precision ``auto`` (:data:`neobert.common.config.PRECISIONS`) is decided by timing the model's own matmul shapes
in fp32 and in bf16 on this device, once per process and shape (:func:`choose_precision`); bf16 must win
by :data:`BF16_MARGIN` to be taken over exact fp32.

Every probe here is a plain module-level function, so tests force either answer on any machine
(monkeypatch), and ``NEOBERT_AUTO_PRECISION=fp32|bf16`` pins what ``auto`` means for a whole process tree
(the test suite pins fp32, so its results do not depend on the CPU it runs on).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..common.config import check_precision

# The libraries whose versions a report names (`neobert doctor`, job manifests)
PACKAGES = (
    "neobert",
    "transformers",
    "huggingface_hub",
    "tokenizers",
    "accelerate",
    "sentence-transformers",
    "flash-attn",
    "onnxruntime",
    "openvino",
    "nncf",
    "pyarrow",
    "ray",
)
# The CPU flags that decide which paths are fast or available here.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
AUTO_PRECISION_ENV = "NEOBERT_AUTO_PRECISION"
BF16_MARGIN = 1.1  # bf16 must be at least this much faster than fp32 to be chosen by "auto"
# Rows of the timed matmuls, per device type: a CPU serves small batches, a GPU large ones. At 64 rows an
# H100 times kernel launches, not arithmetic (0.14 ms for the base block in fp32 and in bf16 alike).
PROBE_TOKENS = {"cpu": 64, "cuda": 8192}
SLOW_FACTOR = 3.0  # one bf16 call this much slower than fp32 ends the measurement early
# Timed runs: the best of at least MIN_RUNS, more (up to MAX_RUNS) while they add up to less than RUN_BUDGET
# seconds, so a tiny workload is timed often enough that other work on the machine cannot decide it.
MIN_RUNS, MAX_RUNS, RUN_BUDGET = 3, 20, 0.05
# a warm call this long is timed once: a transient on the machine is small beside it, and on a large model
# (the 250M shape at one thread: seconds a call) three of each made `auto`'s start take minutes
LONG_CALL_S = 1.0
GIVE_UP_RUNS = 2  # warm timed calls, all slower than the limit, that end a measurement early
# oneDNN's cap on the instruction sets it uses (PyTorch's matmuls and OpenVINO's CPU plugin both honour it;
# ONNX Runtime's kernels do not). Set, it makes this CPU run those runtimes as a CPU without the flags above
# the cap would: how the benchmarks emulate an AVX2-only or a bf16-less CPU on a larger one.
ISA_CAP_ENV = "ONEDNN_MAX_CPU_ISA"
# the flags of CPU_FLAGS each cap leaves usable; a cap naming AMX (or ALL/DEFAULT) leaves them all
ISA_CAPS = {
    "SSE41": (),
    "AVX": (),
    "AVX2": ("avx2",),
    "AVX2_VNNI": ("avx2",),
    "AVX2_VNNI_2": ("avx2",),
    "AVX512_CORE": ("avx2", "avx512f"),
    "AVX512_CORE_VNNI": ("avx2", "avx512f"),
    "AVX512_CORE_BF16": ("avx2", "avx512f", "avx512_bf16"),
    "AVX512_CORE_FP16": ("avx2", "avx512f", "avx512_bf16"),
    "AVX10_1_512": ("avx2", "avx512f", "avx512_bf16"),
}


@functools.cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """(model name, flags) of this CPU from /proc/cpuinfo; ("", {}) where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    name = re.search(r"model name\s*:\s*(.*)", text)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return (name.group(1).strip() if name else platform.machine()), frozenset(
        flags.group(1).split() if flags else ()
    )


def isa_cap() -> str | None:
    """The instruction-set cap of :data:`ISA_CAP_ENV` in upper case, or None where none (or no cap) is set."""
    cap = os.environ.get(ISA_CAP_ENV, "").strip().upper()
    if not cap or cap in ("ALL", "DEFAULT") or "AMX" in cap:
        return None
    if cap not in ISA_CAPS:
        known = ", ".join([*ISA_CAPS, "ALL", "AVX512_CORE_AMX"])
        raise ValueError(f"{ISA_CAP_ENV}={cap!r} is not a cap this package knows: one of {known}")
    return cap


def cpu_flags() -> dict[str, bool]:
    """The flags of :data:`CPU_FLAGS` usable here: present in the CPU and not above :func:`isa_cap`."""
    flags = cpu_info()[1]
    cap = isa_cap()
    return {flag: flag in flags and (cap is None or flag in ISA_CAPS[cap]) for flag in CPU_FLAGS}


def cpu_kind() -> str:
    """This CPU's kind, the name of its benchmark folders: its maker, then the widest vector ISA of
    :data:`CPU_FLAGS` and the bf16 units it has, e.g. ``intel-avx512-bf16-amx``, ``amd-avx512-bf16``,
    ``amd-avx2``; these flags decide which runtime is fastest here (docs/benchmarks.md). Under an
    instruction-set cap that hides flags this CPU has (:func:`isa_cap`), the kind the cap leaves, marked
    ``-capped``: e.g. ``intel-avx2-capped`` for ``ONEDNN_MAX_CPU_ISA=AVX2`` on an AMX Xeon."""
    name, present = cpu_info()
    flags = cpu_flags()
    maker = next((m for m in ("intel", "amd") if m in name.lower()), platform.machine().lower() or "cpu")
    if flags["avx512f"]:
        isa = "avx512" + "-bf16" * flags["avx512_bf16"] + "-amx" * flags["amx_bf16"]
    else:
        isa = "avx2" if flags["avx2"] else "baseline"
    capped = any(flag in present and not usable for flag, usable in flags.items())
    return f"{maker}-{isa}" + "-capped" * capped


def machine_summary() -> str:
    """One line naming the CPU and its relevant flags, e.g. for a benchmark's or a report's header."""
    name, _ = cpu_info()
    flags = " ".join(f for f, present in cpu_flags().items() if present) or "none of " + ", ".join(CPU_FLAGS)
    capability = torch.backends.cpu.get_cpu_capability()
    cap = f"; {ISA_CAP_ENV}={isa_cap()}" if isa_cap() else ""
    return (
        f"{name} ({os.cpu_count()} cores; {flags}; kind {cpu_kind()}{cap}; torch CPU capability {capability})"
    )


def versions() -> dict[str, str | None]:
    """Python's, torch's (CUDA's, cuDNN's, oneDNN's) and :data:`PACKAGES`' versions (None: not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__}
    found["cuda"] = torch.version.cuda
    found["cudnn"] = str(torch.backends.cudnn.version()) if torch.cuda.is_available() else None
    found["onednn"] = "available" if torch.backends.mkldnn.is_available() else None
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def default_device() -> str:
    """The device a command runs on when none is named: cuda where a GPU is available, else cpu."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def oversubscription_note() -> str | None:
    """A note when this process runs several intra-op threads on cores that other work already fills:
    there a multi-threaded matmul waits for its slowest thread (measured: 10x slower training,
    docs/ablations.md; a 0.5 ms product taking 100 ms). None otherwise."""
    cores, threads, load = os.cpu_count() or 1, torch.get_num_threads(), load_average()
    if threads > 1 and load >= cores:
        return (
            f"load average {load:.1f} on {cores} cores with {threads} threads per process: with other work "
            "running, OMP_NUM_THREADS=1 trains up to 10x faster (docs/ablations.md)"
        )
    return None


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` became for one model shape on one device, and why."""

    precision: str  # fp32 | bf16
    reason: str
    fp32_ms: float | None = None  # the timed workload, best of the runs
    bf16_ms: float | None = None


def resolve_precision(
    precision: str,
    hidden_size: int,
    intermediate_size: int,
    device: torch.device | str = "cpu",
    training: bool = False,
) -> str:
    """``precision`` itself, or for ``auto`` the measured faster one (:func:`choose_precision`)."""
    if check_precision(precision, ValueError) != "auto":
        return precision
    return choose_precision(hidden_size, intermediate_size, str(device), training).precision


@functools.cache
def choose_precision(
    hidden_size: int, intermediate_size: int, device: str, training: bool
) -> PrecisionChoice:
    """fp32 or bf16, whichever runs one block's matmuls (qkv, output, SwiGLU in and out) on
    :data:`PROBE_TOKENS` tokens faster here, forward (inference, bf16 weights) or forward + backward
    (training, bf16 autocast over fp32 weights). Pinned by ``NEOBERT_AUTO_PRECISION``. On a CPU both are
    timed on one thread: the ratio is a property of the kernels, and one thread is not thrown off by other
    processes' threads the way a multi-threaded matmul waiting for its slowest thread is."""
    pinned = os.environ.get(AUTO_PRECISION_ENV)
    if pinned:
        return PrecisionChoice(check_precision(pinned, ValueError), f"pinned by {AUTO_PRECISION_ENV}")
    torch_device = torch.device(device)
    if torch_device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return PrecisionChoice("fp32", "this GPU has no bf16")
    threads = torch.get_num_threads()
    if torch_device.type == "cpu":
        torch.set_num_threads(1)
    try:
        fp32 = _time_block(hidden_size, intermediate_size, torch_device, torch.float32, training, None)
        bf16 = _time_block(
            hidden_size, intermediate_size, torch_device, torch.bfloat16, training, fp32 * SLOW_FACTOR
        )
    finally:
        torch.set_num_threads(threads)
    if bf16 * BF16_MARGIN <= fp32:
        return PrecisionChoice(
            "bf16", f"bf16 {fp32 / bf16:.1f}x faster than fp32 here", fp32 * 1e3, bf16 * 1e3
        )
    return PrecisionChoice("fp32", f"bf16 {bf16 / fp32:.2f}x the time of fp32 here", fp32 * 1e3, bf16 * 1e3)


def _time_block(
    hidden: int,
    intermediate: int,
    device: torch.device,
    dtype: torch.dtype,
    training: bool,
    give_up: float | None,
) -> float:
    """Best seconds of warm runs of the workload (:func:`warm_best`); gives up once warm runs exceed ``give_up``."""
    g = torch.Generator().manual_seed(0)
    shapes = [(3 * hidden, hidden), (hidden, hidden), (2 * intermediate, hidden), (hidden, intermediate)]
    weight_dtype = torch.float32 if training else dtype
    weights = [(torch.randn(*s, generator=g) / s[1] ** 0.5).to(device, weight_dtype) for s in shapes]
    for w in weights:
        w.requires_grad_(training)
    x = torch.randn(PROBE_TOKENS.get(device.type, PROBE_TOKENS["cpu"]), hidden, generator=g).to(
        device, weight_dtype
    )

    def step(backward: bool) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=training and dtype != torch.float32):
            qkv = x @ weights[0].T
            h = qkv[:, :hidden] @ weights[1].T
            gate, up = (h @ weights[2].T).chunk(2, dim=-1)
            out = (torch.nn.functional.silu(gate) * up) @ weights[3].T
        if backward:
            out.float().square().mean().backward()

    def call() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        step(training)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    with torch.inference_mode(not training):
        return warm_best(call, give_up).seconds


@dataclass(frozen=True)
class Timing:
    """What :func:`warm_best` measured: the best warm call, how many calls were timed, whether it gave up."""

    seconds: float
    runs: int
    gave_up: bool = False


def warm_best(call: Callable[[], float], give_up: float | None = None, budget: float = RUN_BUDGET) -> Timing:
    """The best of warm calls of ``call`` (it runs the workload once and returns the seconds it took).

    The first call warms up (allocations, kernel selection, a GPU's kernel loading, a runtime's first
    compilation) and never counts nor decides anything, on any device: a cold call can be slow for reasons
    the workload does not have. Then at least :data:`MIN_RUNS` timed calls (one where a warm call takes
    :data:`LONG_CALL_S` or more), more (up to :data:`MAX_RUNS`) while they add up to less than ``budget``
    seconds. It ends early (``gave_up``) once :data:`GIVE_UP_RUNS` timed calls were all slower than
    ``give_up``: one slow call (another process took the core) does not."""
    call()  # warm-up: never timed, never decisive
    best, spent, runs = float("inf"), 0.0, 0
    while runs < MAX_RUNS:
        seconds = call()
        best, spent, runs = min(best, seconds), spent + seconds, runs + 1
        if give_up is not None and runs >= GIVE_UP_RUNS and best > give_up:
            return Timing(best, runs, gave_up=True)
        if (runs >= MIN_RUNS or seconds >= LONG_CALL_S) and spent > budget:
            break
    return Timing(best, runs)


@dataclass(frozen=True)
class RuntimeChoice:
    """Which candidate (runtime and precision) ``auto`` took, why, and the warm timings it compared."""

    name: str
    reason: str
    timings_ms: dict[str, float]  # candidate -> best warm call over the rounds


PROBE_ROUNDS = 2  # rounds over all candidates: a transient load in one round does not decide
PROBE_BUDGET = 0.25  # seconds of timed calls per candidate and round (more calls while under it)
# a candidate this much slower than the fastest so far stops being timed: its warm calls all over that end its
# round, and it sits out the next rounds (the 250M shape's ONNX Runtime fp32 at 6x PyTorch's cost minutes)
OUT_OF_RACE = 2.0


def choose_fastest(
    candidates: dict[str, Callable[[], float]],
    exact: set[str] | frozenset[str],
    workload: str,
    rounds: int = PROBE_ROUNDS,
    budget: float = PROBE_BUDGET,
) -> RuntimeChoice:
    """The fastest of ``candidates`` (name -> one call of the model's own workload, returning its seconds),
    by :func:`warm_best` in each of ``rounds`` rounds (candidates interleaved; each round warms every
    candidate up again, so no cold call decides), a candidate's time its best over the rounds. A candidate not
    in ``exact`` (bf16: its vectors agree with fp32 within the cosine floor, not to the last digit) is taken
    only if it beats the fastest exact one by :data:`BF16_MARGIN`, as precision ``auto`` takes bf16. A
    candidate over :data:`OUT_OF_RACE` times the fastest so far is out of the race: its warm calls stop once
    :data:`GIVE_UP_RUNS` of them are all over that, and it is not timed in later rounds."""
    if not candidates:
        raise ValueError("no candidate to choose from")
    best = {name: float("inf") for name in candidates}
    out: list[str] = []
    for round_ in range(rounds):
        for name, call in candidates.items():
            leader = min(best.values())
            if round_ and best[name] > OUT_OF_RACE * leader:
                out += [] if name in out else [name]
                continue
            limit = OUT_OF_RACE * leader if leader < float("inf") else None
            best[name] = min(best[name], warm_best(call, give_up=limit, budget=budget).seconds)
    timings = {name: seconds * 1e3 for name, seconds in best.items()}
    ranked = sorted(best, key=best.__getitem__)
    floats = [name for name in ranked if name in exact]
    measured = f"{workload}, best warm call of {rounds} rounds: " + ", ".join(
        f"{name} {timings[name]:.2f} ms" for name in ranked
    )
    if out:
        measured += f"; {', '.join(out)} over {OUT_OF_RACE:g}x the fastest, timed in one round"
    fastest = ranked[0]
    if not floats:
        return RuntimeChoice(fastest, f"{fastest} fastest ({measured})", timings)
    float_best = floats[0]
    if fastest != float_best and best[fastest] * BF16_MARGIN <= best[float_best]:
        ratio = best[float_best] / best[fastest]
        why = f"{fastest} {ratio:.2f}x faster than {float_best}, the fastest exact path ({measured})"
        return RuntimeChoice(fastest, why, timings)
    margin = "" if fastest == float_best else f"; {fastest} not {BF16_MARGIN}x faster"
    return RuntimeChoice(float_best, f"{float_best} fastest exact path ({measured}{margin})", timings)
