"""The service's request and response schemas (pydantic): they validate requests (the field-naming 422
answers) and document every answer in the OpenAPI schema (``/openapi.json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..model.pooling import POOLING_NAMES

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
    pooling: Literal[POOLING_NAMES] | None = Field(  # type: ignore[valid-type]
        default=None, description="default: the model's; the registry neobert.model.pooling.POOLINGS"
    )
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


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


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
    threads: int | None = Field(description="the model's threads per model process, chosen at start")
    threads_reason: str | None = Field(description="why: pinned (--threads, the environment) or measured")
    threads_under_load: int | None = Field(
        default=None,
        description="the model's threads for a call taken while other requests wait: measured defaults pick "
        "per call from the start-up probe and http_ms_per_text; pinned counts, several model processes and "
        "ONNX keep threads",
    )
    http_ms_per_text: float | None = Field(
        default=None,
        description="the HTTP process's CPU milliseconds per text answered, measured while serving (model in "
        "its own process; null before the first calls)",
    )
    long_documents: str
    limits: dict[str, int | float]
    auth: bool
