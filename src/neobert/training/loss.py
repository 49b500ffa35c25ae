"""The MLM loss under gradient accumulation and data parallelism.

A step's loss is the mean cross-entropy over every masked token of the step: all micro-batches on all
processes. Averaging per-micro-batch means instead would weight a token by how many others shared its
micro-batch (a micro-batch with 10 masked tokens would count as much as one with 10,000). So each
micro-batch contributes its *sum* divided by the global count, which is known before the first backward
because the count depends only on the labels:

    count = all_reduce(sum((mb["labels"] != IGNORE_INDEX).sum() for mb in micro_batches))   # once per step
    for mb in micro_batches:
        selected = mb["labels"] != IGNORE_INDEX
        logits = model(..., masked_positions=selected).logits   # (N, V); the model computes no loss
        loss = normalize_loss(masked_lm_loss_sum(logits, mb["labels"][selected]), count)
        loss.backward()

Summed over micro-batches and averaged by the data-parallel wrapper over processes, these gradients are
those of the global mean. The sum of the ``loss`` values, all-reduced with AVG, is that global mean too.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..model.losses import mlm_loss


def masked_lm_loss_sum(logits_masked: torch.Tensor, labels_masked: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy, in fp32, of logits (N, V) against labels (N,): the MLM head's loss
    (:func:`neobert.model.losses.mlm_loss`) summed; ignored labels are skipped, so full (..., V) logits with
    (...) labels work too."""
    return mlm_loss(logits_masked, labels_masked, reduction="sum")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def normalize_loss(
    loss_sum: torch.Tensor, global_count: torch.Tensor | int, *, world_size: int | None = None
) -> torch.Tensor:
    """``loss_sum * world_size / global_count``: the share of the global mean owed by this micro-batch.

    ``world_size`` undoes the averaging of gradients over processes that DDP, FSDP and DeepSpeed apply
    (default: the distributed world size, 1 when not distributed); pass 1 if gradients are summed instead.
    A step without any masked token gives 0 rather than NaN.
    """
    if world_size is None:
        world_size = dist.get_world_size() if _distributed() else 1
    if isinstance(global_count, torch.Tensor):
        denominator = global_count.clamp(min=1).to(loss_sum.dtype)
    else:
        denominator = max(int(global_count), 1)
    return loss_sum * world_size / denominator
