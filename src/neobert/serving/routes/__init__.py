"""The service's routes, one module per dialect over a shared core (docs/serving.md, "Clients people already
use"):

* :mod:`.core`: :class:`Routes`, what every route shares (the limits, the model call through the queue,
  prompts, widths, rerank scores) and the app's own route table (path -> the model task it needs);
* :mod:`.ours`: ``texts`` in, named fields out (``/embed``, ``/rerank``, ``/classify``, ``/tokens``,
  ``/fill-mask``);
* :mod:`.tei`: text-embeddings-inference's (``/embed`` and ``/rerank`` in its shape, ``/embed_all``,
  ``/embed_sparse``, ``/predict``, ``/tokenize``, ``/decode``, ``POST /`` by the model's head);
* :mod:`.openai`: OpenAI's (``/v1/embeddings``, ``/v1/models``);
* :mod:`.cohere`: Cohere's and Jina's rerank (``/v1/rerank``, ``/v2/rerank``), Cohere's ``/v2/embed``;
* :mod:`.vllm`: vLLM's adapters loaded while serving (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``);
* :mod:`.status`: ``/info``, ``/health``, ``/metrics``.

A request's model (its ``model`` field, or the ``/models/NAME/`` its URL starts with: TEI's dialect has no
field) is resolved in one place, :meth:`Routes.answering`, for every model route.

Each dialect's module holds its request and response shapes beside its routes (what they share:
:mod:`..schemas`), and an ``add(routes)`` that declares its routes through :class:`Routes`; :data:`DIALECTS`
lists them. A path two dialects share (``/embed``, ``/rerank``) is declared once, below, with each dialect's
handler of its request shape (:meth:`Routes.by_shape`). Nothing here is module state: :func:`add_routes`
returns the app's route table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Annotated, Any

from fastapi import FastAPI
from pydantic import Tag

from ..schemas import shape_by_field
from . import cohere, openai, ours, status, tei, vllm
from .core import LIMITS, SERVICE_ROUTES, Routes, as_items, encode_vector, warn
from .ours import EmbedRequest, EmbedResponse, RerankRequest, RerankResponse
from .tei import TEIEmbedRequest, TEIRerankItem, TEIRerankRequest, Vectors

__all__ = (
    "DIALECTS",
    "LIMITS",
    "SERVICE_ROUTES",
    "Routes",
    "add_routes",
    "as_items",
    "encode_vector",
    "warn",
)

# the dialects every app speaks, in the order their routes are declared: a new dialect is one entry
DIALECTS: tuple[ModuleType, ...] = (ours, tei, openai, cohere, vllm, status)

# the request of a path two dialects share: either dialect's shape, told apart by a field
EmbedBody = Annotated[
    Annotated[EmbedRequest, Tag("ours")] | Annotated[TEIEmbedRequest, Tag("tei")], shape_by_field("inputs")
]
RerankBody = Annotated[
    Annotated[RerankRequest, Tag("ours")] | Annotated[TEIRerankRequest, Tag("tei")], shape_by_field("texts")
]


def add_routes(app: FastAPI, service: Any, dialects: Sequence[Any] = DIALECTS) -> Mapping[str, str]:
    """Every route of the service on ``app``: the paths ours and TEI's share, then each of ``dialects``'
    (a module, or any object, with ``add(routes)``); its model routes (path -> task), read-only."""
    routes = Routes(app, service)
    add_shared(routes)
    for dialect in dialects:
        dialect.add(routes)
    return routes.table


def add_shared(routes: Routes) -> None:
    """The paths ours and text-embeddings-inference's dialects share, told apart by a field."""
    routes.by_shape(
        "/embed",
        "embed",
        EmbedBody,
        EmbedResponse | Vectors,
        {EmbedRequest: ours.embed, TEIEmbedRequest: tei.embed},
        "embed",
        "Vectors of the texts. Ours: ``texts``, with the model's pooling and normalisation unless the\n"
        'request names them -> ``{"embeddings"}``. text-embeddings-inference\'s: ``inputs`` -> a list of vectors.',
    )
    routes.by_shape(
        "/rerank",
        "rerank",
        RerankBody,
        RerankResponse | list[TEIRerankItem],
        {RerankRequest: ours.rerank, TEIRerankRequest: tei.rerank},
        "rerank",
        "A cross-encoder's relevance of each document to the query, most relevant first: the sigmoid of a\n"
        "one-logit model, the second label's probability of a two-label one. Ours (Cohere's shape):\n"
        '``documents`` -> ``{"results", "model"}``; text-embeddings-inference\'s: ``texts`` -> a list of\n'
        "``{index, score, text?}`` (``raw_scores``: the logit).",
    )
