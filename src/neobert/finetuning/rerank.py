"""Cross-encoder (reranker) fine-tuning of any encoder, as a task of the training core: ``neobert finetune rerank``.

The encoder gets a one-logit sequence-classification head and reads each (query, document) pair whole; every
query of a step brings its positive and up to ``hard_negatives`` negatives (the contrastive JSONL of ``finetune
contrastive``, e.g. what ``neobert mine`` writes), all scored in one forward. The losses, per query over its
own candidates (labels: 1 for the positive, 0 for the negatives), summed over queries and divided by the
global query count by the trainer:

* ``bce``: pointwise binary cross-entropy on the logits (each candidate counted);
* ``lambdaloss``: LambdaLoss (Wang et al. 2018) with the NDCG-Loss2 weighting: for every pair ranked wrongly
  by the labels, -log2 sigmoid(s_i - s_j) weighted by |G_i - G_j| x |1/D(|r_i - r_j|) - 1/D(|r_i - r_j| + 1)|,
  G the gains normalised by the ideal DCG, r the ranks the model gives, D(r) = log2(1 + r); averaged over
  the query's pairs;
* ``listnet``: ListNet (Cao et al. 2007): the cross-entropy from softmax(labels) to softmax(scores);
* ``ranknet``: RankNet (Burges et al. 2005): log(1 + exp(-(s_pos - s_neg))) averaged over the query's pairs;
* ``margin_mse``: MarginMSE (Hofstätter et al. 2020) to a teacher's ``scores``: the mean over negatives of
  ((s_pos - s_neg) - (t_pos - t_neg))^2;
* ``kl``: KL(softmax(teacher scores) || softmax(scores)) over the query's candidates.

Data, sampling, resume, several processes and precision are ``finetune contrastive``'s
(:func:`.contrastive.train`). The result is a sentence-transformers ``CrossEncoder`` directory (and a
transformers sequence classifier at its root): trained with ``bce``, its activation is a sigmoid (scores in
[0, 1]); trained with any other loss, the identity (the logit: the scores rank, they are no probabilities).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..cards import write_card
from ..common.io import move_into, write_json
from ..inference.cross_encoder import pair_inputs
from ..inference.encoders import Encoder, write_model_files
from ..training.trainer import LossTerms
from .config import FinetuneConfigError, config_from_dict
from .contrastive import (
    ContrastiveConfig,
    ContrastiveResult,
    ContrastiveTask,
    dataset_sizes,
    run_card,
    save_trained,
    train,
)

LOSSES = ("bce", "lambdaloss", "listnet", "ranknet", "margin_mse", "kl")
DISTILLATION = ("margin_mse", "kl")  # the losses that read a teacher's scores


@dataclass
class RerankConfig(ContrastiveConfig):
    """``finetune contrastive``'s data and training settings (its embedding settings excepted), the ranking
    loss and the candidates per query."""

    loss: str = field(default="lambdaloss", metadata={"choices": LOSSES})  # see neobert.finetuning.rerank
    hard_negatives: int = 7  # negatives scored with each query's positive in a step (at most)
    batch_size: int = 16  # queries per process per step (each with its positive and negatives)
    lr: float = 2e-5  # peak learning rate

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.matryoshka_dims:
            raise FinetuneConfigError("matryoshka_dims apply to dense embeddings, not to a cross-encoder")
        if self.distillation or self.margin_mse:
            raise FinetuneConfigError(
                "a reranker distils a teacher with its loss (--loss margin_mse or kl), not distillation / margin_mse"
            )
        if self.loss not in LOSSES:
            raise FinetuneConfigError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.hard_negatives < 0:
            raise FinetuneConfigError(f"hard_negatives must be >= 0, got {self.hard_negatives}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RerankConfig:
        return config_from_dict(cls, data)

    @property
    def activation(self) -> str:
        """What the saved directory applies to its logit: ``sigmoid`` after BCE, else ``identity``."""
        return "sigmoid" if self.loss == "bce" else "identity"


RerankResult = ContrastiveResult


def lambdaloss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LambdaLoss with NDCG-Loss2 weights of one query: ``scores`` and ``labels`` (N,); mean over its pairs."""
    n = scores.shape[0]
    order = torch.argsort(scores.detach(), descending=True)
    s, y = scores[order], labels[order].float()  # as the model ranks them
    discount = torch.log2(torch.arange(n + 1, device=s.device, dtype=torch.float32) + 2.0)  # D(r + 1), r >= 0
    ideal = ((2 ** y.sort(descending=True).values - 1) / discount[:n]).sum().clamp(min=1e-10)
    gain = (2**y - 1) / ideal
    rank = torch.arange(n, device=s.device)
    gap = (rank[:, None] - rank[None, :]).abs()  # |r_i - r_j|, at least 1 off the diagonal
    delta = (1 / discount[(gap - 1).clamp(min=0)] - 1 / discount[gap]).abs()
    weight = delta * (gain[:, None] - gain[None, :]).abs()
    wrong = y[:, None] > y[None, :]  # pairs the labels order: i above j
    if not bool(wrong.any()):
        return scores.sum() * 0
    losses = -weight * F.logsigmoid(s[:, None] - s[None, :]) / math.log(2)
    return losses[wrong].mean()


