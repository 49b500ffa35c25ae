"""The service's own routes, the same in every dialect: ``/info`` (the one description of a model: the
model's, the service's and text-embeddings-inference's fields; ``?model=NAME`` or ``/models/NAME/info`` for
another than the default), ``/health`` and ``/metrics``: their answers' shapes, then the routes (OpenAI's
``/v1/models`` is :mod:`.openai`'s)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from ..errors import documented
from .core import LIMITS, Answering, Routes

# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


class HealthResponse(BaseModel):
    status: str
    model: str
    head: str
    serves: list[str]
    queue_depth: int
    max_queue: int


class InfoResponse(BaseModel):
    model: str = Field(description="the model described: its name (one model: the --model value)")
    models: list[str] = Field(description="every model served (GET /v1/models has their kinds and states)")
    kind: str = Field(description="its directory kind (an adapter: adapter, which runs over its base)")
    base: str | None = Field(description="an adapter: the model it runs over")
    backend: Literal["torch", "onnx", "openvino"]
    precision: str = Field(
        description="torch: bf16 or fp32 as chosen at start; onnx: the graph, fp32 or int8; openvino: fp32, "
        "bf16 (the CPU's inference hint) or int8-static"
    )
    backend_reason: str | None = Field(
        default=None,
        description="why this backend and precision: named, or what --backend auto measured at start",
    )
    model_type: str
    head: str
    serves: list[str]
    dimensions: int
    max_input_tokens: int
    pooling: str | None
    normalize: bool | None
    embedding_settings_from: str | None
    labels: list[str] | None
    threads: int | None = Field(description="the model's threads per model process, chosen at start")
    threads_reason: str | None = Field(description="why: pinned (--threads, the environment) or measured")
    threads_under_load: int | None = Field(
        default=None,
        description="the model's threads for a call taken while other requests wait: measured defaults pick "
        "per call from the start-up probe and http_ms_per_text; pinned counts, several model processes and "
        "ONNX keep threads",
    )
    runtime_under_load: str | None = Field(
        default=None,
        description="backend auto keeping PyTorch beside the export it took: where a call taken while other "
        "requests wait runs now, the export's runtime or PyTorch (null for one runtime)",
    )
    runtime_alone: str | None = Field(
        default=None,
        description="backend auto keeping PyTorch beside the export it took: where a call taken with no other "
        "request waiting runs, the export's runtime or PyTorch, whichever ran one text faster at start (null "
        "for one runtime)",
    )
    http_ms_per_text: float | None = Field(
        default=None,
        description="the HTTP process's CPU milliseconds per text answered, measured while serving (model in "
        "its own process) over stretches that began with requests waiting (null until there were some)",
    )
    long_documents: str
    limits: dict[str, int | float]
    auth: bool
    mask_token: str | None = Field(description="the token /fill-mask fills")
    vocab_size: int | None = Field(description="token ids are below it")
    prompts: dict[str, str] = Field(description="prompt_name -> the text put before the input")
    default_prompt_name: str | None
    matryoshka_dims: list[int] = Field(description="the widths `dimensions` may take without a warning")
    not_served: dict[str, str] = Field(
        default_factory=dict, description="endpoints (tasks) of the model's head it does not serve, and why"
    )
    token_vectors: dict[str, Any] | None = Field(
        default=None,
        description=(
            "the settings of the model's token vectors (a late-interaction, ColBERT, model): dim (numbers per token vector), query_length (every "
            "query's vectors), document_length (a document's at most), the markers, the skiplist, similarity "
            "MaxSim; null for any other model"
        ),
    )
    # text-embeddings-inference's /info fields
    model_id: str
    model_sha: str | None
    model_dtype: str
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int | None
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int | None
    version: str


# --- routes ---------------------------------------------------------------------------------------------


def info_body(routes: Routes, answering: Answering) -> dict[str, Any]:
    """The one ``/info`` description of a model: the model's (from the model process), the service's, and
    text-embeddings-inference's fields."""
    config, service = routes.config, routes.service
    model, entry = answering.served, service.catalog[answering.name]
    body = {
        **model.info(),
        "model": entry.name,
        "models": service.catalog.names,
        "kind": entry.kind,
        "base": entry.base,
        "long_documents": config.long_documents,
        "limits": {name: getattr(config, name) for name in LIMITS},
        "auth": service.api_key is not None,
        **service.threads.state(),
        "model_id": entry.name,
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

    @app.get("/info", response_model=InfoResponse, responses=documented(401, 404), dependencies=routes.bearer)
    async def info(model: str | None = None) -> Response:
        """The model (``model``: a served model's name; default: the default model), what it serves, its
        dimensions and input limit, pooling, threads, and the limits."""
        return JSONResponse(info_body(routes, await routes.answering(model)))

    @app.get("/health", response_model=HealthResponse, responses={503: {"model": HealthResponse}})
    async def health() -> Response:
        """Open without the API key: 200 while serving, 503 while shutting down or without a model."""
        closing, alive = service.batcher.closed, service.alive()
        body = {
            "status": "shutting down" if closing else ("ok" if alive else "the model process exited"),
            "model": service.catalog.default,
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
