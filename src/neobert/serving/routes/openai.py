"""OpenAI's dialect: ``/v1/embeddings`` (what the ``openai`` client, LangChain's and LlamaIndex's OpenAI
embeddings send; with Jina's ``return_multivector``), ``/v1/models`` and ``/v1/models/{id}``: its request and
response shapes, then its routes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool

from ..errors import ServiceError, documented
from ..schemas import (
    BYTES_PER_NUMBER,
    DIMENSIONS,
    TRUNCATE,
    Dimensions,
    InputForms,
    LenientRequest,
    ModelField,
    TextInput,
)
from .core import Routes, as_items, encode_vector

# --- requests -------------------------------------------------------------------------------------------

JINA_TASKS = ("retrieval.query", "retrieval.passage", "code.query", "code.passage", "text-matching")


class OpenAIEmbeddingRequest(LenientRequest):
    input: Annotated[InputForms, TextInput(ids=True, texts_only_for="token_vectors")] = Field(
        description="a text, texts, or token ids of our tokenizer (special tokens included)"
    )
    model: ModelField = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Dimensions = DIMENSIONS
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


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


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


class ModelCard(BaseModel):  # OpenAI's model object, and what this server holds of it
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    kind: str = Field(
        description="its directory kind: transformers, sentence-transformers, splade, late-interaction, onnx, "
        "or adapter (a LoRA adapter, which runs over its base)"
    )
    base: str | None = Field(description="an adapter: the model it runs over")
    state: Literal["loaded", "loading", "not loaded"]
    bytes: int | None = Field(
        description="its weights' bytes in memory (an adapter: its own): measured once loaded, estimated "
        "from its files before"
    )
    pinned: bool = Field(description="never evicted (--pin)")
    default: bool = Field(description="the model of a request that names none")


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


# --- routes ---------------------------------------------------------------------------------------------


def add(routes: Routes) -> None:
    app = routes.app

    @routes.model_route("/v1/embeddings", "embed", OpenAIEmbeddingResponse)
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> Response:
        """OpenAI's embeddings API: the model's pooling, unit vectors; ``input`` texts or token ids;
        ``dimensions`` keeps the first N components and renormalises (sound for a Matryoshka model's widths)."""
        if request.return_multivector:
            return await multivector(routes, request)
        items = routes.prompted(as_items(request.input), None)
        vectors, tokens = await routes.vectors(items, "input", request.truncate, True, request.dimensions)
        data = [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, request.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": routes.echoed(request.model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.get("/v1/models", response_model=ModelList, responses=documented(401), dependencies=routes.bearer)
    async def models() -> Response:
        """OpenAI's model list: every model this server serves (an id: its name, or the --model value), with
        its kind, its base (an adapter), whether it is loaded and its bytes."""
        catalog = routes.service.catalog
        return JSONResponse({"object": "list", "data": [card(routes, entry) for entry in catalog.entries]})

    @app.get(
        "/v1/models/{model_id:path}",
        response_model=ModelCard,
        responses=documented(401, 404),
        dependencies=routes.bearer,
    )
    async def model(model_id: str) -> Response:
        """OpenAI's model object of ``model_id``: 404 for a model not served, naming those served."""
        catalog = routes.service.catalog
        if model_id not in catalog:
            served = ", ".join(repr(name) for name in catalog.names)
            raise ServiceError(
                404,
                f"the model {model_id!r} does not exist here; this server serves {served}",
                "model",
                code="model_not_found",
            )
        return JSONResponse(card(routes, catalog[model_id]))


def card(routes: Routes, entry: Any) -> dict[str, Any]:
    """A served model as OpenAI's model object, with its kind, base, state and bytes."""
    state = routes.service.states.get(entry.name, {})
    loaded = (
        "loading"
        if state.get("loading")
        else ("loaded" if routes.service.loaded(entry.name) else "not loaded")
    )
    return {
        "id": entry.name,
        "object": "model",
        "created": routes.started,
        "owned_by": "neobert",
        "kind": entry.kind,
        "base": entry.base,
        "state": loaded,
        "bytes": state.get("bytes"),
        "pinned": entry.pinned,
        "default": entry.name == routes.service.catalog.default,
    }


async def multivector(routes: Routes, request: OpenAIEmbeddingRequest) -> Response:
    """Jina's ``return_multivector``: a late-interaction model's token vectors per input, queries or
    documents by Jina's ``task``; the answer budget is checked before the model runs."""
    routes.require("token_vectors")
    items = as_items(request.input)
    if any(not isinstance(item, str) for item in items):
        raise ServiceError(
            422,
            "return_multivector takes texts, not token ids (the markers are put before the text)",
            "input",
        )
    settings = routes.model.token_vectors
    kind = "query" if (request.task or "").endswith(".query") else "document"
    per_token = settings["dim"] * BYTES_PER_NUMBER[request.encoding_format]
    what = f"{settings['dim']} numbers as {request.encoding_format}"
    each = settings["query_length"] if kind == "query" else None
    await routes.check_answer("token_vectors", items, "input", per_token, what, tokens_each=each)
    answers = await routes.run("token_vectors", items, "input", request.truncate, kind=kind)
    data = [
        {"object": "embedding", "index": i, "embeddings": encode_vector(v, request.encoding_format)}
        for i, (v, _) in enumerate(answers)
    ]
    tokens = sum(length for _, length in answers)
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": routes.echoed(request.model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
