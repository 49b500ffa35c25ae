"""Late-interaction (ColBERT) fine-tuning of any encoder, as a task of the training core.

The encoder and a bias-free projection to ``dim`` (128) dimensions per token (:class:`neobert.inference.late_interaction.
LateInteractionModel`) are trained together; queries and documents get their marker tokens (added to the
tokenizer), queries are expanded with mask tokens to ``query_length`` tokens, documents lose their punctuation
and are truncated to ``max_length`` tokens (up to the encoder's window). The loss is the in-batch contrastive
loss of ``finetune contrastive`` on MaxSim scores (scale 1 / ``temperature``, 1 by default as PyLate's
``Contrastive``): each query against every positive and hard negative of the batch, of every process (the
token vectors gathered, differentiably, as the SPLADE regulariser's). Data, instructions, sampling, resume,
several processes and precision are ``finetune contrastive``'s (:func:`.contrastive.train`).

The result is PyLate's directory layout, which sentence-transformers' ``MultiVectorEncoder`` loads
(:func:`neobert.inference.late_interaction.save_late_interaction`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..cards import write_card
from ..common.io import write_json
from ..inference.encoders import Encoder, max_positions
from ..inference.late_interaction import (
    LateInteractionModel,
    LateInteractionSpec,
    add_markers,
    save_late_interaction,
    tokenize_late,
)
from ..training.lora import save_with_adapter
from ..training.trainer import LossTerms
from .config import FinetuneConfigError, config_from_dict
from .contrastive import (
    ContrastiveConfig,
    ContrastiveResult,
    ContrastiveTask,
    _distributed,
    dataset_sizes,
    gather_rows,
    run_card,
    train,
)
from .distillation import Distillation


@dataclass
class LateInteractionConfig(ContrastiveConfig):
    """``finetune contrastive``'s settings (``max_length``: the document length; Matryoshka widths excepted),
    the token vectors' width, the query length and the MaxSim scale."""

    temperature: float = 1.0  # MaxSim scores are divided by this (PyLate: 1)
    dim: int = 128  # dimensions of each token vector
    query_length: int = 32  # queries are padded with mask tokens (or truncated) to exactly this many tokens
    skip_punctuation: bool = True  # drop punctuation tokens from documents (ColBERT's skiplist)
    attend_to_expansion_tokens: bool = False  # let the encoder attend to the queries' mask tokens
    # the longest document the saved model reads where it is used (embed, index, serve, eval embeddings); the
    # default is max_length, the length it was trained on: give more to train short and read long documents
    document_length: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.matryoshka_dims:
            raise FinetuneConfigError("matryoshka_dims apply to dense embeddings, not to late interaction")
        if self.dim < 1 or self.query_length < 2 or self.max_length < 2:
            raise FinetuneConfigError("dim must be >= 1, query_length and max_length >= 2")
        if self.document_length is not None and self.document_length < 2:
            raise FinetuneConfigError(f"document_length must be >= 2, got {self.document_length}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LateInteractionConfig:
        return config_from_dict(cls, data)

    def spec(self, window: int | None = None, saved: bool = False) -> LateInteractionSpec:
        """The settings training uses (documents cut at ``max_length``) or, ``saved``, those of the saved model
        (at ``document_length``, default ``max_length``); capped at the encoder's ``window``."""
        skip = LateInteractionSpec().skiplist_words if self.skip_punctuation else []
        length = (self.document_length or self.max_length) if saved else self.max_length
        length = min(length, window) if window else length
        return LateInteractionSpec(
            dim=self.dim,
            query_length=self.query_length,
            document_length=length,
            skiplist_words=skip,
            attend_to_expansion_tokens=self.attend_to_expansion_tokens,
        )


LateInteractionResult = ContrastiveResult  # what every contrastive.train run gives back


def padded_maxsim(queries: torch.Tensor, documents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, N) MaxSim of queries (B, Lq, D) against documents (N, Ld, D) whose tokens ``valid`` (N, Ld) marks."""
    sims = torch.einsum("bqd,nld->bnql", queries, documents)  # (B, N, Lq, Ld)
    sims = sims.masked_fill(~valid[None, :, None, :], float("-inf"))
    return sims.amax(dim=-1).sum(dim=-1)


def _gathered(
    vectors: torch.Tensor, mask: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Every process's documents (padded to ``width`` tokens under several processes) and where ours start."""
    if _distributed():
        vectors = F.pad(vectors, (0, 0, 0, width - vectors.shape[1]))
        mask = F.pad(mask, (0, width - mask.shape[1]))
    all_vectors, offset = gather_rows(vectors)
    return all_vectors, gather_rows(mask.float())[0] > 0, offset


def late_step_loss(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: list[str],
    n_queries: int,
    spec: LateInteractionSpec,
    temperature: float,
    teacher: Distillation | None = None,
) -> LossTerms:
    """Summed InfoNCE on MaxSim of this process's queries against every process's positives and negatives,
    plus the ``teacher``'s distillation terms on MaxSim over each query's own candidates."""
    device = next(model.parameters()).device
    q_in = tokenize_late(tokenizer, texts[:n_queries], spec, True, device)
    d_in = tokenize_late(tokenizer, texts[n_queries:], spec, False, device)
    q = model(q_in["input_ids"], q_in["attention_mask"])  # (B, Lq, D); every query position scores
    d = model(d_in["input_ids"], d_in["attention_mask"])  # (P + M, Ld, D)
    d_mask = d_in["scoring_mask"]
    positives, p_mask, offset = _gathered(d[:n_queries], d_mask[:n_queries], spec.document_length)
    negatives, n_mask, n_offset = _gathered(d[n_queries:], d_mask[n_queries:], spec.document_length)
    width = max(positives.shape[1], negatives.shape[1] if negatives.shape[0] else 0)
    candidates = torch.cat(
        [
            F.pad(positives, (0, 0, 0, width - positives.shape[1])),
            F.pad(negatives, (0, 0, 0, width - negatives.shape[1])),
        ]
    )
    valid = torch.cat(
        [F.pad(p_mask, (0, width - p_mask.shape[1])), F.pad(n_mask, (0, width - n_mask.shape[1]))]
    )
    scores = padded_maxsim(q, candidates, valid)  # (B, N)
    targets = offset + torch.arange(n_queries, device=device)
    loss = F.cross_entropy(scores / temperature, targets, reduction="sum")
    if teacher is not None:
        loss = loss + teacher.loss(scores, temperature, offset, positives.shape[0] + n_offset)
    with torch.no_grad():
        correct = (scores.argmax(dim=1) == targets).sum().float()
    return LossTerms(
        loss, {"accuracy": correct}, tokens=int(q_in["attention_mask"].sum() + d_in["attention_mask"].sum())
    )


class LateInteractionTask(ContrastiveTask):
    """``finetune contrastive``'s sampling and state; the loss of :func:`late_step_loss`."""

    spec: LateInteractionSpec

    def loss(self, model: torch.nn.Module, batch: tuple[list[str], int, list[list[float]]]) -> LossTerms:
        texts, n_queries, teacher = batch
        return late_step_loss(
            model,
            self.encoder.tokenizer,
            texts,
            n_queries,
            self.spec,
            self.config.temperature,
            Distillation.of(teacher, self.config),
        )


def _save(trained: Any, spec: Any, output: Path) -> None:
    """The trained model into ``output``: PyLate's layout, with the encoder as a LoRA adapter after a LoRA
    run (beside the token projection, trained in full)."""
    tokenizer = trained.encoder.tokenizer
    if trained.lora is None:
        save_late_interaction(trained.module, tokenizer, spec, output)
        return

    def whole(module: torch.nn.Module, directory: Path) -> None:
        save_late_interaction(module, tokenizer, spec, directory)

    save_with_adapter(trained.module, tokenizer, output, whole)


def run(
    config: LateInteractionConfig, on_step_end: Callable[[int, dict[str, float]], None] | None = None
) -> LateInteractionResult:
    """Train ``config.model`` with a token projection as a late-interaction model; save it to ``config.output``."""
    built: dict[str, Any] = {}

    def module(encoder: Encoder) -> LateInteractionModel:
        window = max_positions(encoder.base, encoder.tokenizer)
        spec = config.spec(window)
        if not config.lora:  # under LoRA the markers stay text: the base's vocabulary is the adapter's
            add_markers(encoder, spec)
        built["spec"], built["saved"] = spec, config.spec(window, saved=True)
        return LateInteractionModel(encoder.base, spec.dim)

    def make_task(encoder: Encoder, datasets: list, cfg: Any, trainer: Any) -> LateInteractionTask:
        task = LateInteractionTask(encoder, datasets, cfg, trainer)
        task.spec = built["spec"]
        return task

    trained = train(config, make_task, on_step_end=on_step_end, module=module, description="late interaction")
    trainer, task, spec = trained.trainer, trained.task, built["saved"]
    output = Path(config.output)
    if trainer.is_main:
        _save(trained, spec, output)
        write_json(
            output / "late_interaction_training.json",
            {
                "config": asdict(config),
                "spec": asdict(spec),
                "dataset_steps": task.dataset_steps,
                "losses": trained.losses,
                "datasets": dataset_sizes(trained.datasets),
            },
        )
        limits = [
            f"One {spec.dim}-dimensional unit vector per token; score a query against a document with MaxSim "
            f"(queries are {spec.query_length} tokens, documents at most {spec.document_length}).",
            "No evaluation ran with the training: `neobert eval embeddings --model DIR --retrieval ...` scores "
            "it by MaxSim.",
        ]
        card = run_card(
            config,
            trained,
            task.dataset_steps,
            trainer,
            head="late-interaction",
            command="neobert finetune late-interaction",
            task="late-interaction retrieval (ColBERT)",
            loss="InfoNCE on MaxSim",
            limits=limits,
        )
        write_card(output, card)
    trainer.accelerator.wait_for_everyone()
    return LateInteractionResult(
        output, trainer.state.step, trained.losses, task.dataset_steps, time.perf_counter() - trained.start
    )
