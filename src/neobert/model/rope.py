"""Rotary position embeddings in NeoBERT's convention, with context-extension scalings.

NeoBERT rotates *adjacent* pairs of each head's dimensions, (2j, 2j+1), by the angle
``pos * inv_freq[j]`` with ``inv_freq[j] = theta ** (-2j / head_dim)`` (the complex-number form). This is
not the "rotate half" pairing (j, j + head_dim/2) that LLaMA-style code uses; mixing them up silently
breaks a released checkpoint. The rotation is done in float32 (or float64) whatever the activation dtype,
as one complex multiply in eager mode (see :func:`rotate_pairs`).
"""

from __future__ import annotations

import math

import torch

from ..common.config import ModelConfig


def inverse_frequencies(
    head_dim: int,
    theta: float = 10000.0,
    scaling: str = "none",
    factor: float = 1.0,
    original_max_length: int = 4096,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """Per-pair rotation frequencies (float64, shape (head_dim/2,)) and the attention scale for cos/sin.

    - ``none``: plain RoPE.
    - ``linear``: position interpolation, every frequency divided by ``factor``.
    - ``ntk``: NTK-aware scaling, the base raised to ``theta * factor ** (d / (d - 2))``: the highest
      frequency is untouched and the lowest is interpolated by ``factor``.
    - ``yarn``: YaRN: dimensions whose wavelength fits many times in the original context keep their
      frequency, those whose wavelength exceeds it are interpolated, with a linear ramp between
      ``beta_slow`` and ``beta_fast`` rotations; cos and sin are scaled by ``0.1 ln(factor) + 1``.
    With ``factor == 1`` every scaling returns exactly the plain frequencies and scale 1.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # 2j / d
    if scaling == "ntk" and factor != 1.0:
        theta = theta * factor ** (head_dim / (head_dim - 2))
    inv_freq = theta**-exponents
    scale = 1.0
    if factor == 1.0 or scaling in ("none", "ntk"):
        return inv_freq, scale
    if scaling == "linear":
        return inv_freq / factor, scale
    if scaling == "yarn":
        # number of full rotations each pair makes over the original context
        rotations = original_max_length * inv_freq / (2 * math.pi)
        # 1 -> keep the original frequency (fast-rotating pairs), 0 -> interpolate (slow pairs)
        keep = ((rotations - beta_slow) / (beta_fast - beta_slow)).clamp(0.0, 1.0)
        inv_freq = keep * inv_freq + (1.0 - keep) * inv_freq / factor
        scale = 0.1 * math.log(factor) + 1.0
        return inv_freq, scale
    raise ValueError(f"unknown RoPE scaling {scaling!r}")


def rope_tables(config: ModelConfig, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (max_length, head_dim/2), float32, for every position the model accepts."""
    inv_freq, scale = inverse_frequencies(
        config.head_dim,
        config.rope_theta,
        config.rope_scaling_type,
        config.rope_scaling_factor,
        config.rope_original_max_length,
        config.yarn_beta_fast,
        config.yarn_beta_slow,
    )
    positions = torch.arange(config.max_length, dtype=torch.float64)
    angles = torch.outer(positions, inv_freq)  # (L, D/2), float64 so long positions stay exact
    cos = (angles.cos() * scale).float()
    sin = (angles.sin() * scale).float()
    if device is not None:
        cos, sin = cos.to(device), sin.to(device)
    return cos, sin


def rope_rotations(config: ModelConfig, device: torch.device | None = None) -> torch.Tensor:
    """The tables of :func:`rope_tables` side by side: (max_length, D/2, 2) float32 of (cos, sin) pairs."""
    cos, sin = rope_tables(config, device)
    return torch.stack((cos, sin), dim=-1)


def rotate_pairs(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Rotate each adjacent pair (x[2j], x[2j+1]) by the angle whose (cos, sin) is ``rotations[..., j, :]``.

    x: (..., D), any float dtype; rotations: (..., D/2, 2) float32/64, broadcastable. Returns x's shape and
    dtype. Read as complex numbers the rotation is one multiply, (x[2j] + i x[2j+1]) (cos + i sin): in eager
    mode a vectorized complex kernel, where real arithmetic on the strided halves plus an interleaving stack
    is not (with q and k rotated together: 7.7 -> 2.7 ms per layer at 2,048 bf16 tokens on CPU). float32/64
    inputs are viewed as complex without a copy; bf16/fp16 inputs are rotated in a float32 copy, in place,
    and rounded once (as the released code does).
    Under torch.compile the real form is used: inductor has no complex codegen and fuses it into one kernel.
    """
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    if torch.compiler.is_compiling():
        x0, x1 = wide.unflatten(-1, (-1, 2)).unbind(-1)  # (..., D/2) each
        cos, sin = rotations.unbind(-1)
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2).to(x.dtype)
    cis = _as_complex(rotations.flatten(-2))  # (..., D/2)
    if wide is x:
        return torch.view_as_real(_as_complex(x) * cis).flatten(-2)
    _as_complex(wide).mul_(cis)  # wide is our own copy: in place saves an allocation (page faults on CPU)
    return wide.to(x.dtype)


def _as_complex(x: torch.Tensor) -> torch.Tensor:
    """(..., D) real -> (..., D/2) complex view; view_as_complex needs adjacent pairs and even strides."""
    if x.stride(-1) != 1 or x.storage_offset() % 2 or any(s % 2 for s in x.stride()[:-1]):
        x = x.contiguous()
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))
