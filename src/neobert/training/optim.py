"""Optimizer construction with weight-decay parameter groups.

Weight decay pulls weights toward zero. For the gain of a normalization layer (whose neutral value is 1),
a bias, or an embedding row that a batch may not even touch, that pull is not a regularizer but a bias, so
by default they are left out of decay; ``decay_norms_biases_embeddings=True`` decays everything, which is
what the original training code did.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from ..model.checks import BackendCheck, run_check, warn_fallback

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
    core passes it on CUDA, once :func:`check_fused_adamw` passed) runs one fused kernel per step; None leaves the choice to torch.
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


@functools.cache
def check_fused_adamw(device: str) -> BackendCheck:
    """Three steps of torch's fused AdamW against the single-tensor (for-loop) implementation on the same
    parameters and gradients, fp32; once per device per process. The training core uses the fused kernel
    only where this passes (:func:`use_fused_adamw`)."""
    torch_device = torch.device(device)

    def compare() -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        start = [torch.randn(33, 17, generator=g), torch.randn(17, generator=g)]
        grads = [[torch.randn(p.shape, generator=g) for p in start] for _ in range(3)]
        results = []
        for fused in (True, False):
            params = [p.clone().to(torch_device).requires_grad_() for p in start]
            optimizer = torch.optim.AdamW(
                params, lr=1e-2, weight_decay=0.1, fused=fused or None, foreach=False if not fused else None
            )
            for step in grads:
                for p, grad in zip(params, step):
                    p.grad = grad.to(torch_device)
                optimizer.step()
            results.append(params)
        return list(zip(*results))

    return run_check("fused_adamw", torch_device, torch.float32, compare, tol=1e-5)


def use_fused_adamw(device: torch.device) -> bool:
    """Whether the training core takes fused AdamW on ``device``: on CUDA, once it passed its check (else one
    warning, and the for-each implementation)."""
    if device.type != "cuda":
        return False
    check = check_fused_adamw(str(device))
    if not check.ok:
        warn_fallback(check, "torch's for-each AdamW")
    return check.ok
