"""The model behind ``neobert serve`` (:class:`TorchBackend`: loading, one model call per merged batch of
requests) and the service the HTTP layer talks to (:class:`Service`: the queue, the metrics, what the
model serves), with the model in a process of its own (:mod:`.worker`) or in threads of this one.

Every task (:mod:`.tasks`) goes through the library's own functions (``long_documents.embed`` / ``classify``
over ``inference.encode`` / ``classify``, ``token_classification.tag``, ``inference.fill_mask``), so the
service computes exactly what the command-line tools compute. What the model can do is
:mod:`neobert.inference.capabilities`'.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..inference.encoders import Encoder
from ..inference.kinds import load_for_inference
from ..inference.long_documents import LongDocuments
from .batcher import Batcher
from .config import API_KEY_ENV, ServeConfig
from .metrics import ServiceMetrics
from .served import ServedModel
from .tasks import COUNT, LENGTHS, TASKS, Backend, Done, ModelCall, whole_texts
from .threads import ServingProbe, ThreadChoice, ThreadPolicy
from .worker import WorkerPool

log = logging.getLogger(__name__)


@dataclass
class TorchBackend(Backend):
    """The PyTorch backend: a model loaded for inference (:func:`neobert.inference.capabilities.load_for_inference`)
    and the one function the queue calls, ``call(model_call, texts)`` (:class:`.tasks.Backend`), which runs the
    task's function of :data:`.tasks.TASKS`."""

    config: ServeConfig
    loaded: Encoder
    threads: ThreadChoice | None = None  # what the model's thread count is, and why

    def __post_init__(self) -> None:
        self.model, self.tokenizer = self.loaded.model, self.loaded.tokenizer
        self.capabilities = self.loaded.capabilities
        self.policy = self.config.long_documents
        self.long_policy = LongDocuments(
            self.config.long_documents, self.config.stride, self.config.rope_scaling
        )
        self.budget = {"batch_size": self.config.max_batch_texts, "max_tokens": self.config.max_batch_tokens}
        self._whole: Any = None
        self.spec = self.loaded.spec  # its kind's settings beside the weights (a ColBERT model's)
        self.aliases = self.capabilities.aliases  # a task asked by its common name -> its kind's task

    @classmethod
    def load(cls, config: ServeConfig) -> TorchBackend:
        loaded = load_for_inference(
            config.model, config.tokenizer, config.head, config.precision, config.sparse
        )
        fixed = loaded.capabilities.fixed_window
        if fixed and config.long_documents != "truncate":
            raise ValueError(f"--long-documents {config.long_documents} does not apply: {fixed}")
        model = cls(config, loaded)
        key = (config.model, config.precision, loaded.capabilities.head)
        model.threads = ThreadPolicy.at_start(config, ServingProbe(model), key=key)
        return model

    def info(self) -> ServedModel:
        """What the model is and serves (it crosses processes): its capabilities, the backend, the
        precision and the threads chosen at start."""
        dtype = next(self.model.parameters()).dtype
        return ServedModel.of(
            self.capabilities,
            backend="torch",
            mask_token=self.tokenizer.mask_token,
            vocab_size=self.text_tokenizer().get_vocab_size(),
            threads=self.threads,
            precision="bf16" if dtype == torch.bfloat16 else "fp32",
        )

    def run_task(self, name: str, texts: list[Any], options: dict[str, Any]) -> Done:
        return TASKS[self.aliases.get(name, name)](self, texts, **options)

    def lengths(self, texts: list[Any]) -> list[int]:
        return LENGTHS[self.aliases.get(COUNT, COUNT)](self, texts)

    def text_tokenizer(self) -> Any:
        if self._whole is None:
            if not hasattr(self.tokenizer, "backend_tokenizer"):
                raise ValueError("tokenize and decode need a fast (Rust) tokenizer")
            self._whole = whole_texts(self.tokenizer.backend_tokenizer)
        return self._whole


