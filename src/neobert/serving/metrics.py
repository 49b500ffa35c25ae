"""The service's Prometheus metrics, in a registry of its own (several services can live in one process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServiceMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue_depth: Callable[[], int]):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "neobert_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "neobert_request_seconds",
            "Request latency, arrival to response",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_texts = Histogram(
            "neobert_batch_texts", "Texts per model call", buckets=SIZE_BUCKETS, registry=registry
        )
        self.batch_requests = Histogram(
            "neobert_batch_requests",
            "Requests merged into one model call",
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
            "Model calls by the torch threads they ran on (the default adapts them to the load)",
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

    def model_call(self, requests: int, texts: int, tokens: int, seconds: float) -> None:
        self.batch_requests.observe(requests)
        self.batch_texts.observe(texts)
        self.tokens.inc(tokens)
        self.model_seconds.inc(seconds)
        if seconds > 0:
            self.tokens_per_second.set(tokens / seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
