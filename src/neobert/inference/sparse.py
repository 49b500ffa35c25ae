"""Learned sparse vectors (SPLADE) from a masked-LM head: the one implementation every caller uses.

A text's SPLADE vector has one weight per vocabulary entry: the max over the text's real tokens of
log(1 + ReLU(MLM logit)) (SPLADE v2's max pooling). It is what sentence-transformers' ``SparseEncoder``
computes with ``SpladePooling("max")`` over a ``fill-mask`` ``Transformer``, so a directory saved by
``neobert finetune sparse`` gives the same vectors here and there (tests/test_sparse.py checks it).

- :func:`splade_pool`: logits (B, L, V) and the 0/1 mask -> (B, V), differentiable (training uses it);
- :func:`encode_sparse`: a loaded MLM model over texts -> a SciPy CSR matrix (N, V), few-padding batches as
  :func:`neobert.inference.run.encode`, optional top-k pruning per text;
- :func:`sparse_rows`: a matrix as per-text lists of ``{index, value}`` (and ``token``): the shape
  text-embeddings-inference's ``/embed_sparse`` answers, for the service to return as it is;
- :func:`check_splade_layout`: whether a SPLADE ``SparseEncoder`` directory has the settings reproduced here
  (the kind itself is :mod:`neobert.inference.kinds.splade`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..common.progress import progress_bar
from ..model.execution import eval_mode
from .directories import MODULES_FILE, module_types, modules
from .encoders import check_vocab, max_positions
from .registration import require_head
from .run import batched_inputs

__all__ = ["check_splade_layout", "encode_sparse", "prune_top_k", "sparse_rows", "splade_pool"]


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """max over real tokens of log(1 + ReLU(logits)): (B, L, V) logits, (B, L) 0/1 mask -> (B, V).

    log1p and ReLU are monotone, so they are applied after the max, to (B, V) instead of (B, L, V): the same
    values and gradients, one pass over the logits and no (B, L, V) copies kept for backward. Padding
    positions count as 0, ReLU's floor, so they drop out.
    """
    real = logits.masked_fill(attention_mask.unsqueeze(-1) == 0, 0)  # padding -> 0
    return torch.log1p(torch.relu(real.amax(dim=1).float()))  # (B, V), >= 0


def _mlm_logits_model(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` if its forward returns vocabulary logits (a masked-LM head); a clear error otherwise."""
    require_head(getattr(model, "module", model), "mlm", "SPLADE vectors (a masked-LM head's logits)")
    return model


def encode_sparse(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int = 32,
    max_length: int | None = None,
    top_k: int | None = None,
    max_tokens: int | None = None,
    show_progress: bool = False,
) -> sp.csr_matrix:
    """SPLADE vectors of ``texts`` as a float32 CSR matrix (N, vocabulary), rows in input order.

    ``model`` is a masked-LM model (``load_encoder(source, head="mlm")``); texts longer than ``max_length``
    tokens (default: what model and tokenizer accept) are truncated. ``top_k`` keeps each row's k largest
    weights (ties: the lower index). Batching as :func:`neobert.inference.run.encode` (``max_tokens`` padded
    tokens per batch, 4,096 by default on the CPU).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be positive, got {top_k}")
    _mlm_logits_model(model)
    check_vocab(model, tokenizer)
    max_length = max_length or max_positions(model, tokenizer)
    device = next(model.parameters()).device
    rows: list[sp.csr_matrix | None] = [None] * len(texts)
    batches = batched_inputs(tokenizer, texts, None, batch_size, max_tokens, max_length, device)
    with (
        eval_mode(model),
        torch.inference_mode(),
        progress_bar(total=len(texts), unit="text", disable=not show_progress) as bar,
    ):
        for index, inputs in batches:
            vectors = splade_pool(model(**inputs).logits, inputs["attention_mask"])  # (B, V)
            if top_k is not None:
                vectors = prune_top_k(vectors, top_k)
            block = sp.csr_matrix(vectors.cpu().numpy())
            for row, i in enumerate(index):
                rows[i] = block[row]
            bar.update(len(index))
    vocab = int(model.config.vocab_size)
    if not texts:
        return sp.csr_matrix((0, vocab), dtype=np.float32)
    return sp.vstack(rows, format="csr", dtype=np.float32)


def prune_top_k(vectors: torch.Tensor, k: int) -> torch.Tensor:
    """Each row's ``k`` largest weights kept, the rest zeroed: (B, V) -> (B, V)."""
    if k >= vectors.shape[-1]:
        return vectors
    # a stable descending sort keeps the lower index among equal weights
    order = torch.sort(vectors, dim=-1, descending=True, stable=True).indices[:, :k]  # (B, k)
    out = torch.zeros_like(vectors)
    return out.scatter(-1, order, vectors.gather(-1, order))


def sparse_rows(matrix: sp.csr_matrix, tokenizer: Any = None) -> list[list[dict[str, Any]]]:
    """Per row, its non-zeros as ``{"index", "value"}`` by ascending index (text-embeddings-inference's
    ``/embed_sparse`` shape), each with ``"token"`` (the vocabulary entry) when ``tokenizer`` is given."""
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    out = []
    for r in range(matrix.shape[0]):
        start, end = matrix.indptr[r], matrix.indptr[r + 1]
        indices, values = matrix.indices[start:end].tolist(), matrix.data[start:end].tolist()
        tokens = tokenizer.convert_ids_to_tokens(indices) if tokenizer is not None else None
        out.append(
            [
                {"index": i, "value": v, **({"token": tokens[j]} if tokens is not None else {})}
                for j, (i, v) in enumerate(zip(indices, values))
            ]
        )
    return out


def check_splade_layout(path: Path) -> None:
    """Raise ValueError unless the SPLADE ``SparseEncoder`` directory ``path`` has the settings
    :func:`encode_sparse` reproduces: a transformer at the root, then ``SpladePooling`` with max pooling and
    ReLU (not sum pooling, not the ``log1p_relu`` activation)."""
    listed = modules(path)
    splade = next(m for m in listed if str(m.get("type", "")).endswith("SpladePooling"))
    config_file = path / splade.get("path", "") / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    settings = (config.get("pooling_strategy", "max"), config.get("activation_function", "relu"))
    if settings != ("max", "relu") or len(listed) != 2:
        raise ValueError(
            f"{path / MODULES_FILE}: only a transformer followed by SpladePooling(max, relu) is supported; "
            f"found {module_types(path)} with pooling {settings}"
        )
