"""Floor 2, the inference core between the model (floor 1) and its users (floor 3: the service, the jobs,
evaluation, the exports).

- ``registration``: the head registry (what a head is); ``directories``: what kind of model directory a
  source is;
- ``encoders``: loading an encoder and its tokenizer (the ``Encoder`` bundle); ``capabilities``: what a
  loaded model can do (``load_for_inference``);
- ``run``: a loaded model over texts (``encode``, ``classifier_logits``, ``classifier_rows``,
  ``fill_mask``, ...); ``long_documents``: texts longer than the model's window;
- ``sparse`` (SPLADE), ``late_interaction`` (ColBERT), ``quantization`` (int8 / binary embeddings),
  ``model_info`` (architecture and exact parameter counts).

``neobert.inference`` was one module until issue 32 gave the inference core this folder; that module is
now :mod:`neobert.inference.run`, and its names stay importable from here (``from neobert.inference import
encode``), loaded on first use: ``import neobert`` (which imports ``registration``) loads no other module of
this package. Modules of this package import their siblings (``from .run import encode``), never this
namespace.
"""

from __future__ import annotations

import importlib
from typing import Any

SUBMODULES = frozenset(
    {
        "capabilities",
        "directories",
        "encoders",
        "late_interaction",
        "long_documents",
        "model_info",
        "quantization",
        "registration",
        "run",
        "sparse",
    }
)
# The names the single module ``neobert.inference`` defined, served from ``run`` (tests/test_moved.py
# checks the list against the names ``run`` defines).
RUN_NAMES = frozenset(
    {
        "CPU_MAX_TOKENS",
        "SCORE_FUNCTIONS",
        "TOKENIZE_CHUNK",
        "TokenIds",
        "batched_inputs",
        "classifier_logits",
        "classifier_rows",
        "classify",
        "encode",
        "fill_mask",
        "is_regression",
        "label_names",
        "label_scores",
        "relevance",
        "token_batches",
        "token_states",
    }
)

__all__ = [
    "CPU_MAX_TOKENS",
    "TOKENIZE_CHUNK",
    "classifier_logits",
    "classifier_rows",
    "classify",
    "encode",
    "fill_mask",
    "token_batches",
]  # fmt: skip  (the old module's __all__)


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in RUN_NAMES:
        return getattr(importlib.import_module(f"{__name__}.run"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | SUBMODULES | RUN_NAMES)
