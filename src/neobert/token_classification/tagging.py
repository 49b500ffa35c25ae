"""Tag texts with a token classifier: one label per word (from its first sub-word), entities with
character offsets into the original text.

Words are the tokenizer's pre-tokenized words (``word_ids`` of the fast tokenizer); a word's span runs from
its first sub-word's start to its last sub-word's end (``offset_mapping``). Texts longer than the model's
window follow the long-document policy; under ``truncate`` words past the window are tagged ``O``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ..inference.long_documents import TRUNCATE, LongDocuments, LongReport, TokenLogits, token_logits
from ..inference.registration import require_head
from .entities import spans

OUTSIDE = "O"


@dataclass
class Entity:
    label: str  # entity type (PER, LOC, ...)
    start: int  # character offsets into the text, end exclusive
    end: int
    text: str
    score: float  # mean probability of its words' predicted tags

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Word:
    start: int
    end: int
    tag: str
    score: float


def words_of(logits: TokenLogits, id2label: dict[int, str]) -> list[Word]:
    """Each word's character span and the tag predicted on its first sub-word (``O`` if it had none)."""
    words: list[Word] = []
    last = None
    for i, word in enumerate(logits.word_ids):
        start, end = logits.offsets[i]
        if word is None:
            continue
        if word == last:
            words[-1].end = max(words[-1].end, end)
            continue
        last = word
        row = logits.logits[i]
        if np.isnan(row).any():  # cut off by truncation: no prediction
            words.append(Word(start, end, OUTSIDE, float("nan")))
            continue
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        best = int(probs.argmax())
        words.append(Word(start, end, id2label[best], float(probs[best])))
    return words


def entities_of(text: str, words: Sequence[Word]) -> list[Entity]:
    out = []
    for kind, first, last in spans([w.tag for w in words]):
        start, end = words[first].start, words[last].end
        scores = [w.score for w in words[first : last + 1]]
        out.append(Entity(kind, start, end, text[start:end], round(float(np.mean(scores)), 6)))
    return out


def tag(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    settings: LongDocuments = TRUNCATE,
    batch_size: int = 32,
    max_tokens: int | None = None,
) -> tuple[list[list[Entity]], LongReport]:
    """Entities found in each text, and what the long-document policy did."""
    require_head(model, "token-classification", "tagging")
    inner = getattr(model, "_orig_mod", model)
    id2label = {int(k): str(v) for k, v in inner.config.id2label.items()}
    logits, report = token_logits(model, tokenizer, texts, settings, batch_size, max_tokens)
    return [entities_of(text, words_of(rows, id2label)) for text, rows in zip(texts, logits)], report
