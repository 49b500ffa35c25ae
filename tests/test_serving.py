"""``neobert serve`` over real HTTP on 127.0.0.1: every endpoint against the library computed directly,
dynamic batching that hands each caller its own rows, and the failure matrix (overload, oversize,
malformed, unexpected errors, long input, graceful shutdown)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from helpers import gate, wait_for
from neobert.inference import encoders, long_documents
from neobert.inference import run as inference
from neobert.serving import ServeConfig
from neobert.serving.batcher import Batcher
from neobert.serving.server import BackgroundServer
from neobert.serving.service import Service

pytestmark = pytest.mark.usefixtures("one_thread")

SRC = Path(__file__).resolve().parents[1] / "src"
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
    "many",
    "jolly",
    "boxers",
]


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct texts of varied lengths (2 to 30 words)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 31)))) + f" {i}" for i in range(n)]


def post(url: str, path: str, body=None, raw: bytes | None = None, headers=None, timeout=60):
    """(status, parsed JSON body, headers) of a POST."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        text = response.read().decode()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, json.loads(text) if text else None, headers
    finally:
        conn.close()


def get(url: str, path: str) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def make_service(model_dir, **settings) -> Service:
    """The model in a thread of this process (fast to start); the shared ``server`` runs it in a process."""
    settings.setdefault("model_process", False)
    return Service.load(ServeConfig(model=str(model_dir), precision="fp32", **settings))


@pytest.fixture(scope="module")
def reference_model(model_dir):
    return encoders.load_model(model_dir, head="mlm")


@pytest.fixture(scope="module")
def server(model_dir):
    """The default layout: the model in a process of its own beside the HTTP process."""
    service = make_service(model_dir, max_texts=8, max_chars=2000, model_process=True, threads=1)
    with BackgroundServer(service) as srv:
        yield srv


def concurrent_embeddings(url: str, texts: list[str], clients: int = 16) -> list[tuple[str, list[float]]]:
    """``clients`` threads x 4 requests of 1-3 texts each: (text, vector) pairs as answered."""

    def client(c: int) -> list[tuple[str, list[float]]]:
        got = []
        for r in range(4):
            start = (c * 8 + r * 2) % 120
            batch = texts[start : start + 1 + (c + r) % 3]
            status, body, _ = post(url, "/embed", {"texts": batch})
            assert status == 200, body
            assert len(body["embeddings"]) == len(batch)
            got += list(zip(batch, body["embeddings"]))
        return got

    with ThreadPoolExecutor(clients) as pool:
        return [pair for rows in pool.map(client, range(clients)) for pair in rows]


def metric(text: str, name: str) -> float:
    """The value of the sample ``name`` (labels included, as written) in a Prometheus text page."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, f"{name} not in the metrics page"
    return values[0]


def test_concurrent_clients_each_get_their_own_vectors(server, reference_model, tokenizer):
    """16 client threads x 4 requests of 1-3 texts, merged into shared model calls: every vector equals
    that text encoded alone (fp32 weights: equal to float rounding)."""
    _, before = get(server.url, "/metrics")
    results = concurrent_embeddings(server.url, sentences(130, seed=1))
    assert len(results) >= 16 * 4
    for text, vector in results:
        alone = inference.encode(reference_model, tokenizer, [text], show_progress=False)[0]
        np.testing.assert_allclose(vector, alone, atol=2e-5, rtol=0)
    status, metrics = get(server.url, "/metrics")
    assert status == 200
    calls = metric(metrics, "neobert_batch_requests_count") - metric(before, "neobert_batch_requests_count")
    merged = metric(metrics, "neobert_batch_requests_sum") - metric(before, "neobert_batch_requests_sum")
    assert merged == 64 and calls < merged, "the requests were never merged"
    assert 'neobert_requests_total{endpoint="/embed",status="200"}' in metrics
    for name in (
        "neobert_request_seconds_bucket",
        "neobert_batch_texts_bucket",
        "neobert_queue_depth",
        "neobert_tokens_total",
        "neobert_tokens_per_second",
    ):
        assert name in metrics


@pytest.mark.slow  # 10 s; concurrent clients on fp32 run by default
def test_concurrent_clients_on_the_bf16_fast_path(model_dir, tokenizer):
    """The default service (bf16 weights, unpadded): merged batches change only bf16 rounding, so every
    vector is within bf16 precision of that text encoded alone by the same model, and nearer to it than
    to any other text's vector (each caller got its own rows)."""
    from neobert.runtime.fastpath import fast_inference

    texts = sentences(130, seed=1)
    model = fast_inference(encoders.load_model(model_dir, head="mlm"), torch.bfloat16)
    alone = {t: inference.encode(model, tokenizer, [t], show_progress=False)[0] for t in texts}
    matrix = np.stack(list(alone.values()))
    with BackgroundServer(Service.load(ServeConfig(model=str(model_dir)))) as srv:
        results = concurrent_embeddings(srv.url, texts)
        _, metrics = get(srv.url, "/metrics")
    assert metric(metrics, "neobert_batch_requests_count") < 64  # merged
    for text, vector in results:
        np.testing.assert_allclose(vector, alone[text], atol=1e-2, rtol=0)
        assert list(alone)[int(np.argmax(matrix @ np.asarray(vector)))] == text


