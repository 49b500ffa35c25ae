"""The transformers view of :class:`neobert.common.config.ModelConfig`.

``NeoBERTConfig`` declares exactly the fields of ``ModelConfig`` (generated from it, so the two cannot
drift) and validates them with it; besides those it takes only transformers' own generic keys (labels,
dtype, architectures, ...). Any other key raises, naming it, instead of being silently kept.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from transformers import PretrainedConfig

from ..common.config import ConfigError, ModelConfig
from .pooling import CLASSIFIER_POOLINGS

MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))

# Keys found in the released config.json that carry no architecture information; accepted and dropped.
RELEASE_ONLY_KEYS = ("kwargs", "pretrained_model_name_or_path", "trust_remote_code")
# Runtime choices that configs written by neobert < 0.2 stored; accepted and dropped (see set_runtime).
LEGACY_RUNTIME_KEYS = ("attn_backend", "unpad")

# Keys transformers itself writes or understands on every config.
TRANSFORMERS_KEYS = frozenset(
    [f.name for f in dataclasses.fields(PretrainedConfig)]
    + [
        "auto_map",
        "torch_dtype",
        "num_labels",
        "name_or_path",
        "_name_or_path",
        "_commit_hash",
        "output_attentions",
        "attn_implementation",
        "experts_implementation",
        "bos_token_id",
        "eos_token_id",
        "cls_token_id",
        "sep_token_id",
        "mask_token_id",
        "use_cache",
    ]
)


def _declared_fields() -> dict[str, Any]:
    """Class namespace declaring every ModelConfig field with its type and default."""
    hints = typing.get_type_hints(ModelConfig)
    namespace: dict[str, Any] = {"__annotations__": {}}
    for f in dataclasses.fields(ModelConfig):
        namespace["__annotations__"][f.name] = hints[f.name]
        namespace[f.name] = f.default
    namespace["__annotations__"]["tie_word_embeddings"] = bool
    namespace["tie_word_embeddings"] = False  # the released decoder is NOT tied to the embedding
    return namespace


class _NeoBERTConfigFields(PretrainedConfig):
    locals().update(_declared_fields())


class NeoBERTConfig(_NeoBERTConfigFields):
    """transformers configuration of a NeoBERT model; see :class:`neobert.common.config.ModelConfig` for the fields."""

    model_type = "neobert"

    def __post_init__(self, **kwargs: Any) -> None:
        model_type = kwargs.pop("model_type", "neobert")
        if model_type != "neobert":
            raise ConfigError(f"this is a {model_type!r} config, not a NeoBERT one (model_type 'neobert')")
        for key in RELEASE_ONLY_KEYS + LEGACY_RUNTIME_KEYS:
            kwargs.pop(key, None)
        unknown = sorted(set(kwargs) - TRANSFORMERS_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown NeoBERT config key(s): {', '.join(unknown)}. "
                f"Architecture keys are: {', '.join(MODEL_FIELDS)}"
            )
        # validate, and fill derived fields (dim_head, rope_original_max_length)
        for key, value in self.to_model_config().to_dict().items():
            setattr(self, key, value)
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ConfigError(
                f"classifier_pooling must be one of {', '.join(CLASSIFIER_POOLINGS)}; got {self.classifier_pooling!r}"
            )
        super().__post_init__(**kwargs)

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs: Any) -> NeoBERTConfig:
        return cls(**config.to_dict(), **kwargs)

    def to_model_config(self) -> ModelConfig:
        return ModelConfig.from_dict({key: getattr(self, key) for key in MODEL_FIELDS})
