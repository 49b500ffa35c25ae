"""OpenAI's dialect: ``/v1/embeddings`` (what the ``openai`` client, LangChain's and LlamaIndex's OpenAI
embeddings send), ``/v1/models`` and ``/v1/models/{id}``."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, Response

from ..errors import ServiceError, documented
from ..schemas import ModelCard, ModelList, OpenAIEmbeddingRequest, OpenAIEmbeddingResponse
from .core import Routes, as_items, encode_vector


def add(routes: Routes) -> None:
    app, config = routes.app, routes.config

    @routes.model_route("/v1/embeddings", "embed", OpenAIEmbeddingResponse)
    async def openai_embeddings(request: OpenAIEmbeddingRequest) -> Response:
        """OpenAI's embeddings API: the model's pooling, unit vectors; ``input`` texts or token ids;
        ``dimensions`` keeps the first N components and renormalises (sound for a Matryoshka model's widths)."""
        items = routes.prompted(as_items(request.input), None)
        vectors, tokens = await routes.vectors(items, "input", request.truncate, True, request.dimensions)
        data = [{"object": "embedding", "index": i, "embedding": encode_vector(v, request.encoding_format)}
                for i, v in enumerate(vectors)]  # fmt: skip
        return JSONResponse({"object": "list", "data": data, "model": request.model or config.model,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip

    def card() -> dict[str, Any]:
        return {"id": config.model, "object": "model", "created": routes.started, "owned_by": "neobert"}

    @app.get("/v1/models", response_model=ModelList, responses=documented(401), dependencies=routes.bearer)
    async def models() -> Response:
        """OpenAI's model list: the one model this server serves (its id: the --model value)."""
        return JSONResponse({"object": "list", "data": [card()]})

    @app.get("/v1/models/{model_id:path}", response_model=ModelCard, responses=documented(401, 404),
             dependencies=routes.bearer)  # fmt: skip
    async def model(model_id: str) -> Response:
        """OpenAI's model object of ``model_id``: 404 for any model but the one served."""
        if model_id != config.model:
            raise ServiceError(404, f"the model {model_id!r} does not exist here; this server serves "
                                    f"{config.model!r}", "model", code="model_not_found")  # fmt: skip
        return JSONResponse(card())
