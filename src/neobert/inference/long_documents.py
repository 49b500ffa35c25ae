"""Texts longer than the model's window: ``truncate`` | ``chunk`` | ``extend``.

Every text is tokenized once without special tokens (its *content*), then cut into model rows by the policy:

- ``truncate``: one row per text, its content cut to fit the window (the old behaviour), counted in the
  report so the caller can warn;
- ``chunk``: windows of the model's length whose content overlaps by ``stride`` tokens. Embeddings are the
  windows' pooled vectors averaged (weighted by their token counts for mean pooling, equally for ``cls``)
  and then normalised; classification logits are the plain mean over windows; a token's prediction comes
  from the window where it is most central (farthest from that window's nearer edge; the earlier window
  on a tie);
- ``extend`` (NeoBERT only): one row per text, never cut. A text longer than the window runs on the same
  weights with RoPE scaled (``ModelConfig.with_context``, YaRN / NTK / linear) to the window times
  ``ceil(length / window)``, so a text's result depends on its own length only, never on its batch-mates.

The rows then go through :func:`neobert.inference.run.encode` / :func:`~neobert.inference.run.classifier_logits` as
:class:`~neobert.inference.TokenIds`: one encode, one batching.
"""

from __future__ import annotations

import copy
import math
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..common.config import ROPE_SCALINGS
from ..model import set_runtime
from ..model.execution import eval_mode
from ..model.pooling import get_pooling
from ..runtime.fastpath import FusedEncoderBlock, fuse_cpu_epilogues
from . import run
from .encoders import max_positions
from .run import TokenIds

POLICIES = ("truncate", "chunk", "extend")
EXTEND_METHODS = tuple(m for m in ROPE_SCALINGS if m != "none")


@dataclass(frozen=True)
class LongDocuments:
    """What to do with a text longer than the model's window."""

    policy: str = "truncate"  # truncate | chunk | extend
    stride: int | None = None  # chunk: content tokens shared by neighbouring windows; None: a quarter
    method: str = "yarn"  # extend: RoPE scaling, yarn | ntk | linear
    side: str = "right"  # truncate: which end is cut (right: the end; left: the start)

    def __post_init__(self) -> None:
        if self.side not in ("right", "left"):
            raise ValueError(f"truncation side must be right or left; got {self.side!r}")
        if self.policy not in POLICIES:
            raise ValueError(
                f"long-document policy must be one of {', '.join(POLICIES)}; got {self.policy!r}"
            )
        if self.method not in EXTEND_METHODS:
            raise ValueError(
                f"RoPE scaling method must be one of {', '.join(EXTEND_METHODS)}; got {self.method!r}"
            )
        if self.stride is not None and (not isinstance(self.stride, int) or self.stride < 0):
            raise ValueError(f"stride must be a non-negative integer, got {self.stride!r}")


TRUNCATE = LongDocuments()  # the default: today's behaviour


