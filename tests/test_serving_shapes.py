"""Each dialect owns its shapes, and a request field's limits follow its marker, not its name
(neobert.serving.schemas: ``TextInput`` and the other markers, ``state_limits``).

A toy dialect, declared as a real one is (a module with ``add(routes)`` adding its route through
``core.Routes``, handed to the app as one more entry of ``routes.DIALECTS``), names its texts ``sentences``: a
real server on 127.0.0.1 states their limits in ``/openapi.json`` and refuses what passes them with 413."""

from __future__ import annotations

from types import ModuleType
from typing import Annotated

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import Field, StrictBool, StrictStr

from helpers import call
from neobert.serving import ServeConfig
from neobert.serving.routes import DIALECTS, Routes
from neobert.serving.schemas import LenientRequest, TextInput, request_shapes, state_limits
from neobert.serving.server import BackgroundServer
from neobert.serving.service import Service

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_TEXTS, MAX_CHARS = 3, 40


class SentencesRequest(LenientRequest):
    sentences: Annotated[list[StrictStr], Field(min_length=1), TextInput()]
    labels: list[StrictStr] = []  # strings the model never reads: no marker, so no limits
    normalize: StrictBool = True


def add(routes: Routes) -> None:
    @routes.model_route("/toy/embed", "embed", list[list[float]])
    async def toy_embed(request: SentencesRequest) -> Response:
        """The toy dialect's embeddings: ``sentences`` -> a list of vectors."""
        vectors, _ = await routes.vectors(request.sentences, "sentences", True, request.normalize)
        return JSONResponse(vectors.tolist())


toy = ModuleType("toy_dialect", "A dialect of one route whose texts are called sentences.")
toy.add = add


@pytest.fixture(scope="module")
def toy_server():
    config = ServeConfig(
        model="tiny",
        head="base",
        precision="fp32",
        model_process=False,
        threads=1,
        max_texts=MAX_TEXTS,
        max_chars=MAX_CHARS,
    )
    with BackgroundServer(Service.load(config), dialects=(*DIALECTS, toy)) as srv:
        yield srv


def test_a_toy_dialect_states_and_enforces_the_limits_of_its_sentences(toy_server):
    url = toy_server.url
    status, schema, _ = call(url, "GET", "/openapi.json", key=None)
    assert status == 200
    fields = schema["components"]["schemas"]["SentencesRequest"]["properties"]
    sentences = fields["sentences"]
    assert (sentences["minItems"], sentences["maxItems"], sentences["items"]["maxLength"]) == (
        1,
        MAX_TEXTS,
        MAX_CHARS,
    )
    assert "maxItems" not in fields["labels"] and "maxLength" not in fields["labels"]["items"]
    body = schema["paths"]["/toy/embed"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/SentencesRequest"}
    assert "413" in schema["paths"]["/toy/embed"]["post"]["responses"]

    status, vectors, _ = call(url, "POST", "/toy/embed", {"sentences": ["a cat", "a dog"]}, key=None)
    assert status == 200 and np.asarray(vectors).shape == (2, 64)  # the tiny preset is 64 wide
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)

    too_many = {"sentences": ["a cat"] * (MAX_TEXTS + 1), "labels": ["x" * (MAX_CHARS + 1)] * 9}
    status, answer, _ = call(url, "POST", "/toy/embed", too_many, key=None)
    assert status == 413, answer
    assert answer["error"]["message"] == f"{MAX_TEXTS + 1} texts in one request; the limit is {MAX_TEXTS}"
    assert answer["error"]["param"] == "sentences"

    too_long = {"sentences": ["a cat", "y" * (MAX_CHARS + 1)]}
    status, answer, _ = call(url, "POST", "/toy/embed", too_long, key=None)
    assert status == 413, answer
    assert answer["error"]["message"] == f"text 1 has {MAX_CHARS + 1} characters; the limit is {MAX_CHARS}"
    assert answer["error"]["param"] == "sentences[1]"

    at_the_limits = {"sentences": ["z" * MAX_CHARS] * MAX_TEXTS, "labels": ["x" * (MAX_CHARS + 1)] * 9}
    status, vectors, _ = call(url, "POST", "/toy/embed", at_the_limits, key=None)
    assert status == 200 and len(vectors) == MAX_TEXTS  # what the schema allows is served


class Served:  # what state_limits reads of a served model
    vocab_size, mask_token, dimensions, prompts, serves = 100, "[MASK]", 8, {}, ("embed",)


def stated(shape: type, limits: dict | None = None) -> dict:
    """The schema FastAPI gives an app of one route taking ``shape``, with its limits stated."""
    app = FastAPI()

    async def route(request):
        return None

    route.__annotations__ = {"request": shape, "return": None}
    app.post("/x")(route)
    limits = limits or {"max_texts": 2, "max_chars": 5, "max_answer_bytes": 1000}
    return state_limits(app.openapi(), request_shapes(app), limits, Served())["components"]["schemas"]


class MarkedRequest(LenientRequest):
    query: Annotated[StrictStr, TextInput(many=False)]
    texts: list[StrictStr]  # named as our texts are, but unmarked: no limits
    ids: Annotated[list[int] | list[list[int]], TextInput(ids=True)]
    masked: Annotated[StrictStr | list[StrictStr], TextInput(masked=True)]


class OneTextMarkedMany(LenientRequest):
    query: Annotated[StrictStr, TextInput()]


class IdsMarkedAsText(LenientRequest):
    sentences: Annotated[list[StrictStr] | list[int], TextInput()]


def test_the_marker_and_its_parameters_decide_the_limits_not_the_names():
    fields = stated(MarkedRequest)["MarkedRequest"]["properties"]
    assert fields["query"]["maxLength"] == 5 and "maxItems" not in fields["query"]
    assert fields["texts"] == {"items": {"type": "string"}, "type": "array", "title": "Texts"}
    one_text_ids, texts_ids = fields["ids"]["anyOf"]
    assert (one_text_ids["maxItems"], one_text_ids["items"]["maximum"]) == (5, 99)  # ids below the vocabulary
    assert (texts_ids["maxItems"], texts_ids["items"]["maxItems"]) == (2, 5)
    one, many = fields["masked"]["anyOf"]
    assert one["pattern"] == many["items"]["pattern"] == r"\[MASK\]" and many["maxItems"] == 2


def test_a_marker_that_disagrees_with_its_field_fails_naming_it():
    with pytest.raises(TypeError, match=r"OneTextMarkedMany\.query: marked TextInput\(many=True.*many=False"):
        stated(OneTextMarkedMany)
    with pytest.raises(TypeError, match=r"IdsMarkedAsText\.sentences: .*ids=False.*ids=True"):
        stated(IdsMarkedAsText)
