"""Our dialect: ``texts`` in, named fields out (``/embed``'s and ``/rerank``'s own shape, ``/classify``,
``/tokens``, ``/fill-mask``, ``/maxsim``): its request and response shapes, then its routes."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool

from ...model.pooling import POOLING_NAMES
from ..schemas import (
    BYTES_PER_NUMBER,
    TRUNCATE,
    ModelField,
    OneText,
    Positive,
    RerankResult,
    StrictRequest,
    Text,
    TextInput,
    Texts,
    integer,
)
from .core import Routes, rerank_results

# --- requests -------------------------------------------------------------------------------------------

TopK = integer(ge=1, le=100)


class EmbedRequest(StrictRequest):
    texts: Texts
    pooling: Literal[POOLING_NAMES] | None = Field(
        default=None, description="default: the model's; the registry neobert.model.pooling.POOLINGS"
    )
    normalize: StrictBool | None = Field(default=None, description="unit vectors; default: the model's")
    truncate: StrictBool = TRUNCATE
    model: ModelField = None


class TextsRequest(StrictRequest):
    texts: Texts
    truncate: StrictBool = TRUNCATE
    model: ModelField = None


MASKED = "every text holds the model's mask token (/info's mask_token)"


class FillMaskRequest(StrictRequest):
    texts: Annotated[list[Annotated[Text, Field(description=MASKED)]], TextInput(masked=True)] = Field(
        min_length=1
    )
    top_k: TopK = 5
    truncate: StrictBool = TRUNCATE
    model: ModelField = None


class RerankRequest(StrictRequest):
    query: OneText
    documents: Texts
    top_n: Positive | None = Field(default=None, description="default: every document")
    return_documents: StrictBool = False
    model: ModelField = None
    truncate: StrictBool = TRUNCATE


class MaxSimRequest(StrictRequest):
    query: OneText
    documents: Texts
    truncate: StrictBool = TRUNCATE
    model: ModelField = None


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]


class ClassifierRow(BaseModel):  # neobert.inference.run.classifier_rows
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


class RerankResponse(BaseModel):
    results: list[RerankResult]
    model: str


class Alignment(BaseModel):
    index: int = Field(description="the document's place in `documents`")
    score: float = Field(description="MaxSim: the sum over query tokens of their matched similarity")
    query_tokens: list[str] = Field(
        description="the query's tokens, one per vector: marker and expansion (mask) tokens included"
    )
    document_tokens: list[str] = Field(
        description="the document's tokens, one per vector: marker included, skiplist (punctuation) dropped"
    )
    matched: list[int] = Field(description="per query token, the index of the document token it matched")
    similarities: list[list[float]] = Field(
        description="query tokens x document tokens: the dot product of their unit vectors"
    )


class MaxSimResponse(BaseModel):
    results: list[Alignment] = Field(description="one per document, most relevant first")


# --- routes ---------------------------------------------------------------------------------------------


async def embed(routes: Routes, request: EmbedRequest) -> Response:
    """``texts`` -> ``{"embeddings"}``, with the model's pooling and normalisation unless the request names
    them."""
    model = routes.model
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
            "model": routes.echoed(request.model),
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

    @routes.model_route("/maxsim", "maxsim_alignment", MaxSimResponse)
    async def maxsim(request: MaxSimRequest) -> Response:
        """A late-interaction (ColBERT) model's MaxSim of each document, shown token by token: the query's
        and the document's tokens, their similarities, the document token each query token matched (its
        index) and the score (what ``/rerank`` answers), most relevant first. The answer grows with query
        tokens x document tokens and must fit max_answer_bytes (413 before the model runs)."""
        routes.require("maxsim_alignment")
        routes.check_text(request.query, "query", "the query")
        settings = routes.model.token_vectors
        per_token = settings["query_length"] * BYTES_PER_NUMBER["float"]
        what = f"{settings['query_length']} query tokens' similarities as JSON numbers"
        await routes.check_answer("maxsim_alignment", request.documents, "documents", per_token, what)
        pairs = [(request.query, d) for d in request.documents]
        answers = await routes.run(
            "maxsim_alignment", pairs, "documents", request.truncate, noun="query + document"
        )
        rows = [{"index": i, **value} for i, (value, _) in enumerate(answers)]
        return JSONResponse({"results": sorted(rows, key=lambda row: -row["score"])})

    @routes.model_route("/fill-mask", "fill-mask", FillMaskResponse)
    async def fill_mask(request: FillMaskRequest) -> Response:
        """The top_k tokens for every mask token of every text."""
        answers = await routes.run("fill-mask", request.texts, "texts", request.truncate, top_k=request.top_k)
        rows = [[[{"token": t, "score": p} for t, p, _ in mask] for mask in row] for row, _ in answers]
        return JSONResponse({"results": rows})
