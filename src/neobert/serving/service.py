"""The model behind ``neobert serve``: loading, and one model call per merged batch of requests.

Every task goes through the library's own functions (``long_documents.embed`` / ``classify`` over
``inference.encode`` / ``classify``, ``token_classification.tag``, ``inference.fill_mask``), so the service
computes exactly what the command-line tools compute.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import inference, long_documents
from ..encoders import check_vocab, is_neobert, load_model, resolve_tokenizer
from ..fastpath import fast_inference
from ..long_documents import LongDocuments, LongReport
from ..token_classification.tagging import tag
from .batcher import Batcher
from .config import ServeConfig
from .metrics import ServiceMetrics

log = logging.getLogger(__name__)

# Which endpoints each head serves; the encoder inside any NeoBERT head also serves embeddings.
HEAD_TASKS = {
    "base": ("embed",),
    "mlm": ("embed", "fill-mask"),
    "sequence-classification": ("embed", "classify"),
    "token-classification": ("embed", "tokens"),
}
_ARCHITECTURE_SUFFIXES = {
    "ForMaskedLM": "mlm",
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
}


def detect_task(model: str) -> str:
    """The head a model directory holds (from config.json's ``architectures``); presets default to mlm."""
    path = Path(model)
    if not path.is_dir():
        return "mlm"
    from transformers import AutoConfig

    for name in AutoConfig.from_pretrained(path).architectures or []:
        for suffix, task in _ARCHITECTURE_SUFFIXES.items():
            if name.endswith(suffix):
                return task
    return "base"


def load_for_serving(config: ServeConfig) -> tuple[torch.nn.Module, Any, str]:
    """The model (on the fast path when it is NeoBERT), its tokenizer, and its head."""
    task = detect_task(config.model) if config.task == "auto" else config.task
    if task == "token-classification" and not Path(config.model).is_dir():
        raise ValueError(
            f"a token classifier is served from a fine-tuned model directory, not {config.model!r}"
        )
    model = load_model(config.model, task=task)
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    check_vocab(model, tokenizer)
    if is_neobert(model):
        fast_inference(model, torch.bfloat16 if config.precision == "bf16" else None)
    return model, tokenizer, task


@dataclass
class Service:
    config: ServeConfig
    model: torch.nn.Module
    tokenizer: Any
    task: str

    def __post_init__(self) -> None:
        self.long = LongDocuments(self.config.long_documents, self.config.stride, self.config.rope_scaling)
        self.tasks = tuple(t for t in HEAD_TASKS[self.task] if t != "embed" or is_neobert(self.model))
        self.batcher = Batcher(
            self.run,
            max_queue=self.config.max_queue,
            max_texts=self.config.max_batch_texts,
            merge=self.config.batching,
            workers=self.config.workers,
            on_call=self._on_call,
        )
        self.metrics = ServiceMetrics(self.batcher.depth)
        self.hidden_size = int(self.model.base_model.config.hidden_size)

    @classmethod
    def load(cls, config: ServeConfig) -> Service:
        return cls(config, *load_for_serving(config))

    def submit(self, key: tuple, texts: list[str]):
        return self.batcher.submit(key, texts)

    def close(self, timeout: float | None = None) -> None:
        self.batcher.close(timeout)

    def _on_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.metrics.model_call(requests, texts, tokens, seconds)

    def _report(self, report: LongReport) -> int:
        if report.long:
            self.metrics.long_texts.labels(self.long.policy).inc(report.long)
        if report.truncated:
            self.metrics.truncated.inc(report.truncated)
        return report.tokens

    def run(self, key: Hashable, texts: list[str]) -> tuple[list[Any], int]:
        """One model call: (a result per text, tokens computed). ``key`` is (task, *options)."""
        task, *options = key
        budget = {"batch_size": self.config.max_batch_texts, "max_tokens": self.config.max_batch_tokens}
        if task == "embed":
            pooling, normalize = options
            vectors, report = long_documents.embed(
                self.model, self.tokenizer, texts, self.long, pooling, normalize, **budget
            )
            return list(vectors), self._report(report)
        if task == "classify":
            logits, report = long_documents.classify(self.model, self.tokenizer, texts, self.long, **budget)
            return inference.classifier_rows(logits, self.model.config), self._report(report)
        if task == "tokens":
            entities, report = tag(self.model, self.tokenizer, texts, self.long, **budget)
            return [[e.to_dict() for e in row] for row in entities], self._report(report)
        if task == "fill-mask":
            (top_k,) = options
            results: list[Any] = []
            for text in texts:  # one text's problem (its masks cut off) must not fail its batch-mates
                try:
                    results.append(inference.fill_mask(self.model, self.tokenizer, text, top_k))
                except ValueError as err:
                    results.append(err)
            tokens = sum(len(ids) for ids in self.tokenizer(texts)["input_ids"])
            return results, tokens
        raise ValueError(f"unknown task {task!r}")
