"""The service's request and response schemas (pydantic): they validate requests (the field-naming 422
answers) and document every answer in the OpenAPI schema (``/openapi.json``)."""

from __future__ import annotations

import re
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


def integer(**bounds: int) -> Any:
    """A JSON integer (3.0 too) within ``bounds`` (ge, le): the bounds stated in the schema as JSON Schema's."""
    return Annotated[int, Field(strict=True, **bounds), BeforeValidator(_integral)]


Text = Annotated[StrictStr, Field(min_length=1)]  # an empty text has nothing to embed, classify or rank
Texts = Annotated[list[Text], Field(min_length=1)]
TokenId = integer(ge=0)
Positive = integer(ge=1)
TopK = integer(ge=1, le=100)
Ids = Annotated[list[TokenId], Field(min_length=1)]
# a text, or a text as token ids (the model's tokenizer's, special tokens included: what /tokenize gives)
Inputs = Text | Annotated[list[Text], Field(min_length=1)] | Ids | Annotated[list[Ids], Field(min_length=1)]
Direction = Literal["Right", "Left", "right", "left"]


# an answer's bytes per number as sent, by encoding_format (the answer budget, max_answer_bytes): the JSON
# text of a float32 value runs 19-20 characters with its comma (measured on normal values); base64 is 4
# characters per 3 bytes
BYTES_PER_NUMBER = {"float": 20.0, "base64": 16 / 3, "base64_float16": 8 / 3}

TRUNCATE = Field(
    default=True,
    description="true: a text longer than the model window follows the server's long-document policy "
    "(truncate by default); false: such a text is refused with 413 naming it and its token count",
)


class EmbedRequest(_Request):
    texts: Texts
    pooling: Literal[POOLING_NAMES] | None = Field(
        default=None, description="default: the model's; the registry neobert.model.pooling.POOLINGS"
    )
    normalize: StrictBool | None = Field(default=None, description="unit vectors; default: the model's")
    truncate: StrictBool = TRUNCATE


DIMENSIONS = Field(
    default=None,
    description="keep the first N components, then renormalise (sound "
    "for the widths a Matryoshka model was trained for: /info's matryoshka_dims)",
)


JINA_TASKS = ("retrieval.query", "retrieval.passage", "code.query", "code.passage", "text-matching")


class OpenAIEmbeddingRequest(_Lenient):
    input: Inputs = Field(
        description="a text, texts, or token ids of our tokenizer (special tokens included)"
    )
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Positive | None = DIMENSIONS
    truncate: StrictBool = TRUNCATE
    return_multivector: StrictBool = Field(
        default=False,
        description=(
            "Jina's: a late-interaction (ColBERT) model's token vectors, `embeddings` per input (one unit vector "
            "per token; base64: one string of row-major tokens x dim little-endian float32) instead of `embedding`; "
            "texts only. The answer holds tokens x dim numbers and must fit max_answer_bytes (413 before the "
            "model runs)"
        ),
    )
    task: Literal[JINA_TASKS] | None = Field(
        default=None,
        description=(
            "Jina's: with return_multivector, *.query encodes queries (marker, expanded to query_length tokens), "
            "any other value or none documents (marker, cut to document_length, punctuation dropped)"
        ),
    )


class TextsRequest(_Request):
    texts: Texts
    truncate: StrictBool = TRUNCATE


MASKED = "every text holds the model's mask token (/info's mask_token)"


class FillMaskRequest(_Request):
    texts: list[Annotated[Text, Field(description=MASKED)]] = Field(min_length=1)
    top_k: TopK = 5
    truncate: StrictBool = TRUNCATE


class RerankRequest(_Request):
    query: Text
    documents: Texts
    top_n: Positive | None = Field(default=None, description="default: every document")
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
    dimensions: Positive | None = DIMENSIONS


class TEIEmbedAllRequest(_Lenient):
    inputs: Inputs
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = None
    encoding_format: Literal["float", "base64", "base64_float16"] = Field(
        default="float",
        description="float: JSON numbers; base64 / base64_float16: each input's states as one "
        "string of little-endian float32 / float16 bytes, row-major (tokens x hidden): 1/4 and 1/8 of the "
        "JSON's size",
    )


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
    top_k: Positive | None = None
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = None


