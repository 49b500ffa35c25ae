"""Turning tokenized documents into model batches, and the batch-size arithmetic.

Documents arrive as 1-D integer arrays, each already ``[CLS] ... [SEP]``, and are packed: whole documents
laid end to end in rows of a fixed length. Each document is its own segment in ``cu_seqlens`` and positions
restart at each document, so the model's per-sequence attention keeps every token inside its own document.
(The paper packed without this and lost 2.9 GLUE points.) Nothing is wasted on padding except each row's
tail. (Unpacked rows, one document or piece per row, are :mod:`neobert.training.stream`'s.)

The batch of a step is set in tokens; :func:`micro_batches_for` turns it into gradient-accumulation steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch

PackedRow = list[np.ndarray]  # the documents (or pieces of one) that share a row, in order
LONG_DOCS = ("split", "truncate")


def document_pieces(docs: Iterable[np.ndarray], seq_len: int, long_docs: str) -> Iterator[np.ndarray]:
    """Each document, or its consecutive ``seq_len`` chunks when it does not fit in one row."""
    for doc in docs:
        doc = np.asarray(doc)
        if doc.ndim != 1:
            raise ValueError(f"documents must be 1-D token arrays, got shape {doc.shape}")
        if len(doc) == 0:  # an empty segment would be a sequence with nothing to attend to
            continue
        if len(doc) <= seq_len or long_docs == "truncate":
            yield doc[:seq_len]
        else:
            for start in range(0, len(doc), seq_len):
                yield doc[start : start + seq_len]


def iter_packed_rows(
    docs: Iterable[np.ndarray], seq_len: int, *, open_rows: int = 8, long_docs: str = "split"
) -> Iterator[PackedRow]:
    """Stream rows of whole documents, each row holding at most ``seq_len`` tokens.

    First fit over a window of ``open_rows`` partly filled rows: a document goes into the oldest open row
    with room for it, else opens a new row, first closing the oldest row if the window is full; a row
    also leaves the window as soon as it is full. ``open_rows=1`` is plain next fit (strict document order); a few
    more rows fill the tails of rows with later short documents. The result depends only on the input
    order. Documents longer than ``seq_len`` are split into ``seq_len`` chunks (``long_docs="split"``) or
    cut (``"truncate"``).
    """
    if seq_len <= 0 or open_rows < 1:
        raise ValueError(f"need seq_len >= 1 and open_rows >= 1, got {seq_len}, {open_rows}")
    if long_docs not in LONG_DOCS:
        raise ValueError(f"long_docs must be one of {', '.join(LONG_DOCS)}; got {long_docs!r}")
    rows: list[PackedRow] = []
    room: list[int] = []  # free tokens of each open row
    for piece in document_pieces(docs, seq_len, long_docs):
        slot = next((i for i, free in enumerate(room) if free >= len(piece)), None)
        if slot is None:
            if len(rows) == open_rows:  # make room in the window: the oldest row is done
                room.pop(0)
                yield rows.pop(0)
            rows.append([])
            room.append(seq_len)
            slot = len(rows) - 1
        rows[slot].append(piece)
        room[slot] -= len(piece)
        if room[slot] == 0:
            room.pop(slot)
            yield rows.pop(slot)
    yield from rows


def collate_packed(rows: Sequence[PackedRow], pad_id: int, seq_len: int | None = None) -> dict:
    """Tensors for packed rows, padded to ``seq_len`` (default: the longest row).

    Returns ``input_ids`` (B, L) int64; ``cu_seqlens`` (N + 1,) int32 offsets into the flattened B * L tokens,
    one segment per document and one for each row's padding tail (so the padding attends only to itself);
    ``max_seqlen`` (int, the longest segment, known on the host: no device sync); ``position_ids`` (B, L)
    restarting at 0 in every segment; ``attention_mask`` (B, L) int64, 1 at document tokens and 0 at padding.
    Padding holds ``pad_id``, so masking with the pad id among the special ids never selects it.
    Feed it as ``model(input_ids, cu_seqlens=..., max_seqlen=..., position_ids=...)``.
    """
    if not rows:
        raise ValueError("no rows to collate")
    lengths = [sum(len(piece) for piece in row) for row in rows]
    width = max(lengths) if seq_len is None else seq_len
    if max(lengths) > width:
        raise ValueError(f"a row holds {max(lengths)} tokens, more than seq_len={width}")
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    position_ids = np.zeros((len(rows), width), dtype=np.int64)
    segments: list[int] = []
    for b, row in enumerate(rows):
        start = 0
        for piece in [*row, None]:  # None: the padding tail
            n = len(piece) if piece is not None else width - start
            if n == 0:
                continue
            if piece is not None:
                input_ids[b, start : start + n] = piece
            position_ids[b, start : start + n] = np.arange(n)
            segments.append(n)
            start += n
    cu_seqlens = np.zeros(len(segments) + 1, dtype=np.int32)
    np.cumsum(segments, out=cu_seqlens[1:])
    attention_mask = (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype(np.int64)  # (B, L)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "cu_seqlens": torch.from_numpy(cu_seqlens),
        "max_seqlen": int(max(segments)),
        "position_ids": torch.from_numpy(position_ids),
        "attention_mask": torch.from_numpy(attention_mask),
    }


def micro_batches_for(global_tokens: int, seq_len: int, micro_batch: int, world_size: int) -> int:
    """Gradient-accumulation steps so that micro_batch x seq_len x world_size x steps = global_tokens.

    NeoBERT: 2**21 tokens (the "2M") = 1024 tokens x 32 rows x 8 GPUs x 8 steps.
    """
    if min(global_tokens, seq_len, micro_batch, world_size) <= 0:
        raise ValueError("global_tokens, seq_len, micro_batch and world_size must all be positive")
    per_pass = seq_len * micro_batch * world_size
    if global_tokens % per_pass:
        below = global_tokens // per_pass * per_pass
        raise ValueError(
            f"a global batch of {global_tokens} tokens is not a multiple of seq_len x micro_batch x "
            f"world_size = {seq_len} x {micro_batch} x {world_size} = {per_pass} tokens; the nearest "
            f"that are: {below or per_pass} and {below + per_pass}, or change micro_batch"
        )
    return global_tokens // per_pass
