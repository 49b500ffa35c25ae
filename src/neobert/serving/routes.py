"""The service's routes: each a small async function that validates what the HTTP side can see (counts,
characters), sends its texts through the queue to the model process (:mod:`.tasks`) and shapes the answer.

Nothing here tokenizes or touches the model: token counts, ``truncate: false`` refusals and results come
back from the model process. A model route is declared with :meth:`Routes.model_route`, which records the
task it needs (``MODEL_ROUTES``: the middleware refuses a full queue only for those, and a model that does
not offer the task answers 404). Adding an endpoint: one route here, one task in :mod:`.tasks`.

Three dialects (docs/serving.md, "Clients people already use"): ours; text-embeddings-inference's (``/embed``
and ``/rerank`` tell its shape from ours by a field, ``/embed_all``, ``/predict``, ``/tokenize``,
``/decode``, ``POST /`` by the model's head as the Inference API answers it); OpenAI's (``/v1/embeddings``,
``/v1/models``) and Cohere's / Jina's rerank (``/v1/rerank``, ``/v2/rerank``).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from ..capabilities import heads_offering
from ..registration import HEADS
from .errors import MODEL_ERRORS, ServiceError, documented, unicode_problem
from .schemas import (
    BYTES_PER_NUMBER,
    EMBED_FIELDS,
    ClassifyResponse,
    CohereRerankRequest,
    CohereRerankResponse,
    DecodeRequest,
    EmbedBody,
    EmbedRequest,
    EmbedResponse,
    FillMaskItem,
    FillMaskRequest,
    FillMaskResponse,
    HealthResponse,
    InfoResponse,
    ModelCard,
    ModelList,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    Parameters,
    PredictRequest,
    RerankBody,
    RerankRequest,
    RerankResponse,
    RootMaskedLMRequest,
    RootPredictRequest,
    RootTokensRequest,
    SparseValue,
    TEIEmbedAllRequest,
    TEIEmbedRequest,
    TEIEmbedSparseRequest,
    TEIPrediction,
    TEIRerankItem,
    TEIRerankRequest,
    TEIToken,
    TextsRequest,
    TokenizeRequest,
    TokensResponse,
    Vectors,
)
from .tasks import COUNT, Refusal

log = logging.getLogger(__name__)
MODEL_ROUTES: dict[str, str] = {}  # path -> the model task it needs (filled by Routes.model_route)
SERVICE_ROUTES = ("/info", "/health", "/metrics", "/v1/models")
LIMITS = ("max_texts", "max_chars", "max_queue", "max_batch_texts", "max_batch_tokens", "max_body_bytes",
          "max_answer_bytes")  # fmt: skip
# the Warning header values of the request being answered (a fresh list per request: WarningRoute)
WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)


class WarningRoute(APIRoute):
    """A route whose answer carries the ``Warning`` headers (RFC 9110's ``299 - "text"``) its handler
    recorded with :func:`warn` (e.g. a ``dimensions`` the model was not trained for)."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def handle(request: Any) -> Response:
            token = WARNINGS.set([])
            try:
                response = await handler(request)
                for text in WARNINGS.get() or ():
                    response.headers.append("Warning", f'299 - "{text}"')
                return response
            finally:
                WARNINGS.reset(token)

        return handle


def warn(text: str) -> None:
    """A ``Warning`` header on the answer to the request being handled (outside a route: nothing)."""
    warnings = WARNINGS.get()
    if warnings is not None and text not in warnings:
        warnings.append(text)


class Routes:
    """The routes of one app over one service, and what they share: the limits and the model call."""

    def __init__(self, app: FastAPI, service: Any):
        self.app, self.service, self.config = app, service, service.config
        app.router.route_class = WarningRoute  # routes may answer with Warning headers (``warn``)
        self.warned_widths: set[int] = set()  # untrained ``dimensions`` already logged (once each)
        # documents the scheme where a key is set (the Guard checks it); without a key no header is asked
        self.bearer = [Depends(HTTPBearer(auto_error=False))] if service.api_key else []
        self.started = int(time.time())

    def model_route(self, path: str, task: str, response_model: Any) -> Callable:
        """``@model_route(path, task, Response)``: a POST route that needs the model's ``task``."""
        MODEL_ROUTES[path] = task
        return self.app.post(path, response_model=response_model, responses=MODEL_ERRORS,
                             dependencies=self.bearer)  # fmt: skip

    async def run(self, task: str, texts: list[Any], field: str, truncate: bool, *options: Any,
                  noun: str = "text") -> list[tuple[Any, int]]:  # fmt: skip
        """``texts`` through the queue to the model's ``task``: (value, tokens) per text; a text the model
        refused (too long with ``truncate: false``, no mask to fill) is answered with its status."""
        self.require(task)
        self.check_texts(texts, field)
        future = self.service.submit((task, truncate, *options), texts)
        answers = await asyncio.wrap_future(future)
        for i, (value, _) in enumerate(answers):
            if isinstance(value, Refusal):
                raise ServiceError(value.status, value.describe(noun, i), f"{field}[{i}]")
        return answers

    async def check_answer(self, task: str, items: list[Any], field: str, per_token: float, what: str) -> None:
        """413 before the model runs when the answer to ``items`` (``per_token`` bytes for each of their
        tokens, each cut to the window; ``what`` says how they are counted) would pass ``max_answer_bytes``.
        The budget of every route whose answer grows with tokens: call it before :meth:`run`. The window is
        an upper bound for a text; where it does not settle the question, the model process counts the
        texts' tokens (its tokenizer only, ahead of the queue); token ids count as given."""
        self.require(task)
        self.check_texts(items, field)
        budget, window = self.config.max_answer_bytes, self.service.max_input_tokens
        tokens = [min(len(item), window) if isinstance(item, list) else window for item in items]
        if sum(tokens) * per_token <= budget:
            return
        texts = [i for i, item in enumerate(items) if not isinstance(item, list)]
        if texts:
            future = self.service.submit((COUNT, True), [items[i] for i in texts], first=True)
            for i, (length, _) in zip(texts, await asyncio.wrap_future(future)):
                tokens[i] = min(length, window)
        size = sum(tokens) * per_token
        if size > budget:
            raise ServiceError(413, f"the answer would hold {sum(tokens):,} tokens x {what}, about {size:,.0f} "
                                    f"bytes; the limit is {budget:,} bytes per answer (max_answer_bytes): send "
                                    "fewer or shorter inputs, or a more compact encoding_format", field)  # fmt: skip

    def require(self, task: str) -> None:
        """404 for a task the model does not offer, with why where its head has it (``not_served``)."""
        if task not in self.service.tasks:
            heads = heads_offering(task)
            why = (self.service.info.get("not_served") or {}).get(task) or (
                f"it needs a {' or '.join(heads)} head" if heads and self.service.head not in heads else None)
            raise ServiceError(404, f"this server's model ({self.service.head} head) does not serve {task}"
                                    f"{f' ({why})' if why else ''}; it serves {', '.join(self.service.tasks)}")  # fmt: skip

    def check_texts(self, texts: list[Any], field: str) -> None:
        if len(texts) > self.config.max_texts:
            raise ServiceError(
                413, f"{len(texts)} texts in one request; the limit is {self.config.max_texts}", field
            )
        for i, text in enumerate(texts):
            for j, part in enumerate(text if isinstance(text, tuple) else (text,)):
                where = f"{field}[{i}][{j}]" if isinstance(text, tuple) else f"{field}[{i}]"
                if isinstance(part, str):
                    self.check_text(part, where, f"text {i}")
                elif len(part) > self.config.max_chars:  # token ids: bounded as characters are
                    raise ServiceError(413, f"text {i} has {len(part):,} token ids; the limit is "
                                            f"{self.config.max_chars:,}", where)  # fmt: skip

    def check_text(self, text: str, param: str, name: str) -> None:
        if len(text) > self.config.max_chars:
            raise ServiceError(
                413, f"{name} has {len(text):,} characters; the limit is {self.config.max_chars:,}", param
            )
        problem = unicode_problem(text)
        if problem is not None:
            raise ServiceError(422, f"{name} is {problem}", param)

    def prompted(self, items: list[Any], prompt_name: str | None) -> list[Any]:
        """The texts with the named prompt before them (else the model's default prompt, as
        ``SentenceTransformer.encode``); token ids as given."""
        prompts, name = self.service.info.get("prompts") or {}, prompt_name
        name = name if name is not None else self.service.info.get("default_prompt_name")
        if name is None:
            return items
        if name not in prompts:
            known = ", ".join(prompts) or "none"
            raise ServiceError(422, f"prompt_name {name!r} is not one of the model's prompts ({known})",
                               "prompt_name")  # fmt: skip
        return [prompts[name] + item if isinstance(item, str) else item for item in items]

    def shortened(self, vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
        """The first ``dimensions`` components of each vector (renormalised where the vectors are unit)."""
        hidden = self.service.hidden_size
        if dimensions is None or dimensions == hidden:
            return vectors
        if dimensions > hidden:
            raise ServiceError(422, f"dimensions must be at most the model's {hidden}, got {dimensions}",
                               "dimensions")  # fmt: skip
        self.check_width(dimensions)
        vectors = vectors[:, :dimensions]
        if normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def check_width(self, dimensions: int) -> None:
        """A width the model was trained for (``/info``'s ``matryoshka_dims``) passes silently; another is
        served with a ``Warning`` header and one log line per width, or refused (422) with
        ``strict_dimensions``."""
        trained = [int(d) for d in self.service.info.get("matryoshka_dims") or ()]
        if dimensions in trained:
            return
        widths = (f"it was trained for {', '.join(map(str, trained))}" if trained
                  else "it declares no Matryoshka widths") + f" and its full {self.service.hidden_size}"  # fmt: skip
        if getattr(self.config, "strict_dimensions", False):
            raise ServiceError(422, f"dimensions {dimensions} is not one the model was trained for ({widths}); "
                                    "this server refuses others (--strict-dimensions)", "dimensions")  # fmt: skip
        warn(f"dimensions {dimensions} is not one the model was trained for ({widths})")
        if dimensions not in self.warned_widths:
            self.warned_widths.add(dimensions)
            log.warning("serving dimensions %d, which the model was not trained for (%s); its first %d "
                        "components may embed poorly", dimensions, widths, dimensions)  # fmt: skip

    async def vectors(self, items: list[Any], field: str, truncate: bool, normalize: bool,
                      dimensions: int | None = None, side: str = "right") -> tuple[np.ndarray, int]:  # fmt: skip
        """Embeddings of texts or token ids with the model's pooling, and the tokens they took."""
        answers = await self.run("embed", items, field, truncate, self.service.info["pooling"], normalize,
                                 side)  # fmt: skip
        vectors = np.stack([vector for vector, _ in answers])
        return self.shortened(vectors, dimensions, normalize), sum(length for _, length in answers)

    def info(self) -> dict[str, Any]:
        """The one ``/info`` description: the model's (from the model process), the service's, and
        text-embeddings-inference's fields."""
        config, info = self.config, self.service.info
        body = {**info, "model": config.model, "long_documents": config.long_documents,
                "limits": {name: getattr(config, name) for name in LIMITS},
                "auth": self.service.api_key is not None, **self.service.thread_state(),
                "model_id": config.model, "model_sha": None,
                "model_dtype": {"bf16": "bfloat16", "fp32": "float32"}.get(info["precision"], info["precision"]),
                "max_concurrent_requests": config.max_queue, "max_input_length": info["max_input_tokens"],
                "max_batch_tokens": config.max_batch_tokens, "max_batch_requests": config.max_batch_texts,
                "max_client_batch_size": config.max_texts, "auto_truncate": True, "tokenization_workers": None,
                "version": version("neobert")}  # fmt: skip
        return {name: body.get(name) for name in InfoResponse.model_fields}


def add_routes(app: FastAPI, service: Any) -> None:
    """Every route of the service on ``app``."""
    routes = Routes(app, service)
    add_embedding_routes(routes)
    add_openai_routes(routes)
    add_model_routes(routes)
    add_rerank_routes(routes)
    add_tokenizer_routes(routes)
    add_root_route(routes)
    add_service_routes(routes)
    add_sparse_routes(routes)


def as_items(inputs: Any) -> list[Any]:
    """OpenAI's and TEI's ``input(s)``: a text, texts, one text's token ids, or several texts' ids."""
    if isinstance(inputs, str):
        return [inputs]
    if inputs and isinstance(inputs[0], int):
        return [list(inputs)]
    return list(inputs)


def side(direction: str) -> str:
    return direction.lower()


def add_embedding_routes(routes: Routes) -> None:
    service = routes.service

    @routes.model_route("/embed", "embed", EmbedResponse | Vectors)
    async def embed(request: EmbedBody) -> Response:
        """Vectors of the texts. Ours: ``texts``, with the model's pooling and normalisation unless the
        request names them -> ``{"embeddings"}``. text-embeddings-inference's: ``inputs`` -> a list of vectors."""
        if isinstance(request, TEIEmbedRequest):
            items = routes.prompted(as_items(request.inputs), request.prompt_name)
            vectors, _ = await routes.vectors(items, "inputs", request.truncate, request.normalize,
                                              request.dimensions, side(request.truncation_direction))  # fmt: skip
            return JSONResponse(vectors.tolist())
        assert isinstance(request, EmbedRequest)
        pooling = request.pooling or service.info["pooling"]
        normalize = service.info["normalize"] if request.normalize is None else request.normalize
        texts = routes.prompted(request.texts, None)  # the model's default prompt, as SentenceTransformer.encode
        answers = await routes.run("embed", texts, "texts", request.truncate, pooling, normalize)
        return JSONResponse({"embeddings": [vector.tolist() for vector, _ in answers]})

    @routes.model_route("/embed_all", "embed_all", list[Vectors] | list[str])
    async def embed_all(request: TEIEmbedAllRequest) -> Response:
        """text-embeddings-inference's: the last hidden state of every token (special ones included) of
        each input; a long input is cut to the model's window (``truncation_direction``), whatever the policy.
        ``encoding_format`` ``base64`` / ``base64_float16``: each input's states as one string, little-endian
        float32 / float16, row-major (tokens x hidden). Bounded by ``max_answer_bytes`` (413 before the
        model runs)."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        encoding, hidden = request.encoding_format, service.hidden_size
        await routes.check_answer("embed_all", items, "inputs", hidden * BYTES_PER_NUMBER[encoding],
                                  f"{hidden} numbers as {encoding} ({BYTES_PER_NUMBER[encoding]:.3g} bytes a number)")  # fmt: skip
        answers = await routes.run("embed_all", items, "inputs", request.truncate,
                                   side(request.truncation_direction))  # fmt: skip
        return JSONResponse([encode_vector(states, encoding) for states, _ in answers])


def add_openai_routes(routes: Routes) -> None:
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


def add_model_routes(routes: Routes) -> None:
    @routes.model_route("/classify", "classify", ClassifyResponse)
    async def classify(request: TextsRequest) -> Response:
        """The top label and every label's probability per text (a regression model: its value)."""
        answers = await routes.run("classify", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [row for row, _ in answers]})

    @routes.model_route("/predict", "predict", list[TEIPrediction] | list[list[TEIPrediction]])
    async def predict(request: PredictRequest) -> Response:
        """text-embeddings-inference's: every label with its score, best first. ``inputs``: a text, a pair
        ``[text, text]`` (two texts in one list are a pair, as TEI reads them), or a batch
        ``[[text] | [text, text], ...]`` (or a list of other than two texts) -> a list per input."""
        items, single = predict_items(request.inputs)
        function = "none" if request.raw_scores else "auto"
        answers = await routes.run("predict", items, "inputs", request.truncate, function,
                                   side(request.truncation_direction))  # fmt: skip
        rows = [row for row, _ in answers]
        return JSONResponse(rows[0] if single else rows)

    @routes.model_route("/tokens", "tokens", TokensResponse)
    async def tokens(request: TextsRequest) -> Response:
        """Entities with character offsets (end exclusive) per text."""
        answers = await routes.run("tokens", request.texts, "texts", request.truncate)
        return JSONResponse({"results": [{"entities": row} for row, _ in answers]})

    @routes.model_route("/fill-mask", "fill-mask", FillMaskResponse)
    async def fill_mask(request: FillMaskRequest) -> Response:
        """The top_k tokens for every mask token of every text."""
        answers = await routes.run("fill-mask", request.texts, "texts", request.truncate, request.top_k)
        rows = [[[{"token": t, "score": p} for t, p, _ in mask] for mask in row] for row, _ in answers]
        return JSONResponse({"results": rows})


def predict_items(inputs: Any) -> tuple[list[Any], bool]:
    """TEI's ``/predict`` inputs as texts and (first, second) pairs, and whether one input was given."""
    if isinstance(inputs, str):
        return [inputs], True
    if len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        return [tuple(inputs)], True
    return [x if isinstance(x, str) else (x[0] if len(x) == 1 else tuple(x)) for x in inputs], False


def add_rerank_routes(routes: Routes) -> None:
    config = routes.config

    async def scores(query: str, documents: list[str], field: str, truncate: bool, raw: bool = False,
                     direction: str = "right") -> tuple[list[float], int]:  # fmt: skip
        """Each document's score against the query, and the tokens the pairs took."""
        routes.require("rerank")
        routes.check_text(query, "query", "the query")
        routes.check_texts(documents, field)
        pairs = [(query, d) for d in documents]
        answers = await routes.run("rerank", pairs, field, truncate, raw, direction, noun="query + document")
        return [score for score, _ in answers], sum(length for _, length in answers)

    def ranked(scores: list[float], top_n: int | None) -> list[int]:
        return sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]

    def results(request: Any, documents: list[str], relevance: list[float]) -> list[dict[str, Any]]:
        out = []
        for i in ranked(relevance, request.top_n):
            result: dict[str, Any] = {"index": i, "relevance_score": relevance[i]}
            if request.return_documents:
                result["document"] = {"text": documents[i]}
            out.append(result)
        return out

    @routes.model_route("/rerank", "rerank", RerankResponse | list[TEIRerankItem])
    async def rerank(request: RerankBody) -> Response:
        """A cross-encoder's relevance of each document to the query, most relevant first: the sigmoid of a
        one-logit model, the second label's probability of a two-label one. Ours (Cohere's shape):
        ``documents`` -> ``{"results", "model"}``; text-embeddings-inference's: ``texts`` -> a list of
        ``{index, score, text?}`` (``raw_scores``: the logit)."""
        if isinstance(request, TEIRerankRequest):
            relevance, _ = await scores(request.query, request.texts, "texts", request.truncate,
                                        request.raw_scores, side(request.truncation_direction))  # fmt: skip
            items = [{"index": i, "score": relevance[i], **({"text": request.texts[i]} if request.return_text
                                                             else {})} for i in ranked(relevance, None)]  # fmt: skip
            return JSONResponse(items)
        assert isinstance(request, RerankRequest)
        relevance, _ = await scores(request.query, request.documents, "documents", request.truncate)
        return JSONResponse({"results": results(request, request.documents, relevance),
                             "model": request.model or config.model})  # fmt: skip

    for version_path, api in (("/v1/rerank", "1"), ("/v2/rerank", "2")):

        @routes.model_route(version_path, "rerank", CohereRerankResponse)
        async def cohere_rerank(request: CohereRerankRequest, api: str = api) -> Response:
            """Cohere's and Jina's rerank: ``documents`` (texts or ``{"text"}``), ``top_n``,
            ``return_documents`` -> ``results[].relevance_score``, most relevant first."""
            documents = [d if isinstance(d, str) else d.text for d in request.documents]
            relevance, tokens = await scores(request.query, documents, "documents", request.truncate)
            return JSONResponse({
                "id": uuid.uuid4().hex, "results": results(request, documents, relevance),
                "model": request.model or config.model,
                "meta": {"api_version": {"version": api}, "billed_units": {"search_units": 1}},
                "usage": {"total_tokens": tokens},
            })  # fmt: skip


