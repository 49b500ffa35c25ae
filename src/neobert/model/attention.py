"""Attention over padded batches or packed variable-length sequences.

The public mask convention is transformers' 0/1 ``attention_mask`` (1 = real token). It is converted once per
forward, at the top of the model, into an :class:`AttentionContext`; layers never look at the raw mask.

Two layouts:
- padded: activations (B, L, C); SDPA with a boolean key mask (B, 1, 1, L) that broadcasts over heads and
  queries (nothing of size (B, H, L, L) is built by us).
- packed: activations (T, C) holding only real tokens, sequences delimited by ``cu_seqlens`` (the layout of
  flash-attn's varlen kernels). On CUDA with flash-attn installed that kernel runs. On CPU, consecutive
  sequences of equal length ("runs") are viewed in place as (n, H, l, D) and each run is one SDPA call with
  no mask, so no work is spent on padding; a per-call overhead of some microseconds makes this the choice
  when runs are long enough. Otherwise each layer scatters q, k, v into a (N, max_seqlen) grid, runs SDPA
  with a key mask and gathers back. All compute the same function as the padded path. Packed rows of several
  documents (pretraining) use the same layout, so a token only sees its own document.

On CPU, SDPA dispatches to its flash kernel (``_scaled_dot_product_flash_attention_for_cpu``), which works in
blocks and never holds a (H, L, L) score tensor.
"""

from __future__ import annotations

import importlib.util
import itertools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


@dataclass
class AttentionContext:
    """Everything attention needs about the batch layout, built once per forward."""

    key_mask: torch.Tensor | None = None  # padded: (B, 1, 1, L) bool, True = attend; None = no padding
    cu_seqlens: torch.Tensor | None = None  # packed: (N + 1,) int32 offsets of each sequence
    max_seqlen: int = 0  # packed: longest sequence
    grid_index: torch.Tensor | None = (
        None  # packed: (T,) flat slot of each token in the (N * max_seqlen) grid
    )
    grid_mask: torch.Tensor | None = None  # packed: (N, 1, 1, max_seqlen) bool key mask of that grid
    runs: list[tuple[int, int, int]] = field(default_factory=list)  # packed, CPU: (first token, n, length)
    use_flash: bool = False

    @property
    def packed(self) -> bool:
        return self.cu_seqlens is not None


# A run of equal-length sequences must hold at least this many tokens on average for run-by-run attention
# (one SDPA call each, ~10-50 us of overhead) to beat the padded grid; many tiny sequences use the grid.
MIN_TOKENS_PER_RUN = 64


def padded_context(attention_mask: torch.Tensor | None) -> AttentionContext:
    """Context for (B, L) inputs.

    On an accelerator a mask is kept even when it has no zeros, to avoid a host sync; on CPU the check is
    free, and an all-ones mask is dropped so SDPA skips adding it.
    """
    if attention_mask is None or (
        attention_mask.device.type == "cpu"
        and not torch.compiler.is_compiling()  # a data-dependent branch would break the graph
        and bool(attention_mask.all())
    ):
        return AttentionContext()
    return AttentionContext(key_mask=attention_mask.bool()[:, None, None, :])


def packed_context(cu_seqlens: torch.Tensor, max_seqlen: int, use_flash: bool = False) -> AttentionContext:
    """Context for packed (T, C) inputs with sequence offsets ``cu_seqlens`` (int32, starts at 0)."""
    cu_seqlens = cu_seqlens.to(torch.int32)
    if use_flash:
        return AttentionContext(cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, use_flash=True)
    # Inference only: in training, autograd turns each run's slice of q, k, v into a full-size zero gradient
    # plus an add (quadratic in the number of runs), so the grid is far cheaper there.
    if cu_seqlens.device.type == "cpu" and not torch.is_grad_enabled():  # offsets read without a device sync
        runs = equal_length_runs(cu_seqlens.tolist())
        if int(cu_seqlens[-1]) >= MIN_TOKENS_PER_RUN * len(runs):
            return AttentionContext(cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, runs=runs)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]  # (N,)
    n = lengths.shape[0]
    grid_mask = torch.arange(max_seqlen, device=cu_seqlens.device)[None, :] < lengths[:, None]  # (N, S)
    grid_index = grid_mask.flatten().nonzero().squeeze(-1)  # (T,) slots of real tokens, in packed order
    return AttentionContext(
        cu_seqlens=cu_seqlens,
        max_seqlen=max_seqlen,
        grid_index=grid_index,
        grid_mask=grid_mask.view(n, 1, 1, max_seqlen),
    )


