"""What every dialect's request and response shapes share (pydantic). Each dialect's own shapes live in its
module under :mod:`.routes`, beside its routes; here are the request bases, JSON integers, texts and token ids,
the error body, rerank results (ours and Cohere's), and the markers a request field carries to say what
``/openapi.json`` states of it for this server's model and limits: :func:`state_limits` reads them from the
models' fields (``Annotated[type, marker]``), never from a field's or a model's name."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, StrictStr

from ..inference.quantization import CALIBRATED

# --- requests -------------------------------------------------------------------------------------------


class StrictRequest(BaseModel):  # our dialect: an unknown field is refused (422 naming it)
    model_config = ConfigDict(extra="forbid")


class LenientRequest(
    BaseModel
):  # the dialects of other servers: clients send fields we do not use (user, ...)
    model_config = ConfigDict(extra="ignore")


def _integral(value: Any) -> Any:
    """JSON Schema's ``integer`` admits 3.0: so do we (strings and booleans stay refused)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(**bounds: int) -> Any:
    """A JSON integer (3.0 too) within ``bounds`` (ge, le): the bounds stated in the schema as JSON Schema's."""
    return Annotated[int, Field(strict=True, **bounds), BeforeValidator(_integral)]


def shape_by_field(field: str) -> Any:
    """A route that speaks two dialects tells them apart by one field: ``field`` present -> TEI's shape."""

    def tag(body: Any) -> str:
        return "tei" if (field in body if isinstance(body, dict) else hasattr(body, field)) else "ours"

    return Discriminator(tag)


# --- markers: what the schema states of a request field, for this server's model and limits --------------


class Given(NamedTuple):
    """What a marker states a field's bounds from: the server's limits, its model
    (:class:`.served.ServedModel`; a service of several models: what any of them accepts,
    :meth:`.served.ServedModel.envelope`), whether it has calibration ranges (``--calibration``), and the
    names of the models it serves (a service of several; empty for one)."""

    limits: dict[str, Any]
    model: Any
    calibrated: bool
    names: tuple[str, ...] = ()


