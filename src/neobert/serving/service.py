"""The model behind ``neobert serve`` (:class:`Model`: loading, one model call per merged batch of
requests) and the service the HTTP layer talks to (:class:`Service`: the queue, the metrics, what the
model serves), with the model in a process of its own (:mod:`.worker`) or in threads of this one.

Every task (:mod:`.tasks`) goes through the library's own functions (``long_documents.embed`` / ``classify``
over ``inference.encode`` / ``classify``, ``token_classification.tag``, ``inference.fill_mask``), so the
service computes exactly what the command-line tools compute. What the model can do is
:mod:`neobert.capabilities`'.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from ..capabilities import Loaded, load_for_inference
from ..long_documents import LongDocuments
from .batcher import Batcher
from .config import API_KEY_ENV, ServeConfig
from .metrics import ServiceMetrics
from .tasks import TASKS, Backend, Done, pair_lengths, whole_texts
from .threads import ServingProbe, ThreadChoice, choose_threads, thread_info
from .worker import WorkerPool

log = logging.getLogger(__name__)

@dataclass
class Model(Backend):
    """The PyTorch backend: a model loaded for inference (:func:`neobert.capabilities.load_for_inference`)
    and the one function the queue calls, ``call(key, texts)`` (:class:`.tasks.Backend`), which runs the
    task's function of :data:`.tasks.TASKS`."""

    config: ServeConfig
    loaded: Loaded
    threads: ThreadChoice | None = None  # what the model's thread count is, and why

    def __post_init__(self) -> None:
        self.model, self.tokenizer = self.loaded.model, self.loaded.tokenizer
        self.capabilities = self.loaded.capabilities
        self.policy = self.config.long_documents
        self.long_policy = LongDocuments(self.config.long_documents, self.config.stride, self.config.rope_scaling)
        self.budget = {"batch_size": self.config.max_batch_texts, "max_tokens": self.config.max_batch_tokens}
        self._whole: Any = None

    @classmethod
    def load(cls, config: ServeConfig) -> Model:
        loaded = load_for_inference(config.model, config.tokenizer, config.head, config.precision)
        model = cls(config, loaded)
        workers = config.workers if config.model_process else 1
        key = (config.model, config.precision, loaded.capabilities.head)
        model.threads = choose_threads(config.threads, ServingProbe(model), workers=workers, key=key)
        torch.set_num_threads(model.threads.threads)
        return model

    def info(self) -> dict[str, Any]:
        """What the model is and serves (plain data, so it crosses processes): its capabilities, the
        backend, the precision and the threads chosen at start."""
        dtype = next(self.model.parameters()).dtype
        return {**self.capabilities.info(), "backend": "torch", "mask_token": self.tokenizer.mask_token,
                "precision": "bf16" if dtype == torch.bfloat16 else "fp32", **thread_info(self.threads)}  # fmt: skip

    def run_task(self, name: str, texts: list[Any], options: list[Any]) -> Done:
        return TASKS[name](self, texts, *options)

    def lengths(self, texts: list[Any]) -> list[int]:
        return pair_lengths(self.tokenizer, texts)

    def text_tokenizer(self) -> Any:
        if self._whole is None:
            if not hasattr(self.tokenizer, "backend_tokenizer"):
                raise ValueError("tokenize and decode need a fast (Rust) tokenizer")
            self._whole = whole_texts(self.tokenizer.backend_tokenizer)
        return self._whole


# call(key, texts) -> (one result per text, tokens computed, {"long", "truncated"} counts)
CallFn = Callable[[Hashable, list[Any]], tuple[list[Any], int, dict[str, int]]]


class Service:
    """What the HTTP layer talks to: the bounded queue in front of the model workers, the metrics and what
    the model serves (``info``, from the model process). It holds no tokenizer: token counts come back
    from the model with the results."""

    def __init__(
        self,
        config: ServeConfig,
        info: dict[str, Any],
        call: CallFn,
        close_workers: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ):
        self.config, self.info = config, info
        self.head, self.tasks = info["head"], tuple(info["serves"])  # its head; the tasks (endpoints) it serves
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
            service = cls(config, pool.info, pool.call, pool.close, pool.alive)
            service.pool = pool
            service.metrics.restarts.set_function(lambda: pool.restarts)
            return service
        model = load(config)
        return cls(config, model.info(), model.call)

    def startup_line(self) -> str:
        """What ``neobert serve`` prints once the model is up: what is served, how, and the threads chosen."""
        c, info = self.config, self.info
        threads = f"{info.get('threads')} model thread(s): {info.get('threads_reason')}"
        return (
            f"serving {c.model} ({self.head} head: {', '.join(self.tasks)}; {info['backend']} "
            f"{info['precision']}; {threads}) on http://{c.host}:{c.port}  (batching "
            f"{'on' if c.batching else 'off'}, queue {c.max_queue}, long documents: {c.long_documents}, model "
            f"{'in its own process' if c.model_process else 'in this process'}, API key "
            f"{'required' if self.api_key else 'off'})"
        )

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
