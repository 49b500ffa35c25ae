"""The service's own routes, the same in every dialect: ``/info`` (the one description: the model's, the
service's and text-embeddings-inference's fields), ``/health`` and ``/metrics``."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi.responses import JSONResponse, Response

from ..errors import documented
from ..schemas import HealthResponse, InfoResponse
from .core import LIMITS, Routes


def info_body(routes: Routes) -> dict[str, Any]:
    """The one ``/info`` description: the model's (from the model process), the service's, and
    text-embeddings-inference's fields."""
    config, service = routes.config, routes.service
    model = service.model
    body = {
        **model.info(),
        "model": config.model,
        "long_documents": config.long_documents,
        "limits": {name: getattr(config, name) for name in LIMITS},
        "auth": service.api_key is not None,
        **service.threads.state(),
        "model_id": config.model,
        "model_sha": None,
        "model_dtype": {"bf16": "bfloat16", "fp32": "float32"}.get(model.precision, model.precision),
        "max_concurrent_requests": config.max_queue,
        "max_input_length": model.max_input_tokens,
        "max_batch_tokens": config.max_batch_tokens,
        "max_batch_requests": config.max_batch_texts,
        "max_client_batch_size": config.max_texts,
        "auto_truncate": True,
        "tokenization_workers": None,
        "version": version("neobert"),
    }
    return {name: body.get(name) for name in InfoResponse.model_fields}


def add(routes: Routes) -> None:
    app, service = routes.app, routes.service

    @app.get("/info", response_model=InfoResponse, responses=documented(401), dependencies=routes.bearer)
    async def info() -> Response:
        """The model, what it serves, its dimensions and input limit, pooling, threads, and the limits."""
        return JSONResponse(info_body(routes))

    @app.get("/health", response_model=HealthResponse, responses={503: {"model": HealthResponse}})
    async def health() -> Response:
        """Open without the API key: 200 while serving, 503 while shutting down or without a model."""
        closing, alive = service.batcher.closed, service.alive()
        body = {
            "status": "shutting down" if closing else ("ok" if alive else "the model process exited"),
            "model": routes.config.model,
            "head": service.head,
            "serves": list(service.tasks),
            "queue_depth": service.batcher.depth(),
            "max_queue": routes.config.max_queue,
        }
        return JSONResponse(body, status_code=200 if alive and not closing else 503)

    metrics_doc = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **documented(401)}

    @app.get("/metrics", response_class=Response, responses=metrics_doc, dependencies=routes.bearer)
    async def metrics() -> Response:
        """Prometheus metrics (text format)."""
        return Response(service.metrics.render(), media_type=service.metrics.content_type)
