"""SPLADE fine-tuning of any masked-LM model into a learned sparse retriever, as a task of the training core.

Each text becomes a vocabulary-wide vector (:func:`neobert.inference.sparse.splade_pool`: max over tokens of
log(1 + ReLU(MLM logit))). The loss is the in-batch contrastive loss of ``finetune contrastive`` on *dot
products* of those vectors (scale 1 / ``temperature``, 1 by default, as sentence-transformers'
``SparseMultipleNegativesRankingLoss``), plus the FLOPS regulariser (Paria et al. 2020: the squared mean
weight of each vocabulary entry over the batch, summed) on the queries and on the documents (positives and
hard negatives), with their own weights, each grown quadratically from 0 over the first third of the run
(sentence-transformers' ``SpladeRegularizerWeightSchedulerCallback``). Data, instructions, sampling,
resume, several processes and precision are ``finetune contrastive``'s (:func:`.contrastive.train`); under
several processes the contrastive term gathers the candidates of every process and the FLOPS term is that
of the global batch (every process's vectors gathered, differentiably), so N processes of B queries train as
one process of N x B (sentence-transformers computes FLOPS per device instead, which makes the
regulariser's strength depend on the number of devices).

The result is a sentence-transformers ``SparseEncoder`` directory (a ``fill-mask`` Transformer at the root,
then ``SpladePooling("max")``): ``SparseEncoder(OUTPUT)`` (after ``import neobert`` for NeoBERT) and
:func:`neobert.inference.sparse.encode_sparse` give the same vectors.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..cards import write_card
from ..common.io import move_into, write_json
from ..inference.encoders import Encoder, tokenize, write_model_files
from ..inference.sparse import splade_pool
from ..training.trainer import LossTerms
from .config import FinetuneConfigError, config_from_dict
from .contrastive import (
    ContrastiveConfig,
    ContrastiveResult,
    ContrastiveTask,
    contrastive_loss_sum,
    dataset_sizes,
    gather_rows,
    run_card,
    save_trained,
    train,
)
from .distillation import Distillation


@dataclass
class SparseConfig(ContrastiveConfig):
    """``finetune contrastive``'s settings (its Matryoshka widths excepted), the dot-product scale and the
    FLOPS regulariser's weights."""

    temperature: float = 1.0  # dot products are divided by this (SPLADE: 1, the raw dot product)
    query_regularizer: float = 5e-5  # weight of the FLOPS regulariser on query vectors
    document_regularizer: float = 3e-5  # weight of the FLOPS regulariser on document vectors
    regularizer_warmup: float = 1 / 3  # share of the steps over which both weights grow quadratically from 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.matryoshka_dims:
            raise FinetuneConfigError("matryoshka_dims apply to dense embeddings, not to sparse training")
        if self.query_regularizer < 0 or self.document_regularizer < 0:
            raise FinetuneConfigError("query_regularizer and document_regularizer must be >= 0")
        if not 0 < self.regularizer_warmup <= 1:
            raise FinetuneConfigError(f"regularizer_warmup must be in (0, 1], got {self.regularizer_warmup}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SparseConfig:
        return config_from_dict(cls, data)


SparseResult = ContrastiveResult  # a SPLADE run gives back what every contrastive.train run does


def flops(vectors: torch.Tensor) -> torch.Tensor:
    """The FLOPS regulariser of (B, V) non-negative vectors: sum over entries of (mean over rows)^2."""
    return vectors.float().mean(dim=0).pow(2).sum()


def regularizer_weight(weight: float, step: int, steps: int, warmup: float) -> float:
    """``weight`` x (step / warm-up steps)^2 during the first ``warmup`` share of ``steps`` (at least one
    step), then ``weight`` (sentence-transformers' quadratic schedule; ``step`` counts from 0)."""
    warmup_steps = max(1, int(steps * warmup))
    return weight * min(1.0, step / warmup_steps) ** 2


def sparse_step_loss(
    model: torch.nn.Module,
    encoder: Encoder,
    texts: list[str],
    n_queries: int,
    config: SparseConfig,
    step: int,
    teacher: Distillation | None = None,
) -> LossTerms:
    """Summed loss of this process's queries: contrastive on dot products plus ``n_queries`` x the weighted
    FLOPS terms of the global batch (the trainer divides the sum over processes by the global query count,
    which leaves the global FLOPS once); sums of non-zeros and FLOPS to log."""
    inputs = tokenize(encoder, texts, config.max_length)
    vectors = splade_pool(model(**inputs).logits, inputs["attention_mask"])  # (T, V)
    q, p, n = vectors.split([n_queries, n_queries, len(texts) - 2 * n_queries])
    # FLOPS of the global batch: under several processes, every process's rows (the gather is differentiable)
    all_q, all_documents = gather_rows(q)[0], torch.cat([gather_rows(p)[0], gather_rows(n)[0]])
    w_query = regularizer_weight(config.query_regularizer, step, config.steps, config.regularizer_warmup)
    w_document = regularizer_weight(
        config.document_regularizer, step, config.steps, config.regularizer_warmup
    )
    flops_q, flops_d = flops(all_q), flops(all_documents)
    loss = contrastive_loss_sum(q, p, n, config.temperature, cosine=False, teacher=teacher)
    loss = loss + n_queries * (w_query * flops_q + w_document * flops_d)
    with torch.no_grad():
        sums = {
            "nonzeros_query": (q > 0).sum().float(),
            "nonzeros_positive": (p > 0).sum().float(),
            "flops_query": flops_q.detach() * n_queries,
            "flops_document": flops_d.detach() * n_queries,
        }
    return LossTerms(loss, sums)


class SparseTask(ContrastiveTask):
    """``finetune contrastive``'s sampling and state; the loss of :func:`sparse_step_loss` on the MLM model."""

    step = 0

    def batches(self, step: int) -> list[tuple[list[str], int, list[list[float]]]]:
        self.step = step  # the regulariser's warm-up follows the optimizer step (resume included)
        return super().batches(step)

    def loss(self, model: torch.nn.Module, batch: tuple[list[str], int, list[list[float]]]) -> LossTerms:
        texts, n_queries, teacher = batch
        distillation = Distillation.of(teacher, self.config)
        return sparse_step_loss(model, self.encoder, texts, n_queries, self.config, self.step, distillation)


def run(
    config: SparseConfig, on_step_end: Callable[[int, dict[str, float]], None] | None = None
) -> SparseResult:
    """Train ``config.model`` (with its masked-LM head) as a SPLADE model and save a ``SparseEncoder``
    directory to ``config.output`` (see :func:`save_sparse_encoder`)."""
    trained = train(config, SparseTask, head="mlm", on_step_end=on_step_end, description="sparse")
    trainer, task = trained.trainer, trained.task
    output = Path(config.output)
    if trainer.is_main:
        save_trained(trained, output, save_sparse_encoder)
        write_json(
            output / "sparse_training.json",
            {
                "config": asdict(config),
                "dataset_steps": task.dataset_steps,
                "losses": trained.losses,
                "datasets": dataset_sizes(trained.datasets),
            },
        )
        limits = [
            "SPLADE max pooling over the MLM logits: one weight per vocabulary entry; score with the dot "
            "product (an inverted index serves it).",
            "No evaluation ran with the training: `neobert eval embeddings --model DIR --retrieval ... "
            "--update-card` adds results to this card.",
        ]
        card = run_card(
            config,
            trained,
            task.dataset_steps,
            trainer,
            head="sparse-embedding",
            command="neobert finetune sparse",
            task="sparse retrieval (SPLADE)",
            loss="contrastive + FLOPS",
            limits=limits,
        )
        write_card(output, card)
    trainer.accelerator.wait_for_everyone()
    return SparseResult(
        output, trainer.state.step, trained.losses, task.dataset_steps, time.perf_counter() - trained.start
    )


def save_sparse_encoder(encoder: Encoder, output: str | os.PathLike) -> Path:
    """Write ``encoder`` (a masked-LM model and its tokenizer) into ``output`` as a sentence-transformers
    ``SparseEncoder``: a ``fill-mask`` Transformer at the root (also a transformers model directory), then
    ``SpladePooling("max", "relu")``. Files already in ``output`` (training logs) stay; each file written
    replaces its old version whole."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".neobert-sparse-", dir=output) as staging:
        model_dir, built = Path(staging) / "model", Path(staging) / "built"
        write_model_files(encoder.model, encoder.tokenizer, model_dir)
        transformer = Transformer(
            str(model_dir), transformer_task="fill-mask", max_seq_length=encoder.max_length
        )
        pooling = SpladePooling("max", "relu", embedding_dimension=encoder.vocab_size)
        SparseEncoder(modules=[transformer, pooling], device="cpu").save(str(built))
        move_into(built, output)
    return output
