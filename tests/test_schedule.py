"""Learning-rate schedule: values at the milestones of the NeoBERT recipe, and the torch scheduler."""

import itertools
import math

import pytest
import torch

from neobert.training import lr_at, make_scheduler

PEAK, WARMUP, TOTAL = 6e-4, 2_000, 1_000_000  # the paper's stage 1
NEOBERT = {"peak": PEAK, "warmup_steps": WARMUP, "total_steps": TOTAL}


def test_cosine_milestones():
    assert lr_at(0, **NEOBERT) == 0.0
    assert lr_at(1_000, **NEOBERT) == pytest.approx(3e-4)
    assert lr_at(500, **NEOBERT) == pytest.approx(1.5e-4)
    assert lr_at(WARMUP, **NEOBERT) == pytest.approx(PEAK)
    # halfway through the decay (step 2,000 + 449,000) the cosine is at the middle of peak and floor
    assert lr_at(451_000, **NEOBERT) == pytest.approx((6e-4 + 6e-5) / 2)
    assert lr_at(900_000, **NEOBERT) == pytest.approx(6e-5)
    assert lr_at(950_000, **NEOBERT) == pytest.approx(6e-5)
    assert lr_at(TOTAL, **NEOBERT) == pytest.approx(6e-5)


def test_cosine_shape_is_monotone_and_matches_the_formula():
    steps = range(WARMUP, 900_001, 12_345)
    values = [lr_at(s, **NEOBERT) for s in steps]
    assert all(a >= b for a, b in itertools.pairwise(values))
    s = 300_000
    p = (s - WARMUP) / (900_000 - WARMUP)
    assert lr_at(s, **NEOBERT) == pytest.approx(6e-5 + 5.4e-4 * 0.5 * (1 + math.cos(math.pi * p)))


def test_linear_and_constant():
    kw = {**NEOBERT, "kind": "linear"}
    assert lr_at(1_000, **kw) == pytest.approx(3e-4)
    assert lr_at(WARMUP, **kw) == pytest.approx(PEAK)
    assert lr_at(451_000, **kw) == pytest.approx((6e-4 + 6e-5) / 2)
    assert lr_at(900_000, **kw) == pytest.approx(6e-5)
    assert lr_at(990_000, **kw) == pytest.approx(6e-5)
    # the BERT baseline: linear decay to zero over all the steps
    bert = {"peak": 1e-4, "warmup_steps": 10, "total_steps": 110, "kind": "linear"}
    assert lr_at(60, **bert, final_ratio=0.0, decay_fraction=1.0) == pytest.approx(5e-5)
    assert lr_at(110, **bert, final_ratio=0.0, decay_fraction=1.0) == 0.0
    const = {**NEOBERT, "kind": "constant"}
    assert lr_at(1_000, **const) == pytest.approx(3e-4)
    assert [lr_at(s, **const) for s in (WARMUP, 500_000, TOTAL)] == [PEAK] * 3


def test_no_warmup_starts_at_peak():
    assert lr_at(0, peak=1.0, warmup_steps=0, total_steps=100) == 1.0


def test_invalid_schedules_raise():
    with pytest.raises(ValueError, match="kind"):
        lr_at(0, **NEOBERT, kind="step")
    with pytest.raises(ValueError, match="before warmup"):
        lr_at(0, peak=1.0, warmup_steps=100, total_steps=100)
    with pytest.raises(ValueError, match="non-negative"):
        lr_at(-1, **NEOBERT)


def test_scheduler_follows_lr_at():
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([param], lr=1e-3)
    kw = {"warmup_steps": 10, "total_steps": 100}
    sched = make_scheduler(opt, **kw, peak=1e-3)
    seen = []
    for _ in range(100):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [lr_at(s, peak=1e-3, **kw) for s in range(100)]
    assert seen == pytest.approx(expected)
    assert seen[10] == pytest.approx(1e-3) and seen[95] == pytest.approx(1e-4)