EMBED_FIELDS = (
    "normalize",
    "truncation_direction",
    "prompt_name",
    "dimensions",
)  # TEI /embed's, not fill-mask's


class RootMaskedLMRequest(_Lenient):
    """``POST /`` of an MLM: the Inference API's fill-mask where every text holds the mask token, else
    TEI's ``/embed`` (what ``InferenceClient.feature_extraction`` sends: the texts' embeddings)."""

    inputs: Text | Annotated[list[Text], Field(min_length=1)]
    parameters: Parameters | None = Field(default=None, description="fill-mask's (top_k)")
    truncate: StrictBool = TEI_TRUNCATE
    normalize: StrictBool = True
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = Field(default=None, description="one of /info's prompts")
    dimensions: Positive | None = DIMENSIONS


class RootPredictRequest(_Lenient):
    """``POST /`` of a sequence classifier (the Inference API's text classification)."""

    inputs: Text | Annotated[list[Sequence], Field(min_length=1)]
    parameters: Parameters | None = None
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


class RootTokensRequest(_Lenient):
    """``POST /`` of a token classifier (the Inference API's token classification)."""

    inputs: Text | Annotated[list[Text], Field(min_length=1)]
    parameters: dict[str, Any] | None = None
    truncate: StrictBool = TEI_TRUNCATE


# --- Cohere's and Jina's rerank (/v1/rerank, /v2/rerank) ---------------------------------------------------


class RerankDocumentIn(_Lenient):
    text: StrictStr


class CohereRerankRequest(_Lenient):
    query: Text
    documents: Annotated[list[StrictStr | RerankDocumentIn], Field(min_length=1)]
    model: StrictStr | None = None
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