def test_batcher_merges_waiting_requests_and_routes_rows():
    """Requests that wait while the worker is busy share one model call; each gets its own rows."""
    calls, release = [], threading.Event()

    def run(key, texts):
        calls.append((key, list(texts)))
        release.wait(10)
        return [f"{key}:{t}" for t in texts], len(texts)

    batcher = Batcher(run, max_queue=10, max_texts=5)
    try:
        first = batcher.submit("a", ["t0"])
        wait_for(lambda: len(calls) == 1)  # the worker holds the first call
        waiting = [
            batcher.submit("a", ["t1", "t2"]),
            batcher.submit("b", ["u1"]),
            batcher.submit("a", ["t3"]),
            batcher.submit("a", ["t4", "t5"]),
            batcher.submit("a", ["t6"]),
        ]
        release.set()
        results = [f.result(10) for f in (first, *waiting)]
    finally:
        batcher.close(10)
    assert results == [["a:t0"], ["a:t1", "a:t2"], ["b:u1"], ["a:t3"], ["a:t4", "a:t5"], ["a:t6"]]
    # call 2 merges key "a" up to 5 texts (t1 t2 t3 t4 t5); "b" keeps its place ahead of t6
    assert calls[1:] == [("a", ["t1", "t2", "t3", "t4", "t5"]), ("b", ["u1"]), ("a", ["t6"])]


def test_batcher_without_merging_runs_one_request_per_call():
    calls = []
    batcher = Batcher(lambda key, texts: (calls.append(list(texts)) or list(texts), 0), 10, 64, merge=False)
    futures = [batcher.submit("a", [str(i), "x"]) for i in range(5)]
    assert [f.result(10) for f in futures] == [[str(i), "x"] for i in range(5)]
    batcher.close(10)
    assert calls == [[str(i), "x"] for i in range(5)]


def test_overload_answers_503_with_retry_after_and_serves_the_rest(model_dir):
    service = make_service(model_dir, max_queue=2, retry_after=3)
    release = gate(service)
    with BackgroundServer(service) as srv, ThreadPoolExecutor(3) as pool:
        first = pool.submit(post, srv.url, "/embed", {"texts": ["held by the worker"]})
        wait_for(release.entered.is_set)  # the worker holds it
        queued = [pool.submit(post, srv.url, "/embed", {"texts": [f"queued {i}"]}) for i in range(2)]
        wait_for(lambda: service.batcher.depth() == 2)
        status, body, headers = post(srv.url, "/embed", {"texts": ["one too many"]})
        assert status == 503
        assert headers["retry-after"] == "3"
        assert "busy" in body["error"]["message"]
        release.set()
        assert [f.result(30)[0] for f in (first, *queued)] == [200, 200, 200]
        _, metrics = get(srv.url, "/metrics")
    assert 'neobert_requests_total{endpoint="/embed",status="503"} 1.0' in metrics
    assert 'neobert_requests_total{endpoint="/embed",status="200"} 3.0' in metrics


