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

OPTIMIZERS = ("adamw", "adam", "muon")
MUON_LR_ADJUSTMENTS = ("match_rms_adamw", "original")


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
    muon: dict | None = None,
) -> torch.optim.Optimizer:
    """AdamW (NeoBERT) or Adam (the BERT baseline) over :func:`parameter_groups`; or ``name="muon"``: Muon
    over the hidden 2-D weights and AdamW over the rest (:class:`MuonWithAdamW`, ``muon`` its Muon settings).

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
    if name == "muon":
        return MuonWithAdamW.build(
            model, groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused, **(muon or {})
        )
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def muon_parameter_ids(model: nn.Module) -> set[int]:
    """The parameters Muon updates: every trainable 2-D weight except embeddings and the output layer (the
    MLM decoder, or whatever ``get_output_embeddings`` names), whose rows are looked up or scored one token
    at a time rather than applied as one linear map; norms and biases are 1-D and go to AdamW anyway."""
    excluded: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            excluded.update(id(p) for p in module.parameters(recurse=False))
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        excluded.update(id(p) for p in output.parameters(recurse=False))
    return {id(p) for p in model.parameters() if p.requires_grad and p.ndim == 2 and id(p) not in excluded}


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon (torch.optim.Muon: momentum, then Newton-Schulz orthogonalisation of each matrix's update) for
    the hidden 2-D weights, AdamW for the rest (embeddings, norms, biases, the output layer), stepped as one
    optimizer: its ``param_groups`` are both optimizers' groups, so one learning-rate schedule drives both,
    and its state dict holds both (a checkpoint resumes exactly).

    With ``adjust_lr="match_rms_adamw"`` (the default) Muon scales each matrix's update to AdamW's typical
    RMS (0.2 x sqrt(max(rows, cols))), so the two share the learning rate and the weight decay (Liu et al.
    2025, "Muon is Scalable for LLM Training"); ``"original"`` is Keller Jordan's sqrt(max(1, rows/cols)),
    which wants a larger learning rate than AdamW's.
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer):
        self.muon, self.adamw = muon, adamw
        params = [p for opt in (muon, adamw) for g in opt.param_groups for p in g["params"]]
        super().__init__(params, {"lr": adamw.defaults["lr"]})
        self._link()

    @classmethod
    def build(
        cls,
        model: nn.Module,
        groups: list[dict],
        *,
        lr: float,
        betas,
        eps: float,
        weight_decay: float,
        fused: bool | None = None,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr: str = "match_rms_adamw",
    ) -> MuonWithAdamW:
        if adjust_lr not in MUON_LR_ADJUSTMENTS:
            raise ValueError(
                f"muon adjust_lr must be one of {', '.join(MUON_LR_ADJUSTMENTS)}; got {adjust_lr!r}"
            )
        matrices = muon_parameter_ids(model)
        muon_group: dict[str, list] = {"params": [], "param_names": []}
        rest = []
        for group in groups:
            kept = [(n, p) for n, p in zip(group["param_names"], group["params"]) if id(p) not in matrices]
            muon_group["params"] += [p for p in group["params"] if id(p) in matrices]
            muon_group["param_names"] += [
                n for n, p in zip(group["param_names"], group["params"]) if id(p) in matrices
            ]
            if kept:
                rest.append({**group, "param_names": [n for n, _ in kept], "params": [p for _, p in kept]})
        if not muon_group["params"]:
            raise ValueError("Muon found no hidden 2-D weights in the model")
        muon = torch.optim.Muon(
            [muon_group],
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr,
        )
        adamw = torch.optim.AdamW(rest, lr=lr, betas=betas, eps=eps, fused=fused)
        return cls(muon, adamw)

    def _link(self) -> None:
        # the same group dicts as the inner optimizers', so a scheduler's lr reaches them
        self.param_groups = self.muon.param_groups + self.adamw.param_groups

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self._link()  # loading replaced the inner group dicts


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
