"""Fine-tuning as a task of the training core (:mod:`neobert.training.trainer`): AdamW, linear warmup and
decay, evaluation every n steps, early stopping, and the best checkpoint written atomically whenever the
selection score improves.

The core owns device, precision (bf16 autocast of the model's forward, evaluations included),
distribution (DDP through ``torchrun``), clipping, the NaN guard and
resumable checkpoints; this module owns the data order, the loss and the evaluations. The task knows
nothing of GLUE or of the model's internals: it calls ``model(input_ids, attention_mask, ...)`` on any
transformers sequence classifier and ranks evaluations by a score function.

Data order is a pure function of (seed, step): step ``s`` takes the ``s``-th batch of epoch ``s // steps
per epoch``'s permutation, each process a contiguous slice of it. So a resumed run (``state_dir`` +
``resume``) sees the same batches, and N processes the same global batch as one.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..evaluation.metrics import MetricResult, compute_metrics
from ..inference.adapters import save_model
from ..model.execution import eval_mode
from ..model.losses import sequence_loss
from ..training.lora import LoraReport, adapt, fingerprint
from ..training.optim import build_optimizer
from ..training.schedule import make_scheduler
from ..training.trainer import LossTerms, Trainer, TrainerSettings, model_widths
from .config import ModelSource, TrainSettings
from .data import EncodedDataset, collate

LOG_EVERY = 10  # optimizer steps between training-loss logs


@dataclass
class EvalSpec:
    """How to judge a model: metric names, and the selection score computed from each split's metrics."""

    metrics: tuple[str, ...]
    score: Callable[[dict[str, MetricResult]], float]
    regression: bool = False
    # Tasks whose predictions are not one label per example (token classification) evaluate a split
    # themselves: (model, data, batch_size, pad_token_id) -> (metrics, predictions, mean loss).
    evaluate_split: Callable[..., tuple[MetricResult, np.ndarray, float]] | None = None


@dataclass
class Evaluation:
    step: int
    epoch: float
    score: float
    results: dict[str, MetricResult]  # per validation split
    loss: float
    predictions: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": round(self.epoch, 4),
            "score": None if math.isnan(self.score) else self.score,
            "loss": None if math.isnan(self.loss) else self.loss,
            "splits": {name: result.to_dict() for name, result in self.results.items()},
        }


@dataclass
class FitResult:
    best: Evaluation
    history: list[Evaluation]
    steps: int
    stopped_early: bool
    checkpoint: Path
    seconds: float
    precision: str = "fp32"  # the precision actually run (bf16 autocast or fp32)
    lora: LoraReport | None = None  # what LoRA adapted and trained (None: every weight trained)


def is_better(new: float, old: float | None) -> bool:
    """Higher is better; NaN (an undefined score) loses to any number."""
    if old is None:
        return True
    if math.isnan(new):
        return False
    return math.isnan(old) or new > old


def _loader(data: EncodedDataset, batch_size: int, pad: int) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, collate_fn=partial(collate, pad_token_id=pad))


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    data: EncodedDataset,
    regression: bool,
    batch_size: int = 64,
    pad_token_id: int = 0,
) -> tuple[np.ndarray, float]:
    """Predictions (class ids, or real values for regression) in data order, and the mean loss, in the
    model's own precision (during fine-tuning, the trainer's: see :mod:`neobert.training.trainer`)."""
    device = next(model.parameters()).device
    predictions, total_loss = [], torch.zeros((), device=device)
    with eval_mode(model):
        for batch in _loader(data, batch_size, pad_token_id):
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            logits = model(**batch).logits.float()  # (B, num_labels)
            predictions.append(logits[:, 0] if regression else logits.argmax(dim=-1))
            # the training loss's function, summed on device: no sync per batch
            total_loss += sequence_loss(logits, labels, problem(regression), reduction="sum").detach()
    return torch.cat(predictions).cpu().numpy(), float(total_loss) / len(data)


def problem(regression: bool) -> str:
    """What fine-tuning trains and validates: regression or single-label classification (multi-label is
    not offered: finetuning/models.py sets the head's problem_type to one of these two)."""
    return "regression" if regression else "single_label_classification"


def evaluate(
    model: torch.nn.Module,
    splits: dict[str, EncodedDataset],
    spec: EvalSpec,
    settings: TrainSettings,
    pad_token_id: int,
    step: int = 0,
    epoch: float = 0.0,
) -> Evaluation:
    results, predictions, losses = {}, {}, []
    for name, data in splits.items():
        if spec.evaluate_split is not None:
            results[name], preds, loss = spec.evaluate_split(
                model, data, settings.eval_batch_size, pad_token_id
            )
        else:
            preds, loss = predict(model, data, spec.regression, settings.eval_batch_size, pad_token_id)
            results[name] = compute_metrics(spec.metrics, preds, np.asarray(data.labels))
        predictions[name] = preds
        losses.append(loss)
    score = spec.score(results)
    return Evaluation(step, epoch, score, results, float(np.mean(losses)), predictions)


