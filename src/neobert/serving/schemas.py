"""The service's request and response schemas (pydantic): they validate requests (the field-naming 422
answers) and document every answer in the OpenAPI schema (``/openapi.json``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, StrictBool, StrictStr, Tag

from ..model.pooling import POOLING_NAMES

# --- requests -------------------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Lenient(BaseModel):  # the dialects of other servers: clients send fields we do not use (user, ...)
    model_config = ConfigDict(extra="ignore")


def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` admits 3.0: so do we (strings and booleans stay refused)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral), Field(strict=True)]
Text = Annotated[StrictStr, Field(min_length=1)]  # an empty text has nothing to embed, classify or rank
Texts = Annotated[list[StrictStr], Field(min_length=1)]
TokenId = Annotated[int, BeforeValidator(_integral), Field(strict=True, ge=0)]
Ids = Annotated[list[TokenId], Field(min_length=1)]
# a text, or a text as token ids (the model's tokenizer's, special tokens included: what /tokenize gives)
Inputs = Text | Annotated[list[Text], Field(min_length=1)] | Ids | Annotated[list[Ids], Field(min_length=1)]
Direction = Literal["Right", "Left", "right", "left"]


TRUNCATE = Field(
    default=True,
    description="true: a text longer than the model window follows the server's long-document policy "
    "(truncate by default); false: such a text is refused with 413 naming it and its token count",
)


class EmbedRequest(_Request):
    texts: Texts
    pooling: Literal[POOLING_NAMES] | None = Field(  # type: ignore[valid-type]
        default=None, description="default: the model's; the registry neobert.model.pooling.POOLINGS"
    )
    normalize: StrictBool | None = Field(default=None, description="unit vectors; default: the model's")
    truncate: StrictBool = TRUNCATE


DIMENSIONS = Field(default=None, ge=1, description="keep the first N components, then renormalise (sound "
                   "for the widths a Matryoshka model was trained for: /info's matryoshka_dims)")  # fmt: skip


class OpenAIEmbeddingRequest(_Lenient):
    input: Inputs = Field(description="a text, texts, or token ids of our tokenizer (special tokens included)")
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Integer | None = DIMENSIONS
    truncate: StrictBool = TRUNCATE


class TextsRequest(_Request):
    texts: Texts
    truncate: StrictBool = TRUNCATE


MASKED = "every text holds the model's mask token (/info's mask_token)"


class FillMaskRequest(_Request):
    texts: list[Annotated[StrictStr, Field(description=MASKED)]] = Field(min_length=1)
    top_k: Integer = Field(default=5, ge=1, le=100)
    truncate: StrictBool = TRUNCATE


class RerankRequest(_Request):
    query: StrictStr
    documents: Texts
    top_n: Integer | None = Field(default=None, ge=1, description="default: every document")
    return_documents: StrictBool = False
    model: StrictStr | None = None
    truncate: StrictBool = TRUNCATE


# --- text-embeddings-inference's dialect (TEI's routes and shapes) -----------------------------------------

TEI_TRUNCATE = Field(default=True, description="as our truncate (TEI's server-side auto-truncate is on here)")
DIRECTION = Field(default="Right", description="which end a truncated text keeps: Right cuts the end")


class TEIEmbedRequest(_Lenient):
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = Field(default=None, description="one of /info's prompts")
    dimensions: Integer | None = DIMENSIONS


class TEIEmbedAllRequest(_Lenient):
    inputs: Inputs
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = None


def _shape(field: str) -> Any:
    """A route that speaks two dialects tells them apart by one field: ``field`` present -> TEI's shape."""

    def tag(body: Any) -> str:
        return "tei" if (field in body if isinstance(body, dict) else hasattr(body, field)) else "ours"

    return Discriminator(tag)


EmbedBody = Annotated[
    Annotated[EmbedRequest, Tag("ours")] | Annotated[TEIEmbedRequest, Tag("tei")], _shape("inputs")
]

