"""The service's Prometheus metrics, in a registry of its own (several services can live in one process)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServiceMetrics:
    """The metrics; with ``several`` models (a service that may serve more than one), the requests and their
    latency carry a ``model`` label (the name the request was answered for; empty where none was: refusals
    before parsing, /health), and every service has the models' loads, evictions and bytes by ``model``."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue_depth: Callable[[], int], several: bool = False):
        self.registry = registry = CollectorRegistry()
        self.several = several
        by = ["model"] if several else []
        self.requests = Counter(
            "neobert_requests",
            "HTTP requests by endpoint and status code" + (" and model" if several else ""),
            ["endpoint", "status", *by],
            registry=registry,
        )
        self.latency = Histogram(
            "neobert_request_seconds",
            "Request latency, arrival to response",
            ["endpoint", *by],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._model_metrics(registry)
        self.batch_texts = Histogram(
            "neobert_batch_texts", "Texts per model call", buckets=SIZE_BUCKETS, registry=registry
        )
        self.batch_requests = Histogram(
            "neobert_batch_requests",
            "Requests merged into one model call",
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.batch_adapters = Histogram(
            "neobert_batch_adapters",
            "Adapters of one base (and the base itself) whose requests ran in one model call",
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.restarts = Gauge(
            "neobert_model_process_restarts", "Model processes replaced after they exited", registry=registry
        )
        self.queue = Gauge("neobert_queue_depth", "Requests waiting for the model", registry=registry)
        self.queue.set_function(queue_depth)
        self.tokens = Counter("neobert_tokens", "Tokens run through the model", registry=registry)
        self.model_seconds = Counter(
            "neobert_model_seconds", "Seconds the model worker spent computing", registry=registry
        )
        self.tokens_per_second = Gauge(
            "neobert_tokens_per_second", "Tokens per second of the latest model call", registry=registry
        )
        self.calls_by_threads = Counter(
            "neobert_model_calls",
            "Model calls by the torch threads they ran on, or a pair's export by its runtime (they adapt to load)",
            ["threads"],
            registry=registry,
        )
        self.long_texts = Counter(
            "neobert_long_texts",
            "Texts longer than the model window, by policy",
            ["policy"],
            registry=registry,
        )
        self.truncated = Counter(
            "neobert_truncated_texts", "Texts cut to the model window (truncate policy)", registry=registry
        )

    def _model_metrics(self, registry: CollectorRegistry) -> None:
        self.loads = Counter(
            "neobert_model_loads", "Models and adapters loaded", ["model"], registry=registry
        )
        self.evictions = Counter(
            "neobert_model_evictions",
            "Models and adapters evicted for memory (--max-memory)",
            ["model"],
            registry=registry,
        )
        self.model_bytes = Gauge(
            "neobert_model_bytes",
            "Bytes of a loaded model's weights (an adapter's own)",
            ["model"],
            registry=registry,
        )
        self.memory_budget = Gauge(
            "neobert_memory_budget_bytes",
            "The models' memory budget (--max-memory; 0: none)",
            registry=registry,
        )
        self._seen: dict[str, dict[str, int]] = {}

    def request(self, endpoint: str, status: int, model: str, seconds: float) -> None:
        """One HTTP request answered."""
        labels = (endpoint, model) if self.several else (endpoint,)
        self.requests.labels(endpoint, str(status), *((model,) if self.several else ())).inc()
        self.latency.labels(*labels).observe(seconds)

    def models(self, states: dict[str, dict], budget: int | None) -> None:
        """The models' state as the model process reported it: loaded bytes, and loads and evictions since
        the last report."""
        self.memory_budget.set(budget or 0)
        for name, state in states.items():
            seen = self._seen.setdefault(name, {"loads": 0, "evictions": 0})
            for counter, key in ((self.loads, "loads"), (self.evictions, "evictions")):
                now = int(state.get(key, 0))
                if now > seen[key]:
                    counter.labels(name).inc(now - seen[key])
                seen[key] = now
            self.model_bytes.labels(name).set((state.get("bytes") or 0) if state.get("loaded") else 0)

    def forget(self, name: str) -> None:
        """A model no longer served (an adapter unloaded over HTTP)."""
        self._seen.pop(name, None)
        for metric in (self.loads, self.evictions, self.model_bytes):
            with contextlib.suppress(KeyError):
                metric.remove(name)

    def model_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.batch_requests.observe(requests)
        self.batch_texts.observe(texts)
        self.tokens.inc(tokens)
        self.model_seconds.inc(seconds)
        if seconds > 0:
            self.tokens_per_second.set(tokens / seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
