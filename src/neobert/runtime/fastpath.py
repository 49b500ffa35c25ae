"""The inference fast path, applied to a model from outside (the model itself stays a plain nn.Module).

``fast_inference(model)`` = eval mode + weights held in bf16 + the unpadded attention path + fused CPU
epilogues (+ optionally compiled blocks). On a CPU with AMX, oneDNN runs the bf16 matmuls on the tile
units; RoPE tables stay float32 and are never cast per call; masks are built once per forward. Tolerance
against float32 (tested in tests/test_fast_path.py): mean-pooled embeddings within cosine 0.99 (typically
> 0.9999).

Fused epilogues (CPU, bf16 weights, no autograd): oneDNN's linear with a post-op (the op inductor uses for
frozen CPU graphs, ``torch.ops.mkldnn._linear_pointwise``) computes ``silu(x W_gate)`` and ``* (x W_up)``
inside the SwiGLU matmuls and the two residual additions inside ``wo`` and ``w3``, so the (tokens x 2F)
SwiGLU intermediate and four elementwise passes per layer are never materialised: +1-6% tokens/s
(docs/benchmarks.md). Where that op is missing, or gradients are on, blocks run their plain forward.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..model.attention import AttentionContext
from ..model.checks import BackendCheck, run_check, warn_fallback
from ..model.execution import compile_blocks, neobert_encoder, set_runtime
from ..model.layers import EncoderBlock, SwiGLU

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def fast_inference(
    model: nn.Module,
    dtype: torch.dtype | str | None = torch.bfloat16,
    unpad: bool = True,
    compile: bool = False,
    fuse: bool = True,
) -> nn.Module:
    """Prepare a NeoBERT model (any head) for inference in place; returns it.

    ``dtype`` None keeps the weights' dtype. ``unpad`` runs the encoder on real tokens only whenever an
    attention mask is given (exact: the same function as the padded path). ``compile`` compiles each
    encoder block (:func:`neobert.model.compile_blocks`; inductor then fuses the elementwise work itself,
    so the CPU epilogues are not used); the first call of each new input shape pays the compilation.
    ``fuse`` turns the fused CPU epilogues on (default) or off (:func:`fuse_cpu_epilogues`).
    """
    neobert_encoder(model)  # TypeError for anything but NeoBERT
    model.eval()
    if dtype is not None:
        model.to(DTYPES[dtype] if isinstance(dtype, str) else dtype)
    set_runtime(model, unpad=unpad)
    fuse_cpu_epilogues(model, fuse and not compile)
    if compile:
        compile_blocks(model)
    return model


@functools.cache
def _linear_pointwise() -> object | None:
    """oneDNN's fused linear op, or None where this torch or this CPU cannot run it in bf16, or where it
    fails its first-use check (:func:`check_cpu_epilogues`, with one warning)."""
    check = check_cpu_epilogues()
    if check.ok:
        return torch.ops.mkldnn._linear_pointwise
    if check.available:  # the op runs here but computed something else: say so, use the plain blocks
        warn_fallback(check, "the plain (unfused) encoder blocks")
    return None


@functools.cache
def check_cpu_epilogues() -> BackendCheck:
    """The three fused bf16 ops the blocks use (silu, mul and add epilogues) against the same computation
    unfused in float32, on a small random input. Their bf16 post-ops need AVX-512 (or AVX-NE-CONVERT),
    which e.g. AVX2-only CPUs lack, and the op says so only when called: that is "not available"."""
    ops = getattr(torch.ops, "mkldnn", None)
    if not torch.backends.mkldnn.is_available() or ops is None or not hasattr(ops, "_linear_pointwise"):
        return BackendCheck(
            "cpu_epilogues", "cpu", "bfloat16", available=False, error="no oneDNN in this torch"
        )
    op = ops._linear_pointwise
    g = torch.Generator().manual_seed(0)
    x, other = (torch.randn(6, 32, generator=g).bfloat16() for _ in range(2))
    w = (torch.randn(32, 32, generator=g) / 6).bfloat16()
    try:
        op(x, w, None, "swish", [], "")
    except RuntimeError as err:
        return BackendCheck(
            "cpu_epilogues", "cpu", "bfloat16", available=False, error=str(err).splitlines()[0]
        )

    def compare() -> list[tuple[torch.Tensor, torch.Tensor]]:
        plain = x.float() @ w.float().T
        return [
            (op(x, w, None, "swish", [], ""), F.silu(plain)),
            (op.binary(x, other, w, None, "mul"), plain * other.float()),
            (op.binary(x, other, w, None, "add"), plain + other.float()),
        ]

    return run_check("cpu_epilogues", "cpu", torch.bfloat16, compare)


class FusedEncoderBlock(EncoderBlock):
    """An :class:`EncoderBlock` whose CPU bf16 inference forward fuses SwiGLU and the residual adds into
    oneDNN matmul epilogues; the same parameters and state-dict names, and the plain forward otherwise."""

    def forward(self, x: torch.Tensor, ctx: AttentionContext, rope: torch.Tensor | None) -> torch.Tensor:
        op = _linear_pointwise()
        if op is None or not self._fusable(x):
            return super().forward(x, ctx, rope)
        weight = self.wo.weight
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (T, C)
        heads = self.attention_heads(self.attention_norm(x), ctx, rope).reshape(-1, shape[-1])
        flat = op.binary(heads, flat, weight, None, "add")  # x + wo(heads)
        h = self.ffn_norm(flat)
        gate_up = self.ffn.w12.weight  # rows [gate | up]
        width = self.ffn.w3.in_features
        gate = op(h, gate_up[:width], None, "swish", [], "")  # silu(h W_gate)
        hidden = op.binary(h, gate, gate_up[width:], None, "mul")  # (h W_up) * silu(h W_gate)
        return op.binary(hidden, flat, self.ffn.w3.weight, None, "add").view(shape)  # x + w3(hidden)

    def _fusable(self, x: torch.Tensor) -> bool:
        """CPU bf16 inference on plain bf16 nn.Linear weights (not quantized modules or tensor subclasses)."""
        if self.training or torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.bfloat16:
            return False
        return all(
            type(m) is nn.Linear
            and m.bias is None  # the fused ops below are called without a bias
            and type(m.weight) in (torch.Tensor, nn.Parameter)
            and m.weight.dtype == x.dtype
            for m in (self.wo, self.ffn.w12, self.ffn.w3)
        )


def fuse_cpu_epilogues(model: nn.Module, fuse: bool = True) -> int:
    """Make every SwiGLU block of ``model`` a :class:`FusedEncoderBlock`, or with ``fuse=False`` a plain
    :class:`EncoderBlock` again (in place: the class changes, the parameters stay); returns how many."""
    if fuse and _linear_pointwise() is None:
        return 0
    source, target = (EncoderBlock, FusedEncoderBlock) if fuse else (FusedEncoderBlock, EncoderBlock)
    count = 0
    for module in model.modules():
        if type(module) is source and type(module.ffn) is SwiGLU:
            module.__class__ = target
            count += 1
    return count
