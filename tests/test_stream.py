"""RowStream: deterministic order, exact restart from a saved position, stage-2 mixture sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from neobert.training.stream import RowStream


def make_docs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.full(int(rng.integers(3, 60)), i, dtype=np.int64) for i in range(n)]  # doc i holds token i


def flat(rows) -> list[int]:
    return [int(t) for row in rows for piece in row for t in piece]


def test_same_seed_same_rows_other_seed_other_rows():
    docs = make_docs(300)
    lengths = np.array([len(d) for d in docs])
    a = RowStream(docs, lengths, 64, seed=1, block_docs=50).take(40)
    b = RowStream(docs, lengths, 64, seed=1, block_docs=50).take(40)
    c = RowStream(docs, lengths, 64, seed=2, block_docs=50).take(40)
    assert flat(a) == flat(b) and flat(a) != flat(c)
    assert all(sum(len(p) for p in row) <= 64 for row in a)


def test_one_epoch_covers_every_token_once():
    docs = make_docs(120)
    lengths = np.array([len(d) for d in docs])
    stream = RowStream(docs, lengths, 64, seed=0, block_docs=40)
    rows = []
    while stream.position.block < 3:  # blocks 0..2 are exactly one epoch of 120 documents
        rows.extend(stream.take(1))
    assert sorted(flat(rows)) == sorted(int(t) for d in docs for t in d)


def test_restart_from_saved_position_continues_identically():
    docs = make_docs(200)
    lengths = np.array([len(d) for d in docs])
    straight = RowStream(docs, lengths, 64, seed=3, block_docs=30)
    expected = straight.take(25) + straight.take(30)
    first = RowStream(docs, lengths, 64, seed=3, block_docs=30)
    first.take(25)
    state = first.state_dict()
    resumed = RowStream(docs, lengths, 64, seed=3, block_docs=30)
    resumed.load_state_dict(state)
    assert flat(resumed.take(30)) == flat(expected[25:])


def test_unpacked_rows_hold_one_truncated_document():
    docs = make_docs(50)
    lengths = np.array([len(d) for d in docs])
    rows = RowStream(docs, lengths, 16, seed=0, packing=False).take(20)
    assert all(len(row) == 1 and len(row[0]) <= 16 for row in rows)


def test_mixture_samples_long_subsets_in_proportion():
    # lengths 100..3000: the gt1024 / gt2048 sub-sets are a minority of the documents
    lengths = np.linspace(100, 3000, 400).astype(int)
    docs = [np.full(n, i % 1000, dtype=np.int64) for i, n in enumerate(lengths)]
    stream = RowStream(
        docs, lengths, 4096, seed=0, mixture={"all": 0.2, "gt1024": 0.4, "gt2048": 0.4}, block_docs=8
    )
    picked = np.concatenate([stream.block_documents(b) for b in range(500)])
    long_share = np.mean(lengths[picked] > 2048)
    # P(doc > 2048) = 0.4 (gt2048 block) + 0.4 * P(>2048 | >1024) + 0.2 * P(>2048)
    p_all = np.mean(lengths > 2048)
    p_given_1024 = np.mean(lengths[lengths > 1024] > 2048)
    assert long_share == pytest.approx(0.4 + 0.4 * p_given_1024 + 0.2 * p_all, abs=0.05)
    assert long_share > 1.5 * p_all  # long documents are seen far more often than in the raw data


def test_mixture_with_an_empty_subset_is_refused():
    lengths = np.full(20, 100)
    docs = [np.zeros(100, dtype=np.int64)] * 20
    with pytest.raises(ValueError, match="gt2048"):
        RowStream(docs, lengths, 512, seed=0, mixture={"all": 0.5, "gt2048": 0.5})


def test_unpacked_split_rows_cover_every_token_in_order():
    docs = make_docs(40)
    lengths = np.array([len(d) for d in docs])
    stream = RowStream(docs, lengths, 16, seed=0, packing=False, block_docs=40, long_docs="split")
    rows = []
    while stream.position.block < 1:  # block 0 is one epoch of all 40 documents
        rows.extend(stream.take(1))
    assert all(len(row) == 1 and 0 < len(row[0]) <= 16 for row in rows)
    runs = [(token, len(list(group))) for token, group in itertools.groupby(flat(rows))]
    # each document once, whole, its pieces in adjacent rows
    assert sorted(runs) == [(i, len(d)) for i, d in enumerate(docs)]
    assert len(rows) == sum(-(-len(d) // 16) for d in docs)


def test_long_docs_truncate_applies_to_packed_rows_too():
    docs = make_docs(30)
    lengths = np.array([len(d) for d in docs])
    rows = RowStream(docs, lengths, 16, seed=0, block_docs=30, long_docs="truncate").take(10)
    counts = np.bincount(flat(rows))
    assert counts.max() <= 16  # a document (its token id) never fills more than one piece
