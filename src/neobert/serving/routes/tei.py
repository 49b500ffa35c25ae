"""text-embeddings-inference's dialect: its shape of ``/embed`` and ``/rerank`` (told from ours by a field,
:func:`..schemas.shape_by_field`), ``/embed_all``, ``/embed_sparse``, ``/predict``, ``/tokenize``, ``/decode``,
and ``POST /`` by the model's head as the Inference API answers it (what huggingface_hub's InferenceClient
sends and parses; TEI serves the same): its request and response shapes, then its routes."""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool, StrictStr

from ...inference.registration import HEADS
from ..errors import ServiceError
from ..schemas import (
    BYTES_PER_NUMBER,
    DIMENSIONS,
    AnswerBudget,
    Dimensions,
    Inputs,
    LenientRequest,
    ModelPrompts,
    OneText,
    Positive,
    Text,
    TextInput,
    Texts,
    TokenId,
)
from .core import Routes, as_items, encode_vector, ranked, side

# --- requests -------------------------------------------------------------------------------------------

Direction = Literal["Right", "Left", "right", "left"]
PromptName = Annotated[StrictStr | None, ModelPrompts()]
TextOrTexts = Annotated[Text | Annotated[list[Text], Field(min_length=1)], TextInput()]
Sequence = Text | Annotated[list[Text], Field(min_length=1, max_length=2)]  # a text or a pair
Sequences = Annotated[Text | Annotated[list[Sequence], Field(min_length=1)], TextInput()]

TEI_TRUNCATE = Field(default=True, description="as our truncate (TEI's server-side auto-truncate is on here)")
DIRECTION = Field(default="Right", description="which end a truncated text keeps: Right cuts the end")


class TEIEmbedRequest(LenientRequest):
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: PromptName = Field(default=None, description="one of /info's prompts")
    dimensions: Dimensions = DIMENSIONS


class TEIEmbedAllRequest(LenientRequest):
    inputs: Inputs
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: PromptName = None
    encoding_format: Annotated[Literal["float", "base64", "base64_float16"], AnswerBudget()] = Field(
        default="float",
        description="float: JSON numbers; base64 / base64_float16: each input's states as one "
        "string of little-endian float32 / float16 bytes, row-major (tokens x hidden): 1/4 and 1/8 of the "
        "JSON's size",
    )


class PredictRequest(LenientRequest):
    inputs: Sequences = Field(
        description="a text; a pair [text, text]; or a batch of texts and pairs [[text] | [text, text], ...]"
    )
    raw_scores: StrictBool = Field(default=False, description="logits instead of probabilities")
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


class TEIRerankRequest(LenientRequest):
    query: OneText
    texts: Texts
    raw_scores: StrictBool = False
    return_text: StrictBool = False
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


class TokenizeRequest(LenientRequest):
    inputs: Annotated[StrictStr | Annotated[list[StrictStr], Field(min_length=1)], TextInput()]
    add_special_tokens: StrictBool = True
    prompt_name: PromptName = None


class DecodeRequest(LenientRequest):
    ids: Annotated[list[TokenId] | Annotated[list[list[TokenId]], Field(min_length=1)], TextInput(ids=True)]
    skip_special_tokens: StrictBool = True


class TEIEmbedSparseRequest(LenientRequest):
    inputs: Inputs = Field(
        description="a text, texts, or token ids of our tokenizer (special tokens included)"
    )
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION
    prompt_name: PromptName = Field(default=None, description="one of /info's prompts")
    top_k: Positive | None = Field(default=None, description="keep each text's k highest values")
    return_tokens: StrictBool = Field(default=False, description="each value's vocabulary entry as `token`")


class Parameters(LenientRequest):
    top_k: Positive | None = None
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = None


EMBED_FIELDS = (
    "normalize",
    "truncation_direction",
    "prompt_name",
    "dimensions",
)  # TEI /embed's, not fill-mask's


class RootMaskedLMRequest(LenientRequest):
    """``POST /`` of an MLM: the Inference API's fill-mask where every text holds the mask token, else
    TEI's ``/embed`` (what ``InferenceClient.feature_extraction`` sends: the texts' embeddings)."""

    inputs: TextOrTexts
    parameters: Parameters | None = Field(default=None, description="fill-mask's (top_k)")
    truncate: StrictBool = TEI_TRUNCATE
    normalize: StrictBool = True
    truncation_direction: Direction = DIRECTION
    prompt_name: PromptName = Field(default=None, description="one of /info's prompts")
    dimensions: Dimensions = DIMENSIONS


class RootPredictRequest(LenientRequest):
    """``POST /`` of a sequence classifier (the Inference API's text classification)."""

    inputs: Sequences
    parameters: Parameters | None = None
    truncate: StrictBool = TEI_TRUNCATE
    truncation_direction: Direction = DIRECTION


