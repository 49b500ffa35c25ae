"""The training-throughput benchmark: FLOP accounting by hand, and a smoke run (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from neobert.benchmarks.training import TrainBenchConfig, run, training_flops_per_token
from neobert.config import ModelConfig


def test_training_flops_match_a_hand_count():
    cfg = ModelConfig.from_name("tiny")  # C 64, 2 layers, SwiGLU hidden 128, vocab 128
    per_layer = 64 * 192 + 64 * 64 + 64 * 256 + 128 * 64  # qkv, wo, w12, w3
    keys = 40
    forward = 2 * 2 * per_layer + 2 * 4 * keys * 64
    decoder = 2 * 64 * 128 * 0.2
    assert training_flops_per_token(cfg, keys, 0.2) == pytest.approx(3 * (forward + decoder))


def test_learned_positions_and_layernorm_are_not_counted_as_matmuls():
    cfg = ModelConfig.from_name("tiny", position_embedding="learned", norm="layernorm", ffn="gelu")
    per_layer = 64 * 192 + 64 * 64 + 2 * 64 * 192  # qkv, wo, w1, w3 (GELU hidden = intermediate 192)
    assert training_flops_per_token(cfg, 10, 0.0) == pytest.approx(3 * (2 * 2 * per_layer + 2 * 4 * 10 * 64))


def test_smoke_run_writes_table_and_json(tmp_path):
    bench = TrainBenchConfig(
        presets=["tiny"],
        dtypes=["fp32"],
        seq_len=64,
        rows=2,
        steps=1,
        warmup=1,
        peak_sizes=[256],
        output=str(tmp_path),
    )
    results = run(bench)
    row = results["results"][0]
    assert row["tokens_per_second"] > 0 and row["fraction_of_peak"] > 0
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["preset"] == "tiny"
    assert "| tiny | fp32 |" in (tmp_path / "results.md").read_text()