def test_limits_answer_413(server):
    status, body, _ = post(server.url, "/embed", {"texts": ["a"] * 9})
    assert (status, body["error"]["param"]) == (413, "texts")
    assert "limit is 8" in body["error"]["message"]
    status, body, _ = post(server.url, "/embed", {"texts": ["ok", "x" * 2001]})
    assert (status, body["error"]["param"]) == (413, "texts[1]")
    status, body, _ = post(server.url, "/v1/embeddings", {"input": "y" * 2001})
    assert (status, body["error"]["param"]) == (413, "input[0]")
    # a body over the byte limit is refused from its Content-Length, before it is parsed
    limit = server.service.config.max_body_bytes
    status, body, _ = post(server.url, "/embed", raw=b"[" + b" " * limit + b"]")
    assert status == 413 and "bytes" in body["error"]["message"]


def test_chunked_body_over_the_limit_answers_413(server):
    limit = server.service.config.max_body_bytes
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        body = iter([b'{"texts": ["', b"z" * (limit // 2), b"z" * (limit // 2 + 10), b'"]}'])
        conn.request(
            "POST", "/embed", body=body, headers={"Content-Type": "application/json"}, encode_chunked=True
        )
        response = conn.getresponse()
        assert response.status == 413
        assert "limit" in json.loads(response.read())["error"]["message"]
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("path", "body", "field", "words"),
    [
        ("/embed", {"texts": ["a", 3]}, "texts[1]", "valid string"),
        ("/embed", {"texts": "not a list"}, "texts", "valid list"),
        ("/embed", {"text": ["a"]}, "texts", "required"),
        ("/embed", {"texts": ["a"], "normalize": "yes"}, "normalize", "boolean"),
        ("/embed", {"texts": ["a"], "pooling": "max"}, "pooling", "'mean', 'cls' or 'last'"),
        ("/embed", {"texts": []}, "texts", "at least 1"),
        ("/embed", {"texts": ["a", ""]}, "texts[1]", "at least 1 character"),
        ("/v1/embeddings", {"input": ["a", ""]}, "input[1]", "at least 1 character"),
        ("/fill-mask", {"texts": ["no mask here"]}, "texts[0]", "[MASK]"),
        ("/fill-mask", {"texts": ["a [MASK]"], "top_k": "3"}, "top_k", "integer"),
        ("/v1/embeddings", {"input": {"a": 1}}, "input", "string"),
        ("/v1/embeddings", {"input": ""}, "input", "at least 1 character"),
        ("/v1/embeddings", {"input": [[1, 2], [-1]]}, "input[1][0]", "greater than or equal to 0"),
        ("/v1/embeddings", {"input": "a", "dimensions": 65}, "dimensions", "at most the model's 64"),
        ("/embed", {"texts": ["a", "\ud800"]}, "texts[1]", "not valid Unicode"),
        ("/embed", {"texts": ["a"], "truncate": "no"}, "truncate", "boolean"),
    ],
)
def test_malformed_requests_answer_422_naming_the_field(server, path, body, field, words):
    status, answer, _ = post(server.url, path, body)
    assert status == 422, answer
    assert answer["error"]["param"] == field
    assert words in answer["error"]["message"]
    assert "Traceback" not in json.dumps(answer)


def test_invalid_json_and_unknown_routes(server):
    status, answer, _ = post(server.url, "/embed", raw=b'{"texts": [')
    assert (status, answer["error"]["param"]) == (422, "body")
    assert "not valid JSON" in answer["error"]["message"]
    status, answer, _ = post(server.url, "/classify", {"texts": ["a"]})
    assert status == 404 and "does not serve classify" in answer["error"]["message"]
    status, answer, _ = post(server.url, "/nowhere", {})
    assert status == 404


def test_unexpected_error_answers_500_without_internals(model_dir):
    service = make_service(model_dir)

    def broken(key, texts):
        raise RuntimeError("secret internal detail")

    service.batcher._run = broken
    with BackgroundServer(service) as srv:
        status, answer, _ = post(srv.url, "/embed", {"texts": ["a"]})
        assert status == 500
        assert "secret" not in json.dumps(answer) and "Traceback" not in json.dumps(answer)
        # the worker survives a failed call
        service.batcher._run = service.run
        assert post(srv.url, "/embed", {"texts": ["a"]})[0] == 200


def test_openai_embeddings_shapes(server, reference_model, tokenizer):
    texts = ["first text", "a second, longer text"]
    status, body, _ = post(server.url, "/v1/embeddings", {"input": texts, "model": "m"})
    assert status == 200
    assert body["object"] == "list" and body["model"] == "m"
    assert [d["index"] for d in body["data"]] == [0, 1] and body["data"][0]["object"] == "embedding"
    expected = inference.encode(reference_model, tokenizer, texts, show_progress=False)
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, atol=2e-5)
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    status, body, _ = post(server.url, "/v1/embeddings", {"input": "first text", "encoding_format": "base64"})
    decoded = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, expected[0], atol=2e-5)


