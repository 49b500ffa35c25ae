"""Any encoder as a sequence classifier: a head of the task's label count on a preset, a directory or a hub id.

Loading, tokenizers, limits and saving are :mod:`neobert.inference.encoders`'; here is only what fine-tuning adds:
the head's label fields, and a checkpoint whose head has another label count keeping just its encoder.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig

from ..inference.encoders import is_preset, load_model, model_dir


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
    head: str = "sequence-classification",
    pooling: str | None = None,
    loading_info: bool = False,
) -> Any:
    """A model with a ``head`` (sequence- or token-classification) with a ``num_labels`` head (sequences: 1 =
    regression); with ``loading_info``, (model, the names of the weights its checkpoint lacked), which a
    LoRA run trains in full.

    A checkpoint whose head has another label count (MNLI's 3 classes for RTE's 2) keeps its encoder and
    gets a freshly initialised classifier; a head of the right size is kept. ``pooling`` (cls | mean)
    replaces a NeoBERT sequence head's own ``classifier_pooling``; other models have no such switch.
    """
    fields = head_config(num_labels, id2label)
    if head != "sequence-classification":
        del fields["problem_type"]  # a per-token head: num_labels=1 is one class, not a regression
    if pooling is not None:
        fields["classifier_pooling"] = pooling
    if is_preset(source):
        model = load_model(source, head=head, **(preset_overrides or {}), **fields)
        return (model, sorted(model.state_dict())) if loading_info else model
    if preset_overrides:
        raise ValueError(f"preset overrides apply to presets only, and {source} is not one")
    config = AutoConfig.from_pretrained(model_dir(source) or source, **fields)
    if pooling is not None and config.model_type != "neobert":
        raise ValueError(
            f"pooling={pooling!r} sets a NeoBERT head's pooling, and {source} is a {config.model_type} "
            "model, whose head pools its own way; leave pooling unset"
        )
    if not loading_info:
        return load_model(source, head=head, config=config, ignore_mismatched_sizes=True)
    model, info = load_model(
        source, head=head, config=config, ignore_mismatched_sizes=True, output_loading_info=True
    )
    mismatched = [key for key, *_ in info.get("mismatched_keys") or ()]  # a head of another label count
    return model, sorted({*info.get("missing_keys", ()), *mismatched})
