"""Learning-rate schedules as a pure function of the step, and the torch scheduler that applies one.

NeoBERT: linear warmup over 2,000 steps to the peak (6e-4), cosine decay to 10% of the peak, reached at 90% of
the total steps, then flat. ``kind="linear"`` decays linearly instead (the BERT baseline: ``final_ratio=0``,
``decay_fraction=1``), ``"1-sqrt"`` and ``"inverse-sqrt"`` decay with those shapes, and ``kind="constant"``
holds the peak after warmup.

``kind="wsd"`` is warmup-stable-decay (ModernBERT's "trapezoidal" schedule, Ettin's, mmBERT's): warmup, the
peak held, then a decay of ``decay_steps`` steps that ends at the last step, shaped by ``decay_shape``. With
``decay_steps=0`` the run stays at the peak to its end, and any of its checkpoints can be decayed later
(``neobert pretrain --decay-from CKPT``): a decay branched at step S over N steps is the same function as a
run of S + N steps with ``decay_steps=N``.

Decay shapes, as the factor of the peak at decay progress ``p`` in [0, 1] towards ``r = final_ratio``:
``linear`` r + (1 - r)(1 - p); ``cosine`` r + (1 - r)(1 + cos(pi p))/2; ``1-sqrt`` r + (1 - r)(1 - sqrt(p))
(Hagele et al. 2024, ModernBERT); ``inverse-sqrt`` 1 / sqrt(1 + p (1/r^2 - 1)), the 1/sqrt(t) curve scaled
to run from the peak to r over the decay (mmBERT's decay; needs r > 0).
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

SHAPES = ("linear", "cosine", "1-sqrt", "inverse-sqrt")
KINDS = ("cosine", "linear", "1-sqrt", "inverse-sqrt", "constant", "wsd")
WSD_DEFAULT_DECAY = 0.1  # wsd without decay_steps: the last 10% of the steps decay


def decay_factor(shape: str, progress: float, final_ratio: float) -> float:
    """The peak's multiplier at ``progress`` (0: decay starts, 1: it ends at ``final_ratio``)."""
    p = min(max(progress, 0.0), 1.0)
    r = final_ratio
    if shape == "linear":
        return r + (1.0 - r) * (1.0 - p)
    if shape == "cosine":
        return r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * p))
    if shape == "1-sqrt":
        return r + (1.0 - r) * (1.0 - math.sqrt(p))
    if shape == "inverse-sqrt":
        return 1.0 / math.sqrt(1.0 + p * (1.0 / (r * r) - 1.0))
    raise ValueError(f"decay shape must be one of {', '.join(SHAPES)}; got {shape!r}")


def lr_at(
    step: int,
    *,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    kind: str = "cosine",
    final_ratio: float = 0.1,
    decay_fraction: float = 0.9,
    decay_steps: int | None = None,
    decay_shape: str = "1-sqrt",
) -> float:
    """Learning rate for optimizer step ``step`` (0-based: the first update uses ``lr_at(0)``).

    Warmup rises linearly from 0 at step 0 to ``peak`` at ``warmup_steps``. For the decaying kinds the decay
    runs from there to step ``decay_fraction * total_steps`` (counted from the start of training, warmup
    included), where it reaches ``final_ratio * peak`` and stays. For ``wsd`` the peak holds until
    ``total_steps - decay_steps``, then decays with ``decay_shape`` to ``final_ratio * peak`` at ``total_steps``.
    """
    _check(peak, warmup_steps, total_steps, kind, final_ratio, decay_fraction, decay_steps, decay_shape)
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step}")
    if step < warmup_steps:
        return peak * step / warmup_steps
    if kind == "constant":
        return peak
    if kind == "wsd":
        span = wsd_decay_steps(total_steps, decay_steps)
        start = total_steps - span
        if step < start or span == 0:
            return peak
        return peak * decay_factor(decay_shape, (step - start) / span, final_ratio)
    decay_end = _decay_end(total_steps, decay_fraction)
    progress = (step - warmup_steps) / (decay_end - warmup_steps)  # 0 at the peak, 1 at the floor
    return peak * decay_factor(kind, progress, final_ratio)