def add_tokenizer_routes(routes: Routes) -> None:
    @routes.model_route("/tokenize", "tokenize", list[list[TEIToken]])
    async def tokenize(request: TokenizeRequest) -> Response:
        """text-embeddings-inference's: each text's tokens (id, text, special, start, stop: a character span,
        end exclusive; None for special tokens), as the model's tokenizer makes them."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        answers = await routes.run("tokenize", items, "inputs", True, request.add_special_tokens)
        return JSONResponse([row for row, _ in answers])

    @routes.model_route("/decode", "decode", list[str])
    async def decode(request: DecodeRequest) -> Response:
        """text-embeddings-inference's: the text of each list of token ids."""
        rows = [list(request.ids)] if not request.ids or isinstance(request.ids[0], int) else request.ids
        answers = await routes.run("decode", rows, "ids", True, request.skip_special_tokens)
        return JSONResponse([text for text, _ in answers])


def add_root_route(routes: Routes) -> None:
    """``POST /`` by the model's head, in the Inference API's shape (what huggingface_hub's InferenceClient
    sends and parses); its request schema is the head's."""
    task = HEADS[routes.service.head].root_task
    body, answer = ROOT[task]

    async def root(request: Any) -> Response:
        return await answer(routes, request)

    root.__annotations__ = {"request": body, "return": Response}
    root.__doc__ = answer.__doc__
    routes.model_route("/", task, Any)(root)


