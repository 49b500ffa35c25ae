"""``neobert finetune classify``: fine-tune any encoder on the user's own table.

Classification (string or integer labels), regression, single texts or text pairs, from CSV, TSV, JSONL or
parquet. Writes ``OUTPUT/model`` (the best checkpoint, loadable with ``AutoModelForSequenceClassification``
and ``AutoTokenizer``), ``OUTPUT/metrics.json`` and ``OUTPUT/predictions.jsonl`` (the best model's
validation predictions).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..cards import CardInfo, DataSource, write_card
from ..common.io import atomic_file, write_json
from ..common.tables import fmt
from ..data.text_files import read_table, require_columns, text_column
from ..evaluation.metrics import MetricResult
from ..inference.encoders import check_vocab, max_positions, resolve_tokenizer
from ..training.lora import LoraReport, report_entry
from ..training.trainer import is_main_process, wait_for_everyone
from .card import FinetuneFacts, finetune_card, fit_run
from .classification_task import EvalSpec, fit
from .config import ClassifyConfig
from .data import DataError, EncodedDataset, LabelMap, class_labels, regression_targets
from .models import load_classifier

CLASSIFICATION_METRICS = ("accuracy", "macro_f1")
REGRESSION_METRICS = ("pearson", "spearman")


@dataclass
class ClassifyResult:
    metrics: dict[str, float]  # NaN where undefined; see notes
    notes: list[str]
    model_dir: Path
    metrics_file: Path
    predictions_file: Path
    best_step: int
    steps: int
    labels: list[str] | None  # class names by id; None for regression
    lora: LoraReport | None = None  # a LoRA run: what it adapted and trained (model_dir holds the adapter)
    metric_prefix: ClassVar[str] = ""  # how the metrics are named in the summary ("entity " for tokens)

    @property
    def summary(self) -> str:
        """The best scores (x100) and the files written, for a person."""
        scores = ", ".join(f"{self.metric_prefix}{name} {fmt(v, 100, 1)}" for name, v in self.metrics.items())
        saved = "the model" if self.lora is None else "the LoRA adapter"
        trained = "" if self.lora is None else f" ({fmt(self.lora.share, 100, 2)}% of the parameters trained)"
        return (
            f"best step {self.best_step} of {self.steps}: {scores}\nwrote {self.metrics_file}, "
            f"{self.predictions_file} and {saved} in {self.model_dir}{trained}"
        )


def selection_score(results: dict[str, MetricResult]) -> float:
    """Macro-F1 for classes (accuracy rewards collapsing onto the majority class); the mean of Pearson
    and Spearman for regression, as GLUE does for STS-B. NaN if any part is undefined."""
    (result,) = results.values()
    if "macro_f1" in result.values:
        return result.values["macro_f1"]
    parts = [result.values["pearson"], result.values["spearman"]]
    return math.nan if any(math.isnan(v) for v in parts) else statistics.fmean(parts)


def _read_split(config: ClassifyConfig, path: str, limit: int | None) -> tuple[list, list | None, list]:
    frame = read_table(path)
    require_columns(frame, [config.text_column, config.text_pair_column, config.label_column], path)
    if limit is not None:
        frame = frame.iloc[:limit]
    texts = text_column(frame, config.text_column, path)
    pairs = text_column(frame, config.text_pair_column, path) if config.text_pair_column else None
    if config.task_type == "regression":
        labels = regression_targets(frame, config.label_column, path)
    else:
        labels = class_labels(frame, config.label_column, path)
    return texts, pairs, labels


def _encode_labels(
    config: ClassifyConfig, train: list, validation: list
) -> tuple[list, list, LabelMap | None]:
    if config.task_type == "regression":
        return train, validation, None
    label_map = LabelMap.from_labels(train)
    if len(label_map.names) < 2:
        raise DataError(
            f"{config.train}: the training labels hold a single class ({label_map.names[0]!r}); "
            "classification needs at least two"
        )
    return label_map.encode(train, config.train), label_map.encode(validation, config.validation), label_map


def run_classify(config: ClassifyConfig | dict[str, Any]) -> ClassifyResult:
    """Fine-tune ``config.model`` on ``config.train``, select on ``config.validation``, write the outputs."""
    if isinstance(config, dict):
        config = ClassifyConfig.from_dict(config)
    # Read and check both files before paying for the model.
    train_texts, train_pairs, train_raw = _read_split(config, config.train, config.max_train_samples)
    val_texts, val_pairs, val_raw = _read_split(config, config.validation, config.max_eval_samples)
    train_labels, val_labels, label_map = _encode_labels(config, train_raw, val_raw)

    torch.manual_seed(config.seed)  # the new head's initialisation
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    num_labels = len(label_map.names) if label_map else 1
    model, missing = load_classifier(
        config.model,
        num_labels,
        label_map.id2label if label_map else None,
        config.preset_overrides,
        pooling=config.pooling,
        loading_info=True,
    )
    check_vocab(model, tokenizer)
    max_length = min(config.max_length, max_positions(model, tokenizer))
    train = EncodedDataset(
        tokenizer, train_texts, train_pairs, train_labels, max_length, config.show_progress
    )
    validation = EncodedDataset(tokenizer, val_texts, val_pairs, val_labels, max_length, config.show_progress)

    output = Path(config.output)
    fitted = _fit(config, model, tokenizer, (train, validation), label_map is None, missing)
    predictions_file, metrics_file = output / "predictions.jsonl", output / "metrics.json"
    if is_main_process():  # under torchrun every process trained the same model; one writes
        _write_predictions(
            output, val_texts, val_pairs, val_raw, fitted.best.predictions["validation"], label_map
        )
        _write_report(config, fitted, model, label_map, len(train), len(validation))
        write_card(output / "model", _card(config, fitted, label_map, len(train), len(validation)))
    wait_for_everyone()
    best = fitted.best.results["validation"]
    return ClassifyResult(
        best.values,
        best.notes,
        output / "model",
        metrics_file,
        predictions_file,
        fitted.best.step,
        fitted.steps,
        label_map.names if label_map else None,
        fitted.lora,
    )


def _fit(
    config: ClassifyConfig,
    model: Any,
    tokenizer: Any,
    data: tuple[EncodedDataset, EncodedDataset],
    regression: bool,
    missing: list[str],
) -> Any:
    """The fine-tuning run: the best step's model (or LoRA adapter) into OUTPUT/model, resumable state in
    OUTPUT, selected on the validation file by :func:`selection_score`."""
    train, validation = data
    output = Path(config.output)
    spec = EvalSpec(REGRESSION_METRICS if regression else CLASSIFICATION_METRICS, selection_score, regression)
    return fit(
        model,
        tokenizer,
        train,
        {"validation": validation},
        spec,
        config.train_settings(),
        output / "model",
        config,
        log_dir=output / "tensorboard",
        description=f"classify {Path(config.train).name}",
        state_dir=output,
        missing_keys=missing,
    )


def _card(config: ClassifyConfig, fitted, label_map, num_train: int, num_validation: int) -> CardInfo:
    """The card of OUTPUT/model: the numbers are metrics.json's (the best evaluation's)."""
    best = fitted.best.results["validation"]
    name = Path(config.validation).name
    task = f"text classification ({len(label_map.names)} classes)" if label_map else "text regression"
    if config.text_pair_column:
        task = task.replace("text ", "text-pair ")
    facts = FinetuneFacts(
        head="sequence-classification",
        command="neobert finetune classify",
        task=task,
        model=config.model,
        settings=config.to_dict(),
        data=[DataSource.from_spec(config.train), DataSource.from_spec(config.validation)],
        data_stats=[("training examples", num_train), ("validation examples", num_validation)],
        run=fit_run(fitted, {}),
        results={(name, name, "validation"): best.values},
        labels=label_map.names if label_map else None,
        license=config.license,
        lora=fitted.lora,
        limits=[
            f"Inputs are truncated at {config.max_length} tokens (or the model's limit).",
            "Selected on the validation file above: its scores are optimistic for unseen data.",
        ],
    )
    return finetune_card(facts)


def _write_report(config, fitted, model, label_map, num_train: int, num_validation: int) -> Path:
    best = fitted.best.results["validation"]
    report = {
        "task_type": config.task_type,
        "metrics": best.to_dict()["values"],  # null where undefined; "notes" says why
        "notes": best.notes,
        "selection_score": fitted.best.to_dict()["score"],
        "best_step": fitted.best.step,
        "steps": fitted.steps,
        "stopped_early": fitted.stopped_early,
        "num_train": num_train,
        "num_validation": num_validation,
        "labels": label_map.names if label_map else None,
        "model": config.model,
        "model_type": model.config.model_type,
        "seconds": round(fitted.seconds, 2),
        "config": config.to_dict(),
        "lora": report_entry(fitted.lora),
        "history": [e.to_dict() for e in fitted.history],
    }
    return write_json(Path(config.output) / "metrics.json", report, allow_nan=False, default=str)


def _write_predictions(output, texts, pairs, labels, predictions, label_map) -> Path:
    path = output / "predictions.jsonl"
    with atomic_file(path) as f:
        for i, text in enumerate(texts):
            row = {"text": text}
            if pairs is not None:
                row["text_pair"] = pairs[i]
            label = labels[i]
            row["label"] = label.item() if hasattr(label, "item") else label
            row["prediction"] = label_map.values[int(predictions[i])] if label_map else float(predictions[i])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