def wsd_decay_steps(total_steps: int, decay_steps: int | None) -> int:
    """Steps of a wsd schedule's final decay: ``decay_steps``, or the last 10% of the run when unset."""
    return round(WSD_DEFAULT_DECAY * total_steps) if decay_steps is None else decay_steps


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    kind: str = "cosine",
    final_ratio: float = 0.1,
    decay_fraction: float = 0.9,
    peak: float | None = None,
    decay_steps: int | None = None,
    decay_shape: str = "1-sqrt",
) -> LambdaLR:
    """A ``LambdaLR`` that sets each parameter group's lr to ``lr_at(step) / peak`` times its initial lr.

    The peak is the optimizer's lr (all groups must share it, so the multiplier means the same everywhere);
    passing ``peak`` only checks that it matches. Call ``scheduler.step()`` after each ``optimizer.step()``.
    """
    base = _shared_lr(optimizer)
    if peak is not None and not math.isclose(peak, base, rel_tol=1e-12):
        raise ValueError(
            f"peak {peak} differs from the optimizer's lr {base}; build the optimizer with lr=peak"
        )
    shape = {
        "kind": kind,
        "final_ratio": final_ratio,
        "decay_fraction": decay_fraction,
        "decay_steps": decay_steps,
        "decay_shape": decay_shape,
    }
    # Fail at construction, not at the first step, on an inconsistent schedule.
    _check(base, warmup_steps, total_steps, **shape)
    return LambdaLR(
        optimizer,
        lambda step: (
            lr_at(step, peak=base, warmup_steps=warmup_steps, total_steps=total_steps, **shape) / base
        ),
    )


def make_lambda_scheduler(optimizer: torch.optim.Optimizer, multiplier) -> LambdaLR:
    """A ``LambdaLR`` over ``multiplier(step)`` (the peak's factor), for schedules built from pieces (phases)."""
    _shared_lr(optimizer)
    return LambdaLR(optimizer, multiplier)


def sync_lr(scheduler: LambdaLR) -> None:
    """Set each group's lr to what the schedule gives at the scheduler's step: after a checkpoint written
    under another schedule is loaded (a decay branched from a stable run), the lr stored with it is not
    this run's."""
    for group, base, fn in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * fn(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]


def _shared_lr(optimizer: torch.optim.Optimizer) -> float:
    group_lrs = {group["lr"] for group in optimizer.param_groups}
    if len(group_lrs) != 1:
        raise ValueError(f"parameter groups have different learning rates {sorted(group_lrs)}")
    return group_lrs.pop()


def _decay_end(total_steps: int, decay_fraction: float) -> int:
    return round(decay_fraction * total_steps)


def _check(
    peak: float,
    warmup_steps: int,
    total_steps: int,
    kind: str,
    final_ratio: float,
    decay_fraction: float,
    decay_steps: int | None = None,
    decay_shape: str = "1-sqrt",
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
    shape = decay_shape if kind == "wsd" else kind
    if shape == "inverse-sqrt" and final_ratio <= 0:
        raise ValueError("the inverse-sqrt decay needs final_ratio > 0 (1/sqrt never reaches 0)")
    if kind == "wsd":
        _check_wsd(warmup_steps, total_steps, decay_steps, decay_shape)
    elif kind != "constant" and _decay_end(total_steps, decay_fraction) <= warmup_steps:
        raise ValueError(
            f"the decay would end (step {_decay_end(total_steps, decay_fraction)} = {decay_fraction} x "
            f"{total_steps}) before warmup does (step {warmup_steps})"
        )


def _check_wsd(warmup_steps: int, total_steps: int, decay_steps: int | None, decay_shape: str) -> None:
    if decay_shape not in SHAPES:
        raise ValueError(f"decay_shape must be one of {', '.join(SHAPES)}; got {decay_shape!r}")
    if decay_steps is not None and decay_steps < 0:
        raise ValueError(f"decay_steps must be non-negative, got {decay_steps}")
    span = wsd_decay_steps(total_steps, decay_steps)
    if total_steps - span < warmup_steps:
        raise ValueError(
            f"the decay would start (step {total_steps - span} = {total_steps} - {span} decay steps) before "
            f"warmup ends (step {warmup_steps})"
        )
