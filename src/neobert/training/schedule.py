"""Learning-rate schedules as a pure function of the step, and the torch scheduler that applies one.

NeoBERT: linear warmup over 2,000 steps to the peak (6e-4), cosine decay to 10% of the peak, reached at 90% of
the total steps, then flat. ``kind="linear"`` decays linearly instead (the BERT baseline: ``final_ratio=0``,
``decay_fraction=1``) and ``kind="constant"`` holds the peak after warmup.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

KINDS = ("cosine", "linear", "constant")


def lr_at(
    step: int,
    *,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    kind: str = "cosine",
    final_ratio: float = 0.1,
    decay_fraction: float = 0.9,
) -> float:
    """Learning rate for optimizer step ``step`` (0-based: the first update uses ``lr_at(0)``).

    Warmup rises linearly from 0 at step 0 to ``peak`` at ``warmup_steps``. The decay runs from there to
    step ``decay_fraction * total_steps`` (counted from the start of training, warmup included), where it
    reaches ``final_ratio * peak`` and stays.
    """
    _check(peak, warmup_steps, total_steps, kind, final_ratio, decay_fraction)
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step}")
    if step < warmup_steps:
        return peak * step / warmup_steps
    if kind == "constant":
        return peak
    decay_end = _decay_end(total_steps, decay_fraction)
    final = final_ratio * peak
    if step >= decay_end:
        return final
    progress = (step - warmup_steps) / (decay_end - warmup_steps)  # 0 at the peak, 1 at the floor
    if kind == "linear":
        return peak - (peak - final) * progress
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    kind: str = "cosine",
    final_ratio: float = 0.1,
    decay_fraction: float = 0.9,
    peak: float | None = None,
) -> LambdaLR:
    """A ``LambdaLR`` that sets each parameter group's lr to ``lr_at(step) / peak`` times its initial lr.

    The peak is the optimizer's lr (all groups must share it, so the multiplier means the same everywhere);
    passing ``peak`` only checks that it matches. Call ``scheduler.step()`` after each ``optimizer.step()``.
    """
    group_lrs = {group["lr"] for group in optimizer.param_groups}
    if len(group_lrs) != 1:
        raise ValueError(f"parameter groups have different learning rates {sorted(group_lrs)}")
    base = group_lrs.pop()
    if peak is not None and not math.isclose(peak, base, rel_tol=1e-12):
        raise ValueError(
            f"peak {peak} differs from the optimizer's lr {base}; build the optimizer with lr=peak"
        )
    # Fail at construction, not at the first step, on an inconsistent schedule.
    _check(base, warmup_steps, total_steps, kind, final_ratio, decay_fraction)

    def multiplier(step: int) -> float:
        return (
            lr_at(
                step,
                peak=base,
                warmup_steps=warmup_steps,
                total_steps=total_steps,
                kind=kind,
                final_ratio=final_ratio,
                decay_fraction=decay_fraction,
            )
            / base
        )

    return LambdaLR(optimizer, multiplier)


def _decay_end(total_steps: int, decay_fraction: float) -> int:
    return round(decay_fraction * total_steps)


def _check(
    peak: float, warmup_steps: int, total_steps: int, kind: str, final_ratio: float, decay_fraction: float
) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if peak <= 0:
        raise ValueError(f"peak must be positive, got {peak}")
    if warmup_steps < 0 or total_steps <= 0:
        raise ValueError(f"need warmup_steps >= 0 and total_steps > 0, got {warmup_steps}, {total_steps}")
    if not 0.0 <= final_ratio <= 1.0:
        raise ValueError(f"final_ratio must be in [0, 1], got {final_ratio}")
    if not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"decay_fraction must be in (0, 1], got {decay_fraction}")
    if kind != "constant" and _decay_end(total_steps, decay_fraction) <= warmup_steps:
        raise ValueError(
            f"the decay would end (step {_decay_end(total_steps, decay_fraction)} = {decay_fraction} x "
            f"{total_steps}) before warmup does (step {warmup_steps})"
        )
