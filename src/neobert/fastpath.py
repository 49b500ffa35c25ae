"""The inference fast path, applied to a model from outside (the model itself stays a plain nn.Module).

``fast_inference(model)`` = eval mode + weights held in bf16 + the unpadded attention path (+ optionally
``torch.compile``). On a CPU with AMX, oneDNN runs the bf16 matmuls on the tile units; RoPE tables stay
float32 and are never cast per call; masks are built once per forward. Tolerance against float32 (tested
in tests/test_fast_path.py): mean-pooled embeddings within cosine 0.99 (typically > 0.999).
"""

from __future__ import annotations

import torch
from torch import nn

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def fast_inference(
    model: nn.Module,
    dtype: torch.dtype | str | None = torch.bfloat16,
    unpad: bool = True,
    compile: bool = False,
) -> nn.Module:
    """Prepare a NeoBERT model (any head) for inference in place; returns it, or its compiled wrapper.

    ``dtype`` None keeps the weights' dtype. ``unpad`` runs the encoder on real tokens only whenever an
    attention mask is given (exact: the same function as the padded path). ``compile`` wraps the model in
    ``torch.compile``; the first call of each new input shape then pays the compilation.
    """
    encoder = getattr(model, "base_model", model)
    if not hasattr(encoder, "model_config"):
        raise TypeError(f"expected a NeoBERT model, got {type(model).__name__}")
    model.eval()
    if dtype is not None:
        model.to(DTYPES[dtype] if isinstance(dtype, str) else dtype)
    encoder.model_config.unpad = unpad
    encoder.config.unpad = unpad
    if not compile:
        return model
    if hasattr(encoder, "rotary"):  # built now, or its first use would invalidate the first compiled graph
        encoder.rotary.table(next(model.parameters()).device)
    return torch.compile(model)
