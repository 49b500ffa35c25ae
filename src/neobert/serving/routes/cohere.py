"""Cohere's dialect (which Jina's rerank API shares): ``/v1/rerank``, ``/v2/rerank`` and ``/v2/embed`` (with
``embedding_types``: float, int8, uint8, binary, ubinary, through :func:`neobert.inference.quantization.quantize`):
its request and response shapes, then its routes."""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Annotated, Any, Literal

import numpy as np
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool, StrictStr

from ...inference.quantization import CALIBRATED, calibration_ranges, quantize
from ..errors import ServiceError
from ..schemas import (
    TRUNCATE,
    Calibrated,
    LenientRequest,
    ModelField,
    OneText,
    Positive,
    RerankResult,
    TextInput,
    Texts,
)
from .core import Routes, rerank_results

# --- requests -------------------------------------------------------------------------------------------

# Cohere's words for refusing an over-long text and for cutting it (its ``truncate``)
COHERE_TRUNCATE = ('truncate: "NONE"', 'truncate: "END" (or "START")')


class RerankDocumentIn(LenientRequest):
    text: Annotated[StrictStr, TextInput(many=False)]


class CohereRerankRequest(LenientRequest):
    query: OneText
    documents: Annotated[list[StrictStr | RerankDocumentIn], Field(min_length=1), TextInput()]
    model: ModelField = None
    top_n: Positive | None = None
    return_documents: StrictBool = False
    truncate: StrictBool = TRUNCATE


EMBEDDING_TYPES = (
    "float",
    "int8",
    "uint8",
    "binary",
    "ubinary",
)  # Cohere's names (neobert.inference.quantization's)
COHERE_INPUT_TYPES = ("search_query", "search_document", "classification", "clustering")


class CohereEmbedRequest(LenientRequest):
    texts: Texts
    model: ModelField = None
    input_type: Literal[COHERE_INPUT_TYPES] | None = Field(
        default=None,
        description=(
            "search_query / search_document put the model's `query` / `document` prompt before the text where it "
            "has one; otherwise (and for classification, clustering) the model's default prompt"
        ),
    )
    embedding_types: Annotated[list[Literal[EMBEDDING_TYPES]], Field(min_length=1), Calibrated()] = Field(
        default=["float"],
        description=(
            "float: the model's vectors; int8 / uint8: each dimension in 256 buckets between the minimum and "
            "maximum of the server's --calibration embeddings (offered only where the server has them); binary / "
            "ubinary: signs, 8 dimensions per byte (dim / 8 numbers), minus 128 for binary"
        ),
    )
    truncate: Literal["NONE", "START", "END"] = Field(
        default="END", description=("END cuts a long text's end, START its start; NONE refuses it with 413")
    )


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


class CohereEmbeddings(BaseModel):
    float_: list[list[float]] | None = Field(default=None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None


class CohereEmbedResponse(BaseModel):
    id: str
    embeddings: CohereEmbeddings
    texts: list[str]
    meta: dict[str, Any]
    response_type: Literal["embeddings_by_type"]


class CohereRerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    model: str
    meta: dict[str, Any]
    usage: dict[str, int]


# --- routes ---------------------------------------------------------------------------------------------

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


def fitting(ranges: np.ndarray | None, vectors: np.ndarray) -> np.ndarray | None:
    """The calibration ranges where they are for vectors of this width (else none)."""
    return ranges if ranges is not None and ranges.shape[1] == vectors.shape[1] else None


def add_embed(routes: Routes) -> None:
    """Cohere's ``/v2/embed`` (``texts``, ``input_type``, ``embedding_types``, ``truncate``); the calibration
    ranges are for the default model's width (models of another width are offered no int8 / uint8)."""
    ranges = server_ranges(routes.config, routes.service.hidden_size)

    @routes.model_route("/v2/embed", "embed", CohereEmbedResponse)
    async def cohere_embed(request: CohereEmbedRequest) -> Response:
        """Cohere's embed API (v2): the model's vectors by ``embedding_types``, ``embeddings_by_type``."""
        name = PROMPT_OF.get(request.input_type or "")
        texts = routes.prompted(request.texts, name if name in routes.model.prompts else None)
        direction = "left" if request.truncate == "START" else "right"
        normalize = bool(routes.model.normalize)
        vectors, tokens = await routes.vectors(
            texts, "texts", request.truncate != "NONE", normalize, side=direction, words=COHERE_TRUNCATE
        )
        return JSONResponse(
            {
                "id": uuid.uuid4().hex,
                "embeddings": by_type(vectors, request.embedding_types, fitting(ranges, vectors)),
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
                "model": routes.echoed(request.model),
                "meta": {"api_version": {"version": api}, "billed_units": {"search_units": 1}},
                "usage": {"total_tokens": tokens},
            }
        )
