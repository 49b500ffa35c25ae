"""``neobert finetune tokens``: fine-tune any encoder for token classification (NER) on CoNLL / JSONL files.

Labels sit on the first sub-word of each word (the others, and special tokens, are ignored by the loss);
evaluation is entity-level precision / recall / F1 (seqeval's definition) over every word of the
validation sentences, so words lost to truncation count as missed. Writes ``OUTPUT/model`` (the best
checkpoint, loadable with ``AutoModelForTokenClassification``), ``OUTPUT/metrics.json`` and
``OUTPUT/predictions.jsonl`` (the best model's validation tags).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..cards import DataSource, write_card
from ..common.io import write_json, write_text
from ..evaluation.metrics import MetricResult
from ..inference.encoders import check_vocab, max_positions, resolve_tokenizer
from ..model.execution import eval_mode
from ..model.losses import token_loss
from ..token_classification.entities import entity_scores, spans
from ..training.lora import report_entry
from ..training.trainer import LossTerms, is_main_process, wait_for_everyone
from .card import FinetuneFacts, finetune_card, fit_run
from .classification_task import ClassificationTask, EvalSpec, fit
from .classify import ClassifyResult
from .config import FinetuneConfigError, TokensConfig
from .models import load_classifier
from .token_data import (
    IGNORE,
    OUTSIDE,
    Sentence,
    TokenLabelDataset,
    collate_tokens,
    label_names,
    read_sentences,
)

METRICS = ("precision", "recall", "f1")


@dataclass
class TokensResult(ClassifyResult):
    """A file fine-tuning run's result, as ``run_classify``'s; ``labels`` are the tags by id."""

    metric_prefix: ClassVar[str] = "entity "


def load_token_classifier(
    source: str,
    labels: list[str],
    preset_overrides: dict[str, Any] | None = None,
    loading_info: bool = False,
):
    """A token classifier with one output per label: a NeoBERT preset (random weights) or any encoder
    by directory / hub id (a head of another size is replaced by a fresh one); ``loading_info``: with the
    weights its checkpoint lacked, as :func:`~neobert.finetuning.models.load_classifier`."""
    try:
        return load_classifier(
            source,
            len(labels),
            dict(enumerate(labels)),
            preset_overrides,
            head="token-classification",
            loading_info=loading_info,
        )
    except ValueError as err:
        if "preset overrides" in str(err):
            raise FinetuneConfigError(str(err)) from None
        raise


class TokenClassificationTask(ClassificationTask):
    """Fine-tuning's task (same data order, evaluations, resume and processes) with one label per word:
    the loss is summed over the labelled sub-words, and the trainer divides by their global count."""

    def collate(self, rows: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return collate_tokens(rows, self.pad)

    def count(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["labels"] != IGNORE).sum()

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossTerms:
        batch = {k: v.to(self.trainer.device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")  # (B, L)
        logits = model(**batch).logits  # (B, L, num_labels)
        loss_sum = token_loss(logits, labels, reduction="sum")  # the head's loss, summed
        return LossTerms(loss_sum, tokens=int(batch["attention_mask"].sum()))


@torch.no_grad()
def evaluate_tokens(
    model: torch.nn.Module, data: TokenLabelDataset, batch_size: int, pad_token_id: int
) -> tuple[MetricResult, np.ndarray, float]:
    """Entity-level metrics of ``model`` on ``data``, the predicted label ids per word (N, most words;
    -1 past a sentence's end), the mean loss per labelled word."""
    device = next(model.parameters()).device
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    predicted: list[list[str]] = []
    loss_sum, counted = 0.0, 0
    with eval_mode(model):
        for start in range(0, len(data), batch_size):
            rows = [data[i] for i in range(start, min(start + batch_size, len(data)))]
            batch = {k: v.to(device) for k, v in collate_tokens(rows, pad_token_id).items()}
            labels = batch.pop("labels")
            logits = model(**batch).logits  # (B, L, num_labels)
            labelled = labels != IGNORE  # (B, L): the first sub-word of each word
            loss_sum += float(token_loss(logits, labels, reduction="sum"))  # the training loss's function
            counted += int(labelled.sum())
            guesses = logits.float().argmax(dim=-1)  # (B, L)
            for row, sentence in enumerate(data.sentences[start : start + len(rows)]):
                tags = [id2label[int(i)] for i in guesses[row][labelled[row]].tolist()]
                predicted.append(tags + [OUTSIDE] * (len(sentence.words) - len(tags)))  # truncated words: O
    gold = [s.tags for s in data.sentences]
    label2id = {name: i for i, name in id2label.items()}
    return entity_metrics(gold, predicted), _tag_ids(predicted, label2id), loss_sum / max(counted, 1)


def _tag_ids(tags: list[list[str]], label2id: dict[str, int]) -> np.ndarray:
    """Tags per sentence as one int array (N, most words), -1 past each sentence's end (checkpoint state)."""
    ids = np.full((len(tags), max((len(t) for t in tags), default=0)), -1, dtype=np.int64)
    for row, sentence in enumerate(tags):
        ids[row, : len(sentence)] = [label2id[t] for t in sentence]
    return ids


def _tag_names(ids: np.ndarray, labels: list[str]) -> list[list[str]]:
    return [[labels[i] for i in row if i >= 0] for row in np.asarray(ids).tolist()]


def entity_metrics(gold: list[list[str]], predicted: list[list[str]]) -> MetricResult:
    """P / R / F1 as :class:`MetricResult`: NaN (with a note) where seqeval would report 0 for 0/0."""
    scores = entity_scores(gold, predicted)
    n_gold = sum(len(spans(tags)) for tags in gold)
    n_pred = sum(len(spans(tags)) for tags in predicted)
    values = {name: scores[name] for name in METRICS}
    notes = []
    if n_pred == 0:
        values["precision"] = math.nan
        notes.append("no entity predicted: precision is undefined (NaN)")
    if n_gold == 0:
        values["recall"] = math.nan
        notes.append("no entity in the gold tags: recall is undefined (NaN)")
    if n_pred == 0 or n_gold == 0:
        values["f1"] = math.nan if n_pred == n_gold == 0 else 0.0
    return MetricResult(values, notes)


def _score(results: dict[str, MetricResult]) -> float:
    (result,) = results.values()
    return result.values["f1"]


def run_tokens(config: TokensConfig | dict[str, Any]) -> TokensResult:
    """Fine-tune ``config.model`` on ``config.train``, select on ``config.validation``, write the outputs."""
    if isinstance(config, dict):
        config = TokensConfig.from_dict(config)
    train_sentences = read_sentences(config.train)[: config.max_train_samples]
    val_sentences = read_sentences(config.validation)[: config.max_eval_samples]
    labels = label_names(train_sentences)
    torch.manual_seed(config.seed)  # the new head's initialisation
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    model, missing = load_token_classifier(config.model, labels, config.preset_overrides, loading_info=True)
    check_vocab(model, tokenizer)
    max_length = min(config.max_length, max_positions(model) or config.max_length)
    label2id = {name: i for i, name in enumerate(labels)}
    train = TokenLabelDataset(tokenizer, train_sentences, label2id, max_length, config.train)
    validation = TokenLabelDataset(tokenizer, val_sentences, label2id, max_length, config.validation)

    output = Path(config.output)
    spec = EvalSpec(METRICS, _score, evaluate_split=evaluate_tokens)
    fitted = fit(
        model,
        tokenizer,
        train,
        {"validation": validation},
        spec,
        config.train_settings(),
        output / "model",
        config,
        log_dir=output / "tensorboard",
        description=f"tokens {Path(config.train).name}",
        state_dir=output,
        task_class=TokenClassificationTask,
        missing_keys=missing,
    )
    predicted = _tag_names(fitted.best.predictions["validation"], labels)
    best = fitted.best.results["validation"]
    predictions_file, metrics_file = output / "predictions.jsonl", output / "metrics.json"
    if is_main_process():  # under torchrun every process trained the same model; one writes
        _write_predictions(predictions_file, val_sentences, predicted)
        report = _report(config, fitted, best, val_sentences, predicted, (train, validation), labels, model)
        write_json(metrics_file, report)
        facts = _card_facts(
            config, fitted, labels, (len(train), len(validation)), max_length, report["metrics"]
        )
        write_card(output / "model", finetune_card(facts))
    wait_for_everyone()
    return TokensResult(
        best.values,
        best.notes,
        output / "model",
        metrics_file,
        predictions_file,
        fitted.best.step,
        fitted.steps,
        labels,
        fitted.lora,
    )


def _report(config, fitted, best, val_sentences, predicted, datasets, labels, model) -> dict[str, Any]:
    """metrics.json: the best validation scores, per entity type, and how the run went."""
    train, validation = datasets
    return {
        "task_type": "token-classification",
        "metrics": best.to_dict()["values"],
        "notes": best.notes,
        "per_type": entity_scores([s.tags for s in val_sentences], predicted)["per_type"],
        "best_step": fitted.best.step,
        "steps": fitted.steps,
        "stopped_early": fitted.stopped_early,
        "num_train": len(train),
        "num_validation": len(validation),
        "truncated_sentences": {"train": train.truncated, "validation": validation.truncated},
        "labels": labels,
        "model": config.model,
        "model_type": model.config.model_type,
        "seconds": round(fitted.seconds, 2),
        "config": config.to_dict(),
        "lora": report_entry(fitted.lora),
        "history": [e.to_dict() for e in fitted.history],
    }


def _card_facts(
    config: TokensConfig,
    fitted: Any,
    labels: list[str],
    sizes: tuple[int, int],
    max_length: int,
    metrics: dict[str, float],
) -> FinetuneFacts:
    """What the model card states: the run, both files (``sizes``: their sentences), the validation scores."""
    name = Path(config.validation).name
    return FinetuneFacts(
        head="token-classification",
        command="neobert finetune tokens",
        task=f"token classification ({len(labels)} tags)",
        model=config.model,
        settings=config.to_dict(),
        data=[DataSource.from_spec(config.train), DataSource.from_spec(config.validation)],
        data_stats=[("training sentences", sizes[0]), ("validation sentences", sizes[1])],
        run=fit_run(fitted, {}),
        results={(name, name, "validation"): metrics},
        labels=labels,
        license=config.license,
        lora=fitted.lora,
        limits=[
            "Entity-level precision, recall and F1 (seqeval's definition) on the validation file, "
            "which also selected the saved step.",
            f"Sentences longer than {max_length} tokens are truncated (their tail is not tagged).",
        ],
    )


def _write_predictions(path: Path, sentences: list[Sentence], predicted: list[list[str]]) -> Path:
    lines = [
        json.dumps({"tokens": s.words, "tags": s.tags, "predicted": p}, ensure_ascii=False)
        for s, p in zip(sentences, predicted)
    ]
    return write_text(path, "\n".join(lines) + "\n")
