"""The model behind ``neobert serve`` (:class:`Model`: loading, one model call per merged batch of
requests) and the service the HTTP layer talks to (:class:`Service`: the queue, the metrics, what the
model serves), with the model in a process of its own (:mod:`.worker`) or in threads of this one.

Every task goes through the library's own functions (``long_documents.embed`` / ``classify`` over
``inference.encode`` / ``classify``, ``token_classification.tag``, ``inference.fill_mask``), so the service
computes exactly what the command-line tools compute.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import inference, long_documents
from ..encoders import (
    EmbeddingSpec,
    apply_precision,
    check_vocab,
    embedding_spec,
    load_model,
    max_positions,
    resolve_tokenizer,
)
from ..long_documents import LongDocuments, LongReport
from ..token_classification.tagging import tag
from .batcher import Batcher
from .config import API_KEY_ENV, ServeConfig, model_threads
from .metrics import ServiceMetrics
from .worker import WorkerPool

log = logging.getLogger(__name__)

# Which endpoints each head serves; the encoder inside any head also serves embeddings, and a
# sequence classifier with one or two labels (a cross-encoder) reranks.
HEAD_TASKS = {
    "base": ("embed",),
    "mlm": ("embed", "fill-mask"),
    "sequence-classification": ("embed", "classify", "rerank"),
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


def serving_tokenizer(config: ServeConfig, spec: EmbeddingSpec) -> Any:
    """The model's tokenizer, held to the input length its directory declares (sentence-transformers'
    ``max_seq_length``), as ``SentenceTransformer`` holds it."""
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    if spec.max_length:
        tokenizer.model_max_length = min(int(tokenizer.model_max_length), spec.max_length)
    return tokenizer


def load_for_serving(config: ServeConfig) -> tuple[torch.nn.Module, Any, str, EmbeddingSpec | str]:
    """The model (NeoBERT on the fast path), its tokenizer, its head, and how it embeds (or, where its
    directory declares embeddings this package cannot reproduce, why it does not)."""
    task = detect_task(config.model) if config.task == "auto" else config.task
    if task == "token-classification" and not Path(config.model).is_dir():
        raise ValueError(
            f"a token classifier is served from a fine-tuned model directory, not {config.model!r}"
        )
    try:
        spec: EmbeddingSpec | str = (
            embedding_spec(config.model) if Path(config.model).is_dir() else EmbeddingSpec()
        )
    except ValueError as err:
        spec = str(err)
    model = load_model(config.model, task=task)
    tokenizer = serving_tokenizer(config, spec if isinstance(spec, EmbeddingSpec) else EmbeddingSpec())
    check_vocab(model, tokenizer)
    apply_precision(model, config.precision)
    return model, tokenizer, task, spec


def served_tasks(task: str, model: torch.nn.Module, spec: EmbeddingSpec | str) -> tuple[str, ...]:
    """The endpoints a model serves; a ValueError saying why when that is none."""
    tasks = []
    for name in HEAD_TASKS[task]:
        if name == "embed" and not isinstance(spec, EmbeddingSpec):
            continue
        if name == "rerank" and model.config.num_labels not in (1, 2):
            continue
        tasks.append(name)
    if not tasks:
        reason = spec if isinstance(spec, str) else f"its {task} head serves no endpoint"
        raise ValueError(f"this model would serve nothing, so it is not served: {reason}")
    return tuple(tasks)


@dataclass
class Model:
    """A loaded model and the one function the queue calls: ``run(key, texts)``."""

    config: ServeConfig
    model: torch.nn.Module
    tokenizer: Any
    task: str
    spec: EmbeddingSpec | str = field(default_factory=EmbeddingSpec)

    def __post_init__(self) -> None:
        self.long = LongDocuments(self.config.long_documents, self.config.stride, self.config.rope_scaling)
        self.tasks = served_tasks(self.task, self.model, self.spec)
        self._local = threading.local()  # per worker thread: what the long-document policy did

    @classmethod
    def load(cls, config: ServeConfig) -> Model:
        torch.set_num_threads(model_threads(config.threads))
        return cls(config, *load_for_serving(config))

    def info(self) -> dict[str, Any]:
        """What the model is and serves (the HTTP side's /info; plain data, so it crosses processes)."""
        config = self.model.config
        spec = self.spec if isinstance(self.spec, EmbeddingSpec) else None
        labels = None
        if self.task in ("sequence-classification", "token-classification"):
            labels = [str((config.id2label or {}).get(i, f"LABEL_{i}")) for i in range(config.num_labels)]
        return {
            "backend": "torch",
            "precision": "bf16" if next(self.model.parameters()).dtype == torch.bfloat16 else "fp32",
            "head": self.task,
            "serves": list(self.tasks),
            "model_type": config.model_type,
            "dimensions": int(self.model.base_model.config.hidden_size),
            "max_input_tokens": max_positions(self.model.base_model, self.tokenizer),
            "pooling": spec.pooling if spec else None,
            "normalize": spec.normalize if spec else None,
            "embedding_settings_from": spec.declared_by if spec else None,
            "labels": labels,
        }

    def call(self, key: Hashable, texts: list[Any]) -> tuple[list[Any], int, dict[str, int]]:
        """:meth:`run`, plus what the long-document policy did in it ({"long", "truncated"} counts)."""
        self._local.counts = {"long": 0, "truncated": 0}
        results, tokens = self.run(key, texts)
        return results, tokens, self._local.counts

    def _report(self, report: LongReport) -> int:
        counts = getattr(self._local, "counts", None)
        if counts is not None:
            counts["long"] += report.long
            counts["truncated"] += report.truncated
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
        if task == "rerank":  # texts are (query, document) pairs
            queries, documents = [q for q, _ in texts], [d for _, d in texts]
            logits = inference.classify(
                self.model, self.tokenizer, queries, documents, show_progress=False, **budget
            )
            tokens = sum(len(ids) for ids in self.tokenizer(queries, documents, truncation=True)["input_ids"])
            return [inference.relevance(row) for row in logits], tokens
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


# call(key, texts) -> (one result per text, tokens computed, {"long", "truncated"} counts)
CallFn = Callable[[Hashable, list[Any]], tuple[list[Any], int, dict[str, int]]]


class Service:
    """What the HTTP layer talks to: the bounded queue in front of the model workers, the metrics, the
    tokenizer (for limits and usage counts) and what the model serves (``info``)."""

    def __init__(
        self,
        config: ServeConfig,
        tokenizer: Any,
        info: dict[str, Any],
        call: CallFn,
        close_workers: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ):
        self.config, self.tokenizer, self.info = config, tokenizer, info
        self.task, self.tasks = info["head"], tuple(info["serves"])
        self.hidden_size = int(info["dimensions"])
        self.max_input_tokens = int(info["max_input_tokens"])
        self.api_key = config.api_key or os.environ.get(API_KEY_ENV) or None
        self._call, self._close_workers, self.alive = call, close_workers, alive
        self.pool: WorkerPool | None = None  # the model processes, where the model runs in processes
        self.batcher = Batcher(
            self.run,
            max_queue=config.max_queue,
            max_texts=config.max_batch_texts,
            merge=config.batching,
            workers=config.workers,
            on_call=self._on_call,
        )
        self.metrics = ServiceMetrics(self.batcher.depth)

    @classmethod
    def load(cls, config: ServeConfig) -> Service:
        """The model in ``config.workers`` processes of its own (``model_process``), or in this one; on
        ONNX Runtime for an exported directory (:mod:`.onnx_backend`), else on PyTorch."""
        if config.onnx:
            from .onnx_backend import OnnxModel  # onnxruntime: the optional 'onnx' extra

            load: Callable[[ServeConfig], Any] = OnnxModel.load
        else:
            load = Model.load
        if config.model_process:
            pool = WorkerPool(config, load)
            # this side's tokenizer only counts tokens (usage, truncate: false), never cuts a text
            tokenizer = resolve_tokenizer(config.model, config.tokenizer)
            service = cls(config, tokenizer, pool.info, pool.call, pool.close, pool.alive)
            service.pool = pool
            service.metrics.restarts.set_function(lambda: pool.restarts)
            return service
        model = load(config)
        tokenizer = resolve_tokenizer(config.model, config.tokenizer) if config.onnx else model.tokenizer
        return cls(config, tokenizer, model.info(), model.call)

    def run(self, key: Hashable, texts: list[Any]) -> tuple[list[Any], int]:
        """One model call through the workers, with the long-document counts recorded."""
        results, tokens, counts = self._call(key, texts)
        if counts["long"]:
            self.metrics.long_texts.labels(self.config.long_documents).inc(counts["long"])
        if counts["truncated"]:
            self.metrics.truncated.inc(counts["truncated"])
        return results, tokens

    def submit(self, key: tuple, texts: list[Any]):
        return self.batcher.submit(key, texts)

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued request, then stop the model workers."""
        self.batcher.close(timeout)
        self._close_workers()

    def _on_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.metrics.model_call(requests, texts, tokens, seconds)
