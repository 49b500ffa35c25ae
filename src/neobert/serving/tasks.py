"""The model side of the service's tasks: one function per task, run on a merged batch in the model process.

A route (:mod:`.routes`) sends ``(task, truncate, *options)`` and its texts through the queue; the model
process answers each text with ``(value, tokens)``: the task's result and the text's length in tokens
(so the HTTP side never tokenizes: usage counts and the ``truncate: false`` refusals come from here).
A text the model process refuses is answered with a :class:`Refusal` in place of its value; the rest of its
batch is answered as usual. Which models offer a task is :data:`neobert.capabilities.HEAD_TASKS`.

Adding an endpoint: one function here registered with ``@task("name")``, one route, and the task in
``HEAD_TASKS`` (docs/architecture.md). The ONNX backend (:mod:`.onnx_backend`) implements the tasks its
graphs can run through the same :class:`Backend`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from .. import inference, long_documents
from ..long_documents import LongReport
from ..token_classification.tagging import tag


@dataclass(frozen=True)
class Refusal:
    """One text refused in the model process; ``message`` has ``{noun}`` and ``{i}`` for the route to fill
    (the text's place in its own request)."""

    status: int
    message: str

    def describe(self, noun: str, i: int) -> str:
        return self.message.format(noun=noun, i=i)


@dataclass
class Done:
    """What a task computed: a value per text, each text's tokens, and what the long-document policy did
    (None for tasks that truncate only); ``tokens`` computed (default: the texts' tokens)."""

    values: list[Any]
    lengths: list[int]
    report: LongReport | None = None
    tokens: int | None = None


TaskFn = Callable[..., Done]  # (model, texts, *options) -> Done
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

    def run_task(self, name: str, texts: list[Any], options: list[Any]) -> Done:
        raise NotImplementedError

    def lengths(self, texts: list[Any]) -> list[int]:
        raise NotImplementedError

    def call(self, key: Hashable, texts: list[Any]) -> tuple[list[Any], int, dict[str, int]]:
        """One model call: ((value, tokens) per text, tokens computed, {"long", "truncated"} counts)."""
        name, truncate, *options = key
        if name not in self.capabilities.tasks:
            raise ValueError(f"this model does not serve {name}")
        keep, refused = list(range(len(texts))), {}
        if not truncate:
            limit = self.capabilities.max_input_tokens
            for i, length in enumerate(self.lengths(texts)):
                if length > limit:
                    refused[i] = (_too_long(length, limit, self.policy), length)
            keep = [i for i in keep if i not in refused]
        done = self.run_task(name, [texts[i] for i in keep], options) if keep else Done([], [])
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
        f"{{noun}} {{i}} has {length:,} tokens; the model takes at most {limit:,} (truncate: false; with "
        f"truncate: true the server's {policy} policy applies)",
    )


def pair_lengths(tokenizer: Any, texts: list[Any], truncation: bool = False) -> list[int]:
    """Tokens of each text, or of each (query, document) pair, special tokens included."""
    if texts and isinstance(texts[0], tuple):
        firsts, seconds = [q for q, _ in texts], [d for _, d in texts]
        ids = tokenizer(firsts, seconds, truncation=truncation, verbose=False)["input_ids"]
    else:
        ids = tokenizer(list(texts), truncation=truncation, verbose=False)["input_ids"]
    return [len(row) for row in ids]


# --- the PyTorch backend's tasks (model: serving.service.Model) -------------------------------------------


@task("embed")
def embed(model: Any, texts: list[str], pooling: str, normalize: bool) -> Done:
    vectors, report = long_documents.embed(
        model.model, model.tokenizer, texts, model.long_policy, pooling, normalize, **model.budget
    )
    return Done(list(vectors), report.lengths, report, report.tokens)


@task("classify")
def classify(model: Any, texts: list[str]) -> Done:
    logits, report = long_documents.classifier_logits(model.model, model.tokenizer, texts, model.long_policy, **model.budget)
    return Done(inference.classifier_rows(logits, model.model.config), report.lengths, report, report.tokens)


@task("rerank")
def rerank(model: Any, pairs: list[tuple[str, str]]) -> Done:
    queries, documents = [q for q, _ in pairs], [d for _, d in pairs]
    logits = inference.classifier_logits(
        model.model, model.tokenizer, queries, documents, show_progress=False, **model.budget
    )
    return Done([inference.relevance(row) for row in logits], pair_lengths(model.tokenizer, pairs, True))


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
            values.append(inference.fill_mask(model.model, model.tokenizer, text, top_k))
        except ValueError as err:
            values.append(Refusal(422, "{noun} {i}: " + str(err).replace("{", "{{").replace("}", "}}")))
    return Done(values, pair_lengths(model.tokenizer, texts))
