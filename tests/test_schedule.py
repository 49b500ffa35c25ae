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