class Stated:
    """A marker of a request field (``Annotated[type, marker]``): :meth:`state` writes into the field's
    schema (``field``; ``shape``: its model's) what this server accepts there. :func:`state_limits` finds
    the markers in the fields' metadata (pydantic's ``model_fields[name].metadata``)."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class TextInput(Stated):
    """A field the model reads: one text, or a list of texts (``many``: at most ``max_texts``), each at most
    ``max_chars`` characters. ``ids``: a list of the model's token ids may stand for a text (at most
    ``max_chars`` ids, each below the vocabulary). ``masked``: each text must hold the model's mask token
    (the schema's ``pattern``). ``texts_only_for``: a model serving this task takes texts only here (the
    token-id forms leave its schema: a late-interaction model's markers go before a text). The field's type must hold what ``many`` and ``ids`` say, no more and
    no less: else stating the schema fails, naming the field. The 413s that match are ``Routes.check_texts``'
    (through ``Routes.run``, ``check_answer`` and ``scores``), given the field's texts by its route."""

    many: bool = True
    ids: bool = False
    masked: bool = False
    texts_only_for: str | None = None

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        found = _bound(field, given.limits, given.model.vocab_size, outer=True)
        held = {"many": "lists" in found, "ids": "ids" in found}
        if held != {"many": self.many, "ids": self.ids}:
            raise TypeError(
                f"marked {self}, but its type holds {', '.join(f'{k}={v}' for k, v in held.items())}"
            )
        if self.masked and given.model.mask_token:
            _pattern(field, re.escape(given.model.mask_token))
        if self.texts_only_for is not None and self.texts_only_for in given.model.serves:
            _texts_only(field)


@dataclass(frozen=True)
class ModelName(Stated):
    """A model's name (``model``): a service of several models takes one of theirs (else 404); a service of
    one model takes any name, its model answering it (OpenAI's clients always send one)."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        if given.names:
            field.pop("anyOf", None)
            field["anyOf"] = [{"type": "string", "enum": list(given.names)}, {"type": "null"}]
            field["description"] = "one of the models served (GET /v1/models); none: the default"


@dataclass(frozen=True)
class ModelWidth(Stated):
    """A width (``dimensions``): at most the model's."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        _each(field, "integer", lambda n: n.update(maximum=given.model.dimensions))


@dataclass(frozen=True)
class ModelPrompts(Stated):
    """A prompt's name (``prompt_name``): one of the model's prompts, or none."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        prompts = sorted(given.model.prompts)
        field.pop("anyOf", None)
        field["anyOf"] = (
            [{"type": "string", "enum": prompts}, {"type": "null"}] if prompts else [{"type": "null"}]
        )


@dataclass(frozen=True)
class Calibrated(Stated):
    """A list of embedding types: those that need calibration ranges (``inference.quantization.CALIBRATED``)
    only where the server has them."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        if not given.calibrated:
            _each(
                field.get("items", {}),
                "string",
                lambda n: n.update(enum=[t for t in n["enum"] if t not in CALIBRATED]),
            )


@dataclass(frozen=True)
class AnswerBudget(Stated):
    """The encoding of an answer of token states (``encoding_format``): the request's description states
    how many tokens fit the answer budget (``max_answer_bytes``) in each encoding."""

    def state(self, field: dict[str, Any], shape: dict[str, Any], given: Given) -> None:
        shape["description"] = answer_budget(given.limits, given.model.dimensions)


# --- texts and token ids ---------------------------------------------------------------------------------

Text = Annotated[StrictStr, Field(min_length=1)]  # an empty text has nothing to embed, classify or rank
OneText = Annotated[Text, TextInput(many=False)]
Texts = Annotated[list[Text], Field(min_length=1), TextInput()]
TokenId = integer(ge=0)
Positive = integer(ge=1)
Ids = Annotated[list[TokenId], Field(min_length=1)]
# a text, or a text as token ids (the model's tokenizer's, special tokens included: what /tokenize gives)
InputForms = (
    Text | Annotated[list[Text], Field(min_length=1)] | Ids | Annotated[list[Ids], Field(min_length=1)]
)
Inputs = Annotated[InputForms, TextInput(ids=True)]
Dimensions = Annotated[Positive | None, ModelWidth()]
ModelField = Annotated[StrictStr | None, ModelName()]  # a request's model: the name of a served model


# an answer's bytes per number as sent, by encoding_format (the answer budget, max_answer_bytes): the JSON
# text of a float32 value runs 19-20 characters with its comma (measured on normal values); base64 is 4
# characters per 3 bytes
BYTES_PER_NUMBER = {"float": 20.0, "base64": 16 / 3, "base64_float16": 8 / 3}

TRUNCATE = Field(
    default=True,
    description="true: a text longer than the model window follows the server's long-document policy "
    "(truncate by default); false: such a text is refused with 413 naming it and its token count",
)

DIMENSIONS = Field(
    default=None,
    description="keep the first N components, then renormalise (sound "
    "for the widths a Matryoshka model was trained for: /info's matryoshka_dims)",
)


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None = Field(description="OpenAI's: e.g. model_not_found, invalid_api_key")


class ErrorResponse(BaseModel):
    error: ErrorBody


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):  # ours and Cohere's (routes.core.rerank_results)
    index: int
    relevance_score: float
    document: RerankDocument | None = None


# --- the schema states what this server's model accepts ----------------------------------------------------


