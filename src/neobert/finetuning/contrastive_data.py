"""Contrastive training data: (query, positive, hard negatives) examples, data sets, and the batch sampler.

A data set comes from a local JSONL file (``query``, ``positive``, optional ``negatives`` list or
``negative`` string per line) or from the hub (``hub:ID[:CONFIG][@SPLIT]``, columns recognized by name).
Each batch is drawn from one data set, chosen with probability proportional to ``size ** alpha``; under
DDP every process draws the same data set at each step (a shared seed) and its own disjoint examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.readers import json_objects
from ..evaluation.instructions import dataset_instruction

QUERY_COLUMNS = ("query", "anchor", "question", "sentence1", "title", "premise")
POSITIVE_COLUMNS = ("positive", "pos", "answer", "document", "passage", "sentence2", "body", "hypothesis")
NEGATIVE_PREFIXES = ("negative", "neg", "hard_negative")


@dataclass(frozen=True)
class Example:
    query: str
    positive: str
    negatives: tuple[str, ...] = ()
    scores: tuple[
        float, ...
    ] = ()  # a teacher's scores of (positive, *negatives), for distillation; () if none


@dataclass
class ContrastiveDataset:
    name: str
    examples: list[Example]
    instruction: str = ""
    source: str = ""
    skipped: list[str] = field(default_factory=list)  # the bad rows skipped (on_error skip), each named

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def has_negatives(self) -> bool:
        return any(ex.negatives for ex in self.examples)


def _negatives(row: dict, where: str) -> tuple[str, ...]:
    value = row.get("negatives", row.get("negative"))
    if value is None:
        # numbered columns (negative_1, negative_2 ...) as some hub data sets store them
        value = [row[k] for k in sorted(row) if k.startswith(NEGATIVE_PREFIXES) and row[k]]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: 'negatives' must be a list of strings")
    return tuple(v for v in value if v)


def _scores(row: dict, negatives: int, where: str) -> tuple[float, ...]:
    """A teacher's ``scores`` of the positive and each negative (e.g. a cross-encoder's), for distillation."""
    value = row.get("scores")
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or not all(isinstance(v, (int, float)) for v in value)
        or len(value) != 1 + negatives
    ):
        raise ValueError(
            f"{where}: 'scores' must be a list of {1 + negatives} numbers (the positive's, then "
            "each negative's)"
        )
    return tuple(float(v) for v in value)


def read_jsonl_examples(
    path: str | os.PathLike, on_error: str = "raise", skipped: list[str] | None = None
) -> list[Example]:
    """One example per line: {"query", "positive", optional "negatives": [...] or "negative": "...", optional
    "scores": [positive's, each negative's]}. A bad row raises naming its line, or (``on_error="skip"``) is
    left out and its message appended to ``skipped``."""
    examples = []
    for number, row in json_objects(path, what="contrastive data file"):
        where = f"{path}, line {number}"
        try:
            missing = [k for k in ("query", "positive") if not isinstance(row.get(k), str)]
            if missing:
                raise ValueError(
                    f"{where}: missing text field(s) {', '.join(missing)}; "
                    f"available: {', '.join(sorted(row)) or 'none'}"
                )
            negatives = _negatives(row, where)
            examples.append(
                Example(row["query"], row["positive"], negatives, _scores(row, len(negatives), where))
            )
        except ValueError as error:
            if on_error == "raise":
                raise ValueError(f"{error} (--on-error skip skips such rows and counts them)") from None
            if skipped is not None:
                skipped.append(str(error))
    if not examples:
        raise ValueError(f"contrastive data file {path} is empty: expected JSONL with query and positive")
    return examples


def _pick(columns: Sequence[str], candidates: Sequence[str], what: str, source: str) -> str:
    for name in candidates:
        if name in columns:
            return name
    raise ValueError(
        f"{source}: no {what} column (looked for {', '.join(candidates)}); available: {', '.join(columns)}"
    )


def load_hub_examples(spec: str) -> list[Example]:
    """``ID[:CONFIG][@SPLIT]`` (split default ``train``) through ``datasets.load_dataset``."""
    from datasets import load_dataset

    spec, _, split = spec.partition("@")
    hub_id, _, config = spec.partition(":")
    data = load_dataset(hub_id, config or None, split=split or "train")
    columns = list(data.column_names)
    q = _pick(columns, QUERY_COLUMNS, "query", hub_id)
    p = _pick([c for c in columns if c != q], POSITIVE_COLUMNS, "positive", hub_id)
    negative_columns = [c for c in columns if c.startswith(NEGATIVE_PREFIXES)]
    examples = []
    for row in data:
        negatives = [row[c] for c in negative_columns]
        flat = [n for v in negatives for n in (v if isinstance(v, list) else [v]) if n]
        examples.append(Example(row[q], row[p], tuple(flat)))
    if not examples:
        raise ValueError(f"hub data set {hub_id} ({split or 'train'}) is empty")
    return examples


# Hub copies of the paper's data sets that were checked (name -> hub spec); others: NAME=hub:ID.
HUB_SOURCES = {
    "all-nli": "sentence-transformers/all-nli:triplet",
    "gooaq": "sentence-transformers/gooaq",
}


def parse_data_spec(spec: str) -> tuple[str, str]:
    """``[NAME=]PATH.jsonl``, ``[NAME=]hub:ID[:CONFIG][@SPLIT]`` or a known NAME -> (name, source)."""
    name, sep, source = spec.partition("=")
    if not sep:
        name, source = "", spec
    if not source:
        raise ValueError(f"empty data source in {spec!r}")
    if not sep and source in HUB_SOURCES:
        return source, "hub:" + HUB_SOURCES[source]
    if not name:
        name = source.removeprefix("hub:").split("@")[0].split(":")[0].rsplit("/", 1)[-1]
        name = Path(name).stem if not source.startswith("hub:") else name
    return name, source


def load_datasets(
    specs: Sequence[str], instructions: dict[str, str] | None = None, on_error: str = "raise"
) -> list[ContrastiveDataset]:
    """Read every data set named in ``specs``; each gets its instruction from the table (or overrides);
    ``on_error`` as :func:`read_jsonl_examples` (each data set keeps its skipped rows' messages)."""
    datasets = []
    for spec in specs:
        name, source = parse_data_spec(spec)
        skipped: list[str] = []
        if source.startswith("hub:"):
            examples = load_hub_examples(source.removeprefix("hub:"))
        else:
            examples = read_jsonl_examples(source, on_error, skipped)
        instruction = dataset_instruction(name, instructions)
        datasets.append(ContrastiveDataset(name, examples, instruction, source, skipped))
    names = [d.name for d in datasets]
    if len(set(names)) != len(names):
        raise ValueError(f"data set names must differ, got {names}; name them with NAME=SOURCE")
    return datasets


def sampling_probabilities(sizes: Sequence[int], alpha: float) -> np.ndarray:
    """p_i = size_i^alpha / sum_j size_j^alpha: alpha 1 samples in proportion to size, 0 uniformly."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if (sizes <= 0).any():
        raise ValueError(f"data set sizes must be positive, got {sizes.tolist()}")
    weights = sizes**alpha
    return weights / weights.sum()


@dataclass
class BatchSampler:
    """Endless (data set index, examples) batches, each from a single data set.

    The data set at each step comes from a generator seeded with ``seed`` alone, so every process of a DDP
    run picks the same one; the examples come from that data set's shuffled order, of which each process
    takes its own ``batch_size`` slice of every ``world_size * batch_size`` window.
    """

    datasets: Sequence[ContrastiveDataset]
    batch_size: int
    alpha: float = 0.5
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    _cursors: list[int] = field(default_factory=list, init=False)
    _orders: list[np.ndarray] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        window = self.batch_size * self.world_size
        for d in self.datasets:
            if len(d) < window:
                raise ValueError(
                    f"data set {d.name} has {len(d)} examples, fewer than one global batch "
                    f"({self.batch_size} x {self.world_size} processes); lower the batch size"
                )
        self.probabilities = sampling_probabilities([len(d) for d in self.datasets], self.alpha)
        self._choice = np.random.default_rng(self.seed)
        self._shuffle = [np.random.default_rng([self.seed, i]) for i in range(len(self.datasets))]
        self._orders = [rng.permutation(len(d)) for rng, d in zip(self._shuffle, self.datasets)]
        self._cursors = [0] * len(self.datasets)

    def __iter__(self) -> Iterator[tuple[int, list[Example]]]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> tuple[int, list[Example]]:
        index = int(self._choice.choice(len(self.datasets), p=self.probabilities))
        window = self._take(index, self.batch_size * self.world_size)
        mine = window[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        return index, [self.datasets[index].examples[i] for i in mine]

    def state_dict(self) -> dict:
        """The position in every data set's order and the generators' states (a resumable checkpoint)."""
        return {
            "choice": self._choice.bit_generator.state,
            "shuffle": [rng.bit_generator.state for rng in self._shuffle],
            "orders": [order.tolist() for order in self._orders],
            "cursors": list(self._cursors),
        }

    def load_state_dict(self, state: dict) -> None:
        self._choice.bit_generator.state = state["choice"]
        for rng, saved in zip(self._shuffle, state["shuffle"]):
            rng.bit_generator.state = saved
        self._orders = [np.asarray(order, dtype=np.int64) for order in state["orders"]]
        self._cursors = [int(c) for c in state["cursors"]]

    def _take(self, index: int, count: int) -> list[int]:
        """The next ``count`` positions of data set ``index``'s order. An epoch's tail shorter than
        ``count`` is skipped and the order reshuffled, so no example appears twice in one global batch."""
        if self._cursors[index] + count > len(self._orders[index]):
            self._orders[index] = self._shuffle[index].permutation(len(self._orders[index]))
            self._cursors[index] = 0
        cursor = self._cursors[index]
        self._cursors[index] = cursor + count
        return [int(i) for i in self._orders[index][cursor : cursor + count]]
