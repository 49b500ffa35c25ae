"""Helpers shared by several test modules (fixtures live in conftest.py; tiny encoders in embedding_fixtures.py).

A test module imports from here, never from another test module.
"""

from __future__ import annotations

import torch

from neobert.model.rope import rotate_pairs


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of the last dimension by the angles whose cosine and sine are given (cos, sin
    broadcastable to (..., D/2)): the model's :func:`rotate_pairs` spelled with separate tables."""
    return rotate_pairs(x, torch.stack((cos, sin), dim=-1))
