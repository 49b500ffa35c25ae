"""Building blocks of the NeoBERT encoder, bottom-up: norm, FFN, block (with its attention).

Attribute names match the released checkpoint (``qkv``, ``wo``, ``ffn.w12``, ``ffn.w3``, ``attention_norm``,
``ffn_norm``), so its tensors load without any renaming.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.config import ModelConfig
from .attention import AttentionContext, attend
from .rope import rotate_pairs


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: the function of ``torch.nn.RMSNorm``, in fewer passes.

    On CPU torch's version upcasts the whole input to float32 and makes about eight passes over it; here
    the norm is one reduction (accumulated in float32 by the kernel, then rounded to x's dtype: a 0.2%
    scale error per bf16 token, below bf16's own rounding of the output), then two multiplies.
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # (..., 1)
        norm = norm.to(torch.promote_types(norm.dtype, torch.float32))
        inv_rms = torch.rsqrt(norm.square() / x.shape[-1] + self.eps)
        return x * inv_rms.to(x.dtype) * self.weight


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.hidden_size, eps=config.norm_eps)
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps)


class SwiGLU(nn.Module):
    """out = w3(silu(gate) * up) with [gate | up] = chunk(w12(x), 2): gate rows first in w12."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w12 = nn.Linear(config.hidden_size, 2 * config.ffn_hidden_size, bias=config.linear_bias)
        self.w3 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=config.linear_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(gate) * up)


class GeluMLP(nn.Module):
    """The BERT-baseline FFN: w3(gelu(w1(x))), no gating."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=config.linear_bias)
        self.w3 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=config.linear_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w3(F.gelu(self.w1(x)))


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + ffn(norm(x)).

    The attention projections live on the block itself (``qkv``, ``wo``), as in the released checkpoint.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.use_rope = config.position_embedding == "rope"
        self.attention_norm = make_norm(config)
        # a qkv bias follows the same per-head [q | k | v] layout as the weight rows
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.linear_bias)
        self.wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.linear_bias)
        self.ffn_norm = make_norm(config)
        self.ffn = SwiGLU(config) if config.ffn == "swiglu" else GeluMLP(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def attention(self, x: torch.Tensor, ctx: AttentionContext, rope: torch.Tensor | None) -> torch.Tensor:
        return self.wo(self.attention_heads(x, ctx, rope))  # (..., C)

    def attention_heads(
        self, x: torch.Tensor, ctx: AttentionContext, rope: torch.Tensor | None
    ) -> torch.Tensor:
        """The attention output before ``wo``, heads concatenated: (..., C)."""
        # x: (B, L, C) padded or (T, C) packed; rope: (cos, sin), broadcastable to (..., H, 2, D/2, 2)
        # The released layout splits *inside* each head: rows [h*3D, h*3D + D) are q of head h, the next D
        # are k, the next D are v. It is not [all q | all k | all v].
        qkv = self.qkv(x).unflatten(-1, (self.num_heads, 3, self.head_dim))  # (..., H, 3, D)
        qk = qkv[..., :2, :]  # (..., H, 2, D): q and k side by side, rotated in one call
        if self.use_rope:
            qk = rotate_pairs(qk, rope)
        q, k = qk.unbind(-2)  # each (..., H, D)
        return attend(q, k, qkv[..., 2, :], ctx).flatten(-2)  # (..., H, D) -> (..., C)

    def forward(self, x: torch.Tensor, ctx: AttentionContext, rope: torch.Tensor | None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), ctx, rope))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))
