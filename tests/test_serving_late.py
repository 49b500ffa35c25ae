"""A late-interaction (ColBERT) directory served by `neobert serve`, over real HTTP on 127.0.0.1: token vectors
(Jina's `return_multivector` on /v1/embeddings) and /rerank by MaxSim in our, TEI's and Cohere's shapes, equal
to sentence-transformers' MultiVectorEncoder on the same directory; the answer budget before the model runs;
/info and the OpenAPI schema."""

from __future__ import annotations

import base64
import string

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from helpers import call, serve

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
QUERY = "what is a cat?"
DOCUMENTS = [
    "A cat, is an animal.",
    "Dogs; bark! loudly (always).",
    "cats and kittens " * 30,
    "a tower in paris",
]


@pytest.fixture(scope="module")
def late_dir(tmp_path_factory):
    from neobert.inference.encoders import load_encoder
    from neobert.inference.late_interaction import (
        LateInteractionModel,
        LateInteractionSpec,
        add_markers,
        save_late_interaction,
    )

    tmp = tmp_path_factory.mktemp("late")
    encoder = load_encoder(save_tiny_neobert(tmp / "src"))
    spec = LateInteractionSpec(dim=16, document_length=64)
    add_markers(encoder, spec)
    torch.manual_seed(0)
    return save_late_interaction(LateInteractionModel(encoder.base, 16), encoder.tokenizer, spec, tmp / "li")


@pytest.fixture(scope="module")
def reference(late_dir):
    from sentence_transformers import MultiVectorEncoder

    import neobert  # noqa: F401  (registers NeoBERT with transformers)

    return MultiVectorEncoder(str(late_dir), device="cpu")


@pytest.fixture(scope="module")
def server(late_dir):
    with serve(
        late_dir, api_key=None, model_process=True
    ) as srv:  # the default: the model in its own process
        yield srv.url


def _post(url, path, body):
    status, answer, _ = call(url, "POST", path, body, key=None)
    assert status == 200, answer
    return answer


def test_token_vectors_equal_multi_vector_encoder(server, reference):
    queries = _post(
        server,
        "/v1/embeddings",
        {"input": [QUERY, "dogs"], "return_multivector": True, "task": "retrieval.query"},
    )
    documents = _post(
        server,
        "/v1/embeddings",
        {"input": DOCUMENTS, "return_multivector": True, "task": "retrieval.passage"},
    )
    expected = reference.encode_query([QUERY, "dogs"]) + reference.encode_document(DOCUMENTS)
    got = [np.array(row["embeddings"]) for row in queries["data"] + documents["data"]]
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    assert (
        got[0].shape == (32, 16) and got[3].shape[0] < 64
    )  # expansion; a long document cut, punctuation dropped
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs.float().numpy(), atol=1e-5)
    assert documents["usage"]["total_tokens"] > 0
    packed = _post(
        server,
        "/v1/embeddings",
        {"input": DOCUMENTS[:1], "return_multivector": True, "encoding_format": "base64"},
    )
    raw = np.frombuffer(base64.b64decode(packed["data"][0]["embeddings"]), dtype="<f4").reshape(-1, 16)
    # computed alone here, among others above: float32 sums round with the batch and the CPU kind (2.4e-7 seen
    # on an AMD EPYC with AVX-512 BF16), so compare at what float32 holds, as above
    np.testing.assert_allclose(raw, got[2], atol=1e-5)


def test_rerank_by_maxsim_in_three_shapes(server, reference):
    expected = reference.similarity(reference.encode_query([QUERY]), reference.encode_document(DOCUMENTS))[0]
    expected = expected.float().numpy()
    ours = _post(server, "/rerank", {"query": QUERY, "documents": DOCUMENTS, "return_documents": True})
    tei = _post(server, "/rerank", {"query": QUERY, "texts": DOCUMENTS})
    cohere = _post(server, "/v2/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": 2, "model": "m"})
    order = list(np.argsort(-expected))
    for results, key in (
        (ours["results"], "relevance_score"),
        (tei, "score"),
        (cohere["results"], "relevance_score"),
    ):
        assert [r["index"] for r in results] == order[: len(results)]
        for r in results:
            assert r[key] == pytest.approx(float(expected[r["index"]]), abs=1e-5)
    assert len(cohere["results"]) == 2 and ours["results"][0]["document"]["text"] == DOCUMENTS[order[0]]


