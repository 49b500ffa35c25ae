"""Offline embedding evaluation: each metric against a hand-computed value, evaluators on a keyword
embedding whose answers are known, and the command end to end on tiny files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from helpers import ANIMAL_SOUNDS, write_jsonl, write_tasks_dir
from neobert.evaluation import embeddings as E
from neobert.evaluation.embedding_files import discover_tasks, read_jsonl, read_qrels, run
from neobert.evaluation.instructions import TaskInstruction

RANKING = ["a", "b", "c", "d"]
RELEVANCE = {"b": 2.0, "d": 1.0, "e": 1.0}  # "e" is relevant but never retrieved


def test_ndcg_at_10_by_hand():
    # DCG = 2/log2(3) + 1/log2(5) = 1.261860 + 0.430677; ideal order 2, 1, 1: 2/1 + 1/log2(3) + 1/log2(4)
    assert E.ndcg_at_k(RANKING, RELEVANCE, 10) == pytest.approx(1.692537 / 3.130930, abs=1e-6)
    assert E.ndcg_at_k(["b", "d", "e"], RELEVANCE, 10) == pytest.approx(1.0)
    assert math.isnan(E.ndcg_at_k(RANKING, {"a": 0.0}, 10))


def test_recall_at_k_by_hand():
    assert E.recall_at_k(RANKING, RELEVANCE, 1) == 0.0
    assert E.recall_at_k(RANKING, RELEVANCE, 2) == pytest.approx(1 / 3)
    assert E.recall_at_k(RANKING, RELEVANCE, 10) == pytest.approx(2 / 3)
    assert E.mrr_at_k(RANKING, RELEVANCE, 10) == 0.5


def test_spearman_with_ties_by_hand():
    # ranks of y with a tie: 1, 2, 3.5, 5, 3.5; Pearson of the ranks = 8 / sqrt(10 * 9.5)
    assert E.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.820783, abs=1e-6)
    assert math.isnan(E.spearman([1, 2, 3], [4, 4, 4]))  # constant: undefined, not 0


def test_v_measure_by_hand():
    # classes {0,0,1,1}, clusters {0,0,0,1}: homogeneity 1 - H(C|K)/H(C) = 0.311278,
    # completeness 1 - H(K|C)/H(K) = 0.383689, harmonic mean 0.343711
    assert E.v_measure([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(0.343711, abs=1e-6)
    assert E.v_measure([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)


def test_average_precision_by_hand():
    # positives at ranks 1 and 3: (1/1 + 2/3) / 2
    assert E.average_precision([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == pytest.approx(5 / 6)
    assert math.isnan(E.average_precision([0.9, 0.8], [1, 1]))


TOPICS = ["cat", "car", "sun", "tea"]


class KeywordEmbed:
    """Unit vectors counting topic words: a model whose right answers are known. Records instructions."""

    def __init__(self):
        self.instructions = []

    def __call__(self, texts, instruction):
        self.instructions.append(instruction)
        rows = np.array(
            [[t.split().count(w) + 1e-3 * (i + 1) for i, w in enumerate(TOPICS)] for t in texts], float
        )
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_evaluators_score_a_perfect_model_perfectly():
    embed, none = KeywordEmbed(), TaskInstruction("", "")
    sts = E.evaluate_sts(
        embed, "s", ["cat", "cat cat", "cat"], ["cat", "cat car", "sun"], [5.0, 3.0, 0.0], none
    )
    assert sts.main_score == pytest.approx(1.0)
    pairs = E.evaluate_pair_classification(embed, "p", ["cat", "sun"], ["cat", "tea"], [1, 0], none)
    assert pairs.main_score == pytest.approx(1.0)
    texts = ["cat cat", "a cat", "car", "the car", "sun", "sun sun"]
    labels = ["c", "c", "v", "v", "s", "s"]
    clusters = E.evaluate_clustering(embed, "k", texts, labels, none)
    assert clusters.main_score == pytest.approx(1.0)
    classes = E.evaluate_classification(
        embed, "c", (texts, labels), (["cat", "my car", "tea"], ["c", "v", "t"]), none
    )
    assert classes.scores["accuracy"] == pytest.approx(2 / 3)  # "t" was never seen in training
    assert "never seen in training (always wrong): t" in classes.notes[0]
    retrieval = E.evaluate_retrieval(
        embed,
        "r",
        {"q1": "cat", "q2": "sun", "q3": "nothing"},
        {"d1": "sun", "d2": "cat", "d3": "car"},
        {"q1": {"d2": 1}, "q2": {"d1": 1}, "q3": {"d3": 0}},
        TaskInstruction("Find", ""),
    )
    assert retrieval.scores["ndcg_at_10"] == pytest.approx(1.0) and retrieval.scores["recall_at_1"] == 1.0
    assert retrieval.size == 2 and "1 queries without a relevant document" in retrieval.notes[0]
    assert embed.instructions[-2:] == ["", "Find"]  # corpus as is, queries instructed


def test_degenerate_inputs_are_reported_not_raised():
    embed, none = KeywordEmbed(), TaskInstruction("", "")
    assert math.isnan(E.evaluate_sts(embed, "s", ["cat", "sun"], ["cat", "tea"], [1.0, 1.0], none).main_score)
    single = E.evaluate_classification(embed, "c", (["cat", "sun"], ["x", "x"]), (["tea"], ["x"]), none)
    assert math.isnan(single.main_score) and "single label" in single.notes[-1]
    assert math.isnan(E.evaluate_clustering(embed, "k", ["cat", "sun"], ["a", "a"], none).main_score)


def test_task_discovery_and_qrels(tmp_path):
    root = write_tasks_dir(tmp_path / "tasks")
    found = [(t.family, t.name) for t in discover_tasks(root)]
    assert found == [
        ("classification", "sentiment"),
        ("clustering", "topics"),
        ("pair_classification", "dups"),
        ("retrieval", "animals"),
        ("sts", "mini-sts"),
    ]
    assert read_qrels(root / "retrieval" / "animals")["q3"] == {"d3": 1.0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "a", "lable": 1}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: missing label; available: lable, text"):
        read_jsonl(bad, ("text", "label"))
    bad.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        read_jsonl(bad, ("text",))
    (root / "typo").mkdir()
    with pytest.raises(ValueError, match="unknown task families typo"):
        discover_tasks(root)


@NEEDS_TOKENIZER
def test_end_to_end_zero_shot_and_after_contrastive_fine_tuning(tmp_path):
    from neobert.cli.main import main
    from neobert.finetuning.contrastive import ContrastiveConfig
    from neobert.finetuning.contrastive import run as finetune

    root = write_tasks_dir(tmp_path / "tasks")
    neo, bert = save_tiny_neobert(tmp_path / "neo"), save_tiny_bert(tmp_path / "bert")
    out = tmp_path / "results"
    assert (
        main(
            [
                "eval",
                "embeddings",
                "--model",
                str(neo),
                "--model",
                str(bert),
                "--tasks-dir",
                str(root),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads((out / "embedding_results.json").read_text(encoding="utf-8"))
    assert set(results) == {str(neo), str(bert)}  # a raw NeoBERT and a raw BERT, zero-shot
    tasks = {t["task"]: t for t in results[str(neo)]["tasks"]}
    assert tasks["animals"]["size"] == 12 and tasks["sentiment"]["size"] == 2
    assert "neutral" in tasks["sentiment"]["notes"][0]
    assert all(-1 <= t["main_score"] <= 1 for t in tasks.values())
    table = (out / "embedding_results.md").read_text(encoding="utf-8")
    assert "| model | Class. (1) | Clust. (1) | PairClass. (1) | Retr. (1) | STS (1) | Avg. |" in table

    # fine-tune on the retrieval task's own pairs: its nDCG@10 must rise above the zero-shot one
    pairs = tmp_path / "pairs.jsonl"
    write_jsonl(
        pairs,
        [
            {"query": f"the sound of a {a}", "positive": f"sound it goes {ANIMAL_SOUNDS[a]} all day"}
            for a in ANIMAL_SOUNDS
        ],
    )
    tuned = finetune(
        ContrastiveConfig(
            model=str(neo),
            data=[str(pairs)],
            output=str(tmp_path / "tuned"),
            steps=25,
            batch_size=6,
            lr=1e-3,
            warmup_steps=2,
            show_progress=False,
        )
    ).output
    retrieval = [t for t in discover_tasks(root) if t.family == "retrieval"]
    after = run([str(tuned)], retrieval, show_progress=False).models[str(tuned)][0]
    assert after.main_score > max(0.9, tasks["animals"]["main_score"] + 0.3), (after, tasks["animals"])
