"""The service's routes: each a small async function that validates what the HTTP side can see (counts,
characters), sends its texts through the queue to the model process (:mod:`.tasks`) and shapes the answer.

Nothing here tokenizes or touches the model: token counts, ``truncate: false`` refusals and results come
back from the model process. A model route is declared with :meth:`Routes.model_route`, which records the
task it needs (``MODEL_ROUTES``: the middleware refuses a full queue only for those, and a model that does
not offer the task answers 404). Adding an endpoint: one route here, one task in :mod:`.tasks`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer

from .errors import MODEL_ERRORS, ServiceError, documented
from .schemas import (
    ClassifyResponse,
    EmbedRequest,
    EmbedResponse,
    FillMaskRequest,
    FillMaskResponse,
    HealthResponse,
    InfoResponse,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    RerankRequest,
    RerankResponse,
    TextsRequest,
    TokensResponse,
)
from .tasks import Refusal

MODEL_ROUTES: dict[str, str] = {}  # path -> the model task it needs (filled by Routes.model_route)
SERVICE_ROUTES = ("/info", "/health", "/metrics")
LIMITS = ("max_texts", "max_chars", "max_queue", "max_batch_texts", "max_batch_tokens", "max_body_bytes")


class Routes:
    """The routes of one app over one service, and what they share: the limits and the model call."""

    def __init__(self, app: FastAPI, service: Any):
        self.app, self.service, self.config = app, service, service.config
        self.bearer = [Depends(HTTPBearer(auto_error=False))]  # documents the scheme; the Guard checks it

    def model_route(self, path: str, task: str, response_model: type) -> Callable:
        """``@model_route(path, task, Response)``: a POST route that needs the model's ``task``."""
        MODEL_ROUTES[path] = task
        return self.app.post(path, response_model=response_model, responses=MODEL_ERRORS,
                             dependencies=self.bearer)  # fmt: skip

    async def run(self, task: str, texts: list[Any], field: str, truncate: bool, *options: Any,
                  noun: str = "text") -> list[tuple[Any, int]]:  # fmt: skip
        """``texts`` through the queue to the model's ``task``: (value, tokens) per text; a text the model
        refused (too long with ``truncate: false``, no mask to fill) is answered with its status."""
        self.require(task)
        self.check_texts(texts, field)
        future = self.service.submit((task, truncate, *options), texts)
        answers = await asyncio.wrap_future(future)
        for i, (value, _) in enumerate(answers):
            if isinstance(value, Refusal):
                raise ServiceError(value.status, value.describe(noun, i), f"{field}[{i}]")
        return answers

    def require(self, task: str) -> None:
        if task not in self.service.tasks:
            raise ServiceError(404, f"this server's model ({self.service.head} head) does not serve {task}; "
                                    f"it serves {', '.join(self.service.tasks)}")  # fmt: skip

    def check_texts(self, texts: list[Any], field: str) -> None:
        if len(texts) > self.config.max_texts:
            raise ServiceError(
                413, f"{len(texts)} texts in one request; the limit is {self.config.max_texts}", field
            )
        for i, text in enumerate(texts):
            if isinstance(text, str):
                self.check_text(text, f"{field}[{i}]", f"text {i}")

    def check_text(self, text: str, param: str, name: str) -> None:
        if len(text) > self.config.max_chars:
            raise ServiceError(
                413, f"{name} has {len(text):,} characters; the limit is {self.config.max_chars:,}", param
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ServiceError(
                422, f"{name} is not valid Unicode ({err.reason} at character {err.start})", param
            ) from None

    def info(self) -> dict[str, Any]:
        """The one ``/info`` description: the model's (from the model process) and the service's."""
        config = self.config
        body = {**self.service.info, "model": config.model, "long_documents": config.long_documents,
                "limits": {name: getattr(config, name) for name in LIMITS},
                "auth": self.service.api_key is not None, **self.service.thread_state()}  # fmt: skip
        return {name: body.get(name) for name in InfoResponse.model_fields}


def add_routes(app: FastAPI, service: Any) -> None:
    """Every route of the service on ``app``."""
    routes = Routes(app, service)
    add_embedding_routes(routes)
    add_model_routes(routes)
    add_service_routes(routes)


def add_embedding_routes(routes: Routes) -> None:
    service = routes.service

    @routes.model_route("/embed", "embed", EmbedResponse)
    async def embed(request: EmbedRequest) -> Response:
        """Vectors of the texts, with the model's pooling and normalisation unless the request names them."""
        pooling = request.pooling or service.info["pooling"]
        normalize = service.info["normalize"] if request.normalize is None else request.normalize
        answers = await routes.run("embed", request.texts, "texts", request.truncate, pooling, normalize)
        return JSONResponse({"embeddings": [vector.tolist() for vector, _ in answers]})

    @routes.model_route("/v1/embeddings", "embed", OpenAIEmbeddingResponse)
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> Response:
        """OpenAI's embeddings API: the model's pooling, unit vectors; ``dimensions`` keeps the first N
        components and renormalises (sound only for models trained for it, e.g. Matryoshka)."""
        texts = [request.input] if isinstance(request.input, str) else request.input
        routes.require("embed")
        routes.check_texts(texts, "input")
        hidden = service.hidden_size
        if request.dimensions is not None and request.dimensions > hidden:
            message = f"dimensions must be at most the model's {hidden}, got {request.dimensions}"
            raise ServiceError(422, message, "dimensions")
        answers = await routes.run("embed", texts, "input", request.truncate, service.info["pooling"], True)
        vectors = np.stack([vector for vector, _ in answers])
        if request.dimensions is not None and request.dimensions < hidden:
            vectors = vectors[:, : request.dimensions]
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        data = [{"object": "embedding", "index": i, "embedding": encode_vector(v, request.encoding_format)}
                for i, v in enumerate(vectors)]  # fmt: skip
        tokens = sum(length for _, length in answers)
        return JSONResponse({"object": "list", "data": data, "model": request.model or routes.config.model,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip


def add_model_routes(routes: Routes) -> None:
    @routes.model_route("/classify", "classify", ClassifyResponse)
    async def classify(request: TextsRequest) -> Response:
        """The top label and every label's probability per text (a regression model: its value)."""
        answers = await routes.run("classify", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [row for row, _ in answers]})

    @routes.model_route("/rerank", "rerank", RerankResponse)
    async def rerank(request: RerankRequest) -> Response:
        """A cross-encoder's relevance of each document to the query, most relevant first (Cohere's
        shape): the sigmoid of a one-logit model, the second label's probability of a two-label one."""
        routes.require("rerank")
        routes.check_text(request.query, "query", "the query")
        pairs = [(request.query, d) for d in request.documents]
        routes.check_texts(request.documents, "documents")
        answers = await routes.run("rerank", pairs, "documents", request.truncate, noun="query + document")
        scores = [score for score, _ in answers]
        results = []
        for i in sorted(range(len(scores)), key=lambda i: -scores[i])[: request.top_n]:
            result: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            if request.return_documents:
                result["document"] = {"text": request.documents[i]}
            results.append(result)
        return JSONResponse({"results": results, "model": request.model or routes.config.model})

    @routes.model_route("/tokens", "tokens", TokensResponse)
    async def tokens(request: TextsRequest) -> Response:
        """Entities with character offsets (end exclusive) per text."""
        answers = await routes.run("tokens", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [{"entities": row} for row, _ in answers]})

    @routes.model_route("/fill-mask", "fill-mask", FillMaskResponse)
    async def fill_mask(request: FillMaskRequest) -> Response:
        """The top_k tokens for every mask token of every text."""
        answers = await routes.run("fill-mask", request.texts, "texts", request.truncate, request.top_k)
        rows = [[[{"token": t, "score": p} for t, p in mask] for mask in row] for row, _ in answers]
        return JSONResponse({"results": rows})


def add_service_routes(routes: Routes) -> None:
    app, service = routes.app, routes.service

    @app.get("/info", response_model=InfoResponse, responses=documented(401), dependencies=routes.bearer)
    async def info() -> Response:
        """The model, what it serves, its dimensions and input limit, pooling, threads, and the limits."""
        return JSONResponse(routes.info())

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


def encode_vector(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # what the OpenAI client asks for by default: little-endian float32 bytes
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()