class RootTokensRequest(LenientRequest):
    """``POST /`` of a token classifier (the Inference API's token classification)."""

    inputs: TextOrTexts
    parameters: dict[str, Any] | None = None
    truncate: StrictBool = TEI_TRUNCATE


# --- responses (for the OpenAPI schema; the endpoints build them as plain JSON) --------------------------

Vectors = list[list[float]]  # TEI's /embed answer: a bare list of vectors


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


class SparseValue(BaseModel):
    index: int = Field(description="the vocabulary id")
    value: float
    token: str | None = Field(default=None, description="the vocabulary entry (return_tokens: true)")


class FillMaskItem(
    BaseModel
):  # the Inference API's fill-mask element (huggingface_hub's FillMaskOutputElement)
    sequence: str
    score: float
    token: int
    token_str: str


# --- routes ---------------------------------------------------------------------------------------------


async def embed(routes: Routes, request: TEIEmbedRequest | RootMaskedLMRequest) -> Response:
    """``inputs`` -> a list of vectors (also ``POST /`` of a base encoder)."""
    items = routes.prompted(as_items(request.inputs), request.prompt_name)
    vectors, _ = await routes.vectors(
        items,
        "inputs",
        request.truncate,
        request.normalize,
        request.dimensions,
        side(request.truncation_direction),
    )
    return JSONResponse(vectors.tolist())


async def rerank(routes: Routes, request: TEIRerankRequest) -> Response:
    """``texts`` -> a list of ``{index, score, text?}``, best first (``raw_scores``: the logit)."""
    relevance, _ = await routes.scores(
        request.query,
        request.texts,
        "texts",
        request.truncate,
        request.raw_scores,
        side(request.truncation_direction),
    )
    return JSONResponse(
        [
            {"index": i, "score": relevance[i], **({"text": request.texts[i]} if request.return_text else {})}
            for i in ranked(relevance, None)
        ]
    )


def add(routes: Routes) -> None:
    """TEI's routes that no other dialect shares a path with."""
    add_embedding_routes(routes)
    add_predict_route(routes)
    add_tokenizer_routes(routes)
    add_root_route(routes)


def add_embedding_routes(routes: Routes) -> None:
    @routes.model_route("/embed_all", "embed_all", list[Vectors] | list[str])
    async def embed_all(request: TEIEmbedAllRequest) -> Response:
        """text-embeddings-inference's: the last hidden state of every token (special ones included) of
        each input; a long input is cut to the model's window (``truncation_direction``), whatever the policy.
        ``encoding_format`` ``base64`` / ``base64_float16``: each input's states as one string, little-endian
        float32 / float16, row-major (tokens x hidden). Bounded by ``max_answer_bytes`` (413 before the
        model runs)."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        encoding, hidden = request.encoding_format, routes.model.dimensions
        await routes.check_answer(
            "embed_all",
            items,
            "inputs",
            hidden * BYTES_PER_NUMBER[encoding],
            f"{hidden} numbers as {encoding} ({BYTES_PER_NUMBER[encoding]:.3g} bytes a number)",
        )
        answers = await routes.run(
            "embed_all", items, "inputs", request.truncate, side=side(request.truncation_direction)
        )
        return JSONResponse([encode_vector(states, encoding) for states, _ in answers])

    @routes.model_route("/embed_sparse", "embed_sparse", list[list[SparseValue]])
    async def embed_sparse(request: TEIEmbedSparseRequest) -> Response:
        """text-embeddings-inference's: each input's SPLADE vector (its MLM logits, max-pooled over its
        tokens: what sentence-transformers' ``SparseEncoder`` computes) as ``[{index, value}]``, highest value
        first; ``top_k`` keeps the k highest; ``return_tokens`` adds each index's vocabulary entry
        (``token``). Served by a SPLADE ``SparseEncoder`` directory, or a masked-LM model with ``--sparse``;
        a long input is cut to the model's window (``truncation_direction``), whatever the policy."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        answers = await routes.run(
            "embed_sparse",
            items,
            "inputs",
            request.truncate,
            side=side(request.truncation_direction),
            top_k=request.top_k,
            tokens=request.return_tokens,
        )
        return JSONResponse([row for row, _ in answers])


def add_predict_route(routes: Routes) -> None:
    @routes.model_route("/predict", "predict", list[TEIPrediction] | list[list[TEIPrediction]])
    async def predict(request: PredictRequest) -> Response:
        """text-embeddings-inference's: every label with its score, best first. ``inputs``: a text, a pair
        ``[text, text]`` (two texts in one list are a pair, as TEI reads them), or a batch
        ``[[text] | [text, text], ...]`` (or a list of other than two texts) -> a list per input."""
        items, single = predict_items(request.inputs)
        function = "none" if request.raw_scores else "auto"
        answers = await routes.run(
            "predict",
            items,
            "inputs",
            request.truncate,
            function=function,
            side=side(request.truncation_direction),
        )
        rows = [row for row, _ in answers]
        return JSONResponse(rows[0] if single else rows)


