"""Attention over padded batches or packed variable-length sequences, and the choice of its kernel.

The public mask convention is transformers' 0/1 ``attention_mask`` (1 = real token). It is converted once per
forward, at the top of the model, into an :class:`AttentionContext`; layers never look at the raw mask.

Two layouts:
- padded: activations (B, L, C); SDPA with a boolean key mask (B, 1, 1, L) that broadcasts over heads and
  queries (nothing of size (B, H, L, L) is built by us), or no mask at all when there is no padding.
- packed: activations (T, C) holding only real tokens, sequences delimited by ``cu_seqlens`` (the layout of
  flash-attn's varlen kernels). Packed rows of several documents (pretraining) use the same layout, so a
  token only sees its own document.

Kernels for the packed layout (:data:`ATTN_BACKENDS`, chosen by :func:`resolve_backend`):
- ``flash_attn``: the flash-attn package's varlen kernel (CUDA, bf16/fp16), when installed;
- ``varlen``: torch's own varlen flash kernel, ``torch.nn.attention.varlen.varlen_attn`` (CUDA, bf16/fp16,
  torch >= 2.10); no padding work, no extra package;
- ``flex``: FlexAttention with a per-document block mask (any device; fused only under ``torch.compile``,
  see :func:`neobert.model.compile_blocks`);
- ``sdpa``: the portable path. On CPU without autograd, consecutive sequences of equal length ("runs") are
  viewed in place as (n, H, l, D) and each run is one SDPA call with no mask; otherwise q, k, v are
  scattered into a (N, max_seqlen) grid, SDPA runs with a key mask, and the result is gathered back.
All compute the same function as the padded path (tests/test_attention_paths.py, tests/test_gpu.py).

On CPU, SDPA dispatches to its flash kernel (``_scaled_dot_product_flash_attention_for_cpu``), which works in
blocks and never holds a (H, L, L) score tensor.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from .checks import BackendCheck, run_check, warn_fallback

ATTN_BACKENDS = ("auto", "sdpa", "varlen", "flex", "flash_attn")
VARLEN_KERNELS = ("flash_attn", "varlen", "flex")  # backends that need no padded grid
_HALF = (torch.bfloat16, torch.float16)


class AttentionBackendError(RuntimeError):
    """The attention kernel asked for cannot run here (device, dtype or a missing package)."""


@functools.cache
def flash_attn_available() -> bool:
    """Whether flash-attn is installed: looked up once per process, not on every half-precision forward."""
    return importlib.util.find_spec("flash_attn") is not None


@functools.cache
def _torch_varlen():
    """torch's varlen flash-attention function, or None where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@dataclass
class AttentionRuntime:
    """How a model runs its attention: runtime choices, never part of the architecture or a checkpoint.

    ``backend``: one of :data:`ATTN_BACKENDS`; ``auto`` takes flash-attn, else torch's varlen kernel, for
    CUDA bf16/fp16, and SDPA otherwise. ``unpad``: run on real tokens only when a padding mask is given;
    None (default) = whenever the backend is a varlen kernel (so on CUDA an all-ones mask costs no masked
    attention: the kernel sees equal lengths). ``compiled`` is set by :func:`neobert.model.compile_blocks`.
    """

    backend: str = "auto"
    unpad: bool | None = None
    compiled: bool = False

    def __post_init__(self) -> None:
        if self.backend not in ATTN_BACKENDS:
            raise ValueError(f"attn_backend must be one of {', '.join(ATTN_BACKENDS)}; got {self.backend!r}")


