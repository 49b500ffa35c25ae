"""What every dialect's routes share: :class:`Routes`, the routes of one app over one service (the limits,
the model call through the queue, the prompt, the width, the rerank scores) and its route table (path ->
the model task it needs), which belongs to that app alone (two apps in one process share nothing).

Nothing here tokenizes or touches the model: token counts, ``truncate: false`` refusals and results come
back from the model process (:mod:`..tasks`).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from ...inference.capabilities import heads_offering
from ..errors import MODEL_ERRORS, ServiceError, unicode_problem
from ..service import UnknownModel
from ..tasks import COUNT, TRUNCATE_WORDS, ModelCall, Refusal

log = logging.getLogger(__name__)
SERVICE_ROUTES = (
    "/info",
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
)
LIMITS = (
    "max_texts",
    "max_chars",
    "max_queue",
    "max_batch_texts",
    "max_batch_tokens",
    "max_body_bytes",
    "max_answer_bytes",
)
# the Warning header values of the request being answered (a fresh list per request: WarningRoute)
WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)
Handler = Callable[["Routes", Any], Awaitable[Response]]  # a dialect's answer to one request shape
MODELS_PREFIX = (
    "/models/"  # /models/NAME/<any path>: that path for model NAME (TEI's dialect has no model field)
)


@dataclass
class Asked:
    """Which model a request is for: the one its URL names (``/models/NAME/...``; the middleware reads it
    before routing), and the one it was answered for (the metrics' ``model`` label)."""

    prefix: str | None = None
    model: str = ""


@dataclass(frozen=True)
class Answering:
    """The model the request being answered runs on: its name and what it serves."""

    name: str
    served: Any  # a ServedModel


ASKED: contextvars.ContextVar[Asked | None] = contextvars.ContextVar("asked", default=None)
ANSWERING: contextvars.ContextVar[Answering | None] = contextvars.ContextVar("answering", default=None)


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
    """The routes of one app over one service, and what they share: the limits and the model call.
    ``table`` is this app's route table (path -> the model task it needs): the middleware refuses a full
    queue only for those paths, and a model that does not offer the task answers 404."""

    def __init__(self, app: FastAPI, service: Any):
        self.app, self.service, self.config = app, service, service.config
        app.router.route_class = WarningRoute  # routes may answer with Warning headers (``warn``)
        self._table: dict[str, str] = {}
        self.warned_widths: set[int] = set()  # untrained ``dimensions`` already logged (once each)
        # documents the scheme where a key is set (the Guard checks it); without a key no header is asked
        self.bearer = [Depends(HTTPBearer(auto_error=False))] if service.api_key else []
        self.started = int(time.time())

    @property
    def table(self) -> Mapping[str, str]:
        """This app's model routes: path -> task (read-only)."""
        return MappingProxyType(self._table)

    def model_route(self, path: str, task: str, response_model: Any) -> Callable:
        """``@model_route(path, task, Response)``: a POST route that needs the model's ``task``, answered by
        the model the request names (:meth:`answering`)."""
        if path in self._table:
            raise ValueError(f"two model routes for {path}: a second request shape is Routes.by_shape's")
        self._table[path] = task
        post = self.app.post(
            path, response_model=response_model, responses=MODEL_ERRORS, dependencies=self.bearer
        )

        def register(handler: Callable[..., Awaitable[Response]]) -> Any:
            @functools.wraps(handler)
            async def answered(*args: Any, **kwargs: Any) -> Response:
                body = next(iter(kwargs.values())) if kwargs else args[0]
                token = ANSWERING.set(await self.answering(getattr(body, "model", None)))
                try:
                    return await handler(*args, **kwargs)
                finally:
                    ANSWERING.reset(token)

            return post(answered)

        return register

    async def answering(self, named: str | None) -> Answering:
        """The model a request is for, the one place it is decided: its ``model`` field, else the model its
        URL names (``/models/NAME/...``), else the default. A service of one model answers any name with
        its model (as it always has); a service of several answers an unknown name 404, naming those it
        serves, and waits for a model that is not loaded yet to load."""
        asked, service = ASKED.get(), self.service
        prefix = asked.prefix if asked else None
        # one model: whatever a model field says (OpenAI's clients always send one) gets it
        name = (named or prefix) if service.catalog.several else prefix
        try:
            served = await service.describe(name)
            name = service.entry(name).name
        except UnknownModel as err:
            raise ServiceError(404, str(err), "model", code="model_not_found") from None
        if asked is not None:
            asked.model = name
        return Answering(name, served)

    @property
    def model(self) -> Any:
        """What the model the request being answered runs on serves (outside a model route: the default's)."""
        answering = ANSWERING.get()
        return self.service.model if answering is None else answering.served

    @property
    def model_name(self) -> str:
        """The name of the model the request being answered runs on."""
        answering = ANSWERING.get()
        return self.service.catalog.default if answering is None else answering.name

    def echoed(self, named: str | None) -> str:
        """The ``model`` an answer names: the model answering; a service of one model echoes the name asked."""
        return self.model_name if self.service.catalog.several else (named or self.model_name)

    def by_shape(
        self,
        path: str,
        task: str,
        body: Any,
        response_model: Any,
        handlers: dict[type, Handler],
        name: str,
        doc: str,
    ) -> None:
        """One POST route that several dialects share: ``body`` is the union of their request shapes (told
        apart by a field, :func:`..schemas.shape_by_field`) and each shape is answered by its dialect's handler."""

        async def route(request: Any) -> Response:
            return await handlers[type(request)](self, request)

        route.__annotations__ = {"request": body, "return": Response}
        route.__name__ = route.__qualname__ = name  # the OpenAPI operation id is made from it
        route.__doc__ = doc
        self.model_route(path, task, response_model)(route)

    async def run(
        self,
        task: str,
        texts: list[Any],
        field: str,
        truncate: bool,
        noun: str = "text",
        words: tuple[str, str] = TRUNCATE_WORDS,
        **options: Any,
    ) -> list[tuple[Any, int]]:
        """``texts`` through the queue to the model's ``task`` with its ``options`` (its function's keyword
        arguments, :class:`..tasks.ModelCall`): (value, tokens) per text; a text the model refused (too long
        with ``truncate: false``, no mask to fill) is answered with its status, in the words of the dialect
        called (``words``: how it spells refusing and allowing a cut)."""
        self.require(task)
        self.check_texts(texts, field)
        future = self.service.submit(ModelCall.of(task, truncate, **options), texts, model=self.model_name)
        answers = await asyncio.wrap_future(future)
        for i, (value, _) in enumerate(answers):
            if isinstance(value, Refusal):
                raise ServiceError(value.status, value.describe(noun, i, words), f"{field}[{i}]")
        return answers

    async def check_answer(
        self,
        task: str,
        items: list[Any],
        field: str,
        per_token: float,
        what: str,
        tokens_each: int | None = None,
    ) -> None:
        """413 before the model runs when the answer to ``items`` (``per_token`` bytes for each of their
        tokens, each cut to the window; ``what`` says how they are counted) would pass ``max_answer_bytes``.
        The budget of every route whose answer grows with tokens: call it before :meth:`run`. The window is
        an upper bound for a text; where it does not settle the question, the model process counts the
        texts' tokens (its tokenizer only, ahead of the queue); token ids count as given. ``tokens_each``:
        every item answers exactly that many tokens (a late-interaction model's expanded queries)."""
        self.require(task)
        self.check_texts(items, field)
        budget, window = self.config.max_answer_bytes, tokens_each or self.model.max_input_tokens
        tokens = [min(len(item), window) if isinstance(item, list) else window for item in items]
        if sum(tokens) * per_token <= budget:
            return
        texts = [i for i, item in enumerate(items) if not isinstance(item, list)]
        if texts and tokens_each is None:
            future = self.service.submit(
                ModelCall.of(COUNT), [items[i] for i in texts], first=True, model=self.model_name
            )
            for i, (length, _) in zip(texts, await asyncio.wrap_future(future)):
                tokens[i] = min(length, window)
        size = sum(tokens) * per_token
        if size > budget:
            raise ServiceError(
                413,
                f"the answer would hold {sum(tokens):,} tokens x {what}, about {size:,.0f} "
                f"bytes; the limit is {budget:,} bytes per answer (max_answer_bytes): send "
                "fewer or shorter inputs, or a more compact encoding_format",
                field,
            )

    def require(self, task: str) -> None:
        """404 for a task the model does not offer, with why where its head has it (``not_served``)."""
        model = self.model
        if task not in model.serves:
            heads = heads_offering(task)
            why = model.not_served.get(task) or (
                f"it needs a {' or '.join(heads)} head" if heads and model.head not in heads else None
            )
            whose = f"the model {self.model_name}" if self.service.catalog.several else "this server's model"
            raise ServiceError(
                404,
                f"{whose} ({model.head} head) does not serve {task}"
                f"{f' ({why})' if why else ''}; it serves {', '.join(model.serves)}",
            )

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
                    raise ServiceError(
                        413,
                        f"text {i} has {len(part):,} token ids; the limit is {self.config.max_chars:,}",
                        where,
                    )

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
        prompts, name = self.model.prompts, prompt_name
        name = name if name is not None else self.model.default_prompt_name
        if name is None:
            return items
        if name not in prompts:
            known = ", ".join(prompts) or "none"
            raise ServiceError(
                422, f"prompt_name {name!r} is not one of the model's prompts ({known})", "prompt_name"
            )
        return [prompts[name] + item if isinstance(item, str) else item for item in items]

    def shortened(self, vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
        """The first ``dimensions`` components of each vector (renormalised where the vectors are unit)."""
        hidden = self.model.dimensions
        if dimensions is None or dimensions == hidden:
            return vectors
        if dimensions > hidden:
            raise ServiceError(
                422, f"dimensions must be at most the model's {hidden}, got {dimensions}", "dimensions"
            )
        self.check_width(dimensions)
        vectors = vectors[:, :dimensions]
        if normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def check_width(self, dimensions: int) -> None:
        """A width the model was trained for (``/info``'s ``matryoshka_dims``) passes silently; another is
        served with a ``Warning`` header and one log line per width, or refused (422) with
        ``strict_dimensions``."""
        trained = list(self.model.matryoshka_dims)
        if dimensions in trained:
            return
        widths = (
            f"it was trained for {', '.join(map(str, trained))}"
            if trained
            else "it declares no Matryoshka widths"
        ) + f" and its full {self.model.dimensions}"
        if getattr(self.config, "strict_dimensions", False):
            raise ServiceError(
                422,
                f"dimensions {dimensions} is not one the model was trained for ({widths}); "
                "this server refuses others (--strict-dimensions)",
                "dimensions",
            )
        warn(f"dimensions {dimensions} is not one the model was trained for ({widths})")
        if dimensions not in self.warned_widths:
            self.warned_widths.add(dimensions)
            log.warning(
                "serving dimensions %d, which the model was not trained for (%s); its first %d "
                "components may embed poorly",
                dimensions,
                widths,
                dimensions,
            )

    async def vectors(
        self,
        items: list[Any],
        field: str,
        truncate: bool,
        normalize: bool,
        dimensions: int | None = None,
        side: str = "right",
        words: tuple[str, str] = TRUNCATE_WORDS,
    ) -> tuple[np.ndarray, int]:
        """Embeddings of texts or token ids with the model's pooling, and the tokens they took."""
        answers = await self.run(
            "embed",
            items,
            field,
            truncate,
            words=words,
            pooling=self.model.pooling,
            normalize=normalize,
            side=side,
        )
        vectors = np.stack([vector for vector, _ in answers])
        return self.shortened(vectors, dimensions, normalize), sum(length for _, length in answers)

    async def scores(
        self,
        query: str,
        documents: list[str],
        field: str,
        truncate: bool,
        raw: bool = False,
        direction: str = "right",
    ) -> tuple[list[float], int]:
        """Each document's relevance to the query (a cross-encoder's), and the tokens the pairs took."""
        self.require("rerank")
        self.check_text(query, "query", "the query")
        self.check_texts(documents, field)
        pairs = [(query, d) for d in documents]
        answers = await self.run(
            "rerank", pairs, field, truncate, noun="query + document", raw=raw, side=direction
        )
        return [score for score, _ in answers], sum(length for _, length in answers)


# little-endian, as the OpenAI client reads base64
BASE64_DTYPES = MappingProxyType({"base64": "<f4", "base64_float16": "<f2"})


def encode_vector(vector: np.ndarray, encoding: str) -> Any:
    """A vector (or a row-major matrix) as JSON numbers, or one base64 string of its float32 / float16 bytes."""
    if encoding in BASE64_DTYPES:
        return base64.b64encode(np.asarray(vector, dtype=BASE64_DTYPES[encoding]).tobytes()).decode("ascii")
    return vector.tolist()


def as_items(inputs: Any) -> list[Any]:
    """OpenAI's and TEI's ``input(s)``: a text, texts, one text's token ids, or several texts' ids."""
    if isinstance(inputs, str):
        return [inputs]
    if inputs and isinstance(inputs[0], int):
        return [list(inputs)]
    return list(inputs)


def side(direction: str) -> str:
    """TEI's ``truncation_direction`` (``Right`` / ``Left``) as the model process's ``right`` / ``left``."""
    return direction.lower()


def ranked(scores: list[float], top_n: int | None) -> list[int]:
    """Indices, most relevant first, the first ``top_n`` (all: None)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]


def rerank_results(request: Any, documents: list[str], relevance: list[float]) -> list[dict[str, Any]]:
    """Cohere's ``results`` (ours and Cohere's rerank): ``{index, relevance_score, document?}``, best first."""
    out = []
    for i in ranked(relevance, request.top_n):
        result: dict[str, Any] = {"index": i, "relevance_score": relevance[i]}
        if request.return_documents:
            result["document"] = {"text": documents[i]}
        out.append(result)
    return out