async def root_embed(routes: Routes, request: TEIEmbedRequest | RootMaskedLMRequest) -> Response:
    """A base encoder embeds (TEI's ``/embed``): a list of vectors."""
    items = routes.prompted(as_items(request.inputs), request.prompt_name)
    vectors, _ = await routes.vectors(items, "inputs", request.truncate, request.normalize,
                                      request.dimensions, side(request.truncation_direction))  # fmt: skip
    return JSONResponse(vectors.tolist())


async def root_predict(routes: Routes, request: RootPredictRequest) -> Response:
    """A sequence classifier: every label's score, best first, a list per input (``parameters``:
    ``top_k``, ``function_to_apply``)."""
    texts, _ = text_inputs(request.inputs, pairs=True)
    parameters = request.parameters or Parameters()
    answers = await routes.run("predict", texts, "inputs", request.truncate, parameters.function_to_apply or
                               "auto", side(request.truncation_direction))  # fmt: skip
    return JSONResponse([row[: parameters.top_k] for row, _ in answers])


async def root_fill_mask(routes: Routes, request: RootMaskedLMRequest) -> Response:
    """An MLM fills its masks where every text holds the mask token: ``[{sequence, score, token,
    token_str}]`` (a list per mask where a text has several; a list per text for several texts). Texts
    without it, or a request with TEI's embedding fields (``normalize``, ``truncation_direction``,
    ``prompt_name``, ``dimensions``), are embedded as TEI's ``/embed`` answers (a list of vectors): what
    ``InferenceClient.feature_extraction`` asks of a masked LM such as the released NeoBERT."""
    texts, single = text_inputs(request.inputs, pairs=False)
    mask = routes.service.info["mask_token"]
    if request.model_fields_set & set(EMBED_FIELDS) or not all(mask and mask in text for text in texts):
        return await root_embed(routes, request)
    top_k = (request.parameters.top_k if request.parameters else None) or 5
    answers = await routes.run("fill-mask", texts, "inputs", request.truncate, top_k)
    rows = [[filled(text, candidates, mask) for candidates in row] for text, (row, _) in zip(texts, answers)]
    rows = [row[0] if len(row) == 1 else row for row in rows]
    return JSONResponse(rows[0] if single else rows)


