"""``neobert finetune rerank``: each loss against a naive per-query reference; the saved CrossEncoder directory
read by the real sentence-transformers (``CrossEncoder(path).predict`` equals our scores), its card, its
activation, served in every dialect; exact resume; distillation without scores refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from helpers import KEY, call, check_card, run_card_snippet, serve, write_pairs
from neobert.finetuning.rerank import RerankConfig, query_loss, run

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]


def naive(loss: str, s: list[float], teacher: list[float]) -> float:
    """The losses written out as their papers state them, one query (positive first), plain Python."""
    y = [1.0] + [0.0] * (len(s) - 1)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    softmax = lambda v: [math.exp(x) / sum(math.exp(z) for z in v) for x in v]  # noqa: E731
    if loss == "bce":
        return sum(-(t * math.log(sig(x)) + (1 - t) * math.log(1 - sig(x))) for x, t in zip(s, y)) / len(s)
    if loss == "listnet":
        return -sum(p * math.log(q) for p, q in zip(softmax(y), softmax(s)))
    if loss == "ranknet":
        return sum(math.log(1 + math.exp(-(s[0] - x))) for x in s[1:]) / (len(s) - 1)
    if loss == "margin_mse":
        return sum(((s[0] - x) - (teacher[0] - t)) ** 2 for x, t in zip(s[1:], teacher[1:])) / (len(s) - 1)
    if loss == "kl":
        p, q = softmax(teacher), softmax(s)
        return sum(a * math.log(a / b) for a, b in zip(p, q))
    # LambdaLoss, NDCG-Loss2: ranks by the model's scores, gains normalised by the ideal DCG
    rank = {i: r for r, i in enumerate(sorted(range(len(s)), key=lambda i: -s[i]))}
    ideal = sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(sorted(y, reverse=True)))
    gain = [(2**g - 1) / ideal for g in y]
    D = lambda r: math.log2(1 + r)  # noqa: E731
    terms = []
    for i in range(len(s)):
        for j in range(len(s)):
            if y[i] > y[j]:
                gap = abs(rank[i] - rank[j])
                delta = abs(1 / D(gap) - 1 / D(gap + 1))
                terms.append(-delta * abs(gain[i] - gain[j]) * math.log2(sig(s[i] - s[j])))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("loss", ["bce", "lambdaloss", "listnet", "ranknet", "margin_mse", "kl"])
def test_each_loss_equals_its_naive_definition(loss):
    for scores, teacher in (([0.3, 1.2, -0.5, 0.9], [4.0, 3.5, -1.0, 0.0]), ([2.0, -1.0], [1.0, 0.2])):
        s = torch.tensor(scores, requires_grad=True)
        labels = torch.zeros(len(scores))
        labels[0] = 1
        value = query_loss(loss, s, labels, teacher)
        value.backward()  # differentiable
        assert float(value) == pytest.approx(naive(loss, scores, teacher), rel=1e-5, abs=1e-6)


def _config(tmp_path: Path, model: Path, data: list, name: str, **changes) -> RerankConfig:
    settings = dict(steps=4, batch_size=4, lr=1e-3, warmup_steps=1, log_every=1, save_every=2, max_length=32)
    settings.update(changes)
    return RerankConfig(
        model=str(model),
        data=[str(d) for d in data],
        output=str(tmp_path / name),
        show_progress=False,
        **settings,
    )


def _scored_pairs(tmp_path: Path) -> Path:
    """helpers.write_pairs' animals, each with a teacher's scores of its positive and negative."""
    animals, _ = write_pairs(tmp_path)
    rows = [json.loads(line) for line in animals.read_text().splitlines()]
    out = tmp_path / "scored.jsonl"
    out.write_text(
        "".join(json.dumps({**r, "scores": [2.0 + i / 10, -1.0]}) + "\n" for i, r in enumerate(rows))
    )
    return out


@pytest.mark.parametrize("loss", ["bce", "lambdaloss"])
def test_a_trained_reranker_is_a_crossencoder_with_equal_scores_served_in_every_dialect(tmp_path, loss):
    from sentence_transformers import CrossEncoder

    from neobert.inference.cross_encoder import CrossEncoderScorer
    from neobert.inference.kinds import kind_of

    model = save_tiny_neobert(tmp_path / "tiny") if loss == "bce" else save_tiny_bert(tmp_path / "bert")
    animals, colors = write_pairs(tmp_path)
    result = run(_config(tmp_path, model, [animals, colors], "ce", loss=loss, hard_negatives=2))
    assert result.steps == 4 and len(result.losses) == 4
    activation = "sigmoid" if loss == "bce" else "identity"
    settings = json.loads((result.output / "config_sentence_transformers.json").read_text())
    assert settings["activation_fn"].rsplit(".", 1)[-1].lower() == activation
    assert kind_of(result.output).name == "cross-encoder"
    check_card(result.output, "text-ranking", library="sentence-transformers")
    if loss == "bce":  # the card's CrossEncoder snippet runs as printed
        printed, documented = run_card_snippet(result.output)
        assert printed == documented == "(2,)"

    query, documents = "the sound of a cat", ["a cat makes a noise", "a dog sleeps", "red is a color"]
    pairs = [(query, d) for d in documents]
    theirs = CrossEncoder(str(result.output), device="cpu").predict(pairs)
    ours = CrossEncoderScorer(result.output).scores(pairs)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    logits = (
        np.asarray(ours) if activation == "identity" else np.log(np.asarray(ours) / (1 - np.asarray(ours)))
    )
    relevance, order = 1 / (1 + np.exp(-logits)), list(np.argsort(-logits))
    with serve(result.output, api_key=KEY) as srv:
        for path, body, key in (
            ("/rerank", {"query": query, "documents": documents}, "results"),
            ("/rerank", {"query": query, "texts": documents}, None),  # text-embeddings-inference
            (
                "/v1/rerank",
                {"model": "m", "query": query, "documents": documents},
                "results",
            ),  # Cohere v1, Jina
            ("/v2/rerank", {"model": "m", "query": query, "documents": documents}, "results"),  # Cohere v2
        ):
            status, answer, _ = call(srv.url, "POST", path, body)
            assert status == 200, answer
            rows = answer[key] if key else answer
            assert [r["index"] for r in rows] == order, path
            got = [r.get("relevance_score", r.get("score")) for r in rows]
            np.testing.assert_allclose(got, relevance[order], atol=1e-5)
        status, raw, _ = call(
            srv.url, "POST", "/rerank", {"query": query, "texts": documents, "raw_scores": True}
        )
        np.testing.assert_allclose([r["score"] for r in raw], logits[order], atol=1e-4)


def test_rerank_crash_and_resume_continue_exactly_with_distillation(tmp_path):
    from helpers import assert_resumes_exactly

    model = save_tiny_neobert(tmp_path / "tiny")
    data = [_scored_pairs(tmp_path)]
    assert_resumes_exactly(
        run,
        lambda name, **changes: _config(tmp_path, model, data, name, loss="margin_mse", **changes),
        steps=4,
    )


def test_distillation_needs_scores_and_bad_scores_are_named(tmp_path):
    from neobert.finetuning.config import FinetuneConfigError

    model = save_tiny_neobert(tmp_path / "tiny")
    animals, _ = write_pairs(tmp_path)
    with pytest.raises(
        FinetuneConfigError, match=r"loss kl distils a teacher's scores, and data set animals .* example 1"
    ):
        run(_config(tmp_path, model, [animals], "kl", loss="kl"))
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(line) for line in _scored_pairs(tmp_path).read_text().splitlines()]
    rows[2]["scores"] = [1.0]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"bad.jsonl, line 3: 'scores' must be a list of 2 numbers"):
        run(_config(tmp_path, model, [bad], "bad", loss="kl"))
    with pytest.raises(FinetuneConfigError, match="loss must be one of"):
        RerankConfig(model="tiny", data=["x"], output="y", loss="mse")
