"""A deterministic, resumable stream of training rows.

Documents are taken in blocks of ``block_docs``; block ``b`` is a pure function of ``(seed, b)``, so the
stream can be restarted at any (block, row) position without replaying what came before:
- plain: block ``b`` holds the next documents of epoch ``b // blocks_per_epoch``'s permutation;
- mixture (stage 2): each block picks one sub-set (all, or the documents longer than N tokens) with the
  configured weights and draws its documents from it with replacement, so long documents are seen often.
Each block is packed into rows (:func:`iter_packed_rows`), or, unpacked, each document (or each ``seq_len``
piece of a long one, with ``long_docs="split"``) is one row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .batching import PackedRow, document_pieces, iter_packed_rows
from .config import subset_min_length


@dataclass
class StreamPosition:
    block: int = 0
    row: int = 0  # rows of that block already consumed


class RowStream:
    """Rows of token arrays (each row a list of document pieces) in a fixed order for a given seed."""

    def __init__(
        self,
        docs: Sequence[np.ndarray],
        lengths: np.ndarray,
        seq_len: int,
        seed: int,
        packing: bool = True,
        mixture: dict[str, float] | None = None,
        block_docs: int = 2048,
        long_docs: str | None = None,  # None: split when packing, truncate when not
        subsets: list[tuple[str, float, np.ndarray]] | None = None,  # (name, weight, document indices)
    ):
        if len(docs) == 0:
            raise ValueError("the training set holds no documents")
        self.docs, self.lengths = docs, np.asarray(lengths)
        self.seq_len, self.seed, self.packing = seq_len, seed, packing
        self.long_docs = long_docs or ("split" if packing else "truncate")
        self.block_docs = min(block_docs, len(docs))
        self.subsets: list[tuple[str, float, np.ndarray]] = []
        for name, weight, members in subsets or []:
            if weight > 0 and len(members) == 0:
                raise ValueError(f"data source {name!r} has no documents")
            if weight > 0:
                self.subsets.append((name, weight, np.asarray(members)))
        if mixture:
            for name, weight in mixture.items():
                members = np.flatnonzero(self.lengths >= subset_min_length(name))
                if weight > 0 and len(members) == 0:
                    raise ValueError(f"mixture sub-set {name!r} has no documents (none long enough)")
                if weight > 0:
                    self.subsets.append((name, weight, members))
        self.position = StreamPosition()
        self._cached: tuple[int, list[PackedRow]] | None = None  # the current block's rows

    def _subset_of(self, block: int) -> tuple[int, np.random.Generator]:
        rng = np.random.default_rng([self.seed, block, 1])
        weights = np.array([w for _, w, _ in self.subsets], dtype=np.float64)
        return int(rng.choice(len(self.subsets), p=weights / weights.sum())), rng

    def subset_counts(self) -> dict[str, int]:
        """Blocks (of ``block_docs`` documents) drawn so far from each sub-set: what a mixture gave."""
        counts = {name: 0 for name, _, _ in self.subsets}
        drawn = self.position.block + (1 if self.position.row else 0)
        for block in range(drawn if self.subsets else 0):
            counts[self.subsets[self._subset_of(block)[0]][0]] += 1
        return counts

    def block_documents(self, block: int) -> np.ndarray:
        """Indices of the documents of a block."""
        if self.subsets:
            index, rng = self._subset_of(block)
            members = self.subsets[index][2]
            return members[rng.integers(0, len(members), self.block_docs)]
        per_epoch = -(-len(self.docs) // self.block_docs)  # ceil
        epoch, index = divmod(block, per_epoch)
        order = np.random.default_rng([self.seed, epoch, 0]).permutation(len(self.docs))
        return order[index * self.block_docs : (index + 1) * self.block_docs]

    def block_rows(self, block: int) -> list[PackedRow]:
        if self._cached is not None and self._cached[0] == block:
            return self._cached[1]
        docs = (np.asarray(self.docs[i]) for i in self.block_documents(block))
        if self.packing:
            rows = list(iter_packed_rows(docs, self.seq_len, long_docs=self.long_docs))
        else:
            rows = [[piece] for piece in document_pieces(docs, self.seq_len, self.long_docs)]
        self._cached = (block, rows)
        return rows

    def take(self, n: int) -> list[PackedRow]:
        """The next ``n`` rows; advances the position."""
        rows: list[PackedRow] = []
        while len(rows) < n:
            block_rows = self.block_rows(self.position.block)
            wanted = block_rows[self.position.row : self.position.row + n - len(rows)]
            rows.extend(wanted)
            self.position.row += len(wanted)
            if self.position.row >= len(block_rows):
                self.position = StreamPosition(self.position.block + 1, 0)
        return rows

    def __iter__(self) -> Iterator[PackedRow]:
        while True:
            yield from self.take(1)

    def state_dict(self) -> dict[str, int]:
        return {"block": self.position.block, "row": self.position.row}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = StreamPosition(int(state["block"]), int(state["row"]))
