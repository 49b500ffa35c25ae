"""The model side of the service's tasks: one function per task, run on a merged batch in the model process.

A route (:mod:`.routes`) sends a :class:`ModelCall` (the task, ``truncate``, the task's named options) and
its texts through the queue; the model
process answers each text with ``(value, tokens)``: the task's result and the text's length in tokens
(so the HTTP side never tokenizes: usage counts and the ``truncate: false`` refusals come from here).
A text the model process refuses is answered with a :class:`Refusal` in place of its value; the rest of its
batch is answered as usual. Which models offer a task is each head's registry entry (:attr:`neobert.inference.registration.Head.tasks`).

Adding an endpoint: one function here registered with ``@task("name")``, one route, and the task in
the head's ``Head.tasks`` (docs/architecture.md). The ONNX backend (:mod:`.onnx_backend`) implements the tasks its
graphs can run through the same :class:`Backend`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inference import late_interaction, long_documents, run, sparse
from ..inference.long_documents import LongReport
from ..inference.run import TokenIds
from ..token_classification.tagging import tag

# How a dialect spells a request that refuses over-long texts, and one that lets them be cut (ours, TEI's and
# OpenAI's ``truncate`` flag); a route of another dialect passes its own words (Cohere's ``truncate``).
TRUNCATE_WORDS = ("truncate: false", "truncate: true")


@dataclass(frozen=True)
class Refusal:
    """One text refused in the model process; ``message`` has ``{noun}`` and ``{i}`` for the route to fill
    (the text's place in its own request), and ``{refused}`` / ``{allowed}`` for its dialect's words."""

    status: int
    message: str

    def describe(self, noun: str, i: int, words: tuple[str, str] = TRUNCATE_WORDS) -> str:
        return self.message.format(noun=noun, i=i, refused=words[0], allowed=words[1])


@dataclass
class Done:
    """What a task computed: a value per text, each text's tokens, and what the long-document policy did
    (None for tasks that truncate only); ``tokens`` computed (default: the texts' tokens)."""

    values: list[Any]
    lengths: list[int]
    report: LongReport | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class ModelCall:
    """What one model call runs: the task, whether over-long texts are cut (``truncate``) or refused, the
    task's options by name (the keyword arguments of its function, :func:`task`), and the model it runs on
    (its name; for an adapter, its base's: None, the service's default). Hashable: the queue merges the
    requests of equal calls into one model call, so requests for different models never share one, and
    requests for different adapters of one base do: the merged call's ``rows`` then name, per text, the
    adapter it runs through (None: the model itself). Made by :meth:`of`."""

    task: str
    truncate: bool = True
    options: tuple[tuple[str, Hashable], ...] = ()
    model: str | None = None
    rows: tuple[str | None, ...] = ()

    @classmethod
    def of(cls, task: str, truncate: bool = True, model: str | None = None, **options: Hashable) -> ModelCall:
        """The call of ``task`` with ``options`` (in any order: equal options make equal calls) on ``model``."""
        return cls(task, truncate, tuple(sorted(options.items())), model)

    def with_rows(self, rows: tuple[str | None, ...]) -> ModelCall:
        """This call with each text's adapter (:attr:`rows`)."""
        return dataclasses.replace(self, rows=rows)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The options, as the task function's keyword arguments."""
        return dict(self.options)


TaskFn = Callable[..., Done]  # (model, texts, **options) -> Done
# every backend's task for the HTTP side (no endpoint): each text's whole length in tokens, special tokens
# included, before a model task runs (the answer budget, routes.Routes.check_answer); the tokenizer only
COUNT = "count"
# the model side's own calls (no endpoint): load a model (or register and load an adapter added over HTTP)
# and answer what it serves; unload one (:mod:`.registry`)
LOAD, UNLOAD = "load", "unload"
TASKS: dict[str, TaskFn] = {}


def task(name: str) -> Callable[[TaskFn], TaskFn]:
    """Register the PyTorch backend's function for task ``name``."""

    def register(fn: TaskFn) -> TaskFn:
        TASKS[name] = fn
        return fn

    return register


class Backend:
    """What both backends share: :meth:`call` (the function the queue calls) over the backend's
    ``run_task(task, texts, options) -> Done`` and ``lengths(texts)`` (whole lengths, for ``truncate:
    false``); ``capabilities.max_input_tokens`` is the limit; ``policy`` names the long-document policy."""

    capabilities: Any
    policy: str = "truncate"

    def run_task(self, name: str, texts: list[Any], options: dict[str, Any]) -> Done:
        raise NotImplementedError

    def lengths(self, texts: list[Any]) -> list[int]:
        raise NotImplementedError

    def text_tokenizer(self) -> Any:
        """The backend's ``tokenizers.Tokenizer`` (Rust): what ``tokenize`` and ``decode`` use."""
        raise NotImplementedError

    def dispatch(self, name: str, texts: list[Any], options: dict[str, Any]) -> Done:
        """The tokenizer's tasks here (the same for every backend); the model's through ``run_task``."""
        if name == COUNT:
            lengths = self.lengths(texts)
            return Done(list(lengths), lengths, tokens=0)  # no token ran through the model
        if name in TOKENIZER_TASKS:
            return TOKENIZER_TASKS[name](self.text_tokenizer(), texts, **options)
        return self.run_task(name, texts, options)

    def call(self, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int, dict[str, int]]:
        """One model call: ((value, tokens) per text, tokens computed, {"long", "truncated"} counts)."""
        if not isinstance(call, ModelCall):
            raise TypeError(f"a model call is a ModelCall, got {type(call).__name__}")
        name, truncate, options = call.task, call.truncate, call.kwargs
        if name not in self.capabilities.tasks and name != COUNT:
            raise ValueError(f"this model does not serve {name}")
        keep, refused = list(range(len(texts))), {}
        if not truncate:
            limit = self.capabilities.max_input_tokens
            for i, length in enumerate(self.lengths(texts)):
                if length > limit:
                    refused[i] = (_too_long(length, limit, self.policy), length)
            keep = [i for i in keep if i not in refused]
        done = self.dispatch(name, [texts[i] for i in keep], options) if keep else Done([], [])
        answers: list[Any] = [None] * len(texts)
        for i, value, length in zip(keep, done.values, done.lengths):
            answers[i] = (value, length)
        for i, answer in refused.items():
            answers[i] = answer
        report = done.report or LongReport()
        tokens = sum(done.lengths) if done.tokens is None else done.tokens
        return answers, tokens, {"long": report.over_window, "truncated": report.truncated}


def _too_long(length: int, limit: int, policy: str) -> Refusal:
    return Refusal(
        413,
        f"{{noun}} {{i}} has {length:,} tokens; the model takes at most {limit:,} ({{refused}}; with "
        f"{{allowed}} the server's {policy} policy applies)",
    )


def pair_lengths(tokenizer: Any, texts: list[Any], truncation: bool = False) -> list[int]:
    """Tokens of each text, (query, document) pair or list of token ids, special tokens included."""
    lengths = [len(item) if isinstance(item, list) else 0 for item in texts]
    for kind in (str, tuple):
        where = [i for i, item in enumerate(texts) if isinstance(item, kind)]
        if not where:
            continue
        if kind is tuple:
            firsts, seconds = [texts[i][0] for i in where], [texts[i][1] for i in where]
            ids = tokenizer(firsts, seconds, truncation=truncation, verbose=False)["input_ids"]
        else:
            ids = tokenizer([texts[i] for i in where], truncation=truncation, verbose=False)["input_ids"]
        for i, row in zip(where, ids):
            lengths[i] = len(row)
    return lengths


@contextmanager
def truncation_side(tokenizer: Any, side: str) -> Iterator[None]:
    """``tokenizer`` cutting from ``side`` (right | left) within the block (one model call at a time)."""
    before = tokenizer.truncation_side
    tokenizer.truncation_side = side
    try:
        yield
    finally:
        tokenizer.truncation_side = before


def token_rows(model: Any, items: list[Any], side: str) -> tuple[TokenIds, list[int], list[Any]]:
    """Model rows for texts and token-id lists (cut to the window from ``side``): the rows, each item's
    whole length, and a :class:`Refusal` per item whose ids the vocabulary does not hold (else None)."""
    window = long_documents.model_window(model.model, model.tokenizer)
    settings = dataclasses.replace(long_documents.TRUNCATE, side=side)
    texts = [i for i, item in enumerate(items) if isinstance(item, str)]
    out, lengths, refusals = TokenIds([[]] * len(items)), [0] * len(items), [None] * len(items)
    if texts:
        rows, _ = long_documents.tokenize_rows(
            model.model, model.tokenizer, [items[i] for i in texts], settings
        )
        for i, row, length in zip(texts, rows.ids, rows.report.lengths):
            out[i], lengths[i] = row, length
    vocab = model.text_tokenizer().get_vocab_size()  # what /info states (check_vocab: within the model's)
    for i, item in enumerate(items):
        if isinstance(item, list):
            lengths[i] = len(item)
            out[i] = run.tagged(item[:window] if side == "right" else item[-window:], run.tag_of(item))
            if max(item) >= vocab:
                refusals[i] = Refusal(
                    422, f"{{noun}} {{i}} holds token id {max(item)}; the vocabulary has {vocab}"
                )
                out[i] = [0]
    return out, lengths, refusals


# --- the PyTorch backend's tasks (model: serving.torch_backend.TorchBackend) -------------------------------------


@task("embed")
def embed(model: Any, items: list[Any], pooling: str, normalize: bool, side: str = "right") -> Done:
    if all(isinstance(item, str) for item in items):
        settings = model.long_policy if side == "right" else dataclasses.replace(model.long_policy, side=side)
        vectors, report = long_documents.embed(
            model.model, model.tokenizer, items, settings, pooling, normalize, **model.budget
        )
        return Done(list(vectors), report.lengths, report, report.tokens)
    # token ids (OpenAI's and TEI's token inputs) are rows as the model sees them: one window each
    rows, lengths, refusals = token_rows(model, items, side)
    vectors = run.encode(
        model.model,
        model.tokenizer,
        rows,
        pooling=pooling,
        normalize=normalize,
        show_progress=False,
        **model.budget,
    )
    values = [refusal or vector for refusal, vector in zip(refusals, vectors)]
    return Done(values, lengths, tokens=sum(len(row) for row in rows))


@task("embed_all")
def embed_all(model: Any, items: list[Any], side: str = "right") -> Done:
    rows, lengths, refusals = token_rows(model, items, side)
    states = run.token_states(model.model, model.tokenizer, rows, **model.budget)
    values = [refusal or state for refusal, state in zip(refusals, states)]
    return Done(values, lengths, tokens=sum(len(row) for row in rows))


@task("embed_sparse")
def embed_sparse(
    model: Any, items: list[Any], side: str = "right", top_k: int | None = None, tokens: bool = False
) -> Done:
    """SPLADE vectors (:func:`neobert.inference.sparse.encode_sparse` over the model's MLM logits) of texts or token
    ids, each cut to the window from ``side`` (whatever the long-document policy, as SparseEncoder cuts):
    per text its non-zeros ``{index, value[, token]}``, highest value first (ties: the lower index),
    the ``top_k`` largest where given."""
    rows, lengths, refusals = token_rows(model, items, side)
    matrix = sparse.encode_sparse(model.model, model.tokenizer, rows, top_k=top_k, **model.budget)
    values: list[Any] = []
    for refusal, row in zip(refusals, sparse.sparse_rows(matrix, model.tokenizer if tokens else None)):
        values.append(refusal or sorted(row, key=lambda entry: (-entry["value"], entry["index"])))
    return Done(values, lengths, tokens=sum(len(row) for row in rows))


@task("classify")
def classify(model: Any, texts: list[str]) -> Done:
    logits, report = long_documents.classifier_logits(
        model.model, model.tokenizer, texts, model.long_policy, **model.budget
    )
    return Done(run.classifier_rows(logits, model.model.config), report.lengths, report, report.tokens)


def pair_logits(model: Any, items: list[Any], side: str) -> np.ndarray:
    """Classifier logits of texts and (first, second) pairs, in order; texts under the long-document policy."""
    out = np.empty((len(items), model.model.config.num_labels), dtype=np.float32)
    texts = [i for i, item in enumerate(items) if isinstance(item, str)]
    pairs = [i for i, item in enumerate(items) if isinstance(item, tuple)]
    if texts:
        settings = model.long_policy if side == "right" else dataclasses.replace(model.long_policy, side=side)
        logits, _ = long_documents.classifier_logits(
            model.model, model.tokenizer, [items[i] for i in texts], settings, **model.budget
        )
        out[texts] = logits
    if pairs:
        with truncation_side(model.tokenizer, side):
            firsts, seconds = [items[i][0] for i in pairs], [items[i][1] for i in pairs]
            out[pairs] = run.classifier_logits(
                model.model, model.tokenizer, firsts, seconds, show_progress=False, **model.budget
            )
    return out


@task("predict")
def predict(model: Any, items: list[Any], function: str = "auto", side: str = "right") -> Done:
    logits = pair_logits(model, items, side)
    scores = run.label_scores(logits, model.model.config, function)
    return Done(scores, pair_lengths(model.tokenizer, items, True))


@task("rerank")
def rerank(model: Any, pairs: list[tuple[str, str]], raw: bool = False, side: str = "right") -> Done:
    logits = pair_logits(model, pairs, side)
    return Done([run.relevance(row, raw) for row in logits], pair_lengths(model.tokenizer, pairs, True))


def late_lengths(model: Any, items: list[Any]) -> list[int]:
    """A late-interaction model's tokens per text as a document (its marker included) or per (query,
    document) pair: the document's, whole (queries are always ``query_length``: expansion or a cut)."""
    spec = model.spec
    texts = [spec.document_prefix + (item[1] if isinstance(item, tuple) else item) for item in items]
    return [len(ids) for ids in model.tokenizer(texts, verbose=False)["input_ids"]] if texts else []


# How a PyTorch model counts each text's whole tokens (for ``truncate: false`` and the answer budget): by
# pairs of its tokenizer, or as its kind counts (``Capabilities.aliases[COUNT]``: a ColBERT document's marker)
LENGTHS: dict[str, Callable[[Any, list[Any]], list[int]]] = {
    COUNT: lambda model, items: pair_lengths(model.tokenizer, items),
    "count_late": late_lengths,
}


@task("token_vectors")
def token_vectors(model: Any, texts: list[str], kind: str = "document") -> Done:
    """A late-interaction model's token vectors (:func:`neobert.inference.late_interaction.token_vectors`): per text a
    (tokens, dim) float32 array, queries expanded to ``query_length``, documents cut to ``document_length``
    without their skiplist tokens."""
    query = kind == "query"
    vectors = late_interaction.token_vectors(
        model.model, model.tokenizer, texts, model.spec, query, batch_size=model.budget["batch_size"]
    )
    whole = late_lengths(model, texts)
    lengths = (
        [model.spec.query_length] * len(texts)
        if query
        else [min(n, model.spec.document_length) for n in whole]
    )
    return Done([v.numpy() for v in vectors], lengths)


@task("maxsim")
def maxsim_rerank(model: Any, pairs: list[tuple[str, str]], raw: bool = False, side: str = "right") -> Done:
    """A late-interaction model's rerank: MaxSim of each (query, document) pair
    (:func:`neobert.inference.late_interaction.maxsim`), each distinct query encoded once. The score is MaxSim itself
    (``raw`` changes nothing: it is no probability); documents are cut from the right, as ColBERT cuts."""
    spec, batch = model.spec, model.budget["batch_size"]
    queries = sorted({q for q, _ in pairs})
    encoded = late_interaction.token_vectors(
        model.model, model.tokenizer, queries, spec, True, batch_size=batch
    )
    by_query = dict(zip(queries, encoded))
    documents = late_interaction.token_vectors(
        model.model, model.tokenizer, [d for _, d in pairs], spec, False, batch_size=batch
    )
    scores = [float(late_interaction.maxsim(by_query[q], d)) for (q, _), d in zip(pairs, documents)]
    lengths = [spec.query_length + min(n, spec.document_length) for n in late_lengths(model, pairs)]
    return Done(scores, lengths)


@task("maxsim_alignment")
def maxsim_alignment(model: Any, pairs: list[tuple[str, str]]) -> Done:
    """A late-interaction model's MaxSim of each (query, document) pair, shown: the query's and the document's
    scored tokens (:func:`neobert.inference.late_interaction.scored_tokens`), every query token's dot product
    with every document token (``similarities``, query tokens x document tokens), the document token each
    query token matched (``matched``: its index) and the score, the sum of the matched products (what
    :func:`maxsim_rerank` scores). Each distinct query is encoded once."""
    spec, batch = model.spec, model.budget["batch_size"]
    queries = sorted({q for q, _ in pairs})
    encoded = late_interaction.token_vectors(
        model.model, model.tokenizer, queries, spec, True, batch_size=batch
    )
    query_tokens = late_interaction.scored_tokens(model.tokenizer, queries, spec, True)
    by_query = {q: (v, t) for q, v, t in zip(queries, encoded, query_tokens)}
    texts = [d for _, d in pairs]
    documents = late_interaction.token_vectors(
        model.model, model.tokenizer, texts, spec, False, batch_size=batch
    )
    document_tokens = late_interaction.scored_tokens(model.tokenizer, texts, spec, False)
    values = []
    for (q, _), vectors, tokens_ in zip(pairs, documents, document_tokens):
        query_vectors, query_tokens_ = by_query[q]
        similarities = query_vectors.float() @ vectors.float().T  # (query tokens, document tokens)
        best, matched = similarities.max(dim=1)
        values.append(
            {
                "score": float(best.sum()),
                "query_tokens": query_tokens_,
                "document_tokens": tokens_,
                "matched": matched.tolist(),
                "similarities": similarities.tolist(),
            }
        )
    lengths = [spec.query_length + min(n, spec.document_length) for n in late_lengths(model, pairs)]
    return Done(values, lengths)


@task("tokens")
def tokens(model: Any, texts: list[str]) -> Done:
    entities, report = tag(model.model, model.tokenizer, texts, model.long_policy, **model.budget)
    return Done([[e.to_dict() for e in row] for row in entities], report.lengths, report, report.tokens)


@task("fill-mask")
def fill_mask(model: Any, texts: list[str], top_k: int) -> Done:
    mask = model.tokenizer.mask_token
    values: list[Any] = []
    for text in texts:  # one text's problem (no mask, its masks cut off) must not fail its batch-mates
        if mask not in text:
            values.append(Refusal(422, f"{{noun}} {{i}} holds no {mask} token to fill"))
            continue
        try:
            filled = run.fill_mask(model.model, model.tokenizer, text, top_k)
            ids = [model.tokenizer.convert_tokens_to_ids([t for t, _ in mask]) for mask in filled]
            values.append([[(t, p, i) for (t, p), i in zip(mask, row)] for mask, row in zip(filled, ids)])
        except ValueError as err:
            values.append(Refusal(422, "{noun} {i}: " + str(err).replace("{", "{{").replace("}", "}}")))
    return Done(values, pair_lengths(model.tokenizer, texts))


# --- the tokenizer's tasks (every backend: a tokenizers.Tokenizer) -----------------------------------------


def tokenize(tokenizer: Any, texts: list[str], add_special_tokens: bool = True) -> Done:
    """Every token of each text: id, its text (the characters it covers; a special token's own text),
    whether it is special, and its character span (None for special tokens)."""
    values = []
    for text, encoding in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)):
        rows = []
        for token_id, token, special, (start, stop) in zip(
            encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets
        ):
            if special:
                rows.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
            else:
                rows.append(
                    {"id": token_id, "text": text[start:stop], "special": False, "start": start, "stop": stop}
                )
        values.append(rows)
    return Done(values, [len(row) for row in values])


def decode(tokenizer: Any, rows: list[list[int]], skip_special_tokens: bool = True) -> Done:
    """The text of each row of token ids."""
    vocab = tokenizer.get_vocab_size()
    values: list[Any] = []
    for row in rows:
        if row and max(row) >= vocab:
            values.append(
                Refusal(422, f"{{noun}} {{i}} holds token id {max(row)}; the vocabulary has {vocab}")
            )
        else:
            values.append(tokenizer.decode(row, skip_special_tokens=skip_special_tokens))
    return Done(values, [len(row) for row in rows])


TOKENIZER_TASKS: dict[str, TaskFn] = {"tokenize": tokenize, "decode": decode}
