"""NeoBERT as a sentence-transformers model.

:func:`save_sentence_transformer` writes a standard sentence-transformers directory (the stock Transformer
module, then Pooling, then optional Normalize) that loads with the same pooling as
:func:`neobert.inference.run.encode`, so the vectors are the same::

    import neobert  # registers model_type "neobert" with transformers' Auto classes
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(path)

No ``trust_remote_code`` is involved: the directory names only sentence-transformers' own module classes, and
transformers finds the NeoBERT code through the registration that ``import neobert`` performs. (Without that
import transformers does not know ``model_type "neobert"`` and says so.) :func:`load_sentence_transformer`
does both steps.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

import neobert  # registers model_type "neobert" with transformers' Auto classes

from ..cards import CardInfo, hub_model_id, write_card
from ..data import load_tokenizer
from ..inference.encoders import load_model, save_pretrained
from ..model.pooling import get_pooling


def save_sentence_transformer(
    model_dir_or_model: str | os.PathLike | torch.nn.Module,
    tokenizer: Any,
    output_dir: str | os.PathLike,
    pooling: str = "mean",
    normalize: bool = False,
) -> Path:
    """Write a sentence-transformers directory: the NeoBERT encoder, then pooling, then optional Normalize.

    ``model_dir_or_model`` is a NeoBERT directory (any head; only the encoder is kept) or an in-memory
    model; ``tokenizer`` is a tokenizer, a tokenizer directory, or None for the one in the model directory.
    Inputs are truncated at the model's ``max_length``, as :func:`neobert.inference.run.encode` does.
    Load the result with ``SentenceTransformer(output_dir)`` after ``import neobert`` (see the module doc).
    """
    mode = get_pooling(pooling).sentence_transformers  # every pooling of the registry has one
    output_dir = Path(output_dir)
    if isinstance(model_dir_or_model, torch.nn.Module):
        model = model_dir_or_model
    else:
        source = Path(model_dir_or_model)
        if output_dir.resolve() == source.resolve():
            raise ValueError(f"output_dir {output_dir} is the model directory; its weights would be replaced")
        model = load_model(source, head="base")
        tokenizer = source if tokenizer is None else tokenizer
    if tokenizer is None:
        raise ValueError("a tokenizer (or tokenizer directory) is needed with an in-memory model")
    if not hasattr(tokenizer, "save_pretrained"):
        tokenizer = load_tokenizer(tokenizer)

    # Stage the encoder and tokenizer, then let sentence-transformers write its own files from a module
    # it loaded itself: the saved layout is whatever this sentence-transformers version expects.
    with tempfile.TemporaryDirectory(prefix="neobert-st-") as staging:
        save_pretrained(model.base_model, tokenizer, staging)
        transformer = Transformer(staging, max_seq_length=model.config.max_length)
        modules: list[torch.nn.Module] = [
            transformer,
            Pooling(transformer.get_embedding_dimension(), pooling_mode=mode),
        ]
        if normalize:
            modules.append(Normalize())
        SentenceTransformer(modules=modules, device="cpu").save(str(output_dir))
    in_memory = isinstance(model_dir_or_model, torch.nn.Module)
    _write_card(output_dir, None if in_memory else str(model_dir_or_model), pooling, normalize, model)
    return output_dir


def _write_card(output_dir: Path, source: str | None, pooling: str, normalize: bool, model) -> None:
    """The directory's card, replacing sentence-transformers' generic README (``source`` None: in memory)."""
    origin = "an in-memory model" if source is None else f"`{Path(source).name}`"
    description = (
        f"A sentence-transformers model: the NeoBERT encoder of {origin} followed by {pooling} pooling"
        f"{' and L2 normalization' if normalize else ''}, written by "
        "`neobert.integrations.sentence_transformers.save_sentence_transformer`. Its vectors equal "
        "`neobert.inference.run.encode`'s with the same pooling."
    )
    info = CardInfo(
        head="sentence-embedding",
        library="sentence-transformers",
        description=description,
        command="save_sentence_transformer",
        base_model=None if source is None else hub_model_id(source),
        limits=[f"Texts longer than {model.config.max_length:,} tokens are truncated."],
    )
    write_card(output_dir, info)


def load_sentence_transformer(path: str | os.PathLike, **kwargs: Any) -> SentenceTransformer:
    """``SentenceTransformer(path, **kwargs)`` with NeoBERT registered (this module imported ``neobert``)."""
    neobert.register()  # idempotent; the import above already did it
    return SentenceTransformer(str(path), **kwargs)
