"""A compact fine-tuning loop: AdamW, linear warmup and decay, evaluation every n steps, early stopping,
and the best checkpoint written atomically whenever the selection score improves.

The loop knows nothing of GLUE or of the model's internals: it calls ``model(**batch)`` (any transformers
sequence classifier returns its loss given ``labels``) and ranks evaluations by a score function.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..evaluation.metrics import MetricResult, compute_metrics
from ..training.optim import build_optimizer
from ..training.schedule import make_scheduler
from .config import TrainSettings
from .data import EncodedDataset, collate
from .models import save_model_atomic

LOG_EVERY = 10  # optimizer steps between training-loss logs (the only place a GPU sync happens)


@dataclass
class EvalSpec:
    """How to judge a model: metric names, and the selection score computed from each split's metrics."""

    metrics: tuple[str, ...]
    score: Callable[[dict[str, MetricResult]], float]
    regression: bool = False
    # Tasks whose predictions are not one label per example (token classification) evaluate a split
    # themselves: (model, data, batch_size, pad_token_id, precision) -> (metrics, predictions, mean loss).
    evaluate_split: Callable[..., tuple[MetricResult, Any, float]] | None = None


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


def is_better(new: float, old: float | None) -> bool:
    """Higher is better; NaN (an undefined score) loses to any number."""
    if old is None:
        return True
    if math.isnan(new):
        return False
    return math.isnan(old) or new > old


def pick_device(device: str | None) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    # bf16 autocast on CUDA by default; the weights and optimizer state stay fp32.
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _loader(
    data: EncodedDataset, batch_size: int, pad: int, shuffle: bool, seed: int = 0, collate_fn: Callable = collate
) -> DataLoader:
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        data,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=partial(collate_fn, pad_token_id=pad),
    )


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    data: EncodedDataset,
    regression: bool,
    batch_size: int = 64,
    pad_token_id: int = 0,
    precision: str = "auto",
) -> tuple[np.ndarray, float]:
    """Predictions (class ids, or real values for regression) in data order, and the mean loss."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    predictions, total_loss = [], torch.zeros((), device=device)
    for batch in _loader(data, batch_size, pad_token_id, shuffle=False):
        batch = {k: v.to(device) for k, v in batch.items()}
        with _autocast(device, precision):
            out = model(**batch)
        logits = out.logits.float()  # (B, num_labels)
        predictions.append(logits[:, 0] if regression else logits.argmax(dim=-1))
        total_loss += out.loss.detach().float() * len(batch["labels"])  # summed on device: no sync per batch
    model.train(was_training)
    return torch.cat(predictions).cpu().numpy(), float(total_loss) / len(data)


def evaluate(
    model: torch.nn.Module,
    splits: dict[str, EncodedDataset],
    spec: EvalSpec,
    settings: TrainSettings,
    pad_token_id: int,
    precision: str,
    step: int = 0,
    epoch: float = 0.0,
) -> Evaluation:
    results, predictions, losses = {}, {}, []
    for name, data in splits.items():
        if spec.evaluate_split is not None:
            results[name], preds, loss = spec.evaluate_split(
                model, data, settings.eval_batch_size, pad_token_id, precision
            )
        else:
            preds, loss = predict(model, data, spec.regression, settings.eval_batch_size, pad_token_id, precision)
            results[name] = compute_metrics(spec.metrics, preds, np.asarray(data.labels))
        predictions[name] = preds
        losses.append(loss)
    score = spec.score(results)
    return Evaluation(step, epoch, score, results, float(np.mean(losses)), predictions)


class BestKeeper:
    """Keeps the best evaluation so far (its model written atomically to ``checkpoint``) and counts the
    evaluations since it, for early stopping."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, checkpoint: Path, patience: int | None):
        self.model, self.tokenizer, self.checkpoint, self.patience = model, tokenizer, checkpoint, patience
        self.best: Evaluation | None = None
        self.stale = 0

    def update(self, current: Evaluation) -> bool:
        """Record ``current``; True when training should stop."""
        if is_better(current.score, self.best.score if self.best else None):
            self.best, self.stale = current, 0
            extra = {"eval_results.json": json.dumps(current.to_dict(), indent=2) + "\n"}
            save_model_atomic(self.model, self.tokenizer, self.checkpoint, extra)
            return False
        self.stale += 1
        return self.patience is not None and self.stale >= self.patience