Sequence = Text | Annotated[list[Text], Field(min_length=1, max_length=2)]  # a text or a pair


class PredictRequest(_Lenient):
    inputs: Text | Annotated[list[Sequence], Field(min_length=1)] = Field(
        description="a text; a pair [text, text]; or a batch of texts and pairs [[text] | [text, text], ...]"
    )
    raw_scores: StrictBool = Field(default=False, description="logits instead of probabilities")
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


class TEIRerankRequest(_Lenient):
    query: Text
    texts: Texts
    raw_scores: StrictBool = False
    return_text: StrictBool = False
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


RerankBody = Annotated[
    Annotated[RerankRequest, Tag("ours")] | Annotated[TEIRerankRequest, Tag("tei")], _shape("texts")
]


class TokenizeRequest(_Lenient):
    inputs: StrictStr | Annotated[list[StrictStr], Field(min_length=1)]
    add_special_tokens: StrictBool = True
    prompt_name: StrictStr | None = None


class DecodeRequest(_Lenient):
    ids: list[TokenId] | Annotated[list[list[TokenId]], Field(min_length=1)]
    skip_special_tokens: StrictBool = True


class Parameters(_Lenient):
    top_k: Integer | None = Field(default=None, ge=1)
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = None


class RootRequest(_Lenient):
    """``POST /``: by the model's head, in the Inference API's shape (what huggingface_hub sends)."""

    inputs: Inputs | Annotated[list[Sequence], Field(min_length=1)]
    parameters: Parameters | None = None
    normalize: StrictBool = True
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = None
    dimensions: Integer | None = DIMENSIONS


# --- Cohere's and Jina's rerank (/v1/rerank, /v2/rerank) ---------------------------------------------------


class RerankDocumentIn(_Lenient):
    text: StrictStr


class CohereRerankRequest(_Lenient):
    query: Text
    documents: Annotated[list[StrictStr | RerankDocumentIn], Field(min_length=1)]
    model: StrictStr | None = None
    top_n: Integer | None = Field(default=None, ge=1)
    return_documents: StrictBool = False
    truncate: StrictBool = TRUNCATE


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None = Field(description="OpenAI's: e.g. model_not_found, invalid_api_key")


class ErrorResponse(BaseModel):
    error: ErrorBody


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]


Vectors = list[list[float]]  # TEI's /embed answer: a bare list of vectors


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


class TEIRerankItem(BaseModel):
    index: int
    score: float
    text: str | None = None


class TEIPrediction(BaseModel):
    label: str
    score: float


class TEIToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class FillMaskItem(BaseModel):  # the Inference API's fill-mask element (huggingface_hub's FillMaskOutputElement)
    sequence: str
    score: float
    token: int
    token_str: str


class CohereRerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    model: str
    meta: dict[str, Any]
    usage: dict[str, int]


class ModelCard(BaseModel):  # OpenAI's model object
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


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
    mask_token: str | None = Field(description="the token /fill-mask fills")
    prompts: dict[str, str] = Field(description="prompt_name -> the text put before the input")
    default_prompt_name: str | None
    matryoshka_dims: list[int] = Field(description="the widths `dimensions` may take without a warning")
    not_served: dict[str, str] = Field(
        default_factory=dict, description="endpoints (tasks) of the model's head it does not serve, and why"
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


# --- text-embeddings-inference's /embed_sparse (SPLADE vectors) --------------------------------------------


class TEIEmbedSparseRequest(_Lenient):
    inputs: Inputs = Field(description="a text, texts, or token ids of our tokenizer (special tokens included)")
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = Field(default=None, description="one of /info's prompts")
    top_k: Integer | None = Field(default=None, ge=1, description="keep each text's k highest values")
    return_tokens: StrictBool = Field(default=False, description="each value's vocabulary entry as `token`")


class SparseValue(BaseModel):
    index: int = Field(description="the vocabulary id")
    value: float
    token: str | None = Field(default=None, description="the vocabulary entry (return_tokens: true)")
