"""Distillation of a teacher's scores into a retriever (dense, SPLADE, late interaction): the KL divergence and
MarginMSE over each query's own candidates, added to the in-batch contrastive loss of every query/document task
(:func:`neobert.finetuning.contrastive.contrastive_loss_sum`, :func:`neobert.finetuning.late_interaction.
late_step_loss`). The teacher's scores are the data's ``scores`` (``neobert mine --teacher CROSS_ENCODER`` writes
them); the student's are its similarities of the batch's candidates, gathered across processes as the
contrastive loss gathers them, so a query's own candidates are found by their columns there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class Distillation:
    """A teacher's scores of each query's own candidates (``scores[i]``: its positive's, then each of its hard
    negatives', in the batch's order; empty where the data has none) and the weights of the two terms."""

    scores: list[list[float]]
    kl: float = 0.0
    margin_mse: float = 0.0

    @classmethod
    def of(cls, teacher: list[list[float]] | None, config: Any) -> Distillation | None:
        weights = (getattr(config, "distillation", 0.0), getattr(config, "margin_mse", 0.0))
        if not teacher or not any(weights) or not any(teacher):
            return None
        return cls(teacher, *weights)

    def columns(self, offset: int, negatives_at: int) -> list[list[int]]:
        """Each query's own candidates' columns: its positive's, then its negatives' (a query's negatives follow
        the previous queries' in the batch)."""
        columns, start = [], negatives_at
        for i, target in enumerate(self.scores):
            own = max(len(target) - 1, 0)
            columns.append([offset + i, *range(start, start + own)])
            start += own
        return columns

    def loss(self, scores: torch.Tensor, temperature: float, offset: int, negatives_at: int) -> torch.Tensor:
        """Summed over the queries with teacher scores: ``kl`` x KL(softmax(teacher) || softmax(scores /
        temperature)) over the query's candidates (PyLate's ``Distillation``) plus ``margin_mse`` x the mean over
        its negatives of ((s_pos - s_neg) - (t_pos - t_neg))^2 on the similarities themselves (MarginMSE)."""
        total = scores.new_zeros(())
        for row, (cols, target) in enumerate(zip(self.columns(offset, negatives_at), self.scores)):
            if not target:
                continue
            student = scores[row, cols]
            wanted = torch.tensor(target, device=scores.device, dtype=scores.dtype)
            if self.kl:
                logits = F.log_softmax(student / temperature, dim=-1)
                kl = F.kl_div(logits, F.log_softmax(wanted, dim=-1), reduction="sum", log_target=True)
                total = total + self.kl * kl
            if self.margin_mse and len(cols) > 1:
                margins = (student[0] - student[1:]) - (wanted[0] - wanted[1:])
                total = total + self.margin_mse * margins.pow(2).mean()
        return total