# call(model call, texts[, threads]) -> (one result per text, tokens computed, {"long", "truncated"} counts);
# the model processes' call also takes the torch threads to run on (ThreadPolicy.adaptive)
CallFn = Callable[[ModelCall, list[Any]], tuple[list[Any], int, dict[str, int]]]


class Service:
    """What the HTTP layer talks to: the bounded queue in front of the model workers, the metrics and what
    the model serves (``model``, a :class:`.served.ServedModel` from the model process). It holds no
    tokenizer: token counts come back from the model with the results.

    Each model call runs on the count its :class:`.threads.ThreadPolicy` (``threads``) picks: the start-up
    choice with no request waiting; under a backlog, where the count adapts (one torch model process, a
    measured choice), the cheapest probed count beside this process's measured CPU per text.
    ``neobert_model_calls{threads}`` counts the calls by the count they ran on.
    """

    def __init__(
        self,
        config: ServeConfig,
        model: ServedModel,
        call: CallFn,
        close_workers: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ):
        self.config, self.model = config, model
        self.head, self.tasks = model.head, model.serves  # its head; the tasks (endpoints) it serves
        self.hidden_size, self.max_input_tokens = model.dimensions, model.max_input_tokens
        self.api_key = config.api_key or os.environ.get(API_KEY_ENV) or None
        self._call, self._close_workers, self.alive = call, close_workers, alive
        self.pool: WorkerPool | None = None  # the model processes, where the model runs in processes
        self.threads = ThreadPolicy.serving(config, model)  # the model's threads per call
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
            from .onnx_backend import OnnxBackend  # onnxruntime: the optional 'onnx' extra

            load: Callable[[ServeConfig], Any] = OnnxBackend.load
        else:
            load = TorchBackend.load
        if config.model_process:
            pool = WorkerPool(config, load)
            service = cls(config, pool.model, pool.call, pool.close, pool.alive)
            service.pool = pool
            service.metrics.restarts.set_function(lambda: pool.restarts)
            return service
        model = load(config)
        return cls(config, model.info(), model.call)

    def startup_line(self) -> str:
        """What ``neobert serve`` prints once the model is up: what is served, how, the threads chosen, and the
        playground's address."""
        c, model, threads = self.config, self.model, self.threads.describe()
        return (
            f"serving {c.model} ({self.head} head: {', '.join(self.tasks)}; {model.backend} "
            f"{model.precision}; {threads}) on http://{c.host}:{c.port}  (batching "
            f"{'on' if c.batching else 'off'}, queue {c.max_queue}, long documents: {c.long_documents}, model "
            f"{'in its own process' if c.model_process else 'in this process'}, API key "
            f"{'required' if self.api_key else 'off'}); try it in a browser: http://{c.host}:{c.port}/playground"
        )

    def run(self, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int]:
        """One model call through the workers (on the threads :meth:`call_threads` picks, where they adapt),
        with the long-document counts, the thread count and this process's CPU per text recorded."""
        threads = self.threads.for_call(self.batcher.backlog())
        if self.threads.adaptive:
            results, tokens, counts = self._call(call, texts, threads)
        else:
            results, tokens, counts = self._call(call, texts)
        self.threads.answered(len(texts))
        self.metrics.calls_by_threads.labels("unknown" if threads is None else str(threads)).inc()
        if counts["long"]:
            self.metrics.long_texts.labels(self.config.long_documents).inc(counts["long"])
        if counts["truncated"]:
            self.metrics.truncated.inc(counts["truncated"])
        return results, tokens

    def submit(self, call: ModelCall, texts: list[Any], first: bool = False):
        """``texts`` queued for ``call`` (ahead of the queue where ``first``): a future of their answers."""
        return self.batcher.submit(call, texts, first)

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued request, then stop the model workers."""
        self.batcher.close(timeout)
        self._close_workers()

    def _on_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.metrics.model_call(requests, texts, tokens, seconds)
