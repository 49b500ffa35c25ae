"""Runtime choices applied to a built model from outside: attention kernel, unpadding, regional compilation.

None of this is architecture (a checkpoint never stores it), and the model never picks it for itself beyond
the ``auto`` defaults of :class:`neobert.model.attention.AttentionRuntime`.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

from .attention import ATTN_BACKENDS, AttentionRuntime
from .layers import EncoderBlock


def neobert_encoder(model: nn.Module) -> nn.Module:
    """The bare NeoBERT encoder of ``model`` (any head); TypeError for anything else."""
    encoder = getattr(model, "base_model", model)
    if not isinstance(getattr(encoder, "runtime", None), AttentionRuntime):
        raise TypeError(f"expected a NeoBERT model, got {type(model).__name__}")
    return encoder


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


def compile_blocks(model: nn.Module, **compile_kwargs: Any) -> float:
    """Regional compilation: ``torch.compile`` each encoder block in place (same parameters and state-dict
    names), so inductor fuses RoPE, RMSNorm, SwiGLU and the residual adds around the matmuls and the
    attention kernel. The embedding, (un)padding and heads stay eager, and all blocks share one compiled
    graph. ``compile_kwargs`` go to ``torch.compile`` (e.g. ``mode``, ``dynamic``). Returns the seconds spent
    here (compilation itself happens lazily, at the first forward of each new shape)."""
    started = time.perf_counter()
    encoder = neobert_encoder(model)
    for block in encoder.modules():
        if isinstance(block, EncoderBlock):
            block.compile(**compile_kwargs)
    encoder.runtime.compiled = True
    if hasattr(encoder, "rotary"):  # built now, so its first use is not inside a traced region
        encoder.rotary.table(next(model.parameters()).device)
    return time.perf_counter() - started
