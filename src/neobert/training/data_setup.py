"""From the ``data`` section of a pretraining config to documents, tokenizer facts and a model."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.config import ConfigError, ModelConfig
from ..data import default_tokenizer_dir, load_tokenizer
from ..data.dataset import TokenDataset
from ..data.shards import MANIFEST
from ..inference.encoders import EXAMPLES_HINT
from ..jobs.prepare import PrepareConfig, prepare
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from .config import PretrainConfig


class ConcatDocuments:
    """Several prepared data sets seen as one sequence of documents."""

    def __init__(self, parts: list[TokenDataset]):
        self.parts = [p for p in parts if len(p)]
        self._starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()
        self.lengths = (
            np.concatenate([p.lengths for p in self.parts]) if self.parts else np.zeros(0, np.int64)
        )

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i: int) -> np.ndarray:
        part = bisect.bisect_right(self._starts, int(i)) - 1
        return self.parts[part][int(i) - self._starts[part]]


@dataclass
class TrainingData:
    train: Any  # documents: __len__, __getitem__ -> np.ndarray, .lengths
    validation: Any | None
    tokenizer: Any
    pad_id: int
    mask_id: int
    special_ids: list[int]
    vocab_size: int
    unigram_entropy: float | None
    # the data sources (prepared directories) as ranges of train's documents: name -> (first, end, tokens)
    sources: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def build_model(self, config: PretrainConfig):
        """A fresh MLM model for this tokenizer (or ``init_from``'s weights, e.g. stage 2 from stage 1)."""
        overrides = dict(config.model)
        if config.init_from:
            model = NeoBERTForMaskedLM.from_pretrained(config.init_from, **overrides)
        else:
            overrides.setdefault("vocab_size", self.vocab_size)
            overrides.setdefault("pad_token_id", self.pad_id)
            model_config = ModelConfig.from_name(config.preset, **overrides)
            model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(model_config))
        if model.config.vocab_size < self.vocab_size:
            raise ConfigError(
                f"model vocab_size {model.config.vocab_size} is smaller than the tokenizer's {self.vocab_size}"
            )
        if model.config.max_length < config.data.seq_len:
            raise ConfigError(
                f"data.seq_len {config.data.seq_len} exceeds the model's max_length {model.config.max_length}; "
                "raise model.max_length"
            )
        return model


def _default_tokenizer(config: PretrainConfig, accelerator) -> Path:
    """The tokenizer for raw text given without one: NeoBERT's (bert-base-uncased) for the neobert presets."""
    if not config.preset.startswith("neobert"):
        raise ConfigError(
            f"raw text inputs need a tokenizer: give --tokenizer DIR (data.tokenizer), e.g. one trained with "
            f"`neobert tokenizer train`; only the neobert presets default to NeoBERT's own (bert-base-uncased, "
            f"{EXAMPLES_HINT}), and this run's preset is {config.preset!r}"
        )
    try:
        path = default_tokenizer_dir()
    except (ImportError, FileNotFoundError) as err:
        raise ConfigError(
            f"raw text inputs need a tokenizer: preset {config.preset!r} uses NeoBERT's (bert-base-uncased), "
            f"which is not installed ({EXAMPLES_HINT}); or give --tokenizer DIR (data.tokenizer), e.g. one "
            "trained with `neobert tokenizer train`"
        ) from err
    accelerator.print(f"tokenizer: NeoBERT's (bert-base-uncased) from {path}, the neobert presets' default")
    return path


