"""The HTTP layer of ``neobert serve``: FastAPI endpoints over a :class:`~neobert.serving.service.Service`.

Errors answer ``{"error": {"message", "type", "param"}}`` (OpenAI's shape): 401 without the API key, 413
for requests over the limits, 422 for malformed JSON or wrong types (``param`` names the field), 503 +
``Retry-After`` when the queue is full or the server is shutting down, 500 without internals for anything
unexpected (the traceback goes to the server log only). Every response is declared in the OpenAPI schema
(``/openapi.json``), which a property-based tester checks against the running server.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Literal

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.exceptions import HTTPException

from .batcher import QueueFull, ShuttingDown
from .service import Service
from .worker import ModelProcessGone

log = logging.getLogger(__name__)

# endpoint -> the task it needs from the model
MODEL_ENDPOINTS = {
    "/embed": "embed",
    "/v1/embeddings": "embed",
    "/classify": "classify",
    "/tokens": "tokens",
    "/fill-mask": "fill-mask",
    "/rerank": "rerank",
}
INFO_FIELDS = ("backend", "precision", "model_type", "head", "serves", "dimensions", "max_input_tokens", "pooling", "normalize",
               "embedding_settings_from", "labels")  # fmt: skip
OPEN_PATHS = ("/health", "/openapi.json", "/docs", "/docs/oauth2-redirect")  # no API key needed
ENDPOINTS = (*MODEL_ENDPOINTS, "/info", "/health", "/metrics")


# --- requests -------------------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


TRUNCATE = Field(
    default=True,
    description="true: a text longer than the model window follows the server's long-document policy "
    "(truncate by default); false: such a text is refused with 413 naming it and its token count",
)


class EmbedRequest(_Request):
    texts: list[StrictStr] = Field(min_length=1)
    pooling: Literal["mean", "cls", "last"] | None = Field(default=None, description="default: the model's")
    normalize: StrictBool | None = Field(default=None, description="unit vectors; default: the model's")
    truncate: StrictBool = TRUNCATE


class OpenAIEmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients may send fields we do not use (user, ...)
    input: StrictStr | list[StrictStr] = Field(min_length=1)
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(
        default=None, ge=1, strict=True, description="keep the first N components, then renormalise"
    )
    truncate: StrictBool = TRUNCATE


class TextsRequest(_Request):
    texts: list[StrictStr] = Field(min_length=1)
    truncate: StrictBool = TRUNCATE


class FillMaskRequest(TextsRequest):
    top_k: int = Field(default=5, ge=1, le=100, strict=True)


class RerankRequest(_Request):
    query: StrictStr
    documents: list[StrictStr] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1, strict=True, description="default: every document")
    return_documents: StrictBool = False
    model: StrictStr | None = None
    truncate: StrictBool = TRUNCATE


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) ---------------------------


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: Usage


class ClassifierRow(BaseModel):  # neobert.inference.classifier_rows
    label: str | None = None
    score: float | None = None
    probabilities: dict[str, float] | None = None
    value: float | list[float] | None = Field(
        default=None, description="regression models: the value (a list for several outputs), alone"
    )


class ClassifyResponse(BaseModel):
    results: list[ClassifierRow]


class Entity(BaseModel):
    label: str
    start: int
    end: int
    text: str
    score: float


class TokensResult(BaseModel):
    entities: list[Entity]


class TokensResponse(BaseModel):
    results: list[TokensResult]


class Candidate(BaseModel):
    token: str
    score: float


class FillMaskResponse(BaseModel):
    results: list[list[list[Candidate]]] = Field(description="per text, per [MASK], the top_k candidates")


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankResponse(BaseModel):
    results: list[RerankResult]
    model: str


class HealthResponse(BaseModel):
    status: str
    model: str
    head: str
    serves: list[str]
    queue_depth: int
    max_queue: int


class InfoResponse(BaseModel):
    model: str
    backend: Literal["torch", "onnx"]
    precision: str = Field(
        description="torch: bf16 or fp32 as chosen at start; onnx: the graph, fp32 or int8"
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
    long_documents: str
    limits: dict[str, int | float]
    auth: bool


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        401: "no or wrong API key (Authorization: Bearer KEY)",
        404: "the model does not serve this endpoint",
        413: "too many texts, a text too long (characters, or tokens with truncate: false), body too large",
        422: "malformed JSON, wrong types, missing or unknown fields, bad option values",
        500: "unexpected error (details in the server log only)",
        503: "the queue is full (Retry-After) or the server is shutting down",
    }
    return {code: {"model": ErrorResponse, "description": what[code]} for code in codes}


MODEL_ERRORS = _errors(401, 404, 413, 422, 500, 503)


# --- helpers --------------------------------------------------------------------------------------------


class ServiceError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


ERROR_TYPES = {401: "unauthorized", 404: "not_found", 413: "request_too_large", 422: "invalid_request",
               503: "overloaded"}  # fmt: skip


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request")
    return {"error": {"message": message, "type": kind, "param": param}}


def error_response(status: int, message: str, param: str | None = None, headers=None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


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

    app = FastAPI(
        title="neobert",
        summary="Embeddings (also OpenAI's shape), classification, reranking, token tagging, fill-mask",
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.add_middleware(Guard, service=service)
    _add_error_handlers(app, service)
    config = service.config
    bearer = [Depends(HTTPBearer(auto_error=False))]  # documents the scheme; Guard checks the key

    def check_texts(texts: list[str], field: str, truncate: bool = True) -> None:
        if len(texts) > config.max_texts:
            raise ServiceError(
                413, f"{len(texts)} texts in one request; the limit is {config.max_texts}", field
            )
        for i, text in enumerate(texts):
            check_text(text, f"{field}[{i}]", f"text {i}")
        if not truncate:
            lengths = [len(ids) for ids in service.tokenizer(texts, verbose=False)["input_ids"]]
            check_tokens(lengths, field, "text")

    def check_text(text: str, param: str, name: str) -> None:
        if len(text) > config.max_chars:
            raise ServiceError(
                413, f"{name} has {len(text):,} characters; the limit is {config.max_chars:,}", param
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ServiceError(
                422, f"{name} is not valid Unicode ({err.reason} at character {err.start})", param
            ) from None

    def check_tokens(lengths: list[int], field: str, name: str) -> None:
        limit = service.max_input_tokens
        for i, length in enumerate(lengths):
            if length > limit:
                raise ServiceError(
                    413,
                    f"{name} {i} has {length:,} tokens; the model takes at most {limit:,} (truncate: false; "
                    f"with truncate: true the server's {config.long_documents} policy applies)",
                    f"{field}[{i}]",
                )

    def require(task: str) -> None:
        if task not in service.tasks:
            raise ServiceError(
                404,
                f"this server's model ({service.task} head) does not serve {task}; it serves "
                f"{', '.join(service.tasks)}",
            )

    async def run(key: tuple, texts: list[Any]) -> list[Any]:
        return await asyncio.wrap_future(service.submit(key, texts))

    model_route = {"responses": MODEL_ERRORS, "dependencies": bearer}

    @app.post("/embed", response_model=EmbedResponse, **model_route)
    async def embed(request: EmbedRequest) -> Response:
        """Vectors of the texts, with the model's pooling and normalisation unless the request names them."""
        require("embed")
        check_texts(request.texts, "texts", request.truncate)
        pooling = request.pooling or service.info["pooling"]
        normalize = service.info["normalize"] if request.normalize is None else request.normalize
        vectors = await run(("embed", pooling, normalize), request.texts)
        return JSONResponse({"embeddings": [v.tolist() for v in vectors]})

    @app.post("/v1/embeddings", response_model=OpenAIEmbeddingResponse, **model_route)
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> Response:
        """OpenAI's embeddings API: the model's pooling, unit vectors; ``dimensions`` keeps the first N
        components and renormalises (sound only for models trained for it, e.g. Matryoshka)."""
        require("embed")
        texts = [request.input] if isinstance(request.input, str) else request.input
        check_texts(texts, "input", request.truncate)
        if request.dimensions is not None and request.dimensions > service.hidden_size:
            raise ServiceError(
                422,
                f"dimensions must be at most the model's {service.hidden_size}, got {request.dimensions}",
                "dimensions",
            )
        vectors = np.stack(await run(("embed", service.info["pooling"], True), texts))
        if request.dimensions is not None and request.dimensions < service.hidden_size:
            vectors = vectors[:, : request.dimensions]
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, request.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(ids) for ids in service.tokenizer(texts, verbose=False)["input_ids"])
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": request.model or config.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.post("/classify", response_model=ClassifyResponse, **model_route)
    async def classify(request: TextsRequest) -> Response:
        """The top label and every label's probability per text (a regression model: its value)."""
        require("classify")
        check_texts(request.texts, "texts", request.truncate)
        return JSONResponse({"results": await run(("classify",), request.texts)})

    @app.post("/rerank", response_model=RerankResponse, **model_route)
    async def rerank(request: RerankRequest) -> Response:
        """A cross-encoder's relevance of each document to the query, most relevant first (Cohere's
        shape): the sigmoid of a one-logit model, the second label's probability of a two-label one."""
        require("rerank")
        check_text(request.query, "query", "the query")
        check_texts(request.documents, "documents")
        if not request.truncate:
            encoded = service.tokenizer(
                [request.query] * len(request.documents), request.documents, verbose=False
            )
            check_tokens([len(ids) for ids in encoded["input_ids"]], "documents", "query + document")
        scores = await run(("rerank",), [(request.query, d) for d in request.documents])
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[: request.top_n]
        results = []
        for i in order:
            result: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            if request.return_documents:
                result["document"] = {"text": request.documents[i]}
            results.append(result)
        return JSONResponse({"results": results, "model": request.model or config.model})

    @app.post("/tokens", response_model=TokensResponse, **model_route)
    async def tokens(request: TextsRequest) -> Response:
        """Entities with character offsets (end exclusive) per text."""
        require("tokens")
        check_texts(request.texts, "texts", request.truncate)
        rows = await run(("tokens",), request.texts)
        return JSONResponse({"results": [{"entities": row} for row in rows]})

    @app.post("/fill-mask", response_model=FillMaskResponse, **model_route)
    async def fill_mask(request: FillMaskRequest) -> Response:
        """The top_k tokens for every mask token of every text."""
        require("fill-mask")
        check_texts(request.texts, "texts", request.truncate)
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

    @app.get("/info", response_model=InfoResponse, responses=_errors(401), dependencies=bearer)
    async def info() -> Response:
        """The model, what it serves, its dimensions and input limit, pooling, and the request limits."""
        info = service.info
        limits = {name: getattr(config, name) for name in
                  ("max_texts", "max_chars", "max_queue", "max_batch_texts", "max_batch_tokens")}  # fmt: skip
        return JSONResponse(
            {
                "model": config.model,
                **{k: info[k] for k in INFO_FIELDS},
                "long_documents": config.long_documents,
                "limits": {**limits, "max_body_bytes": config.max_body_bytes},
                "auth": service.api_key is not None,
            }
        )

    @app.get("/health", response_model=HealthResponse, responses={503: {"model": HealthResponse}})
    async def health() -> Response:
        """Open without the API key: 200 while serving, 503 while shutting down or without a model."""
        closing, alive = service.batcher.closed, service.alive()
        body = {
            "status": "shutting down" if closing else ("ok" if alive else "the model process exited"),
            "model": config.model,
            "head": service.task,
            "serves": list(service.tasks),
            "queue_depth": service.batcher.depth(),
            "max_queue": config.max_queue,
        }
        return JSONResponse(body, status_code=200 if alive and not closing else 503)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **_errors(401)},
        dependencies=bearer,
    )
    async def metrics() -> Response:
        """Prometheus metrics (text format)."""
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
        await asyncio.sleep(service.config.refusal_delay)  # see Guard: a refusal costs no CPU while it waits
        return error_response(
            503, f"server busy: {err}; retry after {service.config.retry_after} s", headers=retry
        )

    @app.exception_handler(ShuttingDown)
    async def closing(request: Request, err: ShuttingDown) -> Response:
        return error_response(503, str(err), headers=retry)

    @app.exception_handler(ModelProcessGone)
    async def model_gone(request: Request, err: ModelProcessGone) -> Response:
        log.error("%s on %s", err, request.url.path)
        return error_response(503, f"{err}; a new one is starting: retry", headers=retry)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        if (
            err.status_code == 400
        ):  # FastAPI's answer to a body it cannot decode (not UTF-8): a 422 like the rest
            return error_response(422, f"body: the body is not valid JSON ({err.detail})", "body")
        return error_response(err.status_code, str(err.detail), headers=err.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal error; the server log has the details")


class Guard:
    """ASGI middleware, before any routing or parsing: checks the API key (401), refuses a model request
    while the queue is full (503 after ``refusal_delay`` seconds of asynchronous waiting, so the refusal
    costs almost no CPU and a client that retries at once is slowed down), refuses bodies over the size
    limit (413, before reading them when the length is declared), and records every request's status and
    latency in the metrics."""

    def __init__(self, app: Any, service: Service):
        self.app, self.service = app, service
        config = service.config
        self.limit = config.max_body_bytes
        key = service.api_key
        self.expected = f"Bearer {key}".encode() if key else None
        self.model_paths = {path for path, task in MODEL_ENDPOINTS.items() if task in service.tasks}
        busy = error_body(
            503,
            f"server busy: {config.max_queue} requests are already waiting; retry after {config.retry_after} s",
        )
        self.busy = _raw_json(503, busy, [(b"retry-after", str(config.retry_after).encode())])
        self.unauthorized = _raw_json(
            401,
            error_body(401, "missing or wrong API key: send the header Authorization: Bearer KEY"),
            [(b"www-authenticate", b"Bearer")],
        )

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        endpoint = path if path in ENDPOINTS else "other"
        status = [500]

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.expected is not None and path not in OPEN_PATHS and not self._authorized(scope):
                await _send_raw(send_status, self.unauthorized)
                return
            if path in self.model_paths and self.service.batcher.full():
                await asyncio.sleep(self.service.config.refusal_delay)
                await _send_raw(send_status, self.busy)
                return
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

    def _authorized(self, scope: dict) -> bool:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)  # constant time
        return False

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


def _raw_json(status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> tuple[dict, dict]:
    """A response built once (the ASGI start and body messages), for the answers sent most often."""
    content = JSONResponse(body).body
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
                    *headers],
    }  # fmt: skip
    return start, {"type": "http.response.body", "body": content}


async def _send_raw(send: Any, response: tuple[dict, dict]) -> None:
    await send(response[0])
    await send(response[1])