def test_embed_options_and_fill_mask(server, reference_model, tokenizer):
    texts = ["pooling by the first token", "x"]
    status, body, _ = post(server.url, "/embed", {"texts": texts, "pooling": "cls", "normalize": False})
    assert status == 200
    expected = inference.encode(
        reference_model, tokenizer, texts, pooling="cls", normalize=False, show_progress=False
    )
    np.testing.assert_allclose(body["embeddings"], expected, atol=2e-5)
    status, body, _ = post(
        server.url, "/fill-mask", {"texts": ["paris is the [MASK] of france."], "top_k": 3}
    )
    assert status == 200
    expected = inference.fill_mask(reference_model, tokenizer, "paris is the [MASK] of france.", 3)
    got = body["results"][0][0]
    assert [g["token"] for g in got] == [t for t, _ in expected[0]]
    np.testing.assert_allclose([g["score"] for g in got], [p for _, p in expected[0]], rtol=1e-4)
    status, health = get(server.url, "/health")
    assert status == 200 and json.loads(health)["serves"] == [
        "embed",
        "embed_all",
        "fill-mask",
        "tokenize",
        "decode",
    ]


def test_classify_and_tokens_endpoints(tmp_path, tokenizer):
    from neobert.common.config import ModelConfig
    from neobert.model import NeoBERTConfig, NeoBERTForTokenClassification

    torch.manual_seed(0)
    labels = {0: "negative", 1: "positive"}
    classifier = encoders.load_model(
        "tiny",
        "sequence-classification",
        vocab_size=30522,
        num_labels=2,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    clf_dir = encoders.save_pretrained(classifier, tokenizer, tmp_path / "clf")
    texts = ["a fine day", "a dreadful, dreary day in the rain"]
    with BackgroundServer(make_service(clf_dir)) as srv:
        status, body, _ = post(srv.url, "/classify", {"texts": texts})
    assert status == 200
    logits = inference.classifier_logits(classifier, tokenizer, texts, show_progress=False)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row, p in zip(body["results"], probs):
        assert row["label"] == labels[int(p.argmax())]
        np.testing.assert_allclose(
            [row["probabilities"]["negative"], row["probabilities"]["positive"]], p, atol=1e-5
        )

    tags = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    config = NeoBERTConfig.from_model_config(
        ModelConfig.from_name("tiny", vocab_size=30522),
        num_labels=5,
        id2label=tags,
        label2id={v: k for k, v in tags.items()},
    )
    tagger = NeoBERTForTokenClassification(config).eval()
    with torch.no_grad():
        tagger.classifier.weight.normal_(0, 2.0)  # random but decisive tags, so entities appear
    tag_dir = encoders.save_pretrained(tagger, tokenizer, tmp_path / "tagger")
    texts = ["John Smith flew from New York to Paris.", "nothing much"]
    with BackgroundServer(make_service(tag_dir)) as srv:
        status, body, _ = post(srv.url, "/tokens", {"texts": texts})
    assert status == 200
    expected = [bio_entities(tagger, tokenizer, text, tags) for text in texts]
    assert any(expected)
    for text, row, want in zip(texts, body["results"], expected):
        got = [(e["label"], e["start"], e["end"], e["text"]) for e in row["entities"]]
        assert got == [(label, start, end, text[start:end]) for label, start, end, _ in want]
        np.testing.assert_allclose([e["score"] for e in row["entities"]], [w[3] for w in want], atol=1e-5)


def bio_entities(model, tokenizer, text: str, tags: dict[int, str]) -> list[tuple[str, int, int, float]]:
    """The expectation of /tokens computed here, not by the tagging code: one padded forward pass, each
    word's tag from its first sub-word, BIO spans read by hand (an I- that does not continue an entity of
    its type opens one, as conlleval does), an entity's score the mean probability of its words' tags."""
    encoding = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=encoding["input_ids"], attention_mask=encoding["attention_mask"]).logits[0]
    probs = torch.softmax(logits.double(), dim=-1).numpy()
    offsets = encoding["offset_mapping"][0].tolist()
    words: list[list] = []  # [start, end, tag, probability]
    previous = None
    for i, word in enumerate(encoding.word_ids()):
        if word is None:
            continue
        if word == previous:
            words[-1][1] = offsets[i][1]
            continue
        previous = word
        best = int(probs[i].argmax())
        words.append([offsets[i][0], offsets[i][1], tags[best], float(probs[i][best])])
    entities, current = [], None
    for start, end, tag_name, p in words:
        kind = tag_name[2:] if tag_name != "O" else None
        if kind is not None and tag_name.startswith("I-") and current and current[0] == kind:
            current[2], current[3] = end, current[3] + [p]
            continue
        if current:
            entities.append(current)
        current = [kind, start, end, [p]] if kind else None
    if current:
        entities.append(current)
    return [(kind, start, end, float(np.mean(ps))) for kind, start, end, ps in entities]