def state_limits(
    openapi: dict[str, Any],
    shapes: list[type[BaseModel]],
    limits: dict[str, Any],
    model: Any,
    calibrated: bool = False,
    names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``openapi`` (FastAPI's) with what this server's model and limits accept stated on every marked field
    of the request ``shapes`` (:func:`request_shapes`): texts per request (``max_texts``) and characters per
    text (``max_chars``; token ids per text alike), token ids below the vocabulary, the mask token a
    fill-mask text must hold (:class:`TextInput`), ``dimensions`` up to the model's, the prompt names it
    has, Cohere's int8 / uint8 ``embedding_types`` only where the server has calibration ranges
    (``calibrated``), the answer budget (``model``: the :class:`.served.ServedModel`), the names of the
    models served (``names``: a service of several). A client generated from it is refused nothing the
    schema allows."""
    components = openapi.get("components", {}).get("schemas", {})
    openapi.setdefault("info", {})["x-limits"] = dict(limits)
    if names:
        openapi["info"]["x-models"] = list(names)
    given = Given(dict(limits), model, calibrated, tuple(names))
    for shape in shapes:
        marked = {name: _markers(shape, name, info) for name, info in shape.model_fields.items()}
        marked = {name: markers for name, markers in marked.items() if markers}
        if not marked:
            continue
        schema = _component(components, shape)
        for name, markers in marked.items():
            field = schema["properties"][shape.model_fields[name].alias or name]
            for marker in markers:
                try:
                    marker.state(field, schema, given)
                except TypeError as error:
                    raise TypeError(f"{shape.__name__}.{name}: {error}") from None
    return openapi


def request_shapes(app: Any) -> list[type[BaseModel]]:
    """The request models of ``app``'s routes that take a body, the models they nest included, each once."""
    found: dict[type[BaseModel], None] = {}
    for route in app.routes:
        body = getattr(route, "body_field", None)
        if body is not None:
            _models(body.field_info.annotation, found)
    return list(found)


def _models(annotation: Any, found: dict[type[BaseModel], None]) -> None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in found:
            found[annotation] = None
            for info in annotation.model_fields.values():
                _models(info.annotation, found)
        return
    for arg in typing.get_args(annotation):  # unions, lists, Annotated
        _models(arg, found)


def _markers(shape: type[BaseModel], name: str, info: Any) -> list[Stated]:
    markers = [m for m in info.metadata if isinstance(m, Stated)]
    kinds = [type(m).__name__ for m in markers]
    if len(set(kinds)) < len(kinds):
        raise TypeError(f"{shape.__name__}.{name}: two markers of one kind ({', '.join(kinds)})")
    return markers


def _component(components: dict[str, Any], shape: type[BaseModel]) -> dict[str, Any]:
    """``shape``'s schema among the OpenAPI components: under its name, or, where two models share a name,
    the one pydantic qualifies with its module."""
    title = shape.model_config.get("title") or shape.__name__
    for key in (shape.__name__, f"{shape.__module__}.{shape.__qualname__}".replace(".", "__")):
        if components.get(key, {}).get("title") == title:
            return components[key]
    raise LookupError(f"the OpenAPI schema has no component for the request model {shape.__qualname__}")


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


def _bound(node: dict[str, Any], limits: dict[str, Any], vocab_size: int | None, outer: bool) -> set[str]:
    """Bounds ``node`` (a text field's schema) by the limits; what it holds: ``lists`` (of texts, at most
    max_texts), ``ids`` (token ids)."""
    found = set()
    for option in node.get("anyOf", []):
        found |= _bound(option, limits, vocab_size, outer)
    kind = node.get("type")
    if kind == "string":
        node["maxLength"] = limits["max_chars"]
    elif kind == "integer":
        found.add("ids")
        if vocab_size:
            node["maximum"] = int(vocab_size) - 1
    elif kind == "array":
        items = node.get("items", {})
        if items.get("type") == "integer":
            node["maxItems"] = limits["max_chars"]  # one text's token ids
        elif outer:
            node["maxItems"] = limits["max_texts"]
            found.add("lists")
        found |= _bound(items, limits, vocab_size, outer=False)
    return found


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
