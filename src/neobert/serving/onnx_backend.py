"""The model behind ``neobert serve --backend onnx|openvino``: a ``neobert export onnx`` directory on ONNX Runtime
or OpenVINO (:func:`neobert.inference.backends.open_export`: named, or for ``auto`` the faster here, measured).

:class:`OnnxBackend` has :class:`~neobert.serving.torch_backend.TorchBackend`'s interface (``load``, ``tasks``, ``info``,
``call``), so the queue, the model process and the HTTP side are the same for both backends. What an export
serves:

* a base encoder export: ``embed``. The graph's ``sentence_embedding`` (the pooling and normalisation the
  export declares) is returned as computed; a request naming other pooling or normalisation is pooled from
  the graph's ``last_hidden_state`` by :func:`neobert.model.pooling.pool`, the function PyTorch uses;
* a sequence-classifier export: ``classify`` (through :func:`neobert.inference.run.classifier_rows`, the one
  classifier output), ``predict`` (:func:`neobert.inference.run.label_scores`) and, for a one- or two-label model without token types (NeoBERT), ``rerank``. The graph
  takes no ``token_type_ids``, so a BERT-style cross-encoder, which reads the second text's type, is not
  offered for reranking from ONNX (its scores would differ from the PyTorch model's).

Texts longer than the export's ``max_length`` are truncated by its tokenizer.json (the only long-document
policy here: ``--long-documents chunk|extend`` need the PyTorch backend). Token-id inputs, token embeddings
(``embed_all``) and ``truncation_direction: Left`` need the PyTorch backend too: such inputs are refused by
name. ``tokenize`` and ``decode`` are the tokenizer's, as on PyTorch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.tokenizer import whole_texts
from ..inference.backends import open_export
from ..inference.batching import token_batches
from ..inference.capabilities import describe
from ..inference.kinds import kind_of
from ..inference.long_documents import LongReport
from ..inference.onnx_encoder import CONFIG_FILE, OnnxEncoder
from ..inference.run import classifier_rows, label_scores, relevance
from ..model.pooling import pool
from .catalog import ModelEntry
from .config import ServeConfig
from .served import ServedModel
from .tasks import Backend, Done, Refusal
from .threads import CALL_THREADS, ThreadChoice, ThreadPolicy


def is_onnx_export(model: str) -> bool:
    """Whether ``model`` is a directory written by ``neobert export onnx``."""
    return kind_of(model).backend == "onnx"


@dataclass
class OnnxBackend(Backend):
    """An exported directory on ONNX Runtime and the one function the queue calls: ``call(model_call, texts)``
    (:class:`.tasks.Backend`); what it serves is :func:`neobert.inference.capabilities.describe` of its source's
    config.json, its graph (a classifier graph outputs logits only) and no token types for pairs."""

    config: ServeConfig
    encoder: OnnxEncoder
    transformers_config: Any  # the source's config.json (labels, problem type, hidden size)
    threads: ThreadChoice | None = None
    runtime: str = "onnx"  # onnx | openvino
    precision: str = "fp32"  # the graph and precision that runs: fp32 | bf16 | int8 | int8-static
    backend_reason: str = "named"  # why this runtime and precision (backend auto: the measurement)
    # the model directory's PyTorch backend, made on first need, where auto took the export a model directory
    # carries: it answers what the graph does not (token embeddings, token-id inputs, left truncation), so
    # the model serves what it serves on PyTorch whichever runtime the measurement took; in a pair
    # (threads.export set, registry.load_measured) it is loaded at start and runs the calls placed on it
    companion: Callable[[], Backend] | None = None
    companion_head: str | None = None  # the head the companion serves (a masked-LM's fill-mask)

    def __post_init__(self) -> None:
        self.head = self.encoder.head  # base, or a head whose graph the export writes
        spec = kind_of(str(self.encoder.directory)).declared_embedding(self.encoder.directory)
        embedding = replace(spec, max_length=None) if self.head == "base" else None
        self.capabilities = describe(
            self.transformers_config,
            self.companion_head or self.head,
            embedding,
            self.encoder.max_length,
            pair_token_types=False,
            model_type=self.encoder.config["model_type"],
            runtime=None if self.companion is not None else ONNX_TASKS,
        )
        self._pytorch: Backend | None = None
        self.policy = self.config.long_documents
        self._lock = threading.Lock()  # workers > 1 in one process share the session's tokenizer
        self._counter = whole_texts(self.encoder.tokenizer)  # whole lengths (usage, truncate: false)

    @classmethod
    def load(cls, config: ServeConfig, entry: ModelEntry | None = None, threads: Any = None) -> OnnxBackend:
        """``entry`` (default: the config's default model), an export; its session's threads are one less
        than the cores whatever ``threads`` the process chose on another model."""
        from transformers import PretrainedConfig

        source = (entry or config.default).source
        if not is_onnx_export(source):
            raise ValueError(
                f"--backend {config.backend} serves a directory written by `neobert export onnx`; {source} holds "
                f"no {CONFIG_FILE}"
            )
        chosen = ThreadPolicy.at_start(
            config, fixed="ONNX Runtime and OpenVINO fix a graph's threads when they compile it"
        )
        opened = open_export(
            source,
            config.backend,
            config.onnx_variant,
            config.precision,
            chosen.threads,
            config.backend_cache,
        )
        settings = json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
        return cls(
            config,
            opened.encoder,
            PretrainedConfig.from_dict(settings),
            chosen,
            opened.runtime,
            opened.precision,
            opened.reason,
        )

    def nbytes(self) -> int:
        """The bytes of the graph's files (its weights are its initializers), and its companion's once loaded."""
        graph = self.encoder.directory / self.encoder.config["files"][self.encoder.variant]
        own = sum(f.stat().st_size for f in graph.parent.glob(f"{graph.name}*"))
        return own + (self._pytorch.nbytes() if self._pytorch is not None else 0)

    def info(self) -> ServedModel:
        """What the export is and serves (it crosses processes)."""
        return ServedModel.of(
            self.capabilities,
            backend=self.runtime,
            precision=self.precision,
            backend_reason=self.backend_reason,
            mask_token=self.encoder.config.get("mask_token"),
            vocab_size=self._counter.get_vocab_size(),
            threads=self.threads,
        )

    def lengths(self, texts: list[Any]) -> list[int]:
        with self._lock:
            counted = iter(self._counter.encode_batch([t for t in texts if not isinstance(t, list)]))
            return [len(t) if isinstance(t, list) else len(next(counted).ids) for t in texts]

    def text_tokenizer(self) -> Any:
        return self._counter

    def pytorch(self) -> Backend:
        """The companion PyTorch backend, loaded the first time it is needed."""
        if self._pytorch is None:
            self._pytorch = self.companion()
        return self._pytorch

    def placed_on_pytorch(self) -> bool:
        """Whether the current call runs on the companion: a pair's call (auto keeps PyTorch beside the export,
        :func:`.threads.choose_pair`) that the HTTP side placed on PyTorch's threads under load."""
        pair = self.threads is not None and self.threads.export is not None
        return pair and CALL_THREADS.get() is not None

    def run_task(self, name: str, texts: list[Any], options: dict[str, Any]) -> Done:
        """One model call on texts the graph may cut at its max_length (counted as long and truncated)."""
        if self.companion is not None and (
            self.placed_on_pytorch()
            or name not in ONNX_TASKS
            or options.get("side") == "left"
            or any(isinstance(t, list) for t in texts)
        ):
            return self.pytorch().run_task(name, texts, options)
        if options.get("side") == "left":
            refusal = Refusal(422, "{noun} {i}: truncation_direction Left needs the PyTorch backend")
            return Done([refusal] * len(texts), self.lengths(texts))
        if any(isinstance(t, list) for t in texts):  # token ids: refused one by one, the rest answered
            keep = [i for i, t in enumerate(texts) if not isinstance(t, list)]
            done = self.run_task(name, [texts[i] for i in keep], options) if keep else Done([], [], None, 0)
            values: list[Any] = [Refusal(422, "{noun} {i}: token-id inputs need the PyTorch backend")] * len(
                texts
            )
            lengths = [len(t) if isinstance(t, list) else 0 for t in texts]
            for i, value, length in zip(keep, done.values, done.lengths):
                values[i], lengths[i] = value, length
            return Done(values, lengths, done.report, done.tokens)
        with self._lock:
            batch = self.encoder.tokenizer.encode_batch(list(texts))  # (query, document) pairs too
            lengths = [len(e.ids) for e in self._counter.encode_batch(list(texts))]
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
        cut = sum(1 for e in batch if e.overflowing)  # cut at max_length by tokenizer.json
        results: list[Any] = [None] * len(batch)
        for batch_rows in token_batches(
            mask.sum(axis=1).tolist(), self.config.max_batch_texts, self.config.max_batch_tokens
        ):
            rows = np.array(batch_rows)
            width = int(mask[rows].sum(axis=1).max())  # right-padded: the group's own longest row
            outputs = self.encoder.run(ids[rows, :width], mask[rows, :width])
            for i, result in zip(rows, self._results(name, options, outputs, mask[rows, :width])):
                results[i] = result
        report = LongReport(texts=len(texts), over_window=cut, truncated=cut, tokens=int(mask.sum()))
        return Done(results, lengths, report, report.tokens)

    def _results(
        self, task: str, options: dict[str, Any], outputs: list[np.ndarray], mask: np.ndarray
    ) -> list[Any]:
        if task == "embed":
            return list(self._vectors(outputs, mask, options["pooling"], options["normalize"]))
        if task == "classify":
            return classifier_rows(outputs[0], self.transformers_config)
        if task == "predict":
            return label_scores(outputs[0], self.transformers_config, options.get("function", "auto"))
        if task == "rerank":
            return [relevance(row, bool(options.get("raw"))) for row in outputs[0]]
        raise ValueError(f"the ONNX backend has no task {task!r}")

    def _vectors(
        self, outputs: list[np.ndarray], mask: np.ndarray, pooling: str, normalize: bool
    ) -> np.ndarray:
        """The graph's sentence embedding where the request asks what it computes; else pooled here."""
        spec = self.capabilities.embedding
        if pooling == spec.pooling and normalize == spec.normalize:
            return outputs[1]
        pooled = pool(torch.from_numpy(outputs[0]), torch.from_numpy(mask), pooling)
        return (F.normalize(pooled, p=2, dim=-1) if normalize else pooled).numpy()


ONNX_TASKS = ("embed", "classify", "predict", "rerank", "tokenize", "decode")
