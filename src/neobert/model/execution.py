"""How a built model executes, chosen from outside: attention kernel, unpadding, regional compilation.

None of this is architecture (a checkpoint never stores it), and the model never picks it for itself beyond
the ``auto`` defaults of :class:`neobert.model.attention.AttentionRuntime`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..common.config import ModelConfig
from .attention import ATTN_BACKENDS, AttentionContext, AttentionRuntime
from .checks import BackendCheck, run_check
from .layers import EncoderBlock
from .rope import rope_rotations


def neobert_encoder(model: nn.Module) -> nn.Module:
    """The bare NeoBERT encoder of ``model`` (any head); TypeError for anything else."""
    encoder = getattr(model, "base_model", model)
    if not isinstance(getattr(encoder, "runtime", None), AttentionRuntime):
        raise TypeError(f"expected a NeoBERT model, got {type(model).__name__}")
    return encoder


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Dropout off (inference, validation), and the caller's train/eval mode restored afterwards, errors
    included: the one save/restore of a module's mode."""
    was_training = module.training
    if not was_training and not any(m.training for m in module.modules()):
        yield  # already all in eval mode (a served model): nothing to switch (transformers' train() costs a
        return  # walk of every module, twice, which was 5% of a served 250M model's call)
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


_KEEP: Any = object()


def set_runtime(model: nn.Module, *, attn_backend: str = _KEEP, unpad: bool | None = _KEEP) -> nn.Module:
    """Choose the attention kernel (one of ``ATTN_BACKENDS``) and/or unpadding (True, False, or None = auto:
    whenever the kernel is a varlen one) of a NeoBERT model, in place; returns the model."""
    runtime = neobert_encoder(model).runtime
    if attn_backend is not _KEEP:
        if attn_backend not in ATTN_BACKENDS:
            raise ValueError(f"attn_backend must be one of {', '.join(ATTN_BACKENDS)}; got {attn_backend!r}")
        runtime.backend = attn_backend
    if unpad is not _KEEP:
        runtime.unpad = unpad
    return model


def compile_blocks(model: nn.Module, check: bool | None = None, **compile_kwargs: Any) -> float:
    """Regional compilation: ``torch.compile`` each encoder block in place (same parameters and state-dict
    names), so inductor fuses RoPE, RMSNorm, SwiGLU and the residual adds around the matmuls and the
    attention kernel. The embedding, (un)padding and heads stay eager, and all blocks share one compiled
    graph. ``compile_kwargs`` go to ``torch.compile`` (e.g. ``mode``, ``dynamic``). Returns the seconds spent
    here (compilation itself happens lazily, at the first forward of each new shape).

    Compilation is always an explicit choice, so a failed first-use check (:func:`check_compiled_blocks`;
    ``check`` None: on CUDA only, where the suite cannot run it) raises rather than falling back."""
    started = time.perf_counter()
    encoder = neobert_encoder(model)
    parameter = next(model.parameters())
    if check is None:
        check = parameter.device.type == "cuda"  # the suite covers CPU compilation itself
    if check:
        result = check_compiled_blocks(str(parameter.device), parameter.dtype, **compile_kwargs)
        if not result.ok:
            raise RuntimeError(f"compiled blocks failed their first-use check: {result.error}")
    for block in encoder.modules():
        if isinstance(block, EncoderBlock):
            block.compile(**compile_kwargs)
    encoder.runtime.compiled = True
    if hasattr(encoder, "rotary"):  # built now, so its first use is not inside a traced region
        encoder.rotary.table(next(model.parameters()).device)
    return time.perf_counter() - started


def check_compiled_blocks(device: str, dtype: torch.dtype, **compile_kwargs: Any) -> BackendCheck:
    """A tiny compiled encoder block against the same block eager, with RoPE, forward and the gradients of
    its input and weights (bf16 / fp16 weights run under autocast over fp32 copies, as in training)."""
    torch_device = torch.device(device)
    config = ModelConfig.from_name("tiny", hidden_size=64, num_attention_heads=2, intermediate_size=128)

    def compare() -> list[tuple[torch.Tensor, torch.Tensor]]:
        torch.manual_seed(0)
        eager = EncoderBlock(config).to(torch_device)
        compiled = EncoderBlock(config).to(torch_device)
        compiled.load_state_dict(eager.state_dict())
        compiled.compile(**compile_kwargs)
        x = torch.randn(2, 24, config.hidden_size, device=torch_device)
        rope = rope_rotations(config, torch_device)[:24, None, None]
        outputs = []
        for block in (compiled, eager):
            inputs = x.clone().requires_grad_()
            with torch.autocast(torch_device.type, dtype=dtype, enabled=dtype != torch.float32):
                out = block(inputs, AttentionContext(), rope)
            out.float().square().mean().backward()
            outputs.append([out, inputs.grad, *(p.grad for p in block.parameters())])
        return list(zip(*outputs))

    return run_check("compiled_blocks", torch_device, dtype, compare)
