"""The throughput benchmark: FLOP counting, a smoke run on tiny models, the CLI. No timing is asserted."""

from __future__ import annotations

import argparse
import csv
import json

import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTModel
from neobert.benchmarks.models import (
    attention_windows,
    build_encoder,
    flops_per_token,
    forward_flops_per_token,
    linear_params,
    random_inputs,
)
from neobert.benchmarks.throughput import BenchConfig, realistic_lengths, run
from neobert.cli import bench
from neobert.inference.encoders import Encoder


def test_flops_per_token_by_hand_tiny_neobert():
    enc = build_encoder("neobert-tiny")
    # tiny: C=64, 2 layers, SwiGLU hidden round8(2*192/3) = 128
    per_layer = 64 * 192 + 64 * 64 + 64 * 2 * 128 + 128 * 64  # qkv, wo, w12, w3
    assert linear_params(enc.model) == 2 * per_layer == 81920
    assert flops_per_token(enc, 16) == 2 * 81920 + 2 * (4 * 16 * 64) == 172032


def test_flops_per_token_released_neobert_and_windows():
    with torch.device("meta"):  # shapes only, no memory
        model = NeoBERTModel(NeoBERTConfig.from_model_config(ModelConfig.from_name("neobert")))
    enc = Encoder(model, None, "neobert", 4096)
    # encoder parameters 221,665,536 minus the embedding (30522 x 768) and 57 RMSNorm weights
    assert linear_params(enc.model) == 221_665_536 - 30522 * 768 - 57 * 768 == 198_180_864
    assert flops_per_token(enc, 1024) == 2 * 198_180_864 + 28 * 4 * 1024 * 768  # ~0.48 GFLOP
    # a sliding window caps the keys a query sees
    assert forward_flops_per_token(10, 8, [100, min(100, 16)]) == 20 + 4 * 100 * 8 + 4 * 16 * 8


def test_modernbert_tiny_has_local_layers():
    enc = build_encoder("modernbert-tiny")
    assert attention_windows(enc.model) == [None, 128, 128]
    assert flops_per_token(enc, 512) - 2 * linear_params(enc.model) == 4 * 64 * (512 + 128 + 128)


def test_random_inputs_avoid_pad():
    enc = build_encoder("bert-tiny")
    ids, mask = random_inputs(enc, 4, 50)
    assert ids.shape == mask.shape == (4, 50)
    assert (ids != enc.pad_token_id).all() and mask.all()


def test_unknown_model_and_bad_config_raise():
    with pytest.raises(ValueError, match="unknown model"):
        BenchConfig(models=["gpt-5"])
    with pytest.raises(ValueError, match="dtype"):
        BenchConfig(dtype="int4")


def test_realistic_lengths_from_file(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("5\n7\n")
    lengths = realistic_lengths(BenchConfig(lengths_file=str(path), realistic_tokens=30))
    assert set(lengths) <= {5, 7} and sum(lengths) >= 30


def tiny_config(tmp_path, **overrides) -> BenchConfig:
    settings = dict(
        models=["neobert-tiny", "bert-tiny"],
        lengths=[8, 16],
        batch_tokens=[32, 64],
        repeats=2,
        warmup=1,
        peak_sizes=(64,),
        realistic=True,
        realistic_range=(2, 16),
        realistic_tokens=48,
        output=str(tmp_path / "out"),
        progress=False,
    )
    return BenchConfig(**{**settings, **overrides})


@pytest.mark.slow  # the whole smoke benchmark (11 s); test_cli_throughput runs the command by default
def test_smoke_run_writes_every_output(tmp_path):
    results = run(tiny_config(tmp_path))
    out = tmp_path / "out"
    for name in ("results.json", "results.csv", "results.md", "results.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name

    saved = json.loads((out / "results.json").read_text())
    assert set(saved["matmul_peak"]) == {"bf16", "fp32"}
    fixed = saved["fixed"]
    assert {(r["model"], r["length"]) for r in fixed} == {
        (m, n) for m in ("neobert-tiny", "bert-tiny") for n in (8, 16)
    }
    for r in fixed:
        assert r["batch_size"] in (2, 4, 8) and len(r["times"]) == 2
        for key in ("tokens_per_s", "tflops", "peak_fraction", "flops_per_token"):
            assert r[key] > 0, key
        assert "peak_memory_mb" in r  # its measurement is tested alone (test_peak_memory_sees_an_allocation)
    modes = {(r["model"], r["mode"]) for r in saved["realistic"]}
    assert modes == {("neobert-tiny", "padded"), ("neobert-tiny", "unpadded"), ("bert-tiny", "padded")}
    assert "neobert-tiny" in results["summary"]["unpadded_over_padded"]
    assert saved["realistic"][0]["real_tokens"] >= 48

    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 + 3
    assert {r["mode"] for r in rows} == {"fixed", "padded", "unpadded"}
    md = (out / "results.md").read_text()
    assert "| neobert-tiny |" in md and "Realistic mode" in md and "Unpadded / padded" in md
    # the written tables hold the measured values: each fixed cell's tokens/s (batch size), in its model's row
    for r in fixed:
        row = next(line for line in md.splitlines() if line.startswith(f"| {r['model']} | "))
        cells = [cell.strip(" |") for cell in row.split(" | ")]  # model, then lengths 8 and 16
        assert cells[1 + [8, 16].index(r["length"])] == f"{round(r['tokens_per_s']):,} ({r['batch_size']})"
    realistic = [line for line in md.splitlines() if line.startswith("| neobert-tiny | unpadded | ")]
    assert len(realistic) == 1


def test_peak_memory_sees_an_allocation():
    """The memory a call adds is measured, not merely non-negative: 64 MiB touched reads as about that."""
    import numpy as np

    from neobert.benchmarks.measure import peak_memory

    def allocate():
        block = np.ones(64 * 2**20, dtype=np.uint8)  # written, so every page is resident
        return int(block[::4096].sum())

    _, added = peak_memory(allocate, "cpu")
    assert 48 * 2**20 < added < 256 * 2**20


def test_lengths_beyond_a_model_are_skipped_and_budget_respected(tmp_path):
    results = run(tiny_config(tmp_path, lengths=[8, 256], realistic=False, output=None, time_budget=1e9))
    cells = {(r["model"], r["length"]) for r in results["fixed"]}
    assert ("bert-tiny", 256) in cells  # bert-tiny has 512 positions
    assert ("neobert-tiny", 256) not in cells  # neobert-tiny has 128
    spent = run(tiny_config(tmp_path, realistic=False, output=None, time_budget=0.0))
    assert all(r.get("skipped") == "time budget" for r in spent["fixed"])


def test_cli_throughput(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "bench",
            "throughput",
            "--models",
            "neobert-tiny,bert-tiny",
            "--lengths",
            "8",
            "--batch-tokens",
            "16",
            "--repeats",
            "1",
            "--output",
            str(tmp_path / "cli"),
            "--peak-sizes",
            "64",
            "--no-progress",
        ]
    )
    assert args.func(args) == 0
    assert (tmp_path / "cli" / "results.md").is_file()
    assert "neobert-tiny" in capsys.readouterr().out