def _optimizer(model: torch.nn.Module, settings: TrainSettings, total: int) -> tuple[Any, Any]:
    """AdamW (no decay on biases, norms, embeddings); linear warmup, then linear decay to 0."""
    optimizer = build_optimizer(
        model, lr=settings.learning_rate, betas=(0.9, 0.999), weight_decay=settings.weight_decay
    )
    scheduler = make_scheduler(
        optimizer,
        warmup_steps=int(settings.warmup_ratio * total),
        total_steps=total,
        kind="linear",
        final_ratio=0.0,
        decay_fraction=1.0,
    )
    return optimizer, scheduler


def fit(
    model: torch.nn.Module,
    tokenizer: Any,
    train: EncodedDataset,
    splits: dict[str, EncodedDataset],
    spec: EvalSpec,
    settings: TrainSettings,
    checkpoint: str | Path,
    log_dir: str | Path | None = None,
    device: str | None = None,
    precision: str = "auto",
    show_progress: bool = True,
    description: str = "fine-tuning",
    collate_fn: Callable = collate,
) -> FitResult:
    """Train ``model`` on ``train``; the best evaluation's model and tokenizer end up in ``checkpoint``."""
    start = time.perf_counter()
    torch.manual_seed(settings.seed)  # dropout masks
    dev = pick_device(device)
    model.to(dev).train()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    loader = _loader(train, settings.batch_size, pad, shuffle=True, seed=settings.seed, collate_fn=collate_fn)
    total = settings.epochs * len(loader)
    eval_every = settings.eval_every or len(loader)
    optimizer, scheduler = _optimizer(model, settings, total)
    writer = _summary_writer(log_dir)
    keeper = BestKeeper(model, tokenizer, Path(checkpoint), settings.patience)
    history: list[Evaluation] = []
    step, stopped = 0, False
    progress = tqdm(total=total, desc=description, unit="step", disable=not show_progress, leave=False)
    with progress:
        while step < total and not stopped:
            for batch in loader:
                loss = _train_step(model, optimizer, scheduler, batch, dev, settings.grad_clip, precision)
                step += 1
                progress.update()
                if step % LOG_EVERY == 0:
                    _log_training(writer, progress, float(loss), scheduler.get_last_lr()[0], step)
                if step % eval_every and step != total:
                    continue
                current = evaluate(model, splits, spec, settings, pad, precision, step, step / len(loader))
                history.append(current)
                _log_evaluation(writer, current)
                stopped = keeper.update(current)
                if stopped or step == total:
                    break
    if writer:
        writer.close()
    return FitResult(keeper.best, history, step, stopped, Path(checkpoint), time.perf_counter() - start)


def _train_step(model, optimizer, scheduler, batch, device, grad_clip, precision) -> torch.Tensor:
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    with _autocast(device, precision):
        loss = model(**batch).loss
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def _summary_writer(log_dir: str | Path | None) -> Any:
    if log_dir is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(log_dir))


def _log_training(writer: Any, progress: Any, loss: float, lr: float, step: int) -> None:
    progress.set_postfix(loss=f"{loss:.4f}")
    if writer is not None:
        writer.add_scalar("train/loss", loss, step)
        writer.add_scalar("train/lr", lr, step)


def _log_evaluation(writer: Any, evaluation: Evaluation) -> None:
    if writer is None:
        return
    step = evaluation.step
    writer.add_scalar("eval/loss", evaluation.loss, step)
    if not math.isnan(evaluation.score):
        writer.add_scalar("eval/score", evaluation.score, step)
    for split, result in evaluation.results.items():
        for name, value in result.values.items():
            if not math.isnan(value):
                writer.add_scalar(f"eval/{split}/{name}", value, step)
