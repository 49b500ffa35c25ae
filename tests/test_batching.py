"""Packing with per-document attention, and accumulation arithmetic."""

import numpy as np
import pytest
import torch

import neobert
from neobert.model.attention import positions_from_cu_seqlens
from neobert.training import collate_packed, iter_packed_rows, micro_batches_for

PAD, CLS, SEP = 0, 1, 2


def _docs(lengths, seed=0, vocab=128):
    """Documents [CLS] ... [SEP] of the given lengths, with ordinary ids in [3, vocab)."""
    rng = np.random.default_rng(seed)
    docs = []
    for n in lengths:
        doc = rng.integers(3, vocab, size=n)
        doc[0], doc[-1] = CLS, SEP
        docs.append(doc)
    return docs


def pack_documents(docs, seq_len, *, open_rows=8, long_docs="split"):
    return list(iter_packed_rows(docs, seq_len, open_rows=open_rows, long_docs=long_docs))


def collate_padded(docs, pad_id, max_length):
    """The reference layout: one document per row, right-padded, with a 0/1 attention mask."""
    cut = [np.asarray(doc)[:max_length] for doc in docs]
    input_ids = torch.full((len(cut), max(map(len, cut))), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for b, doc in enumerate(cut):
        input_ids[b, : len(doc)] = torch.from_numpy(doc)
        attention_mask[b, : len(doc)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _shape(rows):
    return [[len(piece) for piece in row] for row in rows]


@pytest.fixture(scope="module")
def tiny_config():
    return neobert.NeoBERTConfig.from_model_config(neobert.ModelConfig.from_name("tiny"))


# --- packing ---


@pytest.mark.parametrize("open_rows", [1, 4])
def test_packing_keeps_every_token_exactly_once(open_rows):
    lengths = np.random.default_rng(1).integers(1, 150, size=300)
    docs = _docs(lengths)
    rows = pack_documents(docs, 64, open_rows=open_rows)
    assert all(0 < sum(len(p) for p in row) <= 64 for row in rows)
    # the pieces are exactly each document cut into consecutive 64-token chunks, each used once
    expected = sorted(doc[s : s + 64].tobytes() for doc in docs for s in range(0, len(doc), 64))
    assert sorted(p.tobytes() for row in rows for p in row) == expected
    assert sum(len(p) for row in rows for p in row) == lengths.sum()
    # deterministic
    again = pack_documents(docs, 64, open_rows=open_rows)
    assert _shape(again) == _shape(rows)
    assert all(np.array_equal(a, b) for r1, r2 in zip(again, rows) for a, b in zip(r1, r2))


def test_next_fit_first_fit_and_truncation():
    docs = _docs([30, 30, 10, 64, 5, 100])  # pieces 30 30 10 64 5 64 36
    assert _shape(pack_documents(docs, 64, open_rows=1)) == [[30, 30], [10], [64], [5], [64], [36]]
    # a wider window lets later short pieces fill earlier rows' tails: 4 rows instead of 6
    assert _shape(pack_documents(docs, 64, open_rows=4)) == [[64], [64], [30, 30], [10, 5, 36]]
    cut = pack_documents(docs, 64, open_rows=1, long_docs="truncate")
    assert _shape(cut) == [[30, 30], [10], [64], [5], [64]]
    assert np.array_equal(cut[-1][0], docs[-1][:64])
    assert _shape(pack_documents([np.array([], dtype=np.int64), docs[0]], 64)) == [[30]]  # empty skipped


def test_collate_packed_offsets_positions_and_padding():
    docs = _docs([30, 30, 10, 5, 36])
    rows = [[docs[0], docs[1]], [docs[2], docs[3], docs[4]]]
    batch = collate_packed(rows, PAD, seq_len=64)
    # segments: 30, 30, pad 4 | 10, 5, 36, pad 13, over the flattened 2 x 64 tokens
    assert batch["cu_seqlens"].tolist() == [0, 30, 60, 64, 74, 79, 115, 128]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["max_seqlen"] == 36 and isinstance(batch["max_seqlen"], int)
    ids, pos = batch["input_ids"], batch["position_ids"]
    assert ids.shape == pos.shape == (2, 64) and ids.dtype == torch.long
    assert ids[0, :30].tolist() == docs[0].tolist() and ids[1, 15:51].tolist() == docs[4].tolist()
    assert (ids[0, 60:] == PAD).all() and (ids[1, 51:] == PAD).all()
    assert pos[1, :16].tolist() == [*range(10), *range(5), 0]
    assert pos[1, 51:].tolist() == list(range(13))
    # the model's own positions from cu_seqlens are the same
    assert torch.equal(pos.flatten(), positions_from_cu_seqlens(batch["cu_seqlens"], 128))
    assert batch["attention_mask"].sum(1).tolist() == [60, 51]
    # a full row has no padding segment; the default width is the longest row
    full = collate_packed([[docs[0], docs[1]]], PAD)
    assert full["cu_seqlens"].tolist() == [0, 30, 60] and full["input_ids"].shape == (1, 60)
    with pytest.raises(ValueError, match="more than seq_len"):
        collate_packed(rows, PAD, seq_len=32)


def test_packed_forward_equals_each_document_alone(tiny_config):
    """The key property: in a packed row a document sees only itself and its positions start at 0."""
    torch.manual_seed(0)
    model = neobert.NeoBERTModel(tiny_config).eval()
    docs = _docs([20, 7, 33, 5, 48, 12, 3, 40])
    rows = pack_documents(docs, 48, open_rows=3)
    assert any(len(row) > 1 for row in rows) and len(rows) < len(docs)
    batch = collate_packed(rows, PAD, seq_len=48)
    with torch.no_grad():
        packed = model(
            batch["input_ids"],
            cu_seqlens=batch["cu_seqlens"],
            max_seqlen=batch["max_seqlen"],
            position_ids=batch["position_ids"],
        ).last_hidden_state  # (B, 48, C)
        # control: the same rows as ordinary padded sequences, where documents see each other
        crossed = model(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        seen = 0
        for b, row in enumerate(rows):
            start = 0
            for doc in row:
                alone = model(torch.from_numpy(doc)[None]).last_hidden_state[0]  # (n, C)
                torch.testing.assert_close(packed[b, start : start + len(doc)], alone, atol=2e-5, rtol=1e-4)
                if len(row) > 1:
                    assert not torch.allclose(crossed[b, start : start + len(doc)], alone, atol=1e-3)
                start += len(doc)
                seen += 1
    assert seen == len(docs)


def test_packed_masked_lm_loss_equals_padded(tiny_config):
    """MLM loss on packed rows (masked positions only) equals that on one padded document per row."""
    torch.manual_seed(0)
    model = neobert.NeoBERTForMaskedLM(tiny_config).eval()
    docs = _docs([20, 7, 33, 5, 26])
    rows = pack_documents(docs, 40, open_rows=2)
    packed = collate_packed(rows, PAD, seq_len=40)
    order = [doc for row in rows for doc in row]  # documents in packed (row-major) order
    padded = collate_padded(order, PAD, max_length=40)
    labels_padded = torch.full_like(padded["input_ids"], -100)
    labels_padded[:, 1::3] = padded["input_ids"][:, 1::3]
    labels_padded[padded["attention_mask"] == 0] = -100
    labels_packed = torch.full_like(packed["input_ids"], -100)
    labels_packed[packed["attention_mask"] == 1] = labels_padded[padded["attention_mask"] == 1]
    with torch.no_grad():
        a = model(**padded, labels=labels_padded, masked_positions=labels_padded != -100)
        b = model(
            packed["input_ids"],
            labels=labels_packed,
            cu_seqlens=packed["cu_seqlens"],
            max_seqlen=packed["max_seqlen"],
            position_ids=packed["position_ids"],
            masked_positions=labels_packed != -100,
        )
    torch.testing.assert_close(b.logits, a.logits, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(b.loss, a.loss)


# --- batch size arithmetic ---


def test_micro_batches_for():
    # the paper: 2M tokens = 1024 tokens x 32 rows x 8 GPUs x 8 accumulation steps
    assert micro_batches_for(2**21, 1024, 32, 8) == 8
    # stage 2 keeps the tokens per step at 4096 tokens per row
    assert micro_batches_for(2**21, 4096, 8, 8) == 8
    assert micro_batches_for(4096, 512, 8, 1) == 1
    with pytest.raises(ValueError, match="not a multiple"):
        micro_batches_for(2_000_000, 1024, 32, 8)
    with pytest.raises(ValueError, match="positive"):
        micro_batches_for(2**21, 1024, 0, 8)
