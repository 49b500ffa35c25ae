"""``neobert serve``: an embedding / classification / tagging service with dynamic batching, bounded
queues, limits, health and Prometheus metrics (FastAPI + uvicorn; ``pip install 'neobert[serve]'``)."""

from .config import ServeConfig, ServeConfigError

__all__ = ["ServeConfig", "ServeConfigError"]
