"""The model card of a fine-tuned directory (``finetune glue|classify|tokens|contrastive|sparse``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cards import CardInfo, DataSource, Result, hub_model_id, wall_time
from ..common.tables import fmt, markdown_table
from ..inference.encoders import is_preset
from ..inference.kinds import DIRECTORY_KINDS, pipeline_tag
from ..training.lora import LoraReport


@dataclass
class FinetuneFacts:
    """What a fine-tuning run did and measured, as it wrote into its own result files."""

    head: str  # sequence-classification | token-classification | sentence-embedding | sparse-embedding
    command: str  # e.g. "neobert finetune classify"
    task: str  # what it learnt, for a person: "text classification (2 classes)"
    model: str  # the source it started from: a directory, a preset or a hub id
    settings: dict[str, Any]  # the run's whole config
    data: list[DataSource]
    data_stats: list[tuple[str, Any]]
    run: list[tuple[str, Any]]  # precision, steps, best step, wall time ...
    # (data set name, data set type, split) -> metric -> value, the numbers of the result files
    results: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    labels: list[str] | None = None
    license: str | None = None
    limits: list[str] = field(default_factory=list)
    lora: LoraReport | None = (
        None  # a LoRA run: the directory holds an adapter over the model it started from
    )


def started_from(model: str) -> str:
    if is_preset(model):
        return f"the `{model}` preset with random weights (trained here from scratch)"
    if hub_model_id(model):
        return f"[{model}](https://huggingface.co/{model})"
    return f"the local model directory `{Path(model).name}`"


HEAD_TAGS = {
    "sparse-embedding": ["sparse-encoder", "splade"],
    "late-interaction": ["ColBERT", "PyLate", "multi-vector"],
    "cross-encoder": ["cross-encoder", "reranker"],
}


def library_of(card_head: str) -> str:
    """The library that loads what a card calls ``card_head``: the directory kind's that carries that name
    (sentence-transformers for its embedding, sparse, late-interaction and cross-encoder directories), else
    transformers."""
    kinds = (k for k in DIRECTORY_KINDS.values() if k.card_head == card_head)
    return next((k.library for k in kinds), "transformers")


def finetune_card(facts: FinetuneFacts) -> CardInfo:
    """The card of a fine-tuned model: its base model, data, settings, run and results."""
    description = (
        f"{facts.task[:1].upper()}{facts.task[1:]} model fine-tuned from {started_from(facts.model)} with "
        f"`{facts.command}`."
    )
    results, undefined = [], []
    for (name, kind, split), metrics in facts.results.items():
        for metric, value in metrics.items():
            if value is None or (isinstance(value, float) and math.isnan(value)):
                undefined.append(f"{metric} on {name} ({split})")
                continue
            results.append(
                Result(pipeline_tag(facts.head), facts.task, name, kind, metric, value, split, facts.command)
            )
    limits = list(facts.limits)
    if undefined:
        limits.append("Undefined on the validation data (so not reported): " + ", ".join(undefined) + ".")
    sections = []
    if facts.labels:
        sections.append(("Labels", ", ".join(f"`{label}`" for label in facts.labels) + "\n"))
    library = library_of(facts.head)
    tags = [facts.command.split()[-1], *HEAD_TAGS.get(facts.head, [])]
    if facts.lora is not None:
        description = (
            f"A LoRA adapter (peft) for {facts.task} over {started_from(facts.model)}, trained with "
            f"`{facts.command}`: {fmt(facts.lora.share, 100, 2)}% of the parameters trained (see LoRA below)."
        )
        sections.append(("LoRA", lora_section(facts.lora)))
        library, tags = "peft", [*tags, "lora"]
    return CardInfo(
        head=facts.head,
        description=description,
        command=facts.command,
        library=library,
        base_model=hub_model_id(facts.model),
        data=facts.data,
        data_stats=facts.data_stats,
        settings=facts.settings,
        run=facts.run,
        results=results,
        license=facts.license,
        limits=limits,
        sections=sections,
        tags=tags,
    )


def lora_section(report: LoraReport) -> str:
    """The card's LoRA section: what was adapted and trained, and how to fold the adapter."""
    return (
        markdown_table(["", "value"], report.rows())
        + "\nThis directory holds the adapter (`adapter_config.json`, `adapter_model.safetensors`: peft's "
        "layout) and `adapter_base.json` (the head and labels the base is loaded with), not the weights: "
        "the snippet above loads the base it names and applies the adapter. `neobert merge --method lora "
        "--inputs DIR --output FOLDED` folds it into a plain model directory.\n"
    )


def fit_run(fitted: Any, examples: dict[str, int]) -> list[tuple[str, Any]]:
    """The run rows of a :class:`~neobert.finetuning.classification_task.FitResult`."""
    rows = [
        ("precision run", fitted.precision),
        ("steps", f"{fitted.steps:,}"),
        ("best evaluation (the saved model)", f"step {fitted.best.step:,}"),
        ("stopped early", fitted.stopped_early),
        ("wall time", wall_time(fitted.seconds)),
    ]
    return rows + [(f"{split} examples", f"{n:,}") for split, n in examples.items()]