async def root_tokens(routes: Routes, request: RootTokensRequest) -> Response:
    """A token classifier: entities ``[{entity_group, score, word, start, end}]`` (a list per text)."""
    texts, single = text_inputs(request.inputs, pairs=False)
    answers = await routes.run("tokens", texts, "inputs", request.truncate)
    rows = [[{"entity_group": e["label"], "score": e["score"], "word": e["text"], "start": e["start"],
              "end": e["end"]} for e in row] for row, _ in answers]  # fmt: skip
    return JSONResponse(rows[0] if single else rows)


# what `POST /` takes and answers for each task a head may name as its root task (registration.Head.root_task)
ROOT = {"embed": (TEIEmbedRequest, root_embed), "fill-mask": (RootMaskedLMRequest, root_fill_mask),
        "predict": (RootPredictRequest, root_predict), "tokens": (RootTokensRequest, root_tokens)}  # fmt: skip


def text_inputs(inputs: Any, pairs: bool) -> tuple[list[Any], bool]:
    """``inputs`` of ``POST /`` as texts (and, where ``pairs``, ``[text, text]`` pairs; ``[text]`` is a text),
    and whether one was given. A list of texts is a batch here (the Inference API's reading)."""
    if isinstance(inputs, str):
        return [inputs], True
    items = [x if isinstance(x, str) else (x[0] if len(x) == 1 else tuple(x)) for x in inputs]
    for i, item in enumerate(items):
        if isinstance(item, tuple) and not pairs:
            raise ServiceError(422, f"inputs[{i}] must be a text", f"inputs[{i}]")
    return items, False


