"""Offline embedding evaluation: MTEB's task families on local data, as pure functions.

Metrics take arrays or rankings and return a float, NaN where the value is undefined (a constant score
list, a single class), never an exception. Task evaluators take an ``embed(texts, instruction)`` callable
and the task's data and return a :class:`TaskScore`; reading files and running a model live in
:mod:`neobert.evaluation.embedding_files`.

| family | main metric | other metrics |
|---|---|---|
| sts | Spearman of cosine vs gold score | Pearson |
| retrieval | nDCG@10 | recall@k, MRR@10; sparse models: average non-zeros per query and document; late-interaction models (MaxSim): token vectors per document |
| classification | accuracy (logistic regression on embeddings) | macro-F1 |
| clustering | V-measure (k-means, k = number of labels) | - |
| pair_classification | average precision of cosine vs 0/1 label | - |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..inference.late_interaction import maxsim_scores
from .instructions import TaskInstruction
from .metrics import pearson, spearman

# (texts, instruction) -> unit-norm rows (N, C), or a SciPy sparse matrix of SPLADE rows (N, V) scored by the
# dot product (retrieval only; see embedding_files.make_sparse_embed)
Embed = Callable[[list[str], str], Any]
FAMILIES = ("classification", "clustering", "pair_classification", "retrieval", "sts")
MAIN_METRIC = {
    "sts": "spearman",
    "retrieval": "ndcg_at_10",
    "classification": "accuracy",
    "clustering": "v_measure",
    "pair_classification": "ap",
}


@dataclass
class TaskScore:
    family: str
    task: str
    scores: dict[str, float]
    size: int
    notes: list[str] = field(default_factory=list)

    @property
    def main_metric(self) -> str:
        return MAIN_METRIC[self.family]

    @property
    def main_score(self) -> float:
        return self.scores[self.main_metric]


# --- metrics -------------------------------------------------------------------------------------


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval's and MTEB's): sum rel_i / log2(i + 1) over ranks i = 1..k,
    divided by the same sum for the ideal order of the judged documents. NaN without a relevant one."""
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)[:k]
    if not ideal:
        return math.nan
    dcg = sum(relevance.get(doc, 0.0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg


def recall_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int) -> float:
    """Share of the relevant documents (relevance > 0) found in the top k. NaN without a relevant one."""
    relevant = {doc for doc, r in relevance.items() if r > 0}
    if not relevant:
        return math.nan
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int = 10) -> float:
    for i, doc in enumerate(ranking[:k]):
        if relevance.get(doc, 0.0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def v_measure(labels: Sequence, clusters: Sequence) -> float:
    """Harmonic mean of homogeneity and completeness (beta = 1)."""
    from sklearn.metrics import v_measure_score

    return float(v_measure_score(labels, clusters))


def average_precision(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the precision-recall curve of ``scores`` ranking the positive labels; NaN with one class."""
    from sklearn.metrics import average_precision_score

    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return math.nan
    return float(average_precision_score(labels, scores))


def rank_documents(
    query_vectors: np.ndarray | sp.spmatrix,
    doc_vectors: np.ndarray | sp.spmatrix,
    doc_ids: Sequence[str],
    top_k: int,
) -> list[list[str]]:
    """Document ids of each query, best dot product first (the cosine for unit-norm rows; sparse rows as
    SPLADE scores them), ties kept in corpus order."""
    if isinstance(query_vectors, list):  # late interaction: per text, its token vectors, scored by MaxSim
        scores = maxsim_scores(query_vectors, doc_vectors).numpy()
    else:
        scores = query_vectors @ doc_vectors.T  # (Q, D)
        scores = scores.toarray() if sp.issparse(scores) else np.asarray(scores)
    top_k = min(top_k, len(doc_ids))
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    return [[doc_ids[j] for j in row] for row in order]


# --- task evaluators -----------------------------------------------------------------------------


def _pair_cosines(
    embed: Embed, first: list[str], second: list[str], instruction: TaskInstruction
) -> np.ndarray:
    a = embed(first, instruction.query)
    b = embed(second, instruction.corpus)
    return np.sum(a * b, axis=1)


def evaluate_sts(
    embed: Embed,
    task: str,
    first: list[str],
    second: list[str],
    gold: Sequence[float],
    instruction: TaskInstruction,
) -> TaskScore:
    cosines = _pair_cosines(embed, first, second, instruction)
    scores = {"spearman": spearman(cosines, gold), "pearson": pearson(cosines, gold)}
    notes = (
        ["constant cosines or gold scores: correlation undefined"] if math.isnan(scores["spearman"]) else []
    )
    return TaskScore("sts", task, scores, len(gold), notes)


def evaluate_pair_classification(
    embed: Embed,
    task: str,
    first: list[str],
    second: list[str],
    labels: Sequence[int],
    instruction: TaskInstruction,
) -> TaskScore:
    cosines = _pair_cosines(embed, first, second, instruction)
    ap = average_precision(cosines, labels)
    notes = ["labels hold a single class: average precision undefined"] if math.isnan(ap) else []
    return TaskScore("pair_classification", task, {"ap": ap}, len(labels), notes)


def evaluate_retrieval(
    embed: Embed,
    task: str,
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, float]],
    instruction: TaskInstruction,
    recall_ks: Sequence[int] = (1, 10, 100),
) -> TaskScore:
    judged = [q for q in queries if any(r > 0 for r in qrels.get(q, {}).values())]
    notes = (
        [f"{len(queries) - len(judged)} queries without a relevant document skipped"]
        if len(judged) < len(queries)
        else []
    )
    if not judged:
        return TaskScore("retrieval", task, {"ndcg_at_10": math.nan}, 0, [*notes, "no judged query"])
    doc_ids = list(corpus)
    doc_vectors = embed([corpus[d] for d in doc_ids], instruction.corpus)
    # a late-interaction model encodes queries its own way (markers, expansion): its embed carries a .query
    query_vectors = getattr(embed, "query", embed)([queries[q] for q in judged], instruction.query)
    rankings = rank_documents(query_vectors, doc_vectors, doc_ids, max(10, *recall_ks))
    scores = {"ndcg_at_10": float(np.mean([ndcg_at_k(r, qrels[q], 10) for q, r in zip(judged, rankings)]))}
    scores["mrr_at_10"] = float(np.mean([mrr_at_k(r, qrels[q], 10) for q, r in zip(judged, rankings)]))
    for k in recall_ks:
        scores[f"recall_at_{k}"] = float(
            np.mean([recall_at_k(r, qrels[q], k) for q, r in zip(judged, rankings)])
        )
    if sp.issparse(doc_vectors):  # the index's size and the query's cost: average non-zeros per row
        scores["nonzeros_query"] = float(query_vectors.getnnz(axis=1).mean())
        scores["nonzeros_document"] = float(doc_vectors.getnnz(axis=1).mean())
    if isinstance(doc_vectors, list):  # the index's size: token vectors per document
        scores["vectors_document"] = float(np.mean([len(v) for v in doc_vectors]))
    return TaskScore("retrieval", task, scores, len(judged), notes)


def evaluate_classification(
    embed: Embed,
    task: str,
    train: tuple[list[str], list],
    test: tuple[list[str], list],
    instruction: TaskInstruction,
    seed: int = 0,
) -> TaskScore:
    """Logistic regression fitted on the training embeddings, scored on the test ones."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    (train_texts, train_labels), (test_texts, test_labels) = train, test
    notes = []
    unseen = sorted({str(y) for y in test_labels} - {str(y) for y in train_labels})
    if unseen:
        notes.append(f"test labels never seen in training (always wrong): {', '.join(unseen)}")
    if len(set(map(str, train_labels))) < 2:
        notes.append("the training set holds a single label: no classifier to fit")
        return TaskScore(
            "classification", task, {"accuracy": math.nan, "macro_f1": math.nan}, len(test_labels), notes
        )
    x_train = embed(train_texts, instruction.query)
    x_test = embed(test_texts, instruction.query)
    classifier = LogisticRegression(max_iter=1000, random_state=seed)
    classifier.fit(x_train, [str(y) for y in train_labels])
    predicted = classifier.predict(x_test)
    truth = np.asarray([str(y) for y in test_labels])
    scores = {
        "accuracy": float(np.mean(predicted == truth)),
        "macro_f1": float(f1_score(truth, predicted, average="macro", zero_division=0)),
    }
    if len(set(predicted)) == 1:
        notes.append(f"the classifier predicts one label for every text ({predicted[0]})")
    return TaskScore("classification", task, scores, len(test_labels), notes)


def evaluate_clustering(
    embed: Embed, task: str, texts: list[str], labels: Sequence, instruction: TaskInstruction, seed: int = 0
) -> TaskScore:
    """k-means with k = the number of gold labels, scored by V-measure."""
    from sklearn.cluster import KMeans

    k = len({str(y) for y in labels})
    if k < 2 or len(texts) <= k:
        note = "fewer than two labels" if k < 2 else "no more texts than labels"
        return TaskScore(
            "clustering", task, {"v_measure": math.nan}, len(texts), [f"{note}: V-measure undefined"]
        )
    vectors = embed(texts, instruction.query)
    clusters = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(vectors)
    return TaskScore(
        "clustering", task, {"v_measure": v_measure([str(y) for y in labels], clusters)}, len(texts)
    )