def test_long_input_follows_the_policy(model_dir, reference_model, tokenizer):
    """A text of ~3 windows (tiny: 128 tokens) through the service equals long_documents.embed."""
    text = " ".join(sentences(40, seed=3))
    assert len(tokenizer(text)["input_ids"]) > 300
    settings = long_documents.LongDocuments("chunk", stride=16)
    with BackgroundServer(make_service(model_dir, long_documents="chunk", stride=16)) as srv:
        status, body, _ = post(srv.url, "/embed", {"texts": [text, "short"]})
        _, metrics = get(srv.url, "/metrics")
    assert status == 200
    expected, report = long_documents.embed(reference_model, tokenizer, [text, "short"], settings)
    assert report.over_window == 1 and report.rows >= 4
    np.testing.assert_allclose(body["embeddings"], expected, atol=2e-5)
    assert 'neobert_long_texts_total{policy="chunk"} 1.0' in metrics


def test_shutdown_finishes_in_flight_requests(model_dir):
    service = make_service(model_dir)
    release = gate(service)
    srv = BackgroundServer(service)
    with ThreadPoolExecutor(4) as pool:
        pending = [pool.submit(post, srv.url, "/embed", {"texts": ["in flight 0"]})]
        wait_for(release.entered.is_set)  # the worker holds it
        pending += [pool.submit(post, srv.url, "/embed", {"texts": [f"in flight {i}"]}) for i in (1, 2, 3)]
        wait_for(lambda: service.batcher.depth() == 3)
        stopper = threading.Thread(target=srv.stop, args=(60,))
        stopper.start()
        time.sleep(0.3)
        assert all(not f.done() for f in pending)
        with pytest.raises(OSError):  # no new connections once shutdown began
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        release.set()
        answers = [f.result(60) for f in pending]
        stopper.join(60)
    assert [status for status, _, _ in answers] == [200] * 4
    assert all(len(body["embeddings"]) == 1 for _, body, _ in answers)
    assert not srv.thread.is_alive() and service.batcher.closed