def test_scheduler_rejects_a_mismatched_peak():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    with pytest.raises(ValueError, match="peak"):
        make_scheduler(opt, warmup_steps=1, total_steps=10, peak=6e-4)


# -- warmup-stable-decay --------------------------------------------------------------------------------------


def _naive_shape(shape: str, p: float, r: float) -> float:
    """The decay shapes written out independently of neobert.training.schedule."""
    return {
        "linear": r + (1 - r) * (1 - p),
        "cosine": r + (1 - r) * (1 + math.cos(math.pi * p)) / 2,
        "1-sqrt": r + (1 - r) * (1 - p**0.5),
        "inverse-sqrt": (1 + p * (r**-2 - 1)) ** -0.5,
    }[shape]


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt", "inverse-sqrt"])
def test_wsd_warms_up_holds_then_decays_with_its_shape(shape):
    kw = {
        "peak": 1.0,
        "warmup_steps": 10,
        "total_steps": 110,
        "kind": "wsd",
        "decay_steps": 40,
        "decay_shape": shape,
        "final_ratio": 0.05,
    }
    assert lr_at(5, **kw) == pytest.approx(0.5)
    assert [lr_at(s, **kw) for s in (10, 40, 70)] == [1.0, 1.0, 1.0]  # stable until 110 - 40
    for step in range(70, 111):
        assert lr_at(step, **kw) == pytest.approx(_naive_shape(shape, (step - 70) / 40, 0.05))
    assert lr_at(110, **kw) == pytest.approx(0.05)
    values = [lr_at(s, **kw) for s in range(70, 111)]
    assert all(a > b for a, b in itertools.pairwise(values))


def test_wsd_defaults_and_decay_on_demand():
    # no decay_steps: the last 10% decay; decay_steps=0: stable to the end
    assert lr_at(89, peak=1.0, warmup_steps=0, total_steps=100, kind="wsd") == 1.0
    assert lr_at(95, peak=1.0, warmup_steps=0, total_steps=100, kind="wsd", final_ratio=0.0) == pytest.approx(
        1 - 0.5**0.5
    )
    assert lr_at(100, peak=1.0, warmup_steps=5, total_steps=100, kind="wsd", decay_steps=0) == 1.0
    # a decay of N steps branched at step S of a stable run is the schedule of an (S + N)-step wsd run, and
    # before S it is the stable run's schedule
    stable = {"peak": 2e-3, "warmup_steps": 20, "total_steps": 1_000, "kind": "wsd", "decay_steps": 0}
    branch = {**stable, "total_steps": 300 + 50, "decay_steps": 50, "final_ratio": 0.0}
    assert [lr_at(s, **branch) for s in range(300)] == [lr_at(s, **stable) for s in range(300)]
    assert lr_at(350, **branch) == 0.0


def test_decay_kinds_after_warmup_and_bad_wsd_settings():
    kw = {"peak": 1.0, "warmup_steps": 10, "total_steps": 100, "decay_fraction": 1.0, "final_ratio": 0.1}
    assert lr_at(55, **kw, kind="1-sqrt") == pytest.approx(_naive_shape("1-sqrt", 0.5, 0.1))
    assert lr_at(55, **kw, kind="inverse-sqrt") == pytest.approx(_naive_shape("inverse-sqrt", 0.5, 0.1))
    with pytest.raises(ValueError, match="final_ratio > 0"):
        lr_at(0, **{**kw, "final_ratio": 0.0}, kind="inverse-sqrt")
    with pytest.raises(ValueError, match="before warmup ends"):
        lr_at(0, peak=1.0, warmup_steps=50, total_steps=100, kind="wsd", decay_steps=60)
    with pytest.raises(ValueError, match="decay_shape"):
        lr_at(0, peak=1.0, warmup_steps=0, total_steps=100, kind="wsd", decay_shape="step")