@dataclass
class LongReport:
    """What the policy did to one call's texts."""

    texts: int = 0
    over_window: int = 0  # texts whose tokens exceed the window
    truncated: int = 0  # texts cut (truncate policy; every long text there)
    rows: int = 0  # model rows (windows) run
    tokens: int = 0  # tokens fed to the model, special tokens included
    lengths: list[int] = field(default_factory=list)  # each text's whole length in tokens, specials included
    windows: list[int] = field(default_factory=list)  # per text: the model rows it took

    def add(self, other: LongReport) -> None:
        for name in ("texts", "over_window", "truncated", "rows", "tokens", "lengths", "windows"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Rows:
    """Model rows cut from texts: row r holds content tokens ``start[r] : start[r] + size[r]`` of text
    ``owner[r]`` between the special tokens; ``scale[r]`` is its window multiple (extend; 1 otherwise)."""

    ids: TokenIds
    owner: list[int]
    start: list[int]
    size: list[int]
    scale: list[int]
    report: LongReport = field(default_factory=LongReport)


def special_frame(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a single text (BERT: [CLS] / [SEP])."""
    probe = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for i in range(len(full) - len(probe) + 1):
        if full[i : i + len(probe)] == probe:
            return full[:i], full[i + len(probe) :]
    raise ValueError("cannot find where the tokenizer puts a text between its special tokens")


def window_starts(length: int, width: int, stride: int) -> list[int]:
    """Starts of windows of ``width`` tokens overlapping by ``stride`` that cover ``length`` tokens."""
    if width < 1 or not 0 <= stride < width:
        raise ValueError(
            f"windows need width >= 1 and 0 <= stride < width; got width {width}, stride {stride}"
        )
    starts = [0]
    while starts[-1] + width < length:
        starts.append(starts[-1] + width - stride)
    return starts


def plan_rows(
    content: Sequence[Sequence[int]],
    window: int,
    settings: LongDocuments,
    prefix: Sequence[int],
    suffix: Sequence[int],
) -> Rows:
    """Cut each text's content ids into model rows of at most ``window`` tokens (specials included)."""
    width = window - len(prefix) - len(suffix)
    if width < 1:
        raise ValueError(f"a window of {window} tokens leaves no room between the special tokens")
    stride = settings.stride if settings.stride is not None else width // 4
    if settings.policy == "chunk" and stride >= width:
        raise ValueError(f"stride {stride} must be smaller than the window's {width} content tokens")
    rows = Rows(TokenIds(), [], [], [], [], LongReport(texts=len(content)))
    for owner, ids in enumerate(content):
        over = len(ids) > width
        rows.report.over_window += over
        rows.report.lengths.append(len(prefix) + len(ids) + len(suffix))
        if settings.policy == "chunk":
            spans = [(s, min(width, len(ids) - s)) for s in window_starts(len(ids), width, stride)]
        elif settings.policy == "extend":
            spans = [(0, len(ids))]
        else:
            spans = [(len(ids) - width if over and settings.side == "left" else 0, min(width, len(ids)))]
            rows.report.truncated += over
        rows.report.windows.append(len(spans))
        for start, size in spans:
            row = [*prefix, *ids[start : start + size], *suffix]
            rows.ids.append(row)
            rows.owner.append(owner)
            rows.start.append(start)
            rows.size.append(size)
            rows.scale.append(max(1, math.ceil(len(row) / window)) if settings.policy == "extend" else 1)
            rows.report.tokens += len(row)
    rows.report.rows = len(rows.ids)
    return rows


def model_window(model: torch.nn.Module, tokenizer: Any) -> int:
    """How many tokens (special ones included) one row of ``model`` may hold."""
    inner = getattr(model, "_orig_mod", model)
    # the tokenizer's limit counts too (a sentence-transformers max_seq_length below the position table)
    return max_positions(inner, tokenizer) or int(tokenizer.model_max_length)


def tokenize_rows(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments,
    window: int | None = None,
) -> tuple[Rows, Any]:
    """The texts' rows under ``settings``, and the tokenizer's encoding (content ids, character offsets);
    ``window``: rows of at most that many tokens instead of the model's window. A row carries its text's tag
    (:func:`neobert.inference.run.tagged`)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    prefix, suffix = special_frame(tokenizer)
    window = window or model_window(model, tokenizer)
    tags = [run.tag_of(text) for text in texts]
    if settings.policy == "truncate" and settings.side == "right":  # tokenized only a little past the window
        width = window - len(prefix) - len(suffix)
        texts = [_kept_part(tokenizer, text, width) for text in texts]
    encoding = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    rows = plan_rows(encoding["input_ids"], window, settings, prefix, suffix)
    if any(tag is not None for tag in tags):
        rows.ids = TokenIds(run.tagged(row, tags[owner]) for row, owner in zip(rows.ids, rows.owner))
    if settings.policy == "extend" and max(rows.scale, default=1) > 1:
        _rope_config(model)  # fails early for models without RoPE
    return rows, encoding


CHARS_PER_TOKEN = 8  # a first cut of a long text: this many characters per content token of the window
MIN_CUT = 4096  # characters: a text up to this long (or 8 per token of the window) is tokenized whole, counted exactly
WHITESPACE = re.compile(r"\s")


def _kept_part(tokenizer: Any, text: str, width: int) -> str:
    """The start of ``text`` that truncation to ``width`` content tokens can reach, cut at whitespace so that
    it tokenizes as the whole text would up to the cut; ``text`` itself when it is not much longer.

    Characters are cut in bounded steps (``CHARS_PER_TOKEN`` per token, doubled until the part holds more than
    ``width`` tokens), so a 5 MB line costs a few thousand characters of tokenization, not a million tokens.
    The part's token count, more than ``width``, is then a lower bound of the text's. Without whitespace in
    the step's last half the cut falls mid-word, where the part's last tokens may differ from the whole
    text's (beyond the window, which is cut anyway, unless that word spans it)."""
    size = max(MIN_CUT, CHARS_PER_TOKEN * width)
    while size < len(text):
        found = [m.start() for m in WHITESPACE.finditer(text, size // 2, size)]
        part = text[: found[-1] if found else size]  # offsets in the part are the text's own
        if len(tokenizer(part, add_special_tokens=False)["input_ids"]) > width:
            return part
        size *= 2
    return text


# Scaled copies of a model, by (window multiple, method); they share the original's weight tensors.
_EXTENDED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def extended_model(model: torch.nn.Module, scale: int, method: str = "yarn") -> torch.nn.Module:
    """``model`` with RoPE scaled to ``scale`` times its window (``ModelConfig.with_context``), same weights."""
    if scale == 1:
        return model
    base = _rope_config(model)
    cache = _EXTENDED.setdefault(model, {})
    if (scale, method) not in cache:
        extended = base.with_context(scale * base.max_length, method)
        config = copy.deepcopy(model.config)
        for name, value in extended.to_dict().items():
            setattr(config, name, value)
        scaled = type(model)(config)
        scaled.load_state_dict(model.state_dict(), assign=True)  # the same tensors: no copy
        _same_runtime(scaled, model)
        cache[(scale, method)] = scaled.eval()
    return cache[(scale, method)]


def _rope_config(model: torch.nn.Module) -> Any:
    """The NeoBERT ModelConfig of ``model``; raises unless its positions are RoPE (extendable)."""
    base = getattr(getattr(model, "base_model", model), "model_config", None)
    if base is None or base.position_embedding != "rope":
        raise ValueError(
            f"the 'extend' policy needs a NeoBERT model with RoPE positions, got {type(model).__name__}; "
            "use 'chunk' or 'truncate'"
        )
    return base


def _same_runtime(scaled: torch.nn.Module, model: torch.nn.Module) -> None:
    """The original's inference runtime (unpadding, fused CPU blocks) on the scaled copy."""
    source = model.base_model
    set_runtime(scaled, attn_backend=source.runtime.backend, unpad=source.runtime.unpad)
    fused = any(isinstance(block, FusedEncoderBlock) for block in source.transformer_encoder)
    fuse_cpu_epilogues(scaled, fused)


def _by_scale(
    model: torch.nn.Module, rows: Rows, method: str
) -> Iterator[tuple[int, torch.nn.Module, list[int], TokenIds]]:
    """Per window scale the rows need: the scale, the model at that scale, the rows' indices and token ids."""
    groups: dict[int, list[int]] = {}
    for r, scale in enumerate(rows.scale):
        groups.setdefault(scale, []).append(r)
    for scale, members in groups.items():
        yield scale, extended_model(model, scale, method), members, TokenIds(rows.ids[r] for r in members)


def embed(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments = TRUNCATE,
    pooling: str = "mean",
    normalize: bool = True,
    batch_size: int = 32,
    max_tokens: int | None = None,
    show_progress: bool = False,
    window: int | None = None,
) -> tuple[np.ndarray, LongReport]:
    """Embeddings (N, C) of ``texts`` under the long-document policy, and what the policy did; ``window``:
    rows of at most that many tokens (special ones included) instead of the model's window."""

    def vectors(scale: int, scaled: torch.nn.Module, ids: TokenIds) -> np.ndarray:
        return run.encode(
            scaled,
            tokenizer,
            ids,
            batch_size=batch_size,
            pooling=pooling,
            normalize=False,
            show_progress=show_progress,
            max_tokens=max_tokens,
        )

    hidden = model.base_model.config.hidden_size
    by_tokens = get_pooling(pooling).by_tokens  # mean: windows weighted by their token counts
    out, report = _per_text(model, tokenizer, texts, settings, hidden, vectors, by_tokens, window)
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out, report


def _per_text(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments,
    width: int,
    compute: Callable[[int, torch.nn.Module, TokenIds], np.ndarray],
    by_length: bool = False,
    window: int | None = None,
) -> tuple[np.ndarray, LongReport]:
    """Per text (N, width), the mean over its windows of ``compute(scale, model at that scale, windows' ids)``
    (weighted by window length with ``by_length``: a mean over tokens), and what the policy did."""
    rows, _ = tokenize_rows(model, tokenizer, texts, settings, window)
    values = np.zeros((len(rows.ids), width), dtype=np.float32)
    for scale, scaled, members, ids in _by_scale(model, rows, settings.method):
        values[members] = compute(scale, scaled, ids)
    weights = np.asarray([len(row) if by_length else 1 for row in rows.ids], dtype=np.float64)[:, None]
    sums = np.zeros((len(texts), width), dtype=np.float64)
    totals = np.zeros((len(texts), 1), dtype=np.float64)
    np.add.at(sums, rows.owner, values.astype(np.float64) * weights)
    np.add.at(totals, rows.owner, weights)
    return (sums / np.maximum(totals, 1e-12)).astype(np.float32), rows.report


def classifier_logits(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments = TRUNCATE,
    batch_size: int = 32,
    max_tokens: int | None = None,
    show_progress: bool = False,
) -> tuple[np.ndarray, LongReport]:
    """Sequence-classification logits (N, num_labels) under the policy (windows' logits averaged)."""

    def logits(scale: int, scaled: torch.nn.Module, ids: TokenIds) -> np.ndarray:
        return run.classifier_logits(
            scaled,
            tokenizer,
            ids,
            batch_size=batch_size,
            show_progress=show_progress,
            max_length=model_window(model, tokenizer) * scale,
            max_tokens=max_tokens,
        )

    return _per_text(model, tokenizer, texts, settings, model.config.num_labels, logits)


@dataclass
class TokenLogits:
    """A token classifier's output for one text: ``logits[i]`` for content token i (NaN rows where a
    truncated text's tokens got no prediction), its character span ``offsets[i]``, its word ``word_ids[i]``."""

    logits: np.ndarray  # (T, num_labels)
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]


def token_logits(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments = TRUNCATE,
    batch_size: int = 32,
    max_tokens: int | None = None,
) -> tuple[list[TokenLogits], LongReport]:
    """Per content token logits of a token classifier, each from the window where the token is most central."""
    rows, encoding = tokenize_rows(model, tokenizer, texts, settings)
    skip = len(special_frame(tokenizer)[0])
    per_row: list[np.ndarray | None] = [None] * len(rows.ids)
    for _, scaled, members, ids in _by_scale(model, rows, settings.method):
        for r, logits in zip(members, _row_logits(scaled, tokenizer, ids, batch_size, max_tokens)):
            per_row[r] = logits[skip : skip + rows.size[r]]
    out = []
    for i in range(len(texts)):
        n = len(encoding["input_ids"][i])
        logits = np.full((n, model.config.num_labels), np.nan, dtype=np.float32)
        best = np.full(n, -1, dtype=np.int64)  # centrality of the window each token's logits came from
        for r in (r for r in range(len(rows.ids)) if rows.owner[r] == i):
            start, size = rows.start[r], rows.size[r]
            position = np.arange(size)
            centrality = np.minimum(position, size - 1 - position)
            take = centrality > best[start : start + size]
            logits[start : start + size][take] = per_row[r][take]
            best[start : start + size][take] = centrality[take]
        out.append(TokenLogits(logits, list(encoding["offset_mapping"][i]), encoding.word_ids(i)))
    return out, rows.report


def _row_logits(model, tokenizer, subset: TokenIds, batch_size, max_tokens) -> list[np.ndarray]:
    """The token classifier's logits (L_r, num_labels) for each row of ``subset``, in that order."""
    device = next(model.parameters()).device
    width = max(len(row) for row in subset)
    out: list[np.ndarray | None] = [None] * len(subset)
    batches = run.batched_inputs(tokenizer, subset, None, batch_size, max_tokens, width, device)
    with eval_mode(model), torch.inference_mode():
        for index, inputs in batches:
            logits = model(**inputs).logits.float().cpu().numpy()  # (B, L, num_labels)
            for row, j in enumerate(index):
                out[j] = logits[row, : len(subset[j])]
    return out