def query_loss(loss: str, scores: torch.Tensor, labels: torch.Tensor, teacher: list[float]) -> torch.Tensor:
    """``loss`` of one query's candidates: ``scores`` (N,) logits, positive first; ``labels`` (N,) 1 / 0."""
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(scores, labels, reduction="sum") / scores.shape[0]
    if loss == "lambdaloss":
        return lambdaloss(scores, labels)
    if loss == "listnet":
        return -(F.softmax(labels, dim=0) * F.log_softmax(scores, dim=0)).sum()
    if loss == "ranknet":
        return F.softplus(-(scores[0] - scores[1:])).mean() if scores.shape[0] > 1 else scores.sum() * 0
    target = torch.tensor(teacher, dtype=scores.dtype, device=scores.device)
    if loss == "margin_mse":
        if scores.shape[0] < 2:
            return scores.sum() * 0
        return ((scores[0] - scores[1:]) - (target[0] - target[1:])).pow(2).mean()
    return F.kl_div(F.log_softmax(scores, 0), F.log_softmax(target, 0), reduction="sum", log_target=True)


def rerank_step_loss(
    model: torch.nn.Module,
    tokenizer: Any,
    groups: list[tuple[str, list[str], list[float]]],
    config: RerankConfig,
) -> LossTerms:
    """Summed loss of this process's queries, every (query, candidate) pair scored in one forward."""
    queries = [q for q, documents, _ in groups for _ in documents]
    documents = [d for _, ds, _ in groups for d in ds]
    inputs = pair_inputs(model, tokenizer, queries, documents, config.max_length)
    logits = model(**inputs).logits[:, 0].float()  # (pairs,)
    total, start, correct = logits.new_zeros(()), 0, logits.new_zeros(())
    for _, candidates, teacher in groups:
        scores = logits[start : start + len(candidates)]
        labels = torch.zeros_like(scores)
        labels[0] = 1.0
        total = total + query_loss(config.loss, scores, labels, teacher)
        correct = correct + (scores.detach().argmax() == 0).float()
        start += len(candidates)
    return LossTerms(total, {"accuracy": correct}, tokens=int(inputs["attention_mask"].sum()))


class RerankTask(ContrastiveTask):
    """``finetune contrastive``'s sampling and state; each query's positive and negatives scored as pairs."""

    def batches(self, step: int) -> list[list[tuple[str, list[str], list[float]]]]:
        index, examples = self.sampler.next_batch()
        self.dataset_steps[self.datasets[index].name] += 1
        k = self.config.hard_negatives
        groups = [
            (ex.query, [ex.positive, *ex.negatives[:k]], list(ex.scores[: 1 + min(len(ex.negatives), k)]))
            for ex in examples
        ]
        return [groups]

    def count(self, batch: list) -> torch.Tensor:
        return torch.tensor(len(batch))

    def loss(self, model: torch.nn.Module, batch: list) -> LossTerms:
        return rerank_step_loss(model, self.encoder.tokenizer, batch, self.config)


