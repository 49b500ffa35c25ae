"""The service the HTTP layer talks to (:class:`Service`): the queue in front of the model processes, the
metrics, and what the models serve, by name. The models themselves run behind it, in processes of their own
(:mod:`.worker`) or in threads of this one, each process holding a :class:`.registry.ModelSet` (one model or
several, on PyTorch, :mod:`.torch_backend`, or ONNX Runtime, :mod:`.onnx_backend`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from .batcher import Batcher
from .catalog import Catalog, CatalogError, ModelEntry, adapter_entry, inside_roots
from .config import API_KEY_ENV, ServeConfig
from .metrics import ServiceMetrics
from .registry import ModelSet
from .served import ServedModel, ServedSet
from .tasks import LOAD, UNLOAD, ModelCall
from .threads import ThreadPolicy
from .worker import WorkerPool

log = logging.getLogger(__name__)

# call(model call, texts[, threads]) -> (one result per text, tokens computed, {"long", "truncated"} counts,
# and "models": the model set's state where it changed); the model processes' call also takes the torch
# threads to run on (ThreadPolicy.adaptive)
CallFn = Callable[[ModelCall, list[Any]], tuple[list[Any], int, dict[str, Any]]]


class UnknownModel(LookupError):
    """A request names a model this service does not serve."""


class Service:
    """What the HTTP layer talks to: the bounded queue in front of the model workers, the metrics and what
    the models serve: ``model``, the default's :class:`.served.ServedModel` (what a request that names no
    model gets), ``served`` (name -> its description, each learnt from the model process once it was
    loaded) and ``catalog`` (every name, its kind and base). It holds no tokenizer: token counts come back
    from the model with the results.

    Each model call runs on the count its :class:`.threads.ThreadPolicy` (``threads``) picks: the start-up
    choice with no request waiting; under a backlog, where the count adapts (one torch model process, a
    measured choice), the cheapest probed count beside this process's measured CPU per text.
    ``neobert_model_calls{threads}`` counts the calls by the count they ran on (a pair of runtimes, backend
    auto: the export's calls under its runtime's name).
    """

    def __init__(
        self,
        config: ServeConfig,
        model: ServedModel | ServedSet,
        call: CallFn,
        close_workers: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ):
        served = (
            model
            if isinstance(model, ServedSet)
            else ServedSet(config.default_model, {config.default_model: model})
        )
        self.config, self.catalog, self.model = config, config.catalog, served.model
        self.served, self.states, self.budget = dict(served.models), dict(served.state), served.budget
        self.head, self.tasks = self.model.head, self.model.serves  # the default's head and tasks (endpoints)
        self.hidden_size, self.max_input_tokens = self.model.dimensions, self.model.max_input_tokens
        self.api_key = config.api_key or os.environ.get(API_KEY_ENV) or None
        self._call, self._close_workers, self.alive = call, close_workers, alive
        self.pool: WorkerPool | None = None  # the model processes, where the models run in processes
        self.threads = ThreadPolicy.serving(config, self.model)  # the model's threads per call
        self.loading: dict[str, Future] = {}  # a model being loaded for a first request: its one load call
        self.removing: set[str] = set()  # adapters being unloaded over HTTP: no new request takes them
        self.batcher = Batcher(
            self.run,
            max_queue=config.max_queue,
            max_texts=config.max_batch_texts,
            merge=config.batching,
            workers=config.workers,
            on_call=self._on_call,
        )
        self.metrics = ServiceMetrics(self.batcher.depth, several=self.catalog.several)
        self.metrics.models(self.states, self.budget)

    @classmethod
    def load(cls, config: ServeConfig) -> Service:
        """The models in ``config.workers`` processes of their own (``model_process``), or in this one (a
        :class:`.registry.ModelSet` each: the default model loaded at start, the others as it decides)."""
        ModelSet(config).check_sizes()  # a model over the budget is refused before any process starts
        if config.model_process:
            pool = WorkerPool(config, ModelSet.load)
            service = cls(config, pool.model, pool.call, pool.close, pool.alive)
            service.pool = pool
            service.metrics.restarts.set_function(lambda: pool.restarts)
            return service
        models = ModelSet.load(config)
        return cls(config, models.info(), models.call)

    def startup_line(self) -> str:
        """What ``neobert serve`` prints once the model is up: what is served, how, the threads chosen, and the
        playground's address."""
        c, model, threads = self.config, self.model, self.threads.describe()
        several = ""
        if self.catalog.several:
            budget = f"within {self.budget:,} bytes" if self.budget else "no memory limit"
            several = f" and {len(self.catalog.entries) - 1} more model(s) ({budget})"
        return (
            f"serving {c.default_model} ({self.head} head: {', '.join(self.tasks)}; {model.backend} "
            f"{model.precision}{'' if model.backend_reason in (None, 'named') else ': ' + model.backend_reason}; "
            f"{threads}){several} on http://{c.host}:{c.port}  (batching "
            f"{'on' if c.batching else 'off'}, queue {c.max_queue}, long documents: {c.long_documents}, model "
            f"{'in its own process' if c.model_process else 'in this process'}, API key "
            f"{'required' if self.api_key else 'off'}); try it in a browser: http://{c.host}:{c.port}/playground"
        )

    def run(self, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int]:
        """One model call through the workers (on the threads :meth:`call_threads` picks, where they adapt),
        with the long-document counts, the thread count, this process's CPU per text and the models' state
        recorded."""
        threads = self.threads.for_call(self.batcher.backlog(), len(texts))
        asked = () if call.task == UNLOAD else (call.model, *call.rows)
        needed = [name for name in asked if name and not self.loaded(name)]
        for name in needed:
            self.states.setdefault(name, {})["loading"] = True
        try:
            if self.pool is not None and call.task in (LOAD, UNLOAD) and texts != [None]:
                results, tokens, counts = self.each(call, texts)
            elif self.threads.adaptive:
                results, tokens, counts = self._call(call, texts, threads)
            else:
                results, tokens, counts = self._call(call, texts)
        finally:
            for name in needed:
                self.states.get(name, {}).pop("loading", None)
        self.note(counts.pop("models", None))
        if call.rows:  # requests for several adapters of one base, run together
            self.metrics.batch_adapters.observe(len(set(call.rows)))
        self.threads.answered(len(texts), self.batcher.depth())
        self.metrics.calls_by_threads.labels(self.threads.label(threads)).inc()
        if counts["long"]:
            self.metrics.long_texts.labels(self.config.long_documents).inc(counts["long"])
        if counts["truncated"]:
            self.metrics.truncated.inc(counts["truncated"])
        return results, tokens

    def each(self, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int, dict[str, Any]]:
        """``call`` in every model process (an adapter added or removed over HTTP): the first's answer."""
        assert self.pool is not None
        answers = self.pool.each(call, texts)
        for _, _, counts in answers[1:]:
            counts.pop("models", None)
        return answers[0]

    def note(self, models: ServedSet | None) -> None:
        """The model set's state as a call's answer carried it (where it changed)."""
        if models is None:
            return
        self.served.update(models.models)
        self.states = {name: dict(state) for name, state in models.state.items()}
        self.metrics.models(self.states, self.budget)

    def submit(
        self, call: ModelCall, texts: list[Any], first: bool = False, model: str | None = None
    ) -> Future:
        """``texts`` queued for ``call`` (ahead of the queue where ``first``) on ``model`` (a name; None: the
        default): a future of their answers. An adapter's request runs on its base, merged with the
        requests of the base's other adapters."""
        entry = self.entry(model)
        if entry.adapter:
            return self.batcher.submit(replace(call, model=entry.base), texts, first, tag=entry.name)
        return self.batcher.submit(replace(call, model=entry.name), texts, first)

    def entry(self, name: str | None) -> ModelEntry:
        """The served model ``name`` (None: the default); :class:`UnknownModel` naming those served."""
        name = self.catalog.default if name is None else name
        if name not in self.catalog or name in self.removing:
            raise UnknownModel(
                f"the model {name!r} is not served here; it serves {', '.join(self.catalog.names)}"
            )
        return self.catalog[name]

    def loaded(self, name: str) -> bool:
        return bool(self.states.get(name, {}).get("loaded", name in self.served))

    async def describe(self, name: str | None) -> ServedModel:
        """What model ``name`` serves, loading it first where it was never loaded (one load for every
        request that waits for it)."""
        entry = self.entry(name)
        if entry.name not in self.served:
            future = self.loading.get(entry.name)
            if future is None:
                future = self.batcher.submit(ModelCall.of(LOAD, model=entry.name), [None], first=True)
                self.loading[entry.name] = future
                future.add_done_callback(lambda _: self.loading.pop(entry.name, None))
            [(served, _)] = await asyncio.wrap_future(future)
            self.served[entry.name] = served
        return self.served[entry.name]

    async def add_adapter(self, name: str, path: str, base: str | None) -> ServedModel:
        """Load the adapter at ``path`` (inside a ``--model-root``) as ``name`` over ``base`` (or the served
        model it names) in every model process: what it serves."""
        roots = self.config.model_root
        if not roots:
            raise PermissionError(
                "loading models over HTTP is off: the server was started without --model-root"
            )
        found = inside_roots(path, roots)
        if found is None:
            raise PermissionError(
                f"{path!r} is not inside the directories this server may load from (--model-root)"
            )
        entry = adapter_entry(self.catalog, name, found, base)
        [(served, _)] = await self.everywhere(ModelCall.of(LOAD, model=name), [entry], first=True)
        self.set_catalog(self.catalog.with_entry(entry))
        self.served[name] = served
        return served

    async def remove(self, name: str) -> None:
        """Stop serving adapter ``name``: new requests for it are refused at once (404), those already
        queued are answered, then it is unloaded from every model process."""
        entry = self.entry(name)
        if not entry.adapter:
            raise CatalogError(
                f"{name} is a served model, not an adapter: only adapters are unloaded over HTTP"
            )
        self.removing.add(name)
        try:
            await self.everywhere(ModelCall.of(UNLOAD, model=name), [name])
            self.set_catalog(self.catalog.without(name))
        finally:
            self.removing.discard(name)
        self.served.pop(name, None)
        self.states.pop(name, None)
        self.metrics.forget(name)

    async def everywhere(self, call: ModelCall, texts: list[Any], first: bool = False) -> list[Any]:
        """``call`` through the queue (``first``: ahead of it; else after every request queued before it),
        run in every model process."""
        return await asyncio.wrap_future(self.batcher.submit(call, texts, first))

    def set_catalog(self, catalog: Catalog) -> None:
        """The models served from now on; a replacement model process starts with them."""
        self.catalog = catalog
        if self.pool is not None:
            self.pool.config = self.config.with_catalog(catalog)

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued request, then stop the model workers."""
        self.batcher.close(timeout)
        self._close_workers()

    def _on_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.metrics.model_call(requests, texts, tokens, seconds)
