"""Timing, peak memory and the machine's matrix-multiply rate, for CPU and CUDA."""

from __future__ import annotations

import gc
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..common import memory
from ..runtime.hardware import cpu_flags, cpu_info, cpu_kind, isa_cap

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_call(fn: Callable[[], object], device: str) -> float:
    """Seconds one call takes, with the device drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def matmul_rate(dtype: torch.dtype, size: int, device: str, repeats: int = 5) -> float:
    """FLOP/s of a (size x size) @ (size x size) product: median of ``repeats`` after one warm-up."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    torch.mm(a, b, out=out)
    seconds = statistics.median(time_call(lambda: torch.mm(a, b, out=out), device) for _ in range(repeats))
    return 2 * size**3 / seconds


def matmul_peak(dtype: torch.dtype, device: str, sizes: tuple[int, ...] = (2048, 4096)) -> dict:
    """The best square-GEMM rate over ``sizes``: the ceiling a model's FLOP/s is compared with.

    oneDNN uses AMX tiles for bf16 on CPUs that have them; several sizes because the best one depends on
    caches and threads.
    """
    rates = {size: matmul_rate(dtype, size, device) for size in sizes}
    best = max(rates, key=rates.get)
    return {"flops": rates[best], "size": best, "by_size": {str(s): r for s, r in rates.items()}}


def _status_kb(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _reset_peak_rss() -> bool:
    """Linux: writing 5 to clear_refs resets VmHWM (the peak resident set) of this process."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kb("VmHWM") is not None


def process_peak_rss(reset: bool = False) -> int | None:
    """Linux: the peak resident set of this process in bytes (VmHWM), first reset to the current one if
    ``reset``; None where /proc does not tell."""
    if reset and not _reset_peak_rss():
        return None
    return _status_kb("VmHWM")


class _RssSampler(threading.Thread):
    """Fallback where VmHWM cannot be reset: poll the resident set every millisecond."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import psutil

        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.001):
            self.peak = max(self.peak, self.process.memory_info().rss)


def peak_memory(fn: Callable[[], object], device: str) -> tuple[float, int]:
    """Run ``fn`` once; return (seconds, peak bytes it added on top of what was held before).

    CPU: the growth of the process's resident memory (weights already resident are not counted), after
    the allocator's free memory was returned to the system; the call's time includes faulting its memory
    in, so time it separately. CUDA: ``max_memory_allocated`` over the call minus the allocation before it.
    """
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        seconds = time_call(fn, device)
        return seconds, torch.cuda.max_memory_allocated() - before
    import psutil

    memory.release()  # glibc keeps freed blocks resident: hand them back so a forward's working set shows
    before = psutil.Process().memory_info().rss
    if _reset_peak_rss():
        seconds = time_call(fn, device)
        return seconds, max(0, (_status_kb("VmHWM") or before) - before)
    sampler = _RssSampler()
    sampler.start()
    seconds = time_call(fn, device)
    sampler.done.set()
    sampler.join()
    return seconds, max(0, sampler.peak - before)


def machine_info(device: str) -> dict:
    name, _ = cpu_info()
    info = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": f"{name} ({cpu_kind()})",  # every report's machine line names the CPU's kind
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": [flag for flag, present in cpu_flags().items() if present],
        "device": device,
    }
    info["amx"] = cpu_flags()["amx_bf16"]
    if isa_cap():  # an emulated kind: oneDNN's runtimes capped, ONNX Runtime not
        info["isa_cap"] = isa_cap()
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info
