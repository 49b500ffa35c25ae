"""Inference: embed or classify texts, fill masks, with few-padding token-budget batches.

These are the functions behind ``neobert embed`` / ``classify`` / ``fill-mask``, the demo and every
embedding evaluation; load the model and tokenizer with :mod:`neobert.inference.encoders`. :func:`encode` works with
any transformers encoder (NeoBERT, BERT, RoBERTa, ModernBERT ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..common.progress import progress_bar
from ..model.execution import eval_mode
from ..model.pooling import get_pooling
from .batching import CPU_MAX_TOKENS, token_batches
from .encoders import MODEL_INPUT_NAMES, check_vocab, max_positions
from .registration import require_head

__all__ = [  # loading and saving: neobert.inference.encoders; tokenizer files: neobert.data
    "ROW_TAGS",
    "TOKENIZE_CHUNK",
    "classifier_logits",
    "classifier_rows",
    "encode",
    "fill_mask",
]


def _tokenize(tokenizer: Any, texts: Sequence[str], max_length: int, device: torch.device) -> dict:
    batch = tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
        return_token_type_ids=False,
    )
    return {name: batch[name].to(device) for name in MODEL_INPUT_NAMES}


# Texts are tokenized this many at a time (in character-length order), then re-sorted by token count and
# cut into batches: memory stays bounded for any number of texts.
TOKENIZE_CHUNK = 4096


class TokenIds(list):
    """Rows already tokenized, special tokens included, each within the model's length: :func:`encode` and
    :func:`classifier_logits` take them in place of texts (the long-document policies cut texts into such
    rows)."""


# --- tagged rows: a text may carry a tag that follows it into the forward that runs it -------------------
#
# The service runs requests for several LoRA adapters of one base as one forward (peft's mixed-adapter
# batches): each text carries the adapter it runs through (:func:`tagged`), the tag follows the text into
# its rows (a long document's windows too, :func:`neobert.inference.long_documents.tokenize_rows`) and
# :func:`batched_inputs` sets :data:`ROW_TAGS` while each batch runs, which the model's LoRA layers read.


class TaggedText(str):
    """A text carrying a tag (:func:`tagged`)."""

    tag: Hashable = None


class TaggedIds(list):
    """A row of token ids carrying a tag (:func:`tagged`)."""

    tag: Hashable = None


def tagged(item: Any, tag: Hashable) -> Any:
    """``item`` (a text, a row of token ids, or a (text, text) pair: its first text) carrying ``tag``."""
    if isinstance(item, tuple):
        return (tagged(item[0], tag), *item[1:])
    made = TaggedIds(item) if isinstance(item, list) else TaggedText(item)
    made.tag = tag
    return made


def tag_of(item: Any) -> Hashable:
    """The tag ``item`` carries (a pair: its first text's), or None."""
    return getattr(item[0] if isinstance(item, tuple) else item, "tag", None)


@dataclass(frozen=True)
class RowTags:
    """The tags of the rows of the forward being run (``uniform``: one tag for every row) and each row's real
    tokens, so that a module inside the model can treat each row by its tag whether it sees rows (B, ...) or,
    on the unpadded path, tokens (T, ...): :meth:`per_item`."""

    tags: tuple[Hashable, ...]
    lengths: tuple[int, ...] = ()
    uniform: bool = False

    def per_item(self, count: int) -> list[Hashable]:
        """The tag of each of ``count`` items along a module input's first dimension: rows, or tokens."""
        if self.uniform:
            return [self.tags[0]] * count
        if count == len(self.tags):
            return list(self.tags)
        if count == sum(self.lengths):
            return [tag for tag, length in zip(self.tags, self.lengths) for _ in range(length)]
        raise ValueError(
            f"an input of {count} items is neither the batch's {len(self.tags)} rows nor its "
            f"{sum(self.lengths)} tokens"
        )


# the tags of the batch being run (None: untagged); set by batched_inputs, read inside the model
ROW_TAGS: ContextVar[RowTags | None] = ContextVar("row_tags", default=None)


def batched_inputs(
    tokenizer: Any,
    texts: Sequence[str] | TokenIds,
    pairs: Sequence[str] | None,
    batch_size: int,
    max_tokens: int | None,
    max_length: int,
    device: torch.device,
) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """(row indices, padded model inputs) for every text, in few-padding batches (see :func:`token_batches`).
    Where the texts carry tags (:func:`tagged`), a batch's rows are ordered by tag (each tag's rows
    contiguous) and :data:`ROW_TAGS` holds the batch's while the caller runs it (until it asks for the next
    batch)."""
    if max_tokens is None and device.type == "cpu":
        max_tokens = CPU_MAX_TOKENS
    by_chars = sorted(
        range(len(texts)), key=lambda i: -(len(texts[i]) + (len(pairs[i]) if pairs is not None else 0))
    )
    pad_id = tokenizer.pad_token_id or 0
    for start in range(0, len(by_chars), TOKENIZE_CHUNK):
        chunk = by_chars[start : start + TOKENIZE_CHUNK]
        second = [pairs[i] for i in chunk] if pairs is not None else None
        if isinstance(texts, TokenIds):
            ids = [texts[i] for i in chunk]
            if any(len(row) > max_length for row in ids):
                raise ValueError(f"a tokenized row is longer than max_length {max_length}")
        else:
            ids = tokenizer(
                [texts[i] for i in chunk],
                second,
                truncation=True,
                max_length=max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
        for batch in token_batches([len(row) for row in ids], batch_size, max_tokens):
            tags = [tag_of(texts[chunk[j]]) for j in batch]
            if any(
                tag is not None for tag in tags
            ):  # each tag's rows contiguous (a LoRA layer adds by slice)
                order = sorted(range(len(batch)), key=lambda r: (tags[r] is not None, str(tags[r])))
                batch = [batch[r] for r in order]
            width = max(len(ids[j]) for j in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, j in enumerate(batch):
                input_ids[row, : len(ids[j])] = torch.tensor(ids[j])
                attention_mask[row, : len(ids[j])] = 1
            inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
            tags = tuple(tag_of(texts[chunk[j]]) for j in batch)
            if all(tag is None for tag in tags):
                yield [chunk[j] for j in batch], inputs
                continue
            outer = ROW_TAGS.get()
            ROW_TAGS.set(RowTags(tags, tuple(len(ids[j]) for j in batch)))
            try:
                yield [chunk[j] for j in batch], inputs
            finally:
                ROW_TAGS.set(outer)


def encode(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int = 32,
    pooling: str = "mean",
    normalize: bool = True,
    max_length: int | None = None,
    show_progress: bool = True,
    max_tokens: int | None = None,
    desc: str | None = None,
) -> np.ndarray:
    """Embed ``texts`` into a float32 array (N, C), rows in the input order.

    Texts are batched longest first so each batch pads little: at most ``batch_size`` texts per batch and
    at most ``max_tokens`` padded tokens (default: :data:`CPU_MAX_TOKENS` on the CPU, where that is fastest,
    no limit elsewhere). Inputs longer than ``max_length`` tokens (default: what the model and tokenizer
    accept, :func:`~neobert.inference.encoders.max_positions`) are truncated. ``pooling`` is a name of the registry
    (:data:`neobert.model.pooling.POOLINGS`); ``normalize`` scales rows to unit L2.
    ``desc`` labels the progress bar.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    pool = get_pooling(pooling).pool
    check_vocab(model, tokenizer)
    encoder = getattr(model, "base_model", model)  # the bare encoder inside any head
    max_length = max_length or max_positions(encoder, tokenizer)
    device = next(encoder.parameters()).device
    out = np.empty((len(texts), encoder.config.hidden_size), dtype=np.float32)
    batches = batched_inputs(tokenizer, texts, None, batch_size, max_tokens, max_length, device)
    progress = progress_bar(total=len(texts), unit="text", desc=desc, disable=not show_progress)
    with eval_mode(encoder), torch.inference_mode(), progress:
        for index, inputs in batches:
            states = encoder(**inputs).last_hidden_state  # (B, L, C)
            vectors = pool(states, inputs["attention_mask"]).float()  # (B, C)
            if normalize:
                vectors = F.normalize(vectors, p=2, dim=-1)
            out[index] = vectors.cpu().numpy()
            progress.update(len(index))
    return out


def classifier_logits(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    batch_size: int = 32,
    max_length: int | None = None,
    show_progress: bool = True,
    max_tokens: int | None = None,
) -> np.ndarray:
    """The logits of a sequence classifier for ``texts`` (or text pairs), float32 (N, num_labels), in input order.

    ``model`` is a NeoBERTForSequenceClassification or any transformers ``...ForSequenceClassification``
    (BERT, RoBERTa, ...). Batching, truncation (default: the model's position limit) and ``max_tokens`` work
    as in :func:`encode`. ``pairs[i]`` is the second text of row i. Models that take token types and
    whose tokenizer marks a pair's second text (BERT) get them: type 1 after the first [SEP].
    Softmax (or, for regression, the raw value) is left to the caller.
    """
    if isinstance(texts, str) or isinstance(pairs, str):
        raise TypeError("texts and pairs must be lists of strings, not one string")
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError(
            f"pairs must hold one second text per text: got {len(texts)} texts, {len(pairs)} pairs"
        )
    require_head(model, "sequence-classification", "classify")
    inner = getattr(model, "_orig_mod", model)  # a torch.compile wrapper holds the model here
    check_vocab(inner, tokenizer)
    max_length = max_length or max_positions(inner, tokenizer)
    device = next(inner.parameters()).device
    token_types = pairs is not None and pair_token_types(inner, tokenizer)
    out = np.empty((len(texts), inner.config.num_labels), dtype=np.float32)
    batches = batched_inputs(tokenizer, texts, pairs, batch_size, max_tokens, max_length, device)
    progress = progress_bar(total=len(texts), unit="text", disable=not show_progress)
    with eval_mode(model), torch.inference_mode(), progress:
        for index, inputs in batches:
            if token_types:
                is_sep = (inputs["input_ids"] == tokenizer.sep_token_id).long()
                second = (is_sep.cumsum(dim=1) - is_sep) > 0  # after the first [SEP]
                inputs["token_type_ids"] = second.long() * inputs["attention_mask"]
            out[index] = model(**inputs).logits.float().cpu().numpy()  # (B, num_labels)
            progress.update(len(index))
    return out


def is_regression(config: Any) -> bool:
    """Whether a classifier's config describes a regression head (its outputs are values, not labels)."""
    return config.problem_type == "regression" or config.num_labels == 1


def label_names(config: Any) -> list[str]:
    """A classifier's label names in id order (``LABEL_i`` where ``id2label`` has none)."""
    id2label = config.id2label or {}
    return [str(id2label.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]


def classifier_rows(logits: np.ndarray, config: Any) -> list[dict[str, Any]]:
    """A classifier's answer for each row of ``logits`` (N, num_labels), as JSON-ready objects.

    The one output format of ``neobert classify`` and the service's ``/classify``:

    * classification: ``{"label": top label, "score": its probability, "probabilities": {label: p, ...}}``,
      every label in id order; softmax over the labels, independent sigmoids for a
      ``multi_label_classification`` model;
    * regression (``problem_type == "regression"`` or one label): ``{"value": v}``, a float for one output
      and a list of floats for several.
    """
    logits = np.asarray(logits)
    if is_regression(config):
        if logits.shape[1] == 1:
            return [{"value": float(v)} for v in logits[:, 0]]
        return [{"value": [float(v) for v in row]} for row in logits]
    z = logits.astype(np.float64)
    if config.problem_type == "multi_label_classification":
        probs = 1.0 / (1.0 + np.exp(-z))
    else:
        z -= z.max(axis=1, keepdims=True)
        probs = np.exp(z)
        probs /= probs.sum(axis=1, keepdims=True)
    names = label_names(config)
    return [
        {"label": names[k], "score": float(p[k]), "probabilities": dict(zip(names, map(float, p)))}
        for p, k in zip(probs, probs.argmax(axis=1))
    ]


def relevance(logits: np.ndarray, raw: bool = False) -> float:
    """A cross-encoder's relevance of one (query, document) pair in [0, 1]: the sigmoid of a single logit,
    or the probability of the second label ("relevant") of a two-label classifier; ``raw``: the logit
    that sigmoid is taken of (the single logit, or the second label's minus the first's)."""
    z = np.asarray(logits, dtype=np.float64)
    score = z[0] if len(z) == 1 else z[1] - z[0]
    return float(score) if raw else float(1.0 / (1.0 + np.exp(-score)))  # softmax(z)[1] for two labels


SCORE_FUNCTIONS = ("auto", "softmax", "sigmoid", "none")


def label_scores(logits: np.ndarray, config: Any, function: str = "auto") -> list[list[dict[str, Any]]]:
    """Per row of classifier ``logits``, every label with its score, best first (text-embeddings-inference's
    and the Inference API's classification shape). ``function``: ``softmax``, ``sigmoid``, ``none`` (the
    logits), or ``auto``: the model's own (sigmoid for multi-label, the value for regression, else softmax)."""
    if function not in SCORE_FUNCTIONS:
        raise ValueError(f"function must be one of {', '.join(SCORE_FUNCTIONS)}, got {function!r}")
    z = np.asarray(logits, dtype=np.float64)
    if function == "auto":
        kind = getattr(config, "problem_type", None)
        function = (
            "none"
            if is_regression(config)
            else "sigmoid"
            if kind == "multi_label_classification"
            else "softmax"
        )
    if function == "softmax":
        z = np.exp(z - z.max(axis=1, keepdims=True))
        z = z / z.sum(axis=1, keepdims=True)
    elif function == "sigmoid":
        z = 1.0 / (1.0 + np.exp(-z))
    names = label_names(config)
    return [
        sorted(({"label": n, "score": float(v)} for n, v in zip(names, row)), key=lambda d: -d["score"])
        for row in z
    ]


def token_states(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: TokenIds,
    batch_size: int = 32,
    max_tokens: int | None = None,
) -> list[np.ndarray]:
    """The last hidden state of every token (special ones included) of each tokenized row: float32
    (tokens, C) per row, in input order (text-embeddings-inference's ``/embed_all``)."""
    encoder = getattr(model, "base_model", model)
    check_vocab(encoder, tokenizer)
    device = next(encoder.parameters()).device
    out: list[np.ndarray] = [np.empty(0)] * len(rows)
    width = max((len(row) for row in rows), default=1)
    with eval_mode(encoder), torch.inference_mode():
        for index, inputs in batched_inputs(tokenizer, rows, None, batch_size, max_tokens, width, device):
            states = encoder(**inputs).last_hidden_state.float().cpu().numpy()
            for row, i in enumerate(index):
                out[i] = states[row, : len(rows[i])]
    return out


def pair_token_types(model: torch.nn.Module, tokenizer: Any) -> bool:
    """Whether the model takes token types and the tokenizer gives a pair's second text type 1 (BERT-style)."""
    if getattr(model.config, "type_vocab_size", 0) < 2 or tokenizer.sep_token_id is None:
        return False
    if "token_type_ids" not in inspect.signature(model.forward).parameters:
        return False
    types = tokenizer("a", "b", return_token_type_ids=True).get("token_type_ids") or []
    return any(types)


def fill_mask(
    model: torch.nn.Module, tokenizer: Any, text: str, top_k: int = 5
) -> list[list[tuple[str, float]]]:
    """The ``top_k`` most likely tokens, with probabilities, for each [MASK] of ``text`` in order."""
    require_head(model, "mlm", "fill_mask")
    mask = tokenizer.mask_token
    if mask is None or mask not in text:
        raise ValueError(f"the text has no {mask or '[MASK]'} token to fill: {text!r}")
    check_vocab(model, tokenizer)
    device = next(model.parameters()).device
    max_length = max_positions(model, tokenizer)
    inputs = _tokenize(tokenizer, [text], max_length, device)
    positions = (inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if positions.numel() == 0:  # every mask was beyond max_length and truncated away
        raise ValueError(f"all {mask} tokens fall beyond the model's {max_length} tokens")
    with eval_mode(model), torch.inference_mode():
        logits = model(**inputs).logits[0, positions]  # (M, V)
    probs, ids = logits.float().softmax(dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
        for row_ids, row_probs in zip(ids, probs)
    ]
