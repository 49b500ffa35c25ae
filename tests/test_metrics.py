"""GLUE metrics against values computed by hand (and scipy / sklearn as independent references)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from neobert.evaluation.metrics import (
    METRICS,
    MetricResult,
    accuracy,
    compute_metrics,
    f1,
    macro_f1,
    mcc,
    pearson,
    spearman,
)

# Binary case used below: TP = 2 (rows 0, 4), FP = 1 (row 1), FN = 1 (row 3), TN = 1 (row 2).
PRED = [1, 1, 0, 0, 1]
GOLD = [1, 0, 0, 1, 1]


def test_accuracy_by_hand():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    assert accuracy(PRED, GOLD) == 3 / 5
    assert math.isnan(accuracy([], []))


def test_f1_by_hand():
    # precision 2/3, recall 2/3 -> F1 2/3
    assert f1(PRED, GOLD) == pytest.approx(2 / 3)
    # class 0 as positive: TP 1, FP 1, FN 1 -> 1/2
    assert f1(PRED, GOLD, positive=0) == pytest.approx(0.5)
    # never predicting the positive class while it exists: recall 0, F1 0 (defined)
    assert f1([0, 0, 0], [1, 0, 1]) == 0.0
    # no positive label and no positive prediction: 0/0 -> NaN
    assert math.isnan(f1([0, 0], [0, 0]))


def test_macro_f1_by_hand():
    pred = ["a", "a", "b", "c", "c", "c"]
    gold = ["a", "b", "b", "c", "c", "a"]
    # a: TP1 FP1 FN1 -> 1/2; b: TP1 FP0 FN1 -> 2/3; c: TP2 FP1 FN0 -> 4/5
    assert macro_f1(pred, gold) == pytest.approx((1 / 2 + 2 / 3 + 4 / 5) / 3)
    assert macro_f1(PRED, GOLD) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_mcc_binary_by_hand():
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3*3*2*2) = 1/6
    assert mcc(PRED, GOLD) == pytest.approx(1 / 6)
    assert mcc([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert mcc([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_mcc_multiclass_matches_sklearn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 3, 200)
    pred = np.where(rng.random(200) < 0.6, gold, rng.integers(0, 3, 200))
    assert mcc(pred, gold) == pytest.approx(sklearn_metrics.matthews_corrcoef(gold, pred))
    assert macro_f1(pred, gold) == pytest.approx(sklearn_metrics.f1_score(gold, pred, average="macro"))


def test_pearson_by_hand():
    # dx = (-1.5, -.5, .5, 1.5), dy = (-3, -1, 0, 4): 11 / sqrt(5 * 26)
    assert pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))


def rank(values) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of the ranks they span: the reference for Spearman's coefficient."""
    v = np.asarray(values, dtype=np.float64)
    return np.array([(v < x).sum() + ((v == x).sum() + 1) / 2 for x in v])


def test_rank_averages_ties():
    np.testing.assert_array_equal(rank([3, 1, 3, 2]), [3.5, 1.0, 3.5, 2.0])
    np.testing.assert_array_equal(rank([5, 5, 5]), [2.0, 2.0, 2.0])


def test_spearman_by_hand_with_ties():
    # ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(4.5 / math.sqrt(22.5))
    # monotone but not linear: Spearman 1, Pearson below 1
    x = [1, 2, 3, 4, 5]
    y = [1, 4, 9, 16, 100]
    assert spearman(x, y) == pytest.approx(1.0)
    assert pearson(x, y) < 0.95


def test_correlations_match_numpy_by_hand():
    rng = np.random.default_rng(1)
    x = rng.normal(size=100)
    y = x + rng.normal(size=100)
    y[::7] = y[0]  # ties
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert spearman(x, y) == pytest.approx(np.corrcoef(rank(x), rank(y))[0, 1])


def test_constant_predictions_give_nan_and_a_note_not_a_crash():
    result = compute_metrics(["pearson", "spearman"], [2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    assert math.isnan(result.values["pearson"]) and math.isnan(result.values["spearman"])
    assert any("predictions are constant (all 2.0)" in n for n in result.notes)
    assert any("undefined (NaN): pearson, spearman" in n for n in result.notes)

    result = compute_metrics(["mcc", "accuracy"], [1, 1, 1, 1], [1, 0, 1, 0])
    assert math.isnan(result.values["mcc"])  # 0/0, where sklearn would silently say 0.0
    assert result.values["accuracy"] == 0.5
    assert any("constant (all 1)" in n for n in result.notes)


def test_constant_labels_and_nan_predictions_are_flagged():
    result = compute_metrics(["pearson"], [1.0, 2.0, 3.0], [4.0, 4.0, 4.0])
    assert math.isnan(result.values["pearson"])
    assert any("labels are constant" in n for n in result.notes)

    result = compute_metrics(["pearson", "spearman"], [1.0, float("nan"), 3.0], [1.0, 2.0, 3.0])
    assert math.isnan(result.values["pearson"]) and math.isnan(result.values["spearman"])
    assert any("1 prediction(s) are NaN" in n for n in result.notes)


def test_empty_input_and_json_form():
    result = compute_metrics(list(METRICS), [], [])
    assert all(math.isnan(v) for v in result.values.values())
    assert result.notes and "no examples" in result.notes[0]
    # NaN is not JSON: undefined values become null, and the dict is strict-JSON serialisable
    data = MetricResult({"pearson": math.nan, "accuracy": 0.5}, ["x"]).to_dict()
    assert data == {"values": {"pearson": None, "accuracy": 0.5}, "notes": ["x"]}
    json.dumps(data, allow_nan=False)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown metric"):
        compute_metrics(["bleu"], [1], [1])
    with pytest.raises(ValueError, match="same length"):
        accuracy([1, 0], [1])