def test_maxsim_alignment_token_by_token(late_dir, server, reference):
    """/maxsim: per document the query's and the document's tokens, their similarities and each query token's
    match, equal to MultiVectorEncoder's token vectors and the tokenizer's tokens; the score is /rerank's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(late_dir))
    answer = _post(server, "/maxsim", {"query": QUERY, "documents": DOCUMENTS})["results"]
    reranked = _post(server, "/rerank", {"query": QUERY, "documents": DOCUMENTS})["results"]
    assert [r["index"] for r in answer] == [r["index"] for r in reranked]
    query = reference.encode_query([QUERY])[0].float().numpy()
    documents = [d.float().numpy() for d in reference.encode_document(DOCUMENTS)]
    asked = tokenizer.convert_ids_to_tokens(tokenizer("[Q] " + QUERY)["input_ids"])
    expansion = [tokenizer.mask_token] * (32 - len(asked))
    for row, ranked in zip(answer, reranked):
        assert row["query_tokens"] == asked + expansion
        ids = tokenizer("[D] " + DOCUMENTS[row["index"]], truncation=True, max_length=64)["input_ids"]
        words = [t for t in tokenizer.convert_ids_to_tokens(ids) if t not in string.punctuation]
        assert row["document_tokens"] == words
        expected = query @ documents[row["index"]].T
        np.testing.assert_allclose(row["similarities"], expected, atol=1e-5)
        assert row["matched"] == expected.argmax(axis=1).tolist()
        assert row["score"] == pytest.approx(float(expected.max(axis=1).sum()), abs=1e-4)
        assert row["score"] == pytest.approx(ranked["relevance_score"], abs=1e-5)
    status, _, _ = call(server, "POST", "/maxsim", {"query": QUERY, "documents": []}, key=None)
    assert status == 422


def test_info_schema_budget_and_refusals(late_dir, server):
    status, info, _ = call(server, "GET", "/info", key=None)
    assert status == 200 and info["serves"] == [
        "token_vectors",
        "rerank",
        "maxsim_alignment",
        "tokenize",
        "decode",
    ]
    late = info["token_vectors"]
    assert (late["dim"], late["query_length"], late["document_length"], late["similarity"]) == (
        16,
        32,
        64,
        "MaxSim",
    )
    assert info["dimensions"] == 16 and "late-interaction" in info["not_served"]["embed"]
    status, answer, _ = call(server, "POST", "/v1/embeddings", {"input": ["a cat"]}, key=None)
    assert status == 404 and "return_multivector" in answer["error"]["message"]
    status, answer, _ = call(
        server, "POST", "/v1/embeddings", {"input": [5, 6], "return_multivector": True}, key=None
    )
    assert status == 422 and answer["error"]["param"] == "input"
    _, schema, _ = call(server, "GET", "/openapi.json", key=None)
    field = schema["components"]["schemas"]["OpenAIEmbeddingRequest"]["properties"]["return_multivector"]
    assert "max_answer_bytes" in field["description"]
    forms = schema["components"]["schemas"]["OpenAIEmbeddingRequest"]["properties"]["input"]["anyOf"]
    assert [f["type"] for f in forms] == ["string", "array"] and forms[1]["items"]["type"] == "string"
    # 4 queries x 32 tokens x 16 numbers x 20 bytes = 40,960 bytes: over a 40,000-byte budget, before the model runs
    with serve(late_dir, api_key=None, max_answer_bytes=40_000) as small:
        body = {"input": ["a", "b", "c", "d"], "return_multivector": True, "task": "retrieval.query"}
        status, answer, _ = call(small.url, "POST", "/v1/embeddings", body, key=None)
        assert status == 413 and "128 tokens x 16 numbers as float" in answer["error"]["message"]
        body["input"] = ["a", "b", "c"]  # 30,720 bytes
        assert call(small.url, "POST", "/v1/embeddings", body, key=None)[0] == 200
        # /maxsim: 32 query tokens x 20 bytes per document token; the long document's 64 tokens: 40,960 bytes
        body = {"query": QUERY, "documents": DOCUMENTS[2:3]}
        status, answer, _ = call(small.url, "POST", "/maxsim", body, key=None)
        assert status == 413 and answer["error"]["param"] == "documents"
        assert "64 tokens x 32 query tokens' similarities" in answer["error"]["message"]
        body["documents"] = DOCUMENTS[:1]
        assert call(small.url, "POST", "/maxsim", body, key=None)[0] == 200


@pytest.mark.slow
def test_schemathesis_finds_nothing_on_a_late_interaction_server(server):
    """schemathesis' checks, valid and invalid requests, every operation, against the late-interaction server:
    what its schema allows is answered (or 404 for what the model does not serve), what it refuses is refused."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode, checks
    from schemathesis.config import SchemathesisConfig

    every = [
        checks.not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_schema_conformance,
        checks.negative_data_rejection,
        checks.positive_data_acceptance,
    ]
    rejections = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
    config = SchemathesisConfig.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": rejections}}}
    )
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json", config=config)
    for operation in [result.ok() for result in schema.get_all_operations()]:
        post = operation.method.upper() == "POST"
        for mode in [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if post else []):

            @settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case):
                case.call_and_validate(checks=every)

            check()


def test_what_does_not_apply_is_refused_at_start(late_dir):
    with pytest.raises(ValueError, match="no masked-LM logits"):
        serve(late_dir, sparse=True)
    with pytest.raises(ValueError, match="--long-documents chunk does not apply"):
        serve(late_dir, long_documents="chunk")
