"""MLM masking: rates, never-selected specials, the 80/10/10 split and determinism."""

import math

import pytest
import torch

from neobert.training import IGNORE_INDEX, generator_for, mask_tokens

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103  # the bert-base-uncased ids
SPECIAL = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 30522


def _batch(rows: int = 256, length: int = 512, seed: int = 0) -> torch.Tensor:
    """Rows of ordinary tokens with [CLS]/[SEP] at the ends, some [UNK] and a padded tail on odd rows."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, VOCAB, (rows, length), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[torch.rand(rows, length, generator=g) < 0.02] = UNK
    ids[1::2, length // 2 :] = PAD
    return ids


def _mask(ids: torch.Tensor, rate: float, scheme: str, step: int = 0):
    return mask_tokens(
        ids,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        special_ids=SPECIAL,
        rate=rate,
        scheme=scheme,
        generator=generator_for(1234, step),
    )


@pytest.mark.parametrize(("scheme", "rate"), [("mask", 0.2), ("bert", 0.15), ("mask", 0.4)])
def test_rate_over_eligible_tokens(scheme, rate):
    ids = _batch()
    eligible = ~torch.isin(ids, torch.tensor(SPECIAL))
    _, labels = _mask(ids, rate, scheme)
    selected = labels != IGNORE_INDEX
    n = int(eligible.sum())
    assert n > 90_000
    # binomial standard deviation is ~0.0013 here; 0.006 is over 4 sigma
    assert abs(int(selected.sum()) / n - rate) < 0.006


@pytest.mark.parametrize("scheme", ["mask", "bert"])
def test_specials_and_padding_never_selected_and_labels_are_originals(scheme):
    ids = _batch()
    masked, labels = _mask(ids, 0.5, scheme)
    special = torch.isin(ids, torch.tensor(SPECIAL))
    assert (labels[special] == IGNORE_INDEX).all()
    assert torch.equal(masked[special], ids[special])  # specials pass through untouched
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected])  # nothing outside the selection changes
    assert labels.dtype == torch.long and masked.shape == ids.shape


def test_mask_scheme_replaces_every_selected_token_with_mask():
    ids = _batch(rows=32)
    masked, labels = _mask(ids, 0.2, "mask")
    selected = labels != IGNORE_INDEX
    assert (masked[selected] == MASK).all()
    assert not (masked[~selected] == MASK).any()


def test_bert_scheme_80_10_10():
    ids = _batch()
    masked, labels = _mask(ids, 0.15, "bert")
    selected = labels != IGNORE_INDEX
    before, after = ids[selected], masked[selected]
    n = before.numel()
    as_mask = (after == MASK).float().mean().item()
    unchanged = (after == before).float().mean().item()
    replaced = (after != MASK) & (after != before)
    # about 15,000 selected tokens: one standard deviation of a 10% share is 0.0025
    assert n > 10_000
    assert abs(as_mask - 0.8) < 0.015
    assert abs(unchanged - 0.1) < 0.012
    assert abs(replaced.float().mean().item() - 0.1) < 0.012
    # random replacements are ordinary in-vocabulary tokens
    random_ids = after[replaced]
    assert not torch.isin(random_ids, torch.tensor(SPECIAL)).any()
    assert random_ids.min() >= 0 and random_ids.max() < VOCAB
    # and spread over the vocabulary, not a constant
    assert random_ids.unique().numel() > random_ids.numel() // 2


def test_same_seed_and_step_give_the_same_masks_other_steps_and_ranks_differ():
    ids = _batch(rows=16)
    a = _mask(ids, 0.2, "bert", step=7)
    b = _mask(ids, 0.2, "bert", step=7)
    c = _mask(ids, 0.2, "bert", step=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])
    kw = {"mask_token_id": MASK, "vocab_size": VOCAB, "special_ids": SPECIAL}
    rank0 = mask_tokens(ids, generator=generator_for(1234, 7, rank=0), **kw)[1]
    rank1 = mask_tokens(ids, generator=generator_for(1234, 7, rank=1), **kw)[1]
    assert not torch.equal(rank0, rank1)
    # seed + step collisions that naive addition would give do not happen
    assert not torch.equal(
        mask_tokens(ids, generator=generator_for(1, 2), **kw)[1],
        mask_tokens(ids, generator=generator_for(2, 1), **kw)[1],
    )


def test_input_is_left_untouched_and_works_on_any_shape():
    ids = _batch(rows=4, length=64).flatten()  # packed layout: 1-D
    copy = ids.clone()
    masked, labels = _mask(ids, 0.2, "mask")
    assert torch.equal(ids, copy)
    assert masked.shape == labels.shape == ids.shape


def test_rate_zero_and_bad_arguments():
    ids = _batch(rows=4, length=64)
    masked, labels = _mask(ids, 0.0, "mask")
    assert torch.equal(masked, ids) and (labels == IGNORE_INDEX).all()
    with pytest.raises(ValueError, match="scheme"):
        _mask(ids, 0.2, "random")
    with pytest.raises(ValueError, match="rate"):
        _mask(ids, 1.5, "mask")
    with pytest.raises(ValueError, match="non-negative"):
        generator_for(-1, 0)


def test_mask_rate_schedule_moves_from_start_to_end():
    from neobert.training.masking import mask_rate_at

    assert mask_rate_at(0, 11, 0.3, 0.15) == pytest.approx(0.3)
    assert mask_rate_at(5, 11, 0.3, 0.15) == pytest.approx(0.225)
    assert mask_rate_at(10, 11, 0.3, 0.15) == pytest.approx(0.15)
    assert mask_rate_at(3, 11, 0.3, 0.15, "cosine") == pytest.approx(
        0.3 - 0.15 * (1 - math.cos(math.pi * 0.3)) / 2
    )
    assert mask_rate_at(7, 11, 0.2, None) == 0.2
    with pytest.raises(ValueError, match="shape"):
        mask_rate_at(1, 11, 0.3, 0.15, "step")