class CohereEmbedRequest(_Lenient):
    texts: Texts
    model: StrictStr | None = None
    input_type: Literal[COHERE_INPUT_TYPES] | None = Field(
        default=None,
        description=(
            "search_query / search_document put the model's `query` / `document` prompt before the text where it "
            "has one; otherwise (and for classification, clustering) the model's default prompt"
        ),
    )
    embedding_types: Annotated[list[Literal[EMBEDDING_TYPES]], Field(min_length=1)] = Field(
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
    embedding: list[float] | str | None = None
    embeddings: list[list[float]] | str | None = Field(
        default=None, description="return_multivector: the token vectors"
    )


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: Usage


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


class FillMaskItem(
    BaseModel
):  # the Inference API's fill-mask element (huggingface_hub's FillMaskOutputElement)
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
    vocab_size: int | None = Field(description="token ids are below it")
    prompts: dict[str, str] = Field(description="prompt_name -> the text put before the input")
    default_prompt_name: str | None
    matryoshka_dims: list[int] = Field(description="the widths `dimensions` may take without a warning")
    not_served: dict[str, str] = Field(
        default_factory=dict, description="endpoints (tasks) of the model's head it does not serve, and why"
    )
    late_interaction: dict[str, Any] | None = Field(
        default=None,
        description=(
            "a late-interaction (ColBERT) model's settings: dim (numbers per token vector), query_length (every "
            "query's vectors), document_length (a document's at most), the markers, the skiplist, similarity "
            "MaxSim; null for any other model"
        ),
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
    inputs: Inputs = Field(
        description="a text, texts, or token ids of our tokenizer (special tokens included)"
    )
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: StrictStr | None = Field(default=None, description="one of /info's prompts")
    top_k: Positive | None = Field(default=None, description="keep each text's k highest values")
    return_tokens: StrictBool = Field(default=False, description="each value's vocabulary entry as `token`")


class SparseValue(BaseModel):
    index: int = Field(description="the vocabulary id")
    value: float
    token: str | None = Field(default=None, description="the vocabulary entry (return_tokens: true)")


# --- the schema states what this server's model accepts ----------------------------------------------------

TEXT_FIELDS = ("texts", "inputs", "input", "documents", "query", "ids", "text")
REQUESTS_WITH_TEXTS = ("Request", "RerankDocumentIn")


def state_limits(
    openapi: dict[str, Any], limits: dict[str, Any], model: Any, calibrated: bool = False
) -> dict[str, Any]:
    """``openapi`` (FastAPI's) with what this server's model and limits accept stated: texts per request
    (``max_texts``) and characters per text (``max_chars``; token ids per text alike), token ids below the
    vocabulary, ``dimensions`` up to the model's, the prompt names it has, and the mask token a fill-mask
    text must hold (``model``: the :class:`.served.ServedModel`), texts only for a late-interaction model's
    ``/v1/embeddings``, and Cohere's int8 / uint8 ``embedding_types``
    only where the server has calibration ranges (``calibrated``). A client generated from it is refused
    nothing the schema allows."""
    models = openapi.get("components", {}).get("schemas", {})
    openapi.setdefault("info", {})["x-limits"] = dict(limits)
    for name, schema in models.items():
        if not name.endswith(REQUESTS_WITH_TEXTS):
            continue
        for field, prop in schema.get("properties", {}).items():
            if field in TEXT_FIELDS:
                _bound(prop, limits, model.vocab_size, outer=True)
                if name == "FillMaskRequest" and model.mask_token:
                    _pattern(prop, re.escape(model.mask_token))
                if name == "OpenAIEmbeddingRequest" and getattr(model, "late_interaction", None):
                    _texts_only(prop)
            elif field == "dimensions":
                _each(prop, "integer", lambda n: n.update(maximum=model.dimensions))
            elif field == "embedding_types" and not calibrated:
                _each(
                    prop.get("items", {}),
                    "string",
                    lambda n: n.update(enum=[t for t in n["enum"] if t not in ("int8", "uint8")]),
                )
            elif field == "encoding_format" and name == "TEIEmbedAllRequest":
                schema["description"] = answer_budget(limits, model.dimensions)
            elif field == "prompt_name":
                prompts = sorted(model.prompts)
                prop.pop("anyOf", None)
                prop["anyOf"] = (
                    [{"type": "string", "enum": prompts}, {"type": "null"}] if prompts else [{"type": "null"}]
                )
    return openapi


def answer_budget(limits: dict[str, Any], hidden: int) -> str:
    """What the schema says of the answer budget (``max_answer_bytes``) of a request for token states of
    ``hidden`` numbers each."""
    budget = limits["max_answer_bytes"]
    tokens = ", ".join(
        f"{budget // (hidden * per):,.0f} tokens as {name}" for name, per in BYTES_PER_NUMBER.items()
    )
    return (
        f"The answer holds {hidden} numbers per token of the inputs (each cut to the window) and must stay "
        f"within {budget:,} bytes (max_answer_bytes; 413 before the model runs): at most {tokens} "
        "(20, 16/3 and 8/3 bytes a number)."
    )


def _bound(node: dict[str, Any], limits: dict[str, Any], vocab_size: int | None, outer: bool) -> None:
    for option in node.get("anyOf", []):
        _bound(option, limits, vocab_size, outer)
    kind = node.get("type")
    if kind == "string":
        node["maxLength"] = limits["max_chars"]
    elif kind == "integer" and vocab_size:
        node["maximum"] = int(vocab_size) - 1
    elif kind == "array":
        items = node.get("items", {})
        if items.get("type") == "integer":
            node["maxItems"] = limits["max_chars"]  # one text's token ids
        elif outer:
            node["maxItems"] = limits["max_texts"]
        _bound(items, limits, vocab_size, outer=False)


def _texts_only(node: dict[str, Any]) -> None:
    """A late-interaction model's token vectors take texts (the marker goes before the text): token-id forms go."""

    def ids(option: dict[str, Any]) -> bool:
        items = option.get("items", {})
        return items.get("type") == "integer" or items.get("items", {}).get("type") == "integer"

    node["anyOf"] = [option for option in node.get("anyOf", []) if not ids(option)]


def _each(node: dict[str, Any], kind: str, change: Any) -> None:
    for option in node.get("anyOf", []):
        _each(option, kind, change)
    if node.get("type") == kind:
        change(node)


def _pattern(node: dict[str, Any], pattern: str) -> None:
    _each(node, "string", lambda n: n.update(pattern=pattern))
    for option in node.get("anyOf", []):
        if option.get("type") == "array":
            _each(option.get("items", {}), "string", lambda n: n.update(pattern=pattern))
    if node.get("type") == "array":
        _each(node.get("items", {}), "string", lambda n: n.update(pattern=pattern))
