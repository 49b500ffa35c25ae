"""The loss of each head, one function each: the heads' ``forward(labels=...)``, the fine-tuning tasks'
training loss and their validation loss all call these, so training and validation compute the same thing.

A sequence head's problem is transformers' ``problem_type``: ``regression`` (mean squared error on the one
output), ``single_label_classification`` (cross-entropy over class ids) or ``multi_label_classification``
(a sigmoid per label against 0/1 targets). Fine-tuning sets regression or single-label
(``finetuning/models.py``), so multi-label is refused there in training and validation alike; a model
configured for it by the user trains and validates through the same function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PROBLEMS = ("regression", "single_label_classification", "multi_label_classification")
IGNORE_INDEX = -100  # token labels: positions that do not count (special tokens, later sub-words)


def sequence_problem(problem_type: str | None, num_labels: int, labels: torch.Tensor) -> str:
    """The problem a sequence head solves: its ``problem_type``, or (unset) transformers' rule: one label
    is regression, integer labels single-label, float labels multi-label."""
    if problem_type is not None:
        if problem_type not in PROBLEMS:
            raise ValueError(f"unknown problem_type {problem_type!r}; use one of {', '.join(PROBLEMS)}")
        return problem_type
    if num_labels == 1:
        return "regression"
    return (
        "single_label_classification"
        if labels.dtype in (torch.long, torch.int)
        else "multi_label_classification"
    )


def sequence_loss(
    logits: torch.Tensor, labels: torch.Tensor, problem: str, reduction: str = "mean"
) -> torch.Tensor:
    """Loss of sequence logits (B, num_labels) against ``labels`` for ``problem``, in float32."""
    logits = logits.float()
    if problem == "regression":  # one output against a value per row, or several against a row of values
        if logits.shape[-1] == 1:
            return F.mse_loss(logits[:, 0], labels.float().view(-1), reduction=reduction)
        return F.mse_loss(logits, labels.float(), reduction=reduction)
    if problem == "single_label_classification":
        return F.cross_entropy(logits, labels.view(-1), reduction=reduction)
    if problem == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.float(), reduction=reduction)
    raise ValueError(f"unknown problem {problem!r}; use one of {', '.join(PROBLEMS)}")


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of MLM logits (..., V) against ``labels`` (...) over the positions whose label is not
    :data:`IGNORE_INDEX`, in float32 (the head's ``forward(labels=...)`` takes the mean; pretraining sums
    and divides by the global count itself, ``training/loss.py``)."""
    return F.cross_entropy(
        logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction=reduction
    )


def token_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of token logits (B, L, num_labels) over the positions whose label is not
    :data:`IGNORE_INDEX`, in float32."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction=reduction
    )