def _evaluation_state(evaluation: Evaluation) -> dict[str, Any]:
    """An evaluation as plain Python (checkpoint state), predictions included."""
    return {
        "step": evaluation.step,
        "epoch": evaluation.epoch,
        "score": evaluation.score,
        "loss": evaluation.loss,
        "results": {k: {"values": r.values, "notes": list(r.notes)} for k, r in evaluation.results.items()},
        "predictions": {k: v.tolist() for k, v in evaluation.predictions.items()},
    }


def _evaluation_from_state(state: dict[str, Any]) -> Evaluation:
    results = {k: MetricResult(dict(r["values"]), list(r["notes"])) for k, r in state["results"].items()}
    predictions = {k: np.asarray(v) for k, v in state["predictions"].items()}
    return Evaluation(state["step"], state["epoch"], state["score"], results, state["loss"], predictions)


class BestKeeper:
    """Keeps the best evaluation so far (its model written atomically to ``checkpoint`` by the main process)
    and counts the evaluations since it, for early stopping. Its state is part of a resumable checkpoint."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        checkpoint: Path,
        patience: int | None,
        write: bool = True,
    ):
        self.model, self.tokenizer, self.checkpoint, self.patience = model, tokenizer, checkpoint, patience
        self.write = write
        self.best: Evaluation | None = None
        self.history: list[Evaluation] = []
        self.stale = 0

    def update(self, current: Evaluation) -> bool:
        """Record ``current``; True when training should stop."""
        self.history.append(current)
        if is_better(current.score, self.best.score if self.best else None):
            self.best, self.stale = current, 0
            if self.write:
                extra = {"eval_results.json": json.dumps(current.to_dict(), indent=2) + "\n"}
                save_model(self.model, self.tokenizer, self.checkpoint, extra_files=extra)
            return False
        self.stale += 1
        return self.patience is not None and self.stale >= self.patience

    def state_dict(self) -> dict[str, Any]:
        best = self.history.index(self.best) if self.best is not None else None
        history = [_evaluation_state(e) for e in self.history]
        for i, state in enumerate(history):
            if i != best:
                state["predictions"] = {}  # only the best's predictions are reported
        return {"history": history, "best": best, "stale": self.stale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [_evaluation_from_state(e) for e in state["history"]]
        self.best = self.history[state["best"]] if state["best"] is not None else None
        self.stale = int(state["stale"])


def _optimizer(model: torch.nn.Module, settings: TrainSettings, fused: bool) -> torch.optim.Optimizer:
    """AdamW (no decay on biases, norms, embeddings)."""
    return build_optimizer(
        model, lr=settings.lr, betas=(0.9, 0.999), weight_decay=settings.weight_decay, fused=fused
    )


def _scheduler(optimizer: torch.optim.Optimizer, settings: TrainSettings, total: int) -> Any:
    """Linear warmup, then linear decay to 0."""
    return make_scheduler(
        optimizer,
        warmup_steps=int(settings.warmup_ratio * total),
        total_steps=total,
        kind="linear",
        final_ratio=0.0,
        decay_fraction=1.0,
    )


def steps_per_epoch(examples: int, batch_size: int, world: int) -> int:
    """Optimizer steps of one pass; a last partial batch too small to give every process a row is dropped."""
    full, rest = divmod(examples, batch_size)
    return full + (1 if rest >= world or (rest and world == 1) else 0)


def step_indices(step: int, examples: int, batch_size: int, world: int, seed: int) -> np.ndarray:
    """Example indices of optimizer step ``step`` (all processes): a pure function of (seed, step)."""
    per_epoch = steps_per_epoch(examples, batch_size, world)
    epoch, position = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(examples)
    return order[position * batch_size : (position + 1) * batch_size]


class ClassificationTask:
    """Sequence classification or regression, summed over the examples of a batch, for the training core.
    Another task over the same data order (token classification) overrides ``collate``, ``count`` and ``loss``
    and is handed to :func:`fit` as ``task_class``."""

    def __init__(
        self,
        trainer: Trainer,
        train: EncodedDataset,
        splits,
        spec: EvalSpec,
        settings,
        pad: int,
        keeper: BestKeeper,
    ):
        self.trainer, self.train, self.splits, self.spec = trainer, train, splits, spec
        self.settings, self.pad, self.keeper = settings, pad, keeper
        self.per_epoch = steps_per_epoch(len(train), settings.batch_size, trainer.world)
        self.total = settings.epochs * self.per_epoch
        self.eval_every = settings.eval_every or self.per_epoch

    def batches(self, step: int) -> list[dict[str, torch.Tensor]]:
        s = self.settings
        indices = step_indices(step, len(self.train), s.batch_size, self.trainer.world, s.seed)
        mine = np.array_split(indices, self.trainer.world)[self.trainer.rank]
        return [self.collate([self.train[int(i)] for i in mine])]

    def collate(self, rows: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return collate(rows, self.pad)

    def count(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.tensor(len(batch["labels"]))

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossTerms:
        batch = {k: v.to(self.trainer.device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        logits = model(**batch).logits  # (B, num_labels)
        loss_sum = sequence_loss(logits, labels, problem(self.spec.regression), reduction="sum")
        return LossTerms(loss_sum, tokens=int(batch["attention_mask"].sum()))

    def after_step(self, step: int, final: bool) -> tuple[dict[str, float], bool]:
        if step % self.eval_every and not final:
            return {}, False
        model = self.trainer.unwrapped()
        current = evaluate(
            model, self.splits, self.spec, self.settings, self.pad, step, step / self.per_epoch
        )
        stop = self.keeper.update(current)
        return _evaluation_metrics(current), stop

    def state_objects(self) -> list[Any]:
        return [self.keeper]


def _evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    metrics = {"eval/loss": evaluation.loss, "eval/score": evaluation.score}
    for split, result in evaluation.results.items():
        metrics.update({f"eval/{split}/{name}": value for name, value in result.values.items()})
    return {k: v for k, v in metrics.items() if not math.isnan(v)}


def fit(
    model: torch.nn.Module,
    tokenizer: Any,
    train: EncodedDataset,
    splits: dict[str, EncodedDataset],
    spec: EvalSpec,
    settings: TrainSettings,
    checkpoint: str | Path,
    run: ModelSource,
    *,
    log_dir: str | Path | None = None,
    description: str = "fine-tuning",
    state_dir: str | Path | None = None,
    on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    task_class: type[ClassificationTask] = ClassificationTask,
    base: str | None = None,
    missing_keys: Collection[str] = (),
) -> FitResult:
    """Train ``model`` on ``train``; the best evaluation's model and tokenizer end up in ``checkpoint``.

    ``run`` is the command's config: its device, precision, progress bars, and whether TensorBoard logs go
    to ``log_dir``. With ``state_dir``, a resumable checkpoint is written at every evaluation
    (``run.resume`` continues from the last one) and removed once the run has finished. With
    ``settings.lora`` the model trains a LoRA adapter over ``base`` (the source the model was loaded from,
    ``run.model`` by default; ``missing_keys``: what its checkpoint lacked, trained in full) and
    ``checkpoint`` holds the adapter (:mod:`neobert.training.lora`).
    """
    start = time.perf_counter()
    model, report = _adapted(model, settings, base or run.model, missing_keys)
    torch.manual_seed(settings.seed)  # dropout masks
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    trainer = _trainer(model, state_dir, log_dir if run.tensorboard else None, run, settings, description)
    keeper = BestKeeper(model, tokenizer, Path(checkpoint), settings.patience, write=trainer.is_main)
    task = task_class(trainer, train, splits, spec, settings, pad, keeper)
    trainer.settings.max_steps = task.total
    trainer.settings.save_every = task.eval_every
    trainer.prepare(
        model,
        lambda m, fused: _optimizer(m, settings, fused),
        lambda optimizer: _scheduler(optimizer, settings, task.total),
    )
    recorded = {
        "settings": fingerprint(settings.to_dict()),
        "train_examples": len(train),
        "world": trainer.world,
    }
    trainer.run(task, resume=run.resume, fingerprint=recorded, on_step_end=on_step_end)
    trainer.accelerator.wait_for_everyone()
    if state_dir is not None and trainer.is_main:
        _remove_resume_state(Path(state_dir))
    model.eval()
    run = (keeper.best, keeper.history, trainer.state.step, trainer.state.stopped, Path(checkpoint))
    return FitResult(*run, time.perf_counter() - start, trainer.precision, report)


def _adapted(
    model: torch.nn.Module, settings: TrainSettings, base: str | None, missing_keys: Collection[str]
) -> tuple[torch.nn.Module, LoraReport | None]:
    """The model a run trains: ``model``, or with ``settings.lora`` a LoRA adapter over it (and what was done)."""
    if not settings.lora:
        return model, None
    if base is None:
        raise ValueError("a LoRA run needs the base model it adapts (fit's base)")
    return adapt(model, settings, base, missing_keys)


def _trainer(
    model: torch.nn.Module,
    state_dir: str | Path | None,
    log_dir: str | Path | None,
    run: ModelSource,
    settings: TrainSettings,
    description: str,
) -> Trainer:
    """The trainer of one fine-tuning run (its step count is set once the task knows it)."""
    return Trainer(
        TrainerSettings(
            max_steps=1,  # set below, once the number of processes is known
            output=state_dir,
            log_dir=log_dir,
            tensorboard_dir=log_dir,
            precision=run.precision,
            probe_shape=model_widths(model),  # precision "auto" is measured at the model's widths
            device=run.device,
            clip_grad_norm=settings.clip_grad_norm,
            log_every=LOG_EVERY,
            keep_last=1,
            progress_bar=run.show_progress,
            description=description,
        )
    )


def _remove_resume_state(state_dir: Path) -> None:
    """A finished run's resume state has served its purpose: its checkpoints go, and the directory too if
    nothing else (a report, a model) was written there."""
    shutil.rmtree(state_dir / "checkpoints", ignore_errors=True)
    if not any(state_dir.iterdir()):
        state_dir.rmdir()
