"""The HTTP layer of ``neobert serve``: FastAPI endpoints over a :class:`~neobert.serving.service.Service`.

Errors answer ``{"error": {"message", "type", "param"}}`` (OpenAI's shape): 413 for requests over the
limits, 422 for malformed JSON or wrong types (``param`` names the field), 503 + ``Retry-After`` when the
queue is full or the server is shutting down, 500 without internals for anything unexpected (the
traceback goes to the server log only).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.exceptions import HTTPException

from .batcher import QueueFull, ShuttingDown
from .service import Service

log = logging.getLogger(__name__)

ENDPOINTS = ("/embed", "/v1/embeddings", "/classify", "/tokens", "/fill-mask", "/health", "/metrics")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Request):
    texts: list[StrictStr] = Field(min_length=1)
    pooling: Literal["mean", "cls"] = "mean"
    normalize: StrictBool = True


class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients may send fields we do not use (user, ...)
    input: StrictStr | list[StrictStr] = Field(min_length=1)
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)


class TextsRequest(_Request):
    texts: list[StrictStr] = Field(min_length=1)


class FillMaskRequest(TextsRequest):
    top_k: int = Field(default=5, ge=1, le=100, strict=True)


class ServiceError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def error_response(status: int, message: str, param: str | None = None, headers=None) -> JSONResponse:
    kind = {413: "request_too_large", 422: "invalid_request", 503: "overloaded", 404: "not_found"}.get(
        status, "server_error" if status >= 500 else "invalid_request"
    )
    body = {"error": {"message": message, "type": kind, "param": param}}
    return JSONResponse(body, status_code=status, headers=headers)


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def field_name(loc: tuple) -> str:
    """A pydantic error location as a field path: ('body', 'texts', 0) -> texts[0]."""
    # pydantic names the union member tried ("str", "list[str]"): not a field, so left out
    parts = [p for p in loc if p != "body" and not (isinstance(p, str) and (p in _TYPE_TAGS or "[" in p))]
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        # Uvicorn has finished the in-flight requests; stop the model workers.
        await asyncio.to_thread(service.close, service.config.graceful_timeout)

    app = FastAPI(title="neobert", lifespan=lifespan, openapi_url="/openapi.json", docs_url="/docs")
    app.add_middleware(Guard, service=service)
    _add_error_handlers(app, service)
    limits = service.config

    def check_limits(texts: list[str], field: str) -> None:
        if len(texts) > limits.max_texts:
            raise ServiceError(
                413, f"{len(texts)} texts in one request; the limit is {limits.max_texts}", field
            )
        for i, text in enumerate(texts):
            if len(text) > limits.max_chars:
                raise ServiceError(
                    413,
                    f"text {i} has {len(text):,} characters; the limit is {limits.max_chars:,}",
                    f"{field}[{i}]",
                )

    def require(task: str) -> None:
        if task not in service.tasks:
            raise ServiceError(
                404,
                f"this server's model ({service.task} head) does not serve {task}; it serves "
                f"{', '.join(service.tasks) or 'nothing'}",
            )

    async def run(key: tuple, texts: list[str]) -> list[Any]:
        return await asyncio.wrap_future(service.submit(key, texts))

    @app.post("/embed")
    async def embed(request: EmbedRequest) -> Response:
        require("embed")
        check_limits(request.texts, "texts")
        vectors = await run(("embed", request.pooling, request.normalize), request.texts)
        return JSONResponse({"embeddings": [v.tolist() for v in vectors]})

    @app.post("/v1/embeddings")
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> Response:
        require("embed")
        texts = [request.input] if isinstance(request.input, str) else request.input
        check_limits(texts, "input")
        if request.dimensions is not None and request.dimensions != service.hidden_size:
            raise ServiceError(
                422,
                f"dimensions must be the model's {service.hidden_size} (vectors are not truncated)",
                "dimensions",
            )
        vectors = await run(("embed", "mean", True), texts)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, request.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(ids) for ids in service.tokenizer(texts)["input_ids"])
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": request.model or service.config.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.post("/classify")
    async def classify(request: TextsRequest) -> Response:
        require("classify")
        check_limits(request.texts, "texts")
        return JSONResponse({"results": await run(("classify",), request.texts)})

    @app.post("/tokens")
    async def tokens(request: TextsRequest) -> Response:
        require("tokens")
        check_limits(request.texts, "texts")
        rows = await run(("tokens",), request.texts)
        return JSONResponse({"results": [{"entities": row} for row in rows]})

    @app.post("/fill-mask")
    async def fill_mask(request: FillMaskRequest) -> Response:
        require("fill-mask")
        check_limits(request.texts, "texts")
        mask = service.tokenizer.mask_token
        for i, text in enumerate(request.texts):
            if mask not in text:
                raise ServiceError(422, f"text {i} holds no {mask} token to fill", f"texts[{i}]")
        rows = await run(("fill-mask", request.top_k), request.texts)
        for i, row in enumerate(rows):
            if isinstance(row, ValueError):
                raise ServiceError(422, f"text {i}: {row}", f"texts[{i}]")
        return JSONResponse(
            {
                "results": [
                    [[{"token": t, "score": p} for t, p in mask_row] for mask_row in row] for row in rows
                ]
            }
        )

    @app.get("/health")
    async def health() -> Response:
        closing = service.batcher.closed
        body = {
            "status": "shutting down" if closing else "ok",
            "model": service.config.model,
            "head": service.task,
            "serves": list(service.tasks),
            "queue_depth": service.batcher.depth(),
            "max_queue": service.config.max_queue,
        }
        return JSONResponse(body, status_code=503 if closing else 200)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    return app


def _encode_vector(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # what the OpenAI client asks for by default: little-endian float32 bytes
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _add_error_handlers(app: FastAPI, service: Service) -> None:
    retry = {"Retry-After": str(service.config.retry_after)}

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> Response:
        problems = []
        for e in err.errors():
            if e.get("type") == "json_invalid":
                problems.append(
                    ("body", f"the body is not valid JSON ({e.get('ctx', {}).get('error', 'parse error')})")
                )
            else:
                problems.append((field_name(tuple(e.get("loc", ()))), str(e.get("msg", "invalid"))))
        message = "; ".join(f"{name}: {msg}" for name, msg in problems)
        return error_response(422, message, problems[0][0] if problems else None)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, err: ServiceError) -> Response:
        return error_response(err.status, err.message, err.param, err.headers)

    @app.exception_handler(QueueFull)
    async def full(request: Request, err: QueueFull) -> Response:
        return error_response(
            503, f"server busy: {err}; retry after {service.config.retry_after} s", headers=retry
        )

    @app.exception_handler(ShuttingDown)
    async def closing(request: Request, err: ShuttingDown) -> Response:
        return error_response(503, str(err), headers=retry)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        return error_response(err.status_code, str(err.detail), headers=err.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal error; the server log has the details")


class Guard:
    """ASGI middleware: refuses bodies over the size limit (413, before reading them when the length is
    declared) and records every request's status and latency in the metrics."""

    def __init__(self, app: Any, service: Service):
        self.app, self.service = app, service
        self.limit = service.config.max_body_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
        status = [500]

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            declared = dict(scope.get("headers") or []).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.limit:
                response = error_response(
                    413, f"request body of {int(declared):,} bytes; the limit is {self.limit:,}"
                )
                await response(scope, receive, send_status)
                return
            await self.app(scope, self._limited(receive), send_status)
        finally:
            metrics = self.service.metrics
            metrics.requests.labels(endpoint, str(status[0])).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - start)

    def _limited(self, receive: Any) -> Any:
        received = [0]

        async def limited() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.limit:
                    raise HTTPException(413, f"request body over the limit of {self.limit:,} bytes")
            return message

        return limited