def open_training_data(config: PretrainConfig, accelerator) -> TrainingData:
    """Open (preparing raw files first, on the main process) the data sets named in ``config.data.paths``."""
    paths = [Path(p) for p in config.data.paths]
    if not paths:
        raise ConfigError("no training data: give --data PATH (prepared directories or text files)")
    missing = [str(p) for p in paths if not p.exists() and not str(p).startswith("hf:")]
    if missing:
        raise FileNotFoundError(f"training data not found: {', '.join(missing)}")
    prepared = [p for p in paths if (p / MANIFEST).is_file()]
    raw = [str(p) for p in paths if p not in prepared]
    tokenizer_dir = config.data.tokenizer
    if raw:
        tokenizer_dir = tokenizer_dir or _default_tokenizer(config, accelerator)
        target = Path(config.output) / "data"
        if accelerator.is_main_process:
            prepare(
                PrepareConfig(
                    inputs=raw,
                    tokenizer=str(tokenizer_dir),
                    output=str(target),
                    text_column=config.data.text_column,
                    validation_fraction=config.data.validation_fraction,
                )
            )
        accelerator.wait_for_everyone()
        prepared.append(target)
    train_parts = [TokenDataset(p, "train") for p in prepared]
    vocab_sizes = {part.vocab_size for part in train_parts}
    if len(vocab_sizes) > 1:
        raise ConfigError(
            f"the data sets were tokenized with different vocabularies (sizes {sorted(vocab_sizes)})"
        )
    tokenizer = load_tokenizer(tokenizer_dir or train_parts[0].tokenizer_path)
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ConfigError("the tokenizer needs a [MASK] and a [PAD] token for masked-language modelling")
    train = train_parts[0] if len(train_parts) == 1 else ConcatDocuments(train_parts)
    validation = ConcatDocuments([TokenDataset(p, "validation") for p in prepared])
    if not len(validation):
        accelerator.print(empty_validation_message(train_parts))
    return TrainingData(
        train=train,
        validation=validation if len(validation) else None,
        tokenizer=tokenizer,
        pad_id=tokenizer.pad_token_id,
        mask_id=tokenizer.mask_token_id,
        special_ids=sorted(set(tokenizer.all_special_ids)),
        vocab_size=len(tokenizer),
        unigram_entropy=unigram_entropy(train, tokenizer.all_special_ids, len(tokenizer)),
        sources=source_ranges(prepared, train_parts),
    )


def source_ranges(prepared: list[Path], parts: list[TokenDataset]) -> dict[str, tuple[int, int, int]]:
    """Each prepared directory as a range of the concatenated training documents, with its token count."""
    ranges, start = {}, 0
    for path, part in zip(prepared, parts):
        if path.name in ranges:
            raise ConfigError(
                f"two data sources are named {path.name!r}: give the directories distinct names"
            )
        ranges[path.name] = (start, start + len(part), int(np.asarray(part.lengths).sum()))
        start += len(part)
    return ranges


def empty_validation_message(train_parts: list[TokenDataset]) -> str:
    """Why the validation split is empty and what to do about it (validation loss will be n/a)."""
    fractions = sorted({float(p.manifest["config"].get("validation_fraction", 0.0)) for p in train_parts})
    documents = sum(len(p) for p in train_parts)
    where = ", ".join(str(p.path) for p in train_parts)
    if fractions == [0.0]:
        return (
            f"note: no validation split ({where} was prepared with validation_fraction 0), so validation loss "
            "is n/a; prepare with a validation fraction (e.g. 0.01) to measure it"
        )
    why = (
        f"none of the {documents:,} training documents fell into the held-out split (validation_fraction "
        f"{', '.join(f'{f:g}' for f in fractions)})"
    )
    if documents < 10:
        why += (
            "; so few documents often means a .txt file read as blank-line separated paragraphs whose "
            "documents are lines: prepare it again with --txt-mode line"
        )
    return (
        f"warning: the validation split of {where} is empty, so validation loss will be n/a: {why}. "
        "Raise the fraction (raw text: --set data.validation_fraction=0.05; prepared data: "
        "`neobert data prepare --validation-fraction 0.05` into a new directory) to measure it."
    )


def unigram_entropy(
    docs, special_ids: list[int], vocab_size: int, max_tokens: int = 20_000_000
) -> float | None:
    """Entropy (nats) of the training tokens' unigram distribution, specials excluded.

    It is the MLM loss of a model that ignores context and always predicts token frequencies: the bar a
    trained encoder must clear.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    seen = 0
    for i in range(len(docs)):
        doc = np.asarray(docs[i])
        counts += np.bincount(doc, minlength=vocab_size)[:vocab_size]
        seen += len(doc)
        if seen >= max_tokens:
            break
    counts[list(special_ids)] = 0
    total = counts.sum()
    if total == 0:
        return None
    p = counts[counts > 0] / total
    return float(-(p * np.log(p)).sum())
