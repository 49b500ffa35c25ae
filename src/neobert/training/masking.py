"""Masked-language-model corruption: which tokens to predict and what the encoder sees instead.

Two schemes, both from the paper:
- ``"mask"`` (NeoBERT): 20% of the eligible tokens are selected and every one is replaced by [MASK].
- ``"bert"`` (the BERT baseline): 15% are selected; of those 80% become [MASK], 10% a random ordinary token
  and 10% stay unchanged (the model must still predict them).

Special tokens ([CLS], [SEP], [MASK], padding, ...) are never selected. The randomness comes only from the
``torch.Generator`` passed in, so a run is reproducible: :func:`generator_for` derives one from
(seed, step, rank), which makes the masks of a step independent of how many batches were drawn before it
(resuming from a checkpoint gives the same masks as an uninterrupted run).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

from ..model.losses import IGNORE_INDEX  # label of positions that carry no loss

RATE_SHAPES = ("linear", "cosine")  # how a masking rate moves from its start to its end value
SCHEMES = ("mask", "bert")

# Of the selected tokens in the BERT scheme: this share becomes [MASK], the next share a random token,
# and the rest stay as they are.
BERT_MASK_SHARE = 0.8
BERT_RANDOM_SHARE = 0.1


def mask_rate_at(
    step: int, total_steps: int, start: float, end: float | None, shape: str = "linear"
) -> float:
    """The masking rate of step ``step`` (0-based) of ``total_steps``: ``start`` at step 0, ``end`` at the last
    step (None: ``start`` throughout), moving linearly or along a half cosine in between."""
    if end is None or total_steps <= 1:
        return start
    if shape not in RATE_SHAPES:
        raise ValueError(f"shape must be one of {', '.join(RATE_SHAPES)}; got {shape!r}")
    p = min(max(step / (total_steps - 1), 0.0), 1.0)
    if shape == "cosine":
        p = 0.5 * (1.0 - math.cos(math.pi * p))
    return start + (end - start) * p


def generator_for(seed: int, step: int, rank: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded from (seed, step, rank) alone.

    The three numbers are mixed by numpy's SeedSequence (a hash), so nearby steps or ranks give unrelated
    streams, unlike ``seed + step`` which would make rank 1 at step s repeat rank 0 at step s + 1.
    """
    if min(seed, step, rank) < 0:
        raise ValueError(f"seed, step and rank must be non-negative, got {(seed, step, rank)}")
    state = np.random.SeedSequence([seed, step, rank]).generate_state(1, dtype=np.uint64)[0]
    generator = torch.Generator(device=device)
    generator.manual_seed(int(state) & ((1 << 63) - 1))  # manual_seed wants a signed 64-bit value
    return generator


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Iterable[int],
    rate: float = 0.2,
    scheme: str = "mask",
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt ``input_ids`` (any shape) for MLM.

    ``special_ids`` must hold the padding id too: each token not among them (nor [MASK] itself) is selected independently with probability
    ``rate``. Returns ``(masked_ids, labels)`` of the input's shape: ``labels`` holds the original id at
    selected positions and -100 elsewhere. The input is not modified. Random numbers are drawn on the
    generator's device, so the result for a given generator does not depend on where ``input_ids`` lives.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate}")
    protected = sorted({int(i) for i in special_ids} | {mask_token_id})
    if protected[0] < 0 or protected[-1] >= vocab_size:
        raise ValueError(f"special ids {protected} must lie in [0, vocab_size={vocab_size})")

    rng_device = generator.device
    ids = input_ids.to(rng_device)
    eligible = ~torch.isin(ids, torch.tensor(protected, device=rng_device))
    selected = eligible & (torch.rand(ids.shape, generator=generator, device=rng_device) < rate)

    labels = torch.where(selected, ids, IGNORE_INDEX).long()  # cross-entropy wants int64 targets
    if scheme == "mask":
        masked = torch.where(selected, mask_token_id, ids)
    else:
        # One uniform draw per token decides its fate; only the selected positions use it.
        fate = torch.rand(ids.shape, generator=generator, device=rng_device)
        to_mask = selected & (fate < BERT_MASK_SHARE)
        to_random = selected & (fate >= BERT_MASK_SHARE) & (fate < BERT_MASK_SHARE + BERT_RANDOM_SHARE)
        # A random token is drawn for every position (no host sync to count them); most are discarded.
        random_ids = _random_ordinary_tokens(ids.shape, vocab_size, protected, generator).to(ids.dtype)
        masked = torch.where(to_mask, mask_token_id, torch.where(to_random, random_ids, ids))
    return masked.to(input_ids.device), labels.to(input_ids.device)


def _random_ordinary_tokens(
    shape: torch.Size, vocab_size: int, protected: list[int], generator: torch.Generator
) -> torch.Tensor:
    """A tensor of ``shape`` of ids drawn uniformly from the vocabulary without the special ids."""
    allowed = torch.ones(vocab_size, dtype=torch.bool, device=generator.device)
    allowed[protected] = False
    candidates = allowed.nonzero().squeeze(-1)  # (V - n_special,)
    if candidates.numel() == 0:
        raise ValueError("the vocabulary holds only special tokens; nothing to draw random tokens from")
    pick = torch.randint(candidates.numel(), shape, generator=generator, device=generator.device)
    return candidates[pick]
