"""Any encoder behind one interface: load NeoBERT or a transformers encoder, embed texts by masked mean pooling.

The fair-comparison protocol treats every model the same way, so nothing here looks at the architecture
beyond two facts every transformers encoder exposes: ``last_hidden_state`` and the longest input it
accepts. ``--model`` is a NeoBERT directory, a NeoBERT preset (random weights), or any transformers
encoder by directory or hub id (BERT, RoBERTa, ModernBERT ...).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..model.pooling import mean_pool

# RoBERTa-style models number positions from padding_idx + 1, so two rows of their table are unusable.
_OFFSET_POSITION_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer")
_NO_LIMIT = 100_000  # tokenizers without a limit report ~1e30 as model_max_length


@dataclass
class Encoder:
    """A model (bare encoder or one with a head), its tokenizer, and the longest input it accepts."""

    model: torch.nn.Module
    tokenizer: Any
    name: str
    max_length: int

    @property
    def base(self) -> torch.nn.Module:
        """The bare encoder inside any head (a bare encoder is its own base model)."""
        return getattr(self.model, "base_model", self.model)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def is_neobert(self) -> bool:
        return getattr(self.model.config, "model_type", None) == "neobert"


def load_text_tokenizer(model: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Any:
    """``tokenizer`` if given, else the model directory's own, the NeoBERT tokenizer for a preset, or the
    hub id's tokenizer."""
    from ..config import PRESETS
    from ..inference import load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    name = str(model)
    if name in PRESETS and not Path(name).is_dir():
        return load_tokenizer(None)
    if Path(name).is_dir() and not any(
        (Path(name) / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
    ):
        raise FileNotFoundError(f"{name} holds no tokenizer files; pass a tokenizer directory")
    return load_tokenizer(name)


def load_encoder(
    model: str | os.PathLike,
    tokenizer: str | os.PathLike | Any | None = None,
    task: str = "base",
    device: str | torch.device | None = None,
    **model_kwargs: Any,
) -> Encoder:
    """Load ``model`` for ``task`` (base | mlm) with its tokenizer, in eval mode, on ``device``.

    A NeoBERT preset gets a vocabulary as large as the tokenizer's, so the default tokenizer fits the test
    presets (``tiny`` has 128 ids otherwise). ``model_kwargs`` go to :func:`neobert.inference.load_model`.
    """
    from ..config import PRESETS
    from ..inference import load_model

    tok = tokenizer if hasattr(tokenizer, "convert_tokens_to_ids") else load_text_tokenizer(model, tokenizer)
    name = str(model)
    if name in PRESETS and not Path(name).is_dir():
        model_kwargs.setdefault("vocab_size", max(len(tok), PRESETS[name].get("vocab_size", 30522)))
    module = load_model(model, task=task, **model_kwargs)
    if device is not None:
        module = module.to(device)
    if len(tok) > module.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tok)} tokens but {name} only {module.config.vocab_size} embeddings; "
            "use the model's own tokenizer"
        )
    return Encoder(module, tok, name, max_input_length(module, tok))


def max_input_length(model: torch.nn.Module, tokenizer: Any = None) -> int:
    """The longest input (in tokens, specials included) the model and tokenizer both accept."""
    config = model.config
    limits = []
    if getattr(config, "model_type", None) == "neobert":
        limits.append(int(config.max_length))
    elif getattr(config, "max_position_embeddings", None):
        offset = (config.pad_token_id or 0) + 1 if config.model_type in _OFFSET_POSITION_MODELS else 0
        limits.append(int(config.max_position_embeddings) - offset)
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    # A NeoBERT preset with the stock tokenizer: its 512 says nothing about the model.
    if tokenizer_limit and tokenizer_limit < _NO_LIMIT and getattr(config, "model_type", None) != "neobert":
        limits.append(int(tokenizer_limit))
    return min(limits) if limits else 512


def tokenize(encoder: Encoder, texts: Sequence[str], max_length: int | None = None) -> dict:
    """Right-padded ``input_ids`` and 0/1 ``attention_mask`` on the encoder's device, truncated."""
    batch = encoder.tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=min(max_length or encoder.max_length, encoder.max_length),
        return_tensors="pt",
        return_token_type_ids=False,
    )
    device = encoder.device
    return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}


def embed_batch(encoder: Encoder, inputs: dict) -> torch.Tensor:
    """Masked mean of the last hidden states: (B, C), differentiable (the training path uses it too)."""
    states = encoder.base(**inputs).last_hidden_state  # (B, L, C)
    return mean_pool(states, inputs["attention_mask"])


def encode_texts(
    encoder: Encoder,
    texts: Sequence[str],
    batch_size: int = 32,
    normalize: bool = True,
    max_length: int | None = None,
    show_progress: bool = True,
    desc: str = "encode",
) -> np.ndarray:
    """Embed ``texts`` into float32 (N, C), rows in input order; longest texts first so batches pad little."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.empty((len(texts), encoder.hidden_size), dtype=np.float32)
    model = encoder.model
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(texts), desc=desc, disable=not show_progress) as bar:
            for start in range(0, len(order), batch_size):
                index = order[start : start + batch_size]
                vectors = embed_batch(encoder, tokenize(encoder, [texts[i] for i in index], max_length))
                if normalize:
                    vectors = F.normalize(vectors.float(), dim=-1)
                out[index] = vectors.float().cpu().numpy()
                bar.update(len(index))
    finally:
        model.train(was_training)
    return out
