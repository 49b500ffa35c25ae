"""First-use checks of accelerated paths: a tiny input through the path and through the reference, compared.

Every kernel or fused op that a default (``auto``) may pick, and that the test suite cannot run on every
machine (CUDA varlen / flash-attn / FlexAttention kernels, compiled blocks, fused AdamW, oneDNN's fused CPU
epilogues), is checked once per process before its first use. The result is a :class:`BackendCheck`; the
caller then either uses the path, falls back to the reference with one warning (an ``auto`` choice), or
raises (an explicit choice). ``neobert doctor`` prints every check of this machine.

Tolerances are relative error norms ``|path - reference| / |reference|`` per computation dtype (the paths
round differently; float32 paths must agree to float32 accuracy).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

TOLERANCES = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def tolerance(dtype: torch.dtype) -> float:
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """``|value - reference| / |reference|`` in float64 (inf when shapes differ or values are not finite)."""
    if value.shape != reference.shape:
        return float("inf")
    value, reference = value.detach().double(), reference.detach().double()
    error = float((value - reference).norm() / reference.norm().clamp_min(1e-30))
    return error if error == error else float("inf")  # NaN -> inf


@dataclass
class BackendCheck:
    """What the first-use check of one path found."""

    name: str  # e.g. "attention:varlen", "fused_adamw", "cpu_epilogues", "compiled_blocks"
    device: str
    dtype: str
    available: bool  # the path exists here (package, kernel, device)
    checked: bool = False  # the comparison ran
    ok: bool = False  # available, checked and within tolerance
    max_error: float | None = None  # the largest relative error over the compared tensors
    tolerance: float | None = None
    error: str | None = None  # why not ok: the exception or the disagreement
    seconds: float = 0.0  # the check's own cost

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        where = f"{self.name} ({self.device}, {self.dtype})"
        if not self.available:
            return f"{where}: not available ({self.error})"
        if self.ok:
            return f"{where}: ok, max relative error {self.max_error:.2e} <= {self.tolerance:.0e}"
        return f"{where}: FAILED: {self.error}"


def run_check(
    name: str,
    device: torch.device | str,
    dtype: torch.dtype,
    compare: Callable[[], list[tuple[torch.Tensor, torch.Tensor]]],
    tol: float | None = None,
) -> BackendCheck:
    """Run ``compare`` (pairs of (path output, reference output)) with gradients allowed and autocast off,
    and judge it against ``tol`` (default: :func:`tolerance` of ``dtype``). Exceptions become a failed
    check, never a crash."""
    device = torch.device(device)
    check = BackendCheck(name, str(device), str(dtype).removeprefix("torch."), available=True)
    check.tolerance = tolerance(dtype) if tol is None else tol
    started = time.perf_counter()
    try:
        with torch.inference_mode(False), torch.enable_grad(), torch.autocast(device.type, enabled=False):
            pairs = compare()
        check.checked = True
        check.max_error = max(relative_error(value, reference) for value, reference in pairs)
        check.ok = check.max_error <= check.tolerance
        if not check.ok:
            check.error = f"disagrees with the reference path: relative error {check.max_error:.3g} > {check.tolerance:.0e}"
    except Exception as err:  # any failure of the path is a failed check
        check.error = f"{type(err).__name__}: {err}".strip()
    check.seconds = time.perf_counter() - started
    return check


_warned: set[str] = set()


def warn_fallback(check: BackendCheck, fallback: str) -> None:
    """One warning per path and process: the path, what went wrong, and what runs instead."""
    key = f"{check.name}/{check.device}/{check.dtype}"
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"{check.name} on {check.device} ({check.dtype}) failed its first-use check ({check.error}); "
        f"using {fallback} instead",
        RuntimeWarning,
        stacklevel=3,
    )