@pytest.mark.slow  # 25 s of restarts
def test_a_model_process_that_dies_is_replaced(model_dir, reference_model, tokenizer):
    """Killed while idle: the next request runs on a fresh process. Killed during a request: that request
    is answered 503 + Retry-After, and the one after it runs on a fresh process."""
    service = make_service(model_dir, model_process=True, threads=1)
    text = ["still here"]
    expected = inference.encode(reference_model, tokenizer, text, show_progress=False)
    with BackgroundServer(service) as srv:
        first = service.pool.processes[0]
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
        assert get(srv.url, "/health")[0] == 503
        status, body, _ = post(srv.url, "/embed", {"texts": text})
        assert status == 200
        np.testing.assert_allclose(body["embeddings"], expected, atol=1e-5)
        second = service.pool.processes[0]
        assert second is not first and second.alive() and get(srv.url, "/health")[0] == 200

        send = second.conn.send

        def send_then_die(message):  # the request reaches the model process, which then dies
            # stopped first, so it cannot answer in the moment between the send and the kill (a race that
            # a busy machine loses now and then)
            second.process.send_signal(signal.SIGSTOP)
            send(message)
            second.process.send_signal(signal.SIGKILL)

        second.conn.send = send_then_die
        status, body, headers = post(srv.url, "/embed", {"texts": text})
        assert status == 503 and headers["retry-after"] == "1"
        assert "model process exited" in body["error"]["message"]
        status, body, _ = post(srv.url, "/embed", {"texts": text})
        assert status == 200 and service.pool.processes[0] not in (first, second)
        np.testing.assert_allclose(body["embeddings"], expected, atol=1e-5)
        assert metric(get(srv.url, "/metrics")[1], "neobert_model_process_restarts") == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_preset_serves_any_head_with_the_default_tokenizer():
    """issue 31: ``neobert serve --model tiny --head sequence-classification`` refused to start (the
    preset's 128-token vocabulary against the default tokenizer's 30,522); a preset's random weights are
    sized to the tokenizer it is served with, so an endpoint can be tried on one."""
    from helpers import call, serve

    with serve("tiny", head="sequence-classification") as srv:
        status, info, _ = call(srv.url, "GET", "/info", key=None)
        assert status == 200 and info["head"] == "sequence-classification" and info["vocab_size"] == 30522
        status, body, _ = call(
            srv.url, "POST", "/classify", {"texts": ["a fine day", "rain again"]}, key=None
        )
        assert status == 200 and len(body["results"]) == 2
        for row in body["results"]:
            assert row["label"] in info["labels"] and sum(row["probabilities"].values()) == pytest.approx(
                1, abs=1e-5
            )
            assert row["score"] == max(row["probabilities"].values())


@pytest.mark.slow  # a fresh interpreter importing torch, transformers and FastAPI: ~20-30 s on a busy CPU
def test_cli_serve_starts_answers_and_stops_on_sigterm(model_dir):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "neobert.cli.main",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--precision",
        "fp32",
        "--max-queue",
        "4",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert process.poll() is None, process.stdout.read()
            try:
                return get(url, "/health")[0] == 200
            except OSError:
                return False

        wait_for(ready, timeout=90)
        status, body, _ = post(url, "/embed", {"texts": ["hello from the command line"]})
        assert status == 200 and len(body["embeddings"][0]) == 64
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        output = process.stdout.read()
        assert "serving" in output and "stopped: in-flight requests finished" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