def predict_items(inputs: Any) -> tuple[list[Any], bool]:
    """TEI's ``/predict`` inputs as texts and (first, second) pairs, and whether one input was given."""
    if isinstance(inputs, str):
        return [inputs], True
    if len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        return [tuple(inputs)], True
    return [x if isinstance(x, str) else (x[0] if len(x) == 1 else tuple(x)) for x in inputs], False


def add_tokenizer_routes(routes: Routes) -> None:
    @routes.model_route("/tokenize", "tokenize", list[list[TEIToken]])
    async def tokenize(request: TokenizeRequest) -> Response:
        """text-embeddings-inference's: each text's tokens (id, text, special, start, stop: a character span,
        end exclusive; None for special tokens), as the model's tokenizer makes them."""
        items = routes.prompted(as_items(request.inputs), request.prompt_name)
        answers = await routes.run(
            "tokenize", items, "inputs", True, add_special_tokens=request.add_special_tokens
        )
        return JSONResponse([row for row, _ in answers])

    @routes.model_route("/decode", "decode", list[str])
    async def decode(request: DecodeRequest) -> Response:
        """text-embeddings-inference's: the text of each list of token ids."""
        rows = [list(request.ids)] if not request.ids or isinstance(request.ids[0], int) else request.ids
        answers = await routes.run(
            "decode", rows, "ids", True, skip_special_tokens=request.skip_special_tokens
        )
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
    return await embed(routes, request)


async def root_predict(routes: Routes, request: RootPredictRequest) -> Response:
    """A sequence classifier: every label's score, best first, a list per input (``parameters``:
    ``top_k``, ``function_to_apply``)."""
    texts, _ = text_inputs(request.inputs, pairs=True)
    parameters = request.parameters or Parameters()
    answers = await routes.run(
        "predict",
        texts,
        "inputs",
        request.truncate,
        function=parameters.function_to_apply or "auto",
        side=side(request.truncation_direction),
    )
    return JSONResponse([row[: parameters.top_k] for row, _ in answers])


async def root_fill_mask(routes: Routes, request: RootMaskedLMRequest) -> Response:
    """An MLM fills its masks where every text holds the mask token: ``[{sequence, score, token,
    token_str}]`` (a list per mask where a text has several; a list per text for several texts). Texts
    without it, or a request with TEI's embedding fields (``normalize``, ``truncation_direction``,
    ``prompt_name``, ``dimensions``), are embedded as TEI's ``/embed`` answers (a list of vectors): what
    ``InferenceClient.feature_extraction`` asks of a masked LM such as the released NeoBERT."""
    texts, single = text_inputs(request.inputs, pairs=False)
    mask = routes.model.mask_token
    if request.model_fields_set & set(EMBED_FIELDS) or not all(mask and mask in text for text in texts):
        return await embed(routes, request)
    top_k = (request.parameters.top_k if request.parameters else None) or 5
    answers = await routes.run("fill-mask", texts, "inputs", request.truncate, top_k=top_k)
    rows = [[filled(text, candidates, mask) for candidates in row] for text, (row, _) in zip(texts, answers)]
    rows = [row[0] if len(row) == 1 else row for row in rows]
    return JSONResponse(rows[0] if single else rows)


async def root_tokens(routes: Routes, request: RootTokensRequest) -> Response:
    """A token classifier: entities ``[{entity_group, score, word, start, end}]`` (a list per text)."""
    texts, single = text_inputs(request.inputs, pairs=False)
    answers = await routes.run("tokens", texts, "inputs", request.truncate)
    rows = [
        [
            {
                "entity_group": e["label"],
                "score": e["score"],
                "word": e["text"],
                "start": e["start"],
                "end": e["end"],
            }
            for e in row
        ]
        for row, _ in answers
    ]
    return JSONResponse(rows[0] if single else rows)


# what `POST /` takes and answers for each task a head may name as its root task (registration.Head.root_task)
ROOT = MappingProxyType(
    {
        "embed": (TEIEmbedRequest, root_embed),
        "fill-mask": (RootMaskedLMRequest, root_fill_mask),
        "predict": (RootPredictRequest, root_predict),
        "tokens": (RootTokensRequest, root_tokens),
    }
)


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
    return [
        FillMaskItem(
            sequence=text.replace(mask, token, 1), score=score, token=token_id, token_str=token
        ).model_dump()
        for token, score, token_id in candidates
    ]