def resolve_backend(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """The kernel packed inputs run on, for computations in ``dtype`` on ``device``.

    Every kernel other than the reference SDPA path proves itself on first use in the process
    (:func:`check_attention`). ``auto`` never fails: a kernel that fails its check is replaced by SDPA with
    one warning. An explicit choice that cannot run here, or fails its check, raises
    :class:`AttentionBackendError`.
    """
    candidate = (
        auto_candidate(device, dtype) if requested == "auto" else explicit_candidate(requested, device, dtype)
    )
    if candidate == "sdpa" or torch.compiler.is_compiling():
        return candidate
    check = check_attention(candidate, str(device), dtype, backward=torch.is_grad_enabled())
    if check.ok:
        return candidate
    if requested != "auto":
        raise AttentionBackendError(f"attn_backend {requested!r} failed its first-use check: {check.error}")
    warn_fallback(check, "the SDPA attention path")
    return "sdpa"


def auto_candidate(device: torch.device, dtype: torch.dtype) -> str:
    """What ``auto`` would take here before its first-use check: flash-attn, else torch's varlen kernel, for
    CUDA bf16/fp16; SDPA otherwise."""
    fast = device.type == "cuda" and dtype in _HALF
    if fast and flash_attn_available():
        return "flash_attn"
    if fast and _torch_varlen() is not None:
        return "varlen"
    return "sdpa"


def explicit_candidate(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """``requested`` if it can run here at all (device, dtype, package), else :class:`AttentionBackendError`."""
    fast = device.type == "cuda" and dtype in _HALF
    if requested in ("flash_attn", "varlen") and not fast:
        raise AttentionBackendError(
            f"attn_backend {requested!r} needs CUDA and bf16/fp16 computation; got {device.type} {dtype}"
        )
    if requested == "flash_attn" and not flash_attn_available():
        raise AttentionBackendError(
            "attn_backend 'flash_attn' needs the flash-attn package: pip install 'neobert[flash]'"
        )
    if requested == "varlen" and _torch_varlen() is None:
        raise AttentionBackendError(
            f"attn_backend 'varlen' needs torch.nn.attention.varlen (torch >= 2.10); this is {torch.__version__}"
        )
    return requested


CHECK_LENGTHS = (5, 17, 1, 40)  # sequences of the first-use check: odd lengths, a single token


@functools.cache
def check_attention(backend: str, device: str, dtype: torch.dtype, backward: bool = True) -> BackendCheck:
    """Packed attention through ``backend`` against the padded SDPA path in float32 on the same (rounded)
    inputs: the output and, with ``backward`` (a training forward), the gradients of q, k and v. Once per
    (backend, device, dtype, backward) per process."""
    torch_device = torch.device(device)

    def compare() -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        total, heads, dim = sum(CHECK_LENGTHS), 2, 64
        qkv = [torch.randn(total, heads, dim, generator=g).to(torch_device, dtype) for _ in range(3)]
        grad = torch.randn(total, heads, dim, generator=g).to(torch_device, dtype)
        offsets = torch.tensor([0, *itertools.accumulate(CHECK_LENGTHS)], device=torch_device)
        ctx = packed_context(offsets, max(CHECK_LENGTHS), backend)
        path_inputs = [x.clone().requires_grad_(backward) for x in qkv]
        out = attend(*path_inputs, ctx)
        ref_inputs = [x.float().clone().requires_grad_(backward) for x in qkv]
        ref = _attend_each(*ref_inputs, offsets.tolist())
        if not backward:
            return [(out, ref)]
        out.backward(grad)
        ref.backward(grad.float())
        return [(out, ref)] + [(a.grad, b.grad) for a, b in zip(path_inputs, ref_inputs)]

    name = f"attention:{backend}" + ("" if backward else " (forward)")
    return run_check(name, torch_device, dtype, compare)


def _attend_each(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: list[int]) -> torch.Tensor:
    """The reference: padded SDPA on one sequence at a time."""
    outs = []
    for start, end in itertools.pairwise(offsets):
        view = [x[start:end].transpose(0, 1)[None] for x in (q, k, v)]  # (1, H, l, D)
        outs.append(F.scaled_dot_product_attention(*view)[0].transpose(0, 1))
    return torch.cat(outs)


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
    backend: str = "sdpa"  # packed: the kernel (resolved, never "auto")
    block_mask: object | None = None  # packed, flex: the per-document BlockMask

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


def packed_context(
    cu_seqlens: torch.Tensor, max_seqlen: int, backend: str = "sdpa", allow_runs: bool = True
) -> AttentionContext:
    """Context for packed (T, C) inputs with sequence offsets ``cu_seqlens`` (int32, starts at 0).

    ``backend`` is a resolved kernel (see :func:`resolve_backend`); ``allow_runs`` False keeps the SDPA path
    off the data-dependent run-by-run loop (compiled blocks would recompile for every new set of runs).
    """
    cu_seqlens = cu_seqlens.to(torch.int32)
    if backend in ("flash_attn", "varlen"):
        return AttentionContext(cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, backend=backend)
    if backend == "flex":
        return AttentionContext(
            cu_seqlens=cu_seqlens,
            max_seqlen=max_seqlen,
            backend=backend,
            block_mask=document_block_mask(cu_seqlens),
        )
    # Inference only: in training, autograd turns each run's slice of q, k, v into a full-size zero gradient
    # plus an add (quadratic in the number of runs), so the grid is far cheaper there.
    if allow_runs and cu_seqlens.device.type == "cpu" and not torch.is_grad_enabled():  # no device sync
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


def document_ids(cu_seqlens: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """Index of the sequence each packed token belongs to: (T,) int32."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    ids = torch.arange(lengths.shape[0], device=cu_seqlens.device, dtype=torch.int32)
    total = int(cu_seqlens[-1]) if total is None else total
    return torch.repeat_interleave(ids, lengths, output_size=total)


def document_block_mask(cu_seqlens: torch.Tensor) -> object:
    """FlexAttention BlockMask letting each token attend within its own sequence only (blocks of 128
    tokens that straddle no document boundary are skipped or run unmasked by the kernel)."""
    total = int(cu_seqlens[-1])
    docs = document_ids(cu_seqlens, total)

    def same_document(b, h, q_idx, kv_idx):
        return docs[q_idx] == docs[kv_idx]

    return create_block_mask(same_document, None, None, total, total, device=cu_seqlens.device)


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
    if ctx.backend == "varlen":
        return _torch_varlen()(q, k, v, ctx.cu_seqlens, ctx.cu_seqlens, ctx.max_seqlen, ctx.max_seqlen)
    if ctx.backend == "flash_attn":
        from flash_attn import flash_attn_varlen_func  # optional package, imported only where used

        return flash_attn_varlen_func(q, k, v, ctx.cu_seqlens, ctx.cu_seqlens, ctx.max_seqlen, ctx.max_seqlen)
    if ctx.backend == "flex":
        return _attend_flex(q, k, v, ctx.block_mask)
    if ctx.runs:
        return _attend_runs(q, k, v, ctx.runs)
    return _attend_packed_sdpa(q, k, v, ctx)


def _attend_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: object) -> torch.Tensor:
    grid = [x.transpose(0, 1)[None] for x in (q, k, v)]  # (1, H, T, D)
    return flex_attention(*grid, block_mask=block_mask)[0].transpose(0, 1)  # (T, H, D)


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