def filled(text: str, candidates: list[Any], mask: str) -> list[dict[str, Any]]:
    """One mask's candidates in the Inference API's fill-mask shape."""
    return [FillMaskItem(sequence=text.replace(mask, token, 1), score=score, token=token_id,
                         token_str=token).model_dump() for token, score, token_id in candidates]  # fmt: skip


def add_service_routes(routes: Routes) -> None:
    app, service = routes.app, routes.service

    @app.get("/info", response_model=InfoResponse, responses=documented(401), dependencies=routes.bearer)
    async def info() -> Response:
        """The model, what it serves, its dimensions and input limit, pooling, threads, and the limits."""
        return JSONResponse(routes.info())

    @app.get("/health", response_model=HealthResponse, responses={503: {"model": HealthResponse}})
    async def health() -> Response:
        """Open without the API key: 200 while serving, 503 while shutting down or without a model."""
        closing, alive = service.batcher.closed, service.alive()
        body = {
            "status": "shutting down" if closing else ("ok" if alive else "the model process exited"),
            "model": routes.config.model,
            "head": service.head,
            "serves": list(service.tasks),
            "queue_depth": service.batcher.depth(),
            "max_queue": routes.config.max_queue,
        }
        return JSONResponse(body, status_code=200 if alive and not closing else 503)

    metrics_doc = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **documented(401)}

    @app.get("/metrics", response_class=Response, responses=metrics_doc, dependencies=routes.bearer)
    async def metrics() -> Response:
        """Prometheus metrics (text format)."""
        return Response(service.metrics.render(), media_type=service.metrics.content_type)


