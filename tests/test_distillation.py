"""Distillation of a teacher's scores into the dense and SPLADE retrievers (issue 40): the loss with a teacher
minus the loss without is the KL and MarginMSE terms written out per query from per-pair similarities; the
data's scores reach the loss as the batch took its candidates. (Two processes equal one with distillation on:
tests/test_sparse.py::test_sparse_two_processes_equal_one.)"""

from __future__ import annotations

import math

import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from neobert.finetuning.contrastive import ContrastiveConfig, step_loss
from neobert.finetuning.distillation import Distillation
from neobert.finetuning.sparse import SparseConfig, sparse_step_loss
from neobert.inference.encoders import embed_batch, load_encoder, tokenize
from neobert.inference.sparse import splade_pool

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]

QUERIES = ["cats purr", "rain falls", "bees buzz"]
POSITIVES = ["a cat purrs", "the rain", "bees hum"]
NEGATIVES = [["a dog barks", "snow"], [], ["wasps sting"]]  # query 2 has none
TEACHER = [[3.0, 1.0, -1.0], [2.0], [0.5, 1.5]]


def naive_terms(similarity, temperature: float, kl: float, mse: float) -> float:
    """Per query over its own positive and negatives: kl x KL(softmax(t) || softmax(s / T)) + mse x mean
    ((s_p - s_n) - (t_p - t_n))^2."""
    total = 0.0
    for i, query in enumerate(QUERIES):
        s = [similarity(query, d) for d in [POSITIVES[i], *NEGATIVES[i]]]
        t = TEACHER[i]
        p = [math.exp(x) / sum(math.exp(z) for z in t) for x in t]
        q = [math.exp(x / temperature) / sum(math.exp(z / temperature) for z in s) for x in s]
        total += kl * sum(a * math.log(a / b) for a, b in zip(p, q))
        if len(s) > 1:
            total += mse * sum(((s[0] - x) - (t[0] - y)) ** 2 for x, y in zip(s[1:], t[1:])) / (len(s) - 1)
    return total


def texts() -> list[str]:
    return QUERIES + POSITIVES + [n for ns in NEGATIVES for n in ns]


def test_dense_distillation_adds_kl_and_margin_mse_over_each_querys_own_candidates(tmp_path):
    encoder = load_encoder(save_tiny_neobert(tmp_path / "tiny"))
    config = ContrastiveConfig(
        model="m", data=["d"], output="o", temperature=0.05, distillation=0.5, margin_mse=2.0
    )
    with torch.no_grad():
        base = float(step_loss(encoder, texts(), 3, config))
        both = float(step_loss(encoder, texts(), 3, config, Distillation.of(TEACHER, config)))

        def cosine(a: str, b: str) -> float:
            v = embed_batch(encoder, tokenize(encoder, [a, b]))
            return float(torch.nn.functional.cosine_similarity(v[0], v[1], dim=0))

        expected = naive_terms(cosine, 0.05, 0.5, 2.0)
    assert both - base == pytest.approx(expected, rel=1e-4, abs=1e-5)
    # no teacher scores in the data, or both weights 0: no distillation at all
    assert Distillation.of([[], [], []], config) is None
    assert Distillation.of(TEACHER, ContrastiveConfig(model="m", data=["d"], output="o")) is None


def test_sparse_distillation_reads_dot_products(tmp_path):
    encoder = load_encoder(save_tiny_neobert(tmp_path / "tiny"), head="mlm")
    config = SparseConfig(model="m", data=["d"], output="o", distillation=1.0, margin_mse=0.001)
    with torch.no_grad():
        base = float(sparse_step_loss(encoder.model, encoder, texts(), 3, config, step=0).loss_sum)
        teacher = Distillation.of(TEACHER, config)
        both = float(
            sparse_step_loss(encoder.model, encoder, texts(), 3, config, step=0, teacher=teacher).loss_sum
        )

        def dot(a: str, b: str) -> float:
            inputs = tokenize(encoder, [a, b])
            v = splade_pool(encoder.model(**inputs).logits, inputs["attention_mask"])
            return float(v[0] @ v[1])

        expected = naive_terms(dot, 1.0, 1.0, 0.001)
    assert both - base == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_the_batch_hands_the_teachers_scores_of_the_candidates_it_took(tmp_path):
    """hard_negatives 1: each query's scores are cut to its positive's and its first negative's."""
    from neobert.finetuning.contrastive import ContrastiveTask
    from neobert.finetuning.contrastive_data import ContrastiveDataset, Example

    examples = [Example(f"q{i}", f"p{i}", ("n1", "n2"), (float(i), 1.0, 2.0)) for i in range(4)]
    config = ContrastiveConfig(model="m", data=["d"], output="o", batch_size=2, hard_negatives=1)

    class Trainer:
        rank, world = 0, 1

    task = ContrastiveTask(None, [ContrastiveDataset("d", examples)], config, Trainer())
    ((texts_, n_queries, teacher),) = task.batches(0)
    assert n_queries == 2 and len(texts_) == 6
    assert [t[1:] for t in teacher] == [[1.0], [1.0]] and all(len(t) == 2 for t in teacher)
