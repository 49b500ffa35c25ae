"""The model behind ``neobert serve --backend onnx``: a ``neobert export onnx`` directory on ONNX Runtime.

:class:`OnnxModel` has :class:`~neobert.serving.service.Model`'s interface (``load``, ``tasks``, ``info``,
``call``), so the queue, the model process and the HTTP side are the same for both backends. What an export
serves:

* a base encoder export: ``embed``. The graph's ``sentence_embedding`` (the pooling and normalisation the
  export declares) is returned as computed; a request naming other pooling or normalisation is pooled from
  the graph's ``last_hidden_state`` by :func:`neobert.model.pooling.pool`, the function PyTorch uses;
* a sequence-classifier export: ``classify`` (through :func:`neobert.inference.classifier_rows`, the one
  classifier output) and, for a one- or two-label model without token types (NeoBERT), ``rerank``. The graph
  takes no ``token_type_ids``, so a BERT-style cross-encoder, which reads the second text's type, is not
  offered for reranking from ONNX (its scores would differ from the PyTorch model's).

Texts longer than the export's ``max_length`` are truncated by its tokenizer.json (the only long-document
policy here: ``--long-documents chunk|extend`` need the PyTorch backend).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..export.runtime import CONFIG_FILE, OnnxEncoder
from ..inference import classifier_rows, relevance, token_batches
from ..model.pooling import pool
from .config import ServeConfig, model_threads


def is_onnx_export(model: str) -> bool:
    """Whether ``model`` is a directory written by ``neobert export onnx``."""
    return (Path(model) / CONFIG_FILE).is_file()


@dataclass
class OnnxModel:
    """An exported directory on ONNX Runtime and the one function the queue calls: ``call(key, texts)``."""

    config: ServeConfig
    encoder: OnnxEncoder
    transformers_config: Any  # the source's config.json (labels, problem type, hidden size)

    def __post_init__(self) -> None:
        self.task = self.encoder.task
        self.tasks = self._served()
        self._lock = threading.Lock()  # workers > 1 in one process share the session's tokenizer

    @classmethod
    def load(cls, config: ServeConfig) -> OnnxModel:
        from transformers import PretrainedConfig

        if not is_onnx_export(config.model):
            raise ValueError(
                f"--backend onnx serves a directory written by `neobert export onnx`; {config.model} holds no "
                f"{CONFIG_FILE}"
            )
        encoder = OnnxEncoder(config.model, config.onnx_variant, threads=model_threads(config.threads))
        source = json.loads((Path(config.model) / "config.json").read_text(encoding="utf-8"))
        return cls(config, encoder, PretrainedConfig.from_dict(source))

    def _served(self) -> tuple[str, ...]:
        if self.task == "base":
            return ("embed",)
        tasks = ["classify"]
        token_types = self.transformers_config.to_dict().get("type_vocab_size", 0) >= 2
        if self.transformers_config.num_labels in (1, 2) and not token_types:
            tasks.append("rerank")
        return tuple(tasks)

    @property
    def pooling(self) -> dict[str, Any]:
        return self.encoder.config["pooling"]

    def info(self) -> dict[str, Any]:
        """What the export is and serves (the HTTP side's /info; plain data, so it crosses processes)."""
        base = self.task == "base"
        hidden = self.transformers_config.to_dict().get("hidden_size")
        labels = None if base else list(self.encoder.labels or [])
        return {
            "backend": "onnx",
            "precision": self.encoder.variant,
            "head": self.task,
            "serves": list(self.tasks),
            "model_type": self.encoder.config["model_type"],
            "dimensions": int(hidden) if hidden else 0,
            "max_input_tokens": self.encoder.max_length,
            "pooling": self.pooling["method"] if base else None,
            "normalize": self.pooling["normalize"] if base else None,
            "embedding_settings_from": self.pooling["source"] if base else None,
            "labels": labels,
        }

    def call(self, key: Hashable, texts: list[Any]) -> tuple[list[Any], int, dict[str, int]]:
        """One model call: (a result per text, real tokens computed, {"long", "truncated"} counts)."""
        task, *options = key
        with self._lock:
            batch = self.encoder.tokenizer.encode_batch(list(texts))  # (query, document) pairs too
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
        cut = sum(1 for e in batch if e.overflowing)  # cut at max_length by tokenizer.json
        tokens, counts = int(mask.sum()), {"long": cut, "truncated": cut}
        results: list[Any] = [None] * len(batch)
        lengths = mask.sum(axis=1).tolist()
        for batch_rows in token_batches(lengths, self.config.max_batch_texts, self.config.max_batch_tokens):
            rows = np.array(batch_rows)
            width = int(mask[rows].sum(axis=1).max())  # right-padded: the group's own longest row
            outputs = self.encoder.run(ids[rows, :width], mask[rows, :width])
            for i, result in zip(rows, self._results(task, options, outputs, mask[rows, :width])):
                results[i] = result
        return results, tokens, counts

    def _results(
        self, task: str, options: list[Any], outputs: list[np.ndarray], mask: np.ndarray
    ) -> list[Any]:
        if task == "embed":
            pooling, normalize = options
            return list(self._vectors(outputs, mask, pooling, normalize))
        if task == "classify":
            return classifier_rows(outputs[0], self.transformers_config)
        if task == "rerank":
            return [relevance(row) for row in outputs[0]]
        raise ValueError(f"unknown task {task!r}")

    def _vectors(
        self, outputs: list[np.ndarray], mask: np.ndarray, pooling: str, normalize: bool
    ) -> np.ndarray:
        """The graph's sentence embedding where the request asks what it computes; else pooled here."""
        if pooling == self.pooling["method"] and normalize == self.pooling["normalize"]:
            return outputs[1]
        pooled = pool(torch.from_numpy(outputs[0]), torch.from_numpy(mask), pooling)
        return (F.normalize(pooled, p=2, dim=-1) if normalize else pooled).numpy()
