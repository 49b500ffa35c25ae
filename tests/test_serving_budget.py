"""The answer budget of ``neobert serve`` (issue 31, item 1) over real HTTP on 127.0.0.1: an answer that
grows with tokens (``/embed_all``) is refused with 413 naming ``max_answer_bytes`` before the model runs,
counted exactly where the window bound does not settle it; compact encodings of token states; the budget
stated in ``/info`` and the OpenAPI schema; memory handed back after large answers."""

from __future__ import annotations

import base64
import time

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from helpers import call, serve
from neobert.common import memory
from neobert.inference import encoders
from neobert.serving.config import TRIM_BYTES

pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN, WINDOW = 64, 128  # the tiny preset's
BUDGET = 40 * HIDDEN * 20  # 40 tokens as JSON floats (20 bytes a number)


@pytest.fixture(scope="module")
def budgeted(model_dir):
    """conftest's tiny masked LM served with a small answer budget, the model calls it ran recorded."""
    model = encoders.load_model(model_dir, head="mlm").eval()
    with serve(model_dir, max_answer_bytes=BUDGET) as srv:
        ran: list[str] = []
        run = srv.service.batcher._run

        def recorded(key, texts):
            ran.append(key.task)
            return run(key, texts)

        srv.service.batcher._run = recorded
        yield srv, model, ran


def states(model, tokenizer, text: str) -> np.ndarray:
    with torch.no_grad():
        return model.base_model(**tokenizer([text], return_tensors="pt")).last_hidden_state[0].numpy()


def test_an_answer_over_the_budget_is_refused_before_the_model_runs(budgeted, tokenizer):
    srv, model, ran = budgeted
    texts = [
        "the quick brown fox jumps over the lazy dog " * 3,
        "seven wizards quietly hex many jolly boxers " * 3,
    ]
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    assert 40 < tokens <= 2 * WINDOW
    ran.clear()
    status, answer, _ = call(srv.url, "POST", "/embed_all", {"inputs": texts}, key=None)
    assert status == 413 and answer["error"]["param"] == "inputs"
    message = answer["error"]["message"]
    assert f"{tokens:,} tokens x 64 numbers as float" in message and f"{tokens * HIDDEN * 20:,}" in message
    assert f"the limit is {BUDGET:,} bytes per answer (max_answer_bytes)" in message
    assert ran == ["count"]  # the tokenizer counted; the model never ran
    # the same texts fit as base64 float16 (8/3 bytes a number), and come back as the model's states
    ran.clear()
    status, answer, _ = call(
        srv.url, "POST", "/embed_all", {"inputs": texts, "encoding_format": "base64_float16"}, key=None
    )
    assert status == 200 and ran == ["embed_all"]  # under the window bound: nothing to count
    for text, encoded in zip(texts, answer):
        got = np.frombuffer(base64.b64decode(encoded), "<f2").reshape(-1, HIDDEN)
        np.testing.assert_allclose(got, states(model, tokenizer, text), rtol=2e-3, atol=2e-3)


def test_short_texts_are_counted_and_served(budgeted, tokenizer):
    srv, model, ran = budgeted
    text = "paris is the capital of france"  # one text: the window bound (128 tokens) is over the budget
    ran.clear()
    tokens_before = srv.service.metrics.tokens._value.get()
    status, rows, _ = call(srv.url, "POST", "/embed_all", {"inputs": text}, key=None)
    assert status == 200 and ran == ["count", "embed_all"]
    # the count ran no model: only the states' tokens count as run through it
    assert srv.service.metrics.tokens._value.get() - tokens_before == len(tokenizer(text)["input_ids"])
    np.testing.assert_allclose(rows[0], states(model, tokenizer, text), atol=1e-4)
    status, encoded, _ = call(
        srv.url, "POST", "/embed_all", {"inputs": [text], "encoding_format": "base64"}, key=None
    )
    assert status == 200
    np.testing.assert_array_equal(
        np.frombuffer(base64.b64decode(encoded[0]), "<f4").reshape(-1, HIDDEN),
        np.asarray(rows[0], dtype=np.float32),
    )
    # token ids count as given, cut to the window: no count call; 41 ids are one token over
    ran.clear()
    status, answer, _ = call(
        srv.url, "POST", "/embed_all", {"inputs": [[101] + [2003] * 39 + [102]]}, key=None
    )
    assert status == 413 and "41 tokens" in answer["error"]["message"] and ran == []


def test_the_budget_is_stated(budgeted):
    srv, _, _ = budgeted
    _, info, _ = call(srv.url, "GET", "/info", key=None)
    assert info["limits"]["max_answer_bytes"] == BUDGET
    _, schema, _ = call(srv.url, "GET", "/openapi.json", key=None)
    assert schema["info"]["x-limits"]["max_answer_bytes"] == BUDGET
    described = schema["components"]["schemas"]["TEIEmbedAllRequest"]["description"]
    assert f"within {BUDGET:,} bytes (max_answer_bytes" in described and "40 tokens as float" in described
    assert "150 tokens as base64, 300 tokens as base64_float16" in described


@pytest.mark.parametrize("release", [True, False])
def test_a_large_answer_is_followed_by_a_trim(model_dir, monkeypatch, release):
    """The HTTP process hands memory back after an answer of TRIM_BYTES or more (not after small ones),
    unless release_memory is off."""
    trims = []
    monkeypatch.setattr(memory, "release", lambda: trims.append(1) or True)
    big = {"inputs": ["word " * 200] * 30}  # 30 x 128 tokens x 64 numbers as JSON: about 5 MB
    with serve(model_dir, release_memory=release) as srv:
        status, _, headers = call(srv.url, "POST", "/embed_all", {"inputs": "short"}, key=None)
        time.sleep(0.4)
        assert status == 200 and trims == []
        status, _, headers = call(srv.url, "POST", "/embed_all", big, key=None)
        assert status == 200 and int(headers["content-length"]) >= TRIM_BYTES
        time.sleep(0.4)
    assert trims == ([1] if release else [])


def test_release_hands_freed_memory_back():
    """glibc keeps a freed heap for reuse; ``memory.release`` returns it (measured on this process)."""
    if not memory.release():
        pytest.skip("not glibc: nothing to trim")
    before = memory.rss_bytes()
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # 128 MB in blocks under the mmap threshold
    held = memory.rss_bytes()
    del blocks[:-1]  # all but the last (which keeps the heap's top in place, so free() cannot shrink it)
    kept = memory.rss_bytes()
    memory.release()
    after = memory.rss_bytes()
    assert held - before > 100e6 and kept - before > 100e6, (before, held, kept)  # glibc kept it
    assert after - before < 20e6, (before, kept, after)
