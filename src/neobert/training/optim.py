"""Optimizer construction with weight-decay parameter groups.

Weight decay pulls weights toward zero. For the gain of a normalization layer (whose neutral value is 1),
a bias, or an embedding row that a batch may not even touch, that pull is not a regularizer but a bias, so
by default they are left out of decay; ``decay_norms_biases_embeddings=True`` decays everything, which is
what the original training code did.
"""

from __future__ import annotations

import torch
from torch import nn

OPTIMIZERS = ("adamw", "adam")


def _is_norm(module: nn.Module) -> bool:
    # Class-name test so custom norms (and torch's RMSNorm / LayerNorm / GroupNorm ...) are all caught.
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or "Norm" in type(module).__name__


def parameter_groups(
    model: nn.Module, *, weight_decay: float, decay_norms_biases_embeddings: bool = False
) -> list[dict]:
    """Two groups: ``{"params", "weight_decay", "param_names"}`` with decay, then without (empty groups dropped).

    A parameter is exempt when it belongs to a normalization layer or an ``nn.Embedding``, or its name ends
    in ``bias``. Frozen parameters are left out; a parameter shared by two modules appears once.
    """
    exempt: set[int] = set()
    if not decay_norms_biases_embeddings:
        for module in model.modules():
            if _is_norm(module) or isinstance(module, nn.Embedding):
                exempt.update(id(p) for p in module.parameters(recurse=False))
        exempt.update(id(p) for name, p in model.named_parameters() if name.endswith("bias"))

    decay: dict[str, list] = {"params": [], "param_names": []}
    no_decay: dict[str, list] = {"params": [], "param_names": []}
    for name, param in model.named_parameters():  # yields each shared parameter once
        if not param.requires_grad:
            continue
        group = no_decay if id(param) in exempt else decay
        group["params"].append(param)
        group["param_names"].append(name)
    groups = [{**decay, "weight_decay": weight_decay}, {**no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(
    model: nn.Module,
    *,
    name: str = "adamw",
    lr: float,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    weight_decay: float = 0.1,
    decay_norms_biases_embeddings: bool = False,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """AdamW (NeoBERT) or Adam (the BERT baseline) over :func:`parameter_groups`.

    AdamW decays weights directly (decoupled); Adam adds ``weight_decay * w`` to the gradient (an L2 penalty
    that the adaptive step rescales), so pass ``weight_decay=0`` for plain Adam. ``fused=True`` (the training
    core passes it on CUDA) runs one fused kernel per step; None leaves the choice to torch.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {name!r}")
    groups = parameter_groups(
        model, weight_decay=weight_decay, decay_norms_biases_embeddings=decay_norms_biases_embeddings
    )
    if not groups:
        raise ValueError("the model has no trainable parameters")
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(groups, lr=lr, betas=betas, eps=eps, fused=fused)