BASE64_DTYPES = {"base64": "<f4", "base64_float16": "<f2"}  # little-endian, as the OpenAI client reads base64


def encode_vector(vector: np.ndarray, encoding: str) -> Any:
    """A vector (or a row-major matrix) as JSON numbers, or one base64 string of its float32 / float16 bytes."""
    if encoding in BASE64_DTYPES:
        return base64.b64encode(np.asarray(vector, dtype=BASE64_DTYPES[encoding]).tobytes()).decode("ascii")
    return vector.tolist()


def add_sparse_routes(routes: Routes) -> None:
    @routes.model_route("/embed_sparse", "embed_sparse", list[list[SparseValue]])
    async def embed_sparse(request: TEIEmbedSparseRequest) -> Response:
        """text-embeddings-inference's: each input's SPLADE vector (its MLM logits, max-pooled over its
        tokens: what sentence-transformers' ``SparseEncoder`` computes) as ``[{index, value}]``, highest value
        first; ``top_k`` keeps the k highest; ``return_tokens`` adds each index's vocabulary entry
        (``token``). Served by a SPLADE ``SparseEncoder`` directory, or a masked-LM model with ``--sparse``;
        a long input is cut to the model's window (``truncation_direction``), whatever the policy."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        answers = await routes.run("embed_sparse", items, "inputs", request.truncate,
                                   side(request.truncation_direction), request.top_k, request.return_tokens)  # fmt: skip
        return JSONResponse([row for row, _ in answers])
