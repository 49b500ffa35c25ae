"""Cohere's dialect (which Jina's rerank API shares): ``/v1/rerank`` and ``/v2/rerank``."""

from __future__ import annotations

import uuid

from fastapi.responses import JSONResponse, Response

from ..schemas import CohereRerankRequest, CohereRerankResponse
from .core import Routes, rerank_results


def add(routes: Routes) -> None:
    for path, api in (("/v1/rerank", "1"), ("/v2/rerank", "2")):
        add_rerank(routes, path, api)


def add_rerank(routes: Routes, path: str, api: str) -> None:
    """Cohere's rerank of API version ``api`` at ``path``."""

    @routes.model_route(path, "rerank", CohereRerankResponse)
    async def cohere_rerank(request: CohereRerankRequest) -> Response:
        """Cohere's and Jina's rerank: ``documents`` (texts or ``{"text"}``), ``top_n``,
        ``return_documents`` -> ``results[].relevance_score``, most relevant first."""
        documents = [d if isinstance(d, str) else d.text for d in request.documents]
        relevance, tokens = await routes.scores(request.query, documents, "documents", request.truncate)
        return JSONResponse({
            "id": uuid.uuid4().hex, "results": rerank_results(request, documents, relevance),
            "model": request.model or routes.config.model,
            "meta": {"api_version": {"version": api}, "billed_units": {"search_units": 1}},
            "usage": {"total_tokens": tokens},
        })  # fmt: skip