def equal_length_runs(offsets: list[int]) -> list[tuple[int, int, int]]:
    """Group consecutive sequences of equal length: (first token, number of sequences, length) per run.

    ``offsets`` are cu_seqlens; empty sequences hold no token and are skipped.
    """
    runs: list[tuple[int, int, int]] = []
    for start, end in itertools.pairwise(offsets):
        length = end - start
        if length == 0:
            continue
        if runs and runs[-1][2] == length and runs[-1][0] + runs[-1][1] * length == start:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, length)
        else:
            runs.append((start, 1, length))
    return runs


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    """Scaled dot-product attention. q, k, v: (B, L, H, D) padded or (T, H, D) packed; returns the same shape."""
    if not ctx.packed:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=ctx.key_mask
        )  # (B, H, L, D)
        return out.transpose(1, 2)
    if ctx.use_flash and q.is_cuda:
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, ctx.cu_seqlens, ctx.cu_seqlens, ctx.max_seqlen, ctx.max_seqlen)
    if ctx.runs:
        return _attend_runs(q, k, v, ctx.runs)
    return _attend_packed_sdpa(q, k, v, ctx)


def _attend_runs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, runs: list[tuple[int, int, int]]
) -> torch.Tensor:
    h, d = q.shape[1:]
    outs = []
    for start, n, length in runs:
        # (n, H, l, D) views of the run, no copy whatever the strides of q, k, v
        grid = [x[start : start + n * length].view(n, length, h, d).transpose(1, 2) for x in (q, k, v)]
        out = F.scaled_dot_product_attention(*grid)  # (n, H, l, D)
        outs.append(out.transpose(1, 2).reshape(n * length, h, d))
    return outs[0] if len(outs) == 1 else torch.cat(outs)  # (T, H, D)


def _attend_packed_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext
) -> torch.Tensor:
    n, s = ctx.grid_mask.shape[0], ctx.max_seqlen
    h, d = q.shape[1:]

    def to_grid(x: torch.Tensor) -> torch.Tensor:
        grid = x.new_zeros(n * s, h, d)
        grid.index_copy_(0, ctx.grid_index, x)
        return grid.view(n, s, h, d).transpose(1, 2)  # (N, H, S, D)

    out = F.scaled_dot_product_attention(to_grid(q), to_grid(k), to_grid(v), attn_mask=ctx.grid_mask)
    out = out.transpose(1, 2).reshape(n * s, h, d)
    return out.index_select(0, ctx.grid_index)  # (T, H, D)


def unpad(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Indices of real tokens in the flattened (B * L) batch, cu_seqlens and the longest length.

    Assumes each row's real tokens are contiguous (right or left padding); one host sync for max_seqlen.
    """
    lengths = attention_mask.sum(dim=-1, dtype=torch.int32)  # (B,)
    indices = attention_mask.flatten().nonzero().squeeze(-1)  # (T,)
    cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, int(lengths.max())


def positions_from_cu_seqlens(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Position of each packed token inside its own sequence: restarts at 0 for every sequence. (T,)"""
    starts = cu_seqlens[:-1].long()
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    seq_start = torch.repeat_interleave(starts, lengths, output_size=total)
    return torch.arange(total, device=cu_seqlens.device) - seq_start
