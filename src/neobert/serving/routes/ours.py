"""Our dialect: ``texts`` in, named fields out (``/embed``'s and ``/rerank``'s own shape, ``/classify``,
``/tokens``, ``/fill-mask``)."""

from __future__ import annotations

from fastapi.responses import JSONResponse, Response

from ..schemas import (
    ClassifyResponse,
    EmbedRequest,
    FillMaskRequest,
    FillMaskResponse,
    RerankRequest,
    TextsRequest,
    TokensResponse,
)
from .core import Routes, rerank_results


async def embed(routes: Routes, request: EmbedRequest) -> Response:
    """``texts`` -> ``{"embeddings"}``, with the model's pooling and normalisation unless the request names
    them."""
    model = routes.service.model
    pooling = request.pooling or model.pooling
    normalize = model.normalize if request.normalize is None else request.normalize
    texts = routes.prompted(request.texts, None)  # the model's default prompt, as SentenceTransformer.encode
    answers = await routes.run(
        "embed", texts, "texts", request.truncate, pooling=pooling, normalize=normalize
    )
    return JSONResponse({"embeddings": [vector.tolist() for vector, _ in answers]})


async def rerank(routes: Routes, request: RerankRequest) -> Response:
    """Cohere's shape: ``documents`` -> ``{"results", "model"}``."""
    relevance, _ = await routes.scores(request.query, request.documents, "documents", request.truncate)
    return JSONResponse(
        {
            "results": rerank_results(request, request.documents, relevance),
            "model": request.model or routes.config.model,
        }
    )


def add(routes: Routes) -> None:
    """Our routes that no other dialect shares a path with."""

    @routes.model_route("/classify", "classify", ClassifyResponse)
    async def classify(request: TextsRequest) -> Response:
        """The top label and every label's probability per text (a regression model: its value)."""
        answers = await routes.run("classify", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [row for row, _ in answers]})

    @routes.model_route("/tokens", "tokens", TokensResponse)
    async def tokens(request: TextsRequest) -> Response:
        """Entities with character offsets (end exclusive) per text."""
        answers = await routes.run("tokens", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [{"entities": row} for row, _ in answers]})

    @routes.model_route("/fill-mask", "fill-mask", FillMaskResponse)
    async def fill_mask(request: FillMaskRequest) -> Response:
        """The top_k tokens for every mask token of every text."""
        answers = await routes.run("fill-mask", request.texts, "texts", request.truncate, top_k=request.top_k)
        rows = [[[{"token": t, "score": p} for t, p, _ in mask] for mask in row] for row, _ in answers]
        return JSONResponse({"results": rows})