def check_teacher_scores(config: RerankConfig, datasets: list) -> None:
    """A distillation loss needs a teacher's ``scores`` on every example: name the first one without."""
    if config.loss not in DISTILLATION:
        return
    for dataset in datasets:
        for i, example in enumerate(dataset.examples):
            if not example.scores:
                raise FinetuneConfigError(
                    f"loss {config.loss} distils a teacher's scores, and data set {dataset.name} ({dataset.source}) "
                    f"has none at example {i + 1}: mine with `neobert mine --teacher CROSS_ENCODER`, or pick "
                    "another loss"
                )


def run(
    config: RerankConfig, on_step_end: Callable[[int, dict[str, float]], None] | None = None
) -> RerankResult:
    """Train ``config.model`` as a cross-encoder and save a sentence-transformers CrossEncoder directory."""

    def make_task(encoder: Encoder, datasets: list, cfg: Any, trainer: Any) -> RerankTask:
        check_teacher_scores(cfg, datasets)
        return RerankTask(encoder, datasets, cfg, trainer)

    trained = train(
        config,
        make_task,
        head="sequence-classification",
        on_step_end=on_step_end,
        description="rerank",
        model_kwargs={"num_labels": 1},
    )
    trainer, task, output = trained.trainer, trained.task, Path(config.output)
    if trainer.is_main:
        save_trained(
            trained, output, lambda e, d: save_cross_encoder(e, d, config.activation, config.max_length)
        )
        write_json(
            output / "rerank_training.json",
            {
                "config": asdict(config),
                "activation": config.activation,
                "dataset_steps": task.dataset_steps,
                "losses": trained.losses,
                "datasets": dataset_sizes(trained.datasets),
            },
        )
        shown = "a sigmoid: scores in [0, 1]" if config.activation == "sigmoid" else "none: the raw logit"
        limits = [
            f"One relevance score per (query, document) pair; the activation on the logit is {shown} "
            f"(trained with {config.loss}).",
            "No evaluation ran with the training: rerank a first stage's top documents with it "
            "(`neobert serve --model DIR`, POST /rerank) and score the ranking.",
        ]
        card = run_card(
            config,
            trained,
            task.dataset_steps,
            trainer,
            head="cross-encoder",
            command="neobert finetune rerank",
            task="reranking (cross-encoder)",
            loss=config.loss,
            limits=limits,
        )
        write_card(output, card)
    trainer.accelerator.wait_for_everyone()
    return RerankResult(
        output, trainer.state.step, trained.losses, task.dataset_steps, time.perf_counter() - trained.start
    )


def save_cross_encoder(encoder: Encoder, output: str | os.PathLike, activation: str, max_length: int) -> Path:
    """Write ``encoder`` (a one-label sequence classifier and its tokenizer) into ``output`` as a
    sentence-transformers ``CrossEncoder`` with ``activation`` (``sigmoid`` or ``identity``) and pairs cut at
    ``max_length`` tokens. Files already in ``output`` (training logs) stay."""
    from sentence_transformers import CrossEncoder

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".neobert-rerank-", dir=output) as staging:
        model_dir, built = Path(staging) / "model", Path(staging) / "built"
        write_model_files(encoder.model, encoder.tokenizer, model_dir)
        function = {"sigmoid": torch.nn.Sigmoid, "identity": torch.nn.Identity}[activation]()
        length = min(max_length, encoder.max_length)
        CrossEncoder(str(model_dir), activation_fn=function, max_length=length, device="cpu").save(str(built))
        move_into(built, output)
    return output
