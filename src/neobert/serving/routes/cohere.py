"""Cohere's dialect (which Jina's rerank API shares): ``/v1/rerank``, ``/v2/rerank`` and ``/v2/embed`` (with
``embedding_types``: float, int8, uint8, binary, ubinary, through :func:`neobert.inference.quantization.quantize`)."""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Any

import numpy as np
from fastapi.responses import JSONResponse, Response

from ...inference.quantization import CALIBRATED, calibration_ranges, quantize
from ..errors import ServiceError
from ..schemas import CohereEmbedRequest, CohereEmbedResponse, CohereRerankRequest, CohereRerankResponse
from .core import Routes, rerank_results

PROMPT_OF = MappingProxyType(
    {"search_query": "query", "search_document": "document"}
)  # input_type -> prompt name


def add(routes: Routes) -> None:
    for path, api in (("/v1/rerank", "1"), ("/v2/rerank", "2")):
        add_rerank(routes, path, api)
    add_embed(routes)


def server_ranges(config: Any, dim: int) -> np.ndarray | None:
    """The int8 / uint8 calibration ranges of ``--calibration`` (float embeddings, .npy), or None."""
    if not config.calibration:
        return None
    ranges = calibration_ranges(np.load(config.calibration))
    if ranges.shape[1] != dim:
        raise ValueError(
            f"calibration file {config.calibration} holds {ranges.shape[1]}-dimensional embeddings; "
            f"the model's are {dim}"
        )
    return ranges


def by_type(vectors: np.ndarray, types: list[str], ranges: np.ndarray | None) -> dict[str, Any]:
    """Cohere's ``embeddings`` object: each asked type of ``vectors`` (int8 / uint8 in the server's
    calibration ``ranges``' buckets; binary / ubinary packed 8 dimensions a byte)."""
    if ranges is None and any(t in CALIBRATED for t in types):
        raise ServiceError(
            422,
            "int8 / uint8 embeddings need calibration ranges, and this server has none: start "
            "it with --calibration FILE.npy (float embeddings of sample texts), or ask for "
            "float, binary or ubinary",
            "embedding_types",
        )
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(types):
        out[kind] = vectors.tolist() if kind == "float" else quantize(vectors, kind, ranges).tolist()
    return out


def add_embed(routes: Routes) -> None:
    """Cohere's ``/v2/embed`` (``texts``, ``input_type``, ``embedding_types``, ``truncate``)."""
    ranges = server_ranges(routes.config, routes.service.hidden_size)

    @routes.model_route("/v2/embed", "embed", CohereEmbedResponse)
    async def cohere_embed(request: CohereEmbedRequest) -> Response:
        """Cohere's embed API (v2): the model's vectors by ``embedding_types``, ``embeddings_by_type``."""
        name = PROMPT_OF.get(request.input_type or "")
        texts = routes.prompted(request.texts, name if name in routes.service.model.prompts else None)
        direction = "left" if request.truncate == "START" else "right"
        normalize = bool(routes.service.model.normalize)
        vectors, tokens = await routes.vectors(
            texts, "texts", request.truncate != "NONE", normalize, side=direction
        )
        return JSONResponse(
            {
                "id": uuid.uuid4().hex,
                "embeddings": by_type(vectors, request.embedding_types, ranges),
                "texts": request.texts,
                "response_type": "embeddings_by_type",
                "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
            }
        )


def add_rerank(routes: Routes, path: str, api: str) -> None:
    """Cohere's rerank of API version ``api`` at ``path``."""

    @routes.model_route(path, "rerank", CohereRerankResponse)
    async def cohere_rerank(request: CohereRerankRequest) -> Response:
        """Cohere's and Jina's rerank: ``documents`` (texts or ``{"text"}``), ``top_n``,
        ``return_documents`` -> ``results[].relevance_score``, most relevant first."""
        documents = [d if isinstance(d, str) else d.text for d in request.documents]
        relevance, tokens = await routes.scores(request.query, documents, "documents", request.truncate)
        return JSONResponse(
            {
                "id": uuid.uuid4().hex,
                "results": rerank_results(request, documents, relevance),
                "model": request.model or routes.config.model,
                "meta": {"api_version": {"version": api}, "billed_units": {"search_units": 1}},
                "usage": {"total_tokens": tokens},
            }
        )
