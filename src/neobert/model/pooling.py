"""Pooling a sequence of hidden states into one vector per sequence."""

from __future__ import annotations

import torch


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over real tokens. hidden (B, L, C), attention_mask (B, L) 0/1 -> (B, C).

    A row with no real token pools to zeros rather than NaN.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    total = (hidden * mask).sum(dim=1)
    return total / mask.sum(dim=1).clamp(min=1.0)


def cls_pool(hidden: torch.Tensor) -> torch.Tensor:
    """The first token's state ([CLS]). (B, L, C) -> (B, C)."""
    return hidden[:, 0]


def last_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The last real token's state (right-padded rows; decoder-style embedders). (B, L, C) -> (B, C)."""
    if attention_mask is None:
        return hidden[:, -1]
    last = (attention_mask.sum(dim=1) - 1).clamp(min=0)  # (B,)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, method: str) -> torch.Tensor:
    if method == "mean":
        return mean_pool(hidden, attention_mask)
    if method == "cls":
        return cls_pool(hidden)
    if method == "last":
        return last_pool(hidden, attention_mask)
    raise ValueError(f"unknown pooling {method!r}; use 'mean', 'cls' or 'last'")
