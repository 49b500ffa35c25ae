"""The training benchmark: FLOP accounting by hand, the paper's shapes, and a run that times the core's step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neobert.benchmarks import training as bench_module
from neobert.benchmarks.training import (
    TrainBenchConfig,
    pretrain_config,
    run,
    synthetic_data,
    training_flops_per_token,
)
from neobert.common.config import ModelConfig
from neobert.training.trainer import Trainer


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


@pytest.mark.parametrize(("seq_len", "rows"), [(1024, 32), (4096, 8)])
def test_the_papers_shapes_are_pretraining_configs(seq_len, rows, tmp_path):
    """The neobert preset at 1,024 x 32 and 4,096 x 8: one step of packed rows, one micro-batch."""
    bench = TrainBenchConfig(presets=["neobert"], seq_len=seq_len, rows=rows)
    config = pretrain_config("neobert", "bf16", bench, str(tmp_path))
    assert config.tokens_per_step == seq_len * rows and config.micro_batch_size == rows
    assert config.data.packing and config.model_config().max_length >= seq_len
    assert config.model_config().hidden_size == 768 and config.model_config().num_hidden_layers == 28


def test_rows_pack_several_documents_with_per_document_attention():
    bench = TrainBenchConfig(seq_len=1024, rows=2)
    data = synthetic_data(ModelConfig.from_name("tiny"), bench)
    lengths = np.array([len(d) for d in data.train])
    assert lengths.min() >= 32 and lengths.max() < 1024


def test_run_times_the_core_step_and_writes_table_and_json(tmp_path, monkeypatch):
    calls = []
    real = Trainer.train_step

    def counting(self, task, batches):
        calls.append(len(batches))
        return real(self, task, batches)

    monkeypatch.setattr(bench_module.Trainer, "train_step", counting)
    bench = TrainBenchConfig(
        presets=["tiny"],
        dtypes=["fp32"],
        device="cpu",
        seq_len=64,
        rows=4,
        micro_batch_size=2,
        steps=2,
        warmup=1,
        peak_sizes=[256],
        output=str(tmp_path),
    )
    results = run(bench)
    assert calls == [2, 2, 2]  # 1 warm-up + 2 timed steps of the core, each 2 accumulated micro-batches
    row = results["results"][0]
    assert row["device"] == "cpu" and row["tokens_per_second"] > 0 and row["mfu"] > 0
    assert row["tokens_per_step"] <= 4 * 64 and row["peak_memory_bytes"] > 0
    assert row["compile_seconds"] is None
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["preset"] == "tiny"
    assert "| tiny | fp32 | 64 x 4 |" in (tmp_path / "results.md").read_text()


def test_cli_refuses_bad_options(capsys):
    from neobert.cli.main import main

    assert main(["bench", "training", "--presets", "nope"]) == 1
    assert "unknown nope" in capsys.readouterr().err
    assert main(["bench", "training", "--rows", "5", "--micro-batch-size", "2"]) == 1
    assert "not a multiple" in capsys.readouterr().err
