"""Any encoder as a sequence classifier, loaded and saved the same way.

``--model`` is a NeoBERT preset (random weights), a NeoBERT directory, or any transformers encoder by
directory or hub id. All go through ``AutoModelForSequenceClassification`` (``import neobert`` registered
NeoBERT with it) and ``AutoTokenizer``, so BERT, RoBERTa, ModernBERT and NeoBERT get identical treatment.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .reporting import current_umask


def is_preset(name: str) -> bool:
    from ..config import PRESETS

    return name in PRESETS and not Path(name).is_dir()


def head_config(num_labels: int, id2label: dict[int, str] | None) -> dict[str, Any]:
    """transformers config fields describing the head: regression is ``num_labels=1``."""
    fields: dict[str, Any] = {
        "num_labels": num_labels,
        "problem_type": "regression" if num_labels == 1 else "single_label_classification",
    }
    if id2label is not None:
        fields["id2label"] = dict(id2label)
        fields["label2id"] = {name: i for i, name in id2label.items()}
    return fields


def load_classifier(
    source: str,
    num_labels: int,
    id2label: dict[int, str] | None = None,
    preset_overrides: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """A sequence-classification model with a ``num_labels`` head (1 = regression).

    A checkpoint whose head has another label count (MNLI's 3 classes for RTE's 2) keeps its encoder and
    gets a freshly initialised classifier; a head of the right size is kept.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from ..inference import load_model

    head = head_config(num_labels, id2label)
    if is_preset(source):
        return load_model(source, task="sequence-classification", **(preset_overrides or {}), **head)
    if preset_overrides:
        raise ValueError(f"preset overrides apply to presets only, and {source} is not one")
    if source.startswith((".", "/", "~")) and not Path(source).expanduser().is_dir():
        raise FileNotFoundError(f"{source} is not a model directory (no such directory)")
    config = AutoConfig.from_pretrained(source, **head)
    return AutoModelForSequenceClassification.from_pretrained(
        source, config=config, ignore_mismatched_sizes=True
    )


def load_tokenizer_for(source: str, tokenizer: str | None = None) -> Any:
    """The tokenizer given, else the model's own; presets use the default NeoBERT tokenizer.

    NeoBERT tokenizers are set up to emit no token types; any other model's tokenizer is used untouched
    (BERT needs its ``token_type_ids`` for sentence pairs).
    """
    from transformers import AutoTokenizer

    from ..inference import load_tokenizer

    if tokenizer is not None:
        return AutoTokenizer.from_pretrained(tokenizer)
    if is_preset(source):
        return load_tokenizer(None)
    return AutoTokenizer.from_pretrained(source)


def max_positions(model: torch.nn.Module) -> int | None:
    """How many tokens the model accepts, from its config (NeoBERT ``max_length``, BERT-style
    ``max_position_embeddings``, which for RoBERTa includes two reserved offsets)."""
    config = model.config
    if getattr(config, "model_type", None) == "neobert":
        return int(config.max_length)
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None:
        return None
    return int(limit) - 2 if getattr(config, "model_type", "") in ("roberta", "xlm-roberta") else int(limit)


def check_vocabulary(model: torch.nn.Module, tokenizer: Any) -> None:
    size = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding table only {size}; use the "
            f"model's own tokenizer (a preset needs preset_overrides={{'vocab_size': {len(tokenizer)}}} to "
            "run with this one)"
        )


def save_model_atomic(
    model: torch.nn.Module, tokenizer: Any, path: str | Path, extra_files: dict[str, str] | None = None
) -> Path:
    """Write model + tokenizer (+ ``extra_files``: name -> text) to ``path`` via a temporary sibling and
    renames: a reader (or a crash) sees either the previous directory whole or the new one whole."""
    from ..inference import save_pretrained

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".tmp-{path.name}-"))
    try:
        if getattr(model.config, "model_type", None) == "neobert":
            save_pretrained(model, tokenizer, tmp)  # the released layout, with vocab.txt
        else:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp creates 0700; give the usual permissions
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def replace_dir(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``, replacing an existing ``target``: the old one is renamed aside
    first, so ``target`` is never half-written."""
    old = None
    if target.exists():
        old = target.with_name(f".old-{target.name}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(source, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
