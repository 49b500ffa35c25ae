"""The pretraining loop: MLM on packed (or padded) rows, on one CPU or many GPUs through accelerate.

``pretrain(config)`` is the entry point used by the CLI and the tests. Its pieces are the pure functions of
this package (masking, schedule, optimizer groups, batching, loss normalisation); the loop itself only
orders them:

1. each step takes ``tokens_per_step / seq_len`` rows from a deterministic :class:`RowStream`; process ``r``
   takes every ``world``-th micro-batch of ``micro_batch_size`` rows;
2. each row is masked with a generator keyed by (seed, step, row), so the data of a step does not depend on
   the number of processes or the micro-batch size, and a resumed run sees exactly the same batches;
3. the loss of a step is the sum of masked-token cross-entropies divided by the step's *global* count of
   masked tokens, so gradient accumulation and data parallelism compute the same gradient as one big batch;
4. non-finite loss or gradient norm stops the run before the optimizer step: the last checkpoint stays the
   last good one.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..encoders import save_pretrained
from .batching import collate_packed, micro_batches_for
from .checkpointing import latest_checkpoint, load_checkpoint, save_checkpoint
from .config import PretrainConfig
from .data_setup import TrainingData, open_training_data
from .loss import global_masked_count, masked_lm_loss_sum, normalize_loss
from .masking import generator_for, mask_tokens
from .monitor import RunLogger, plot_loss_curve
from .optim import build_optimizer
from .schedule import make_scheduler
from .stream import RowStream


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


@dataclass
class PretrainResult:
    output: Path
    final_model: Path | None
    steps: int
    train_loss: float | None
    val_loss: float | None
    val_accuracy: float | None
    unigram_entropy: float | None
    tokens_seen: int
    seconds: float
    loss_curve: Path | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Progress:
    """What a checkpoint must restore besides model/optimizer/scheduler/RNG: registered with accelerate."""

    step: int = 0
    tokens: int = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "tokens": self.tokens}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.tokens = int(state["step"]), int(state["tokens"])


def pretrain(
    config: PretrainConfig,
    resume: bool = False,
    on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    progress_bar: bool = True,
) -> PretrainResult:
    """Train an MLM encoder from ``config``; returns the final metrics and where the model was exported."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    started = time.perf_counter()
    # cpu=True when there is no GPU: accelerate then runs several CPU processes (torchrun) over gloo
    accelerator = Accelerator(
        mixed_precision="bf16" if config.precision == "bf16" else "no", cpu=not torch.cuda.is_available()
    )
    set_seed(config.seed)
    output = Path(config.output)
    data = open_training_data(config, accelerator)
    model = data.build_model(config)
    optimizer = build_optimizer(
        model,
        name=config.optim.name,
        lr=config.optim.lr,
        betas=tuple(config.optim.betas),
        eps=config.optim.eps,
        weight_decay=config.optim.weight_decay,
        decay_norms_biases_embeddings=config.optim.decay_norms_biases_embeddings,
    )
    warmup = config.schedule.warmup_steps
    if config.schedule.kind != "constant" and warmup >= config.schedule.decay_fraction * config.max_steps:
        warmup = max(1, config.max_steps // 10)
        accelerator.print(
            f"warning: schedule.warmup_steps {config.schedule.warmup_steps} does not fit in "
            f"{config.max_steps} steps; warming up over {warmup} steps instead"
        )
    scheduler = make_scheduler(
        optimizer,
        warmup_steps=warmup,
        total_steps=config.max_steps,
        kind=config.schedule.kind,
        final_ratio=config.schedule.final_ratio,
        decay_fraction=config.schedule.decay_fraction,
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    if config.compile:
        model = torch.compile(model)
    stream = RowStream(
        data.train,
        data.train.lengths,
        config.data.seq_len,
        config.seed,
        config.data.packing,
        config.data.mixture,
    )
    progress = _Progress()
    accelerator.register_for_checkpointing(scheduler, stream, progress)
    if resume:
        _resume(accelerator, output, config)
    elif latest_checkpoint(output / "checkpoints") is not None:
        raise FileExistsError(
            f"{output} already holds checkpoints of a run: pass --resume to continue it, or choose another --output"
        )

    world = accelerator.num_processes
    accumulation = micro_batches_for(
        config.tokens_per_step, config.data.seq_len, config.micro_batch_size, world
    )
    if accelerator.distributed_type.value == "DEEPSPEED" and accumulation > 1:
        # DeepSpeed's engine steps the optimizer inside every backward; our exact global-count loss needs
        # all micro-batches of a step in one backward per process.
        raise ValueError(
            f"with DeepSpeed, micro_batch_size x processes must hold the whole step "
            f"({accumulation} accumulation micro-batches requested)"
        )
    rows_per_step = config.tokens_per_step // config.data.seq_len
    logger = (
        RunLogger(output, tuple(config.report_to), config.to_dict()) if accelerator.is_main_process else None
    )
    bar = tqdm(
        total=config.max_steps,
        initial=progress.step,
        desc="pretrain",
        unit="step",
        disable=not (progress_bar and accelerator.is_main_process),
    )
    last: dict[str, float] = {}
    window = {"loss": 0.0, "correct": 0.0, "count": 0.0, "tokens": 0.0, "time": time.perf_counter()}
    try:
        while progress.step < config.max_steps:
            step = progress.step
            rows = stream.take(rows_per_step)
            mine = _my_micro_batches(rows, step, config, data, accelerator.process_index, world)
            stats = _train_step(model, optimizer, accelerator, mine, config, accumulation)
            scheduler.step()
            progress.step += 1
            progress.tokens += stats["tokens"]
            for key in ("loss", "correct", "count", "tokens"):
                window[key] += stats[key]
            bar.update(1)
            stop = _time_is_up(started, config, accelerator)
            final = stop or progress.step == config.max_steps
            if progress.step % config.log_every == 0 or final:
                last.update(_log_window(progress.step, window, scheduler, stats, logger, bar))
            if progress.step % config.eval_every == 0 or final:
                evaluation = evaluate(model, accelerator, data, config)
                last.update(evaluation)
                if logger and evaluation:
                    logger.log(progress.step, evaluation)
            if progress.step % config.save_every == 0 or final:
                save_checkpoint(
                    accelerator,
                    output / "checkpoints",
                    progress.step,
                    {"step": progress.step, "config": config.to_dict()},
                    config.keep_last,
                )
            if on_step_end is not None:
                on_step_end(progress.step, last)
            if stop:
                break
    finally:
        bar.close()
        if logger:
            logger.close()
    if "val/loss" not in last:  # nothing left to train (a finished run resumed): evaluate for the result
        last.update(evaluate(model, accelerator, data, config))
    return _finish(accelerator, model, data, config, progress, last, started)


def _resume(accelerator, output: Path, config: PretrainConfig) -> None:
    path = latest_checkpoint(output / "checkpoints")
    if path is None:
        accelerator.print(f"no checkpoint under {output / 'checkpoints'}: starting from scratch")
        return
    state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    saved, now = state.get("config", {}), json.loads(json.dumps(config.to_dict()))  # tuples -> lists
    for key in (
        "preset",
        "model",
        "data",
        "optim",
        "schedule",
        "tokens_per_step",
        "micro_batch_size",
        "seed",
    ):
        if saved.get(key) != now.get(key):
            raise ValueError(
                f"cannot resume from {path}: config {key!r} changed ({saved.get(key)!r} -> {now.get(key)!r})"
            )
    load_checkpoint(accelerator, path)
    if accelerator.is_main_process:  # forget what was logged after the checkpoint: those steps run again
        metrics = output / "metrics.jsonl"
        if metrics.is_file():
            kept = [
                line
                for line in metrics.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["step"] <= state["step"]
            ]
            metrics.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    accelerator.print(f"resumed from {path} at step {state['step']}")


def _my_micro_batches(rows, step: int, config: PretrainConfig, data: TrainingData, rank: int, world: int):
    """This process's micro-batches of the step: masked, collated tensors."""
    size = config.micro_batch_size
    chunks = [(c, rows[c * size : (c + 1) * size]) for c in range(len(rows) // size)]
    batches = []
    for c, chunk in chunks[rank::world]:
        batch = collate_packed(chunk, data.pad_id, config.data.seq_len if config.data.packing else None)
        masked, labels = [], []
        for i, row_ids in enumerate(batch["input_ids"]):
            # one generator per row, keyed by its place in the step: independent of micro-batch and world size
            generator = generator_for(config.seed, step, c * size + i)
            m, lab = mask_tokens(
                row_ids,
                mask_token_id=data.mask_id,
                vocab_size=data.vocab_size,
                special_ids=data.special_ids,
                rate=config.data.mask_rate,
                scheme=config.data.mask_scheme,
                generator=generator,
            )
            masked.append(m)
            labels.append(lab)
        batch["input_ids"], batch["labels"] = torch.stack(masked), torch.stack(labels)
        batches.append(batch)
    return batches


def _mlm_sums(model, batch: dict, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed masked-token cross-entropy, correct predictions and masked count of one packed micro-batch."""
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    selected = batch["labels"] != -100
    out = model(
        input_ids=batch["input_ids"],
        cu_seqlens=batch["cu_seqlens"],
        max_seqlen=batch["max_seqlen"],
        position_ids=batch["position_ids"],
        labels=batch["labels"],
        masked_only=True,  # logits (N, V) at the N masked positions only
    )
    targets = batch["labels"][selected]
    hits = (out.logits.detach().argmax(-1) == targets).sum()
    return masked_lm_loss_sum(out.logits, targets), hits, selected.sum()


def _train_step(model, optimizer, accelerator, batches, config: PretrainConfig, accumulation: int) -> dict:
    device = accelerator.device
    global_count = global_masked_count([b["labels"] for b in batches], device=device)
    loss_total = torch.zeros((), device=device)
    correct = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        sync = i == len(batches) - 1
        context = accelerator.no_sync(model) if not sync else contextlib.nullcontext()
        with context:
            loss_sum, hits, _ = _mlm_sums(model, batch, device)
            accelerator.backward(normalize_loss(loss_sum, global_count, world_size=accelerator.num_processes))
        loss_total += loss_sum.detach()
        correct += hits
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.optim.clip_grad_norm)
    loss_total = accelerator.reduce(loss_total, "sum")
    correct = accelerator.reduce(correct, "sum")
    count = float(global_count)
    # DeepSpeed clips inside its engine and returns no norm here
    loss_value, grad_value = (
        float(loss_total) / max(count, 1.0),
        float(grad_norm) if grad_norm is not None else 0.0,
    )
    if not (math.isfinite(loss_value) and math.isfinite(grad_value)):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(
            f"non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'} "
            f"(loss {loss_value}, grad norm {grad_value}); stopping. The last checkpoint is the last good state."
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches) * accelerator.num_processes
    return {
        "loss": float(loss_total),
        "correct": float(correct),
        "count": count,
        "tokens": tokens,
        "grad_norm": grad_value,
    }


def _log_window(step: int, window: dict, scheduler, stats: dict, logger, bar) -> dict[str, float]:
    now = time.perf_counter()
    metrics = {
        "train/loss": window["loss"] / max(window["count"], 1.0),
        "train/accuracy": window["correct"] / max(window["count"], 1.0),
        "train/lr": scheduler.get_last_lr()[0],
        "train/grad_norm": stats["grad_norm"],
        "train/tokens_per_second": window["tokens"] / max(now - window["time"], 1e-9),
    }
    bar.set_postfix(
        loss=f"{metrics['train/loss']:.3f}",
        lr=f"{metrics['train/lr']:.2e}",
        tok_s=f"{metrics['train/tokens_per_second']:.0f}",
    )
    if logger:
        logger.log(step, metrics)
    window.update(loss=0.0, correct=0.0, count=0.0, tokens=0.0, time=now)
    return metrics


@torch.no_grad()
def evaluate(model, accelerator, data: TrainingData, config: PretrainConfig) -> dict[str, float]:
    """MLM loss and accuracy on a fixed set of validation rows with fixed masks."""
    if data.validation is None or len(data.validation) == 0:
        return {}
    was_training = model.training
    model.eval()
    stream = RowStream(
        data.validation, data.validation.lengths, config.data.seq_len, seed=12345, packing=config.data.packing
    )
    rows = stream.take(config.eval_batches * config.micro_batch_size)  # the same rows whatever the world size
    batches = _my_micro_batches(rows, 0, config, data, accelerator.process_index, accelerator.num_processes)
    loss = torch.zeros((), device=accelerator.device)
    correct = torch.zeros((), device=accelerator.device)
    count = torch.zeros((), device=accelerator.device)
    for batch in batches:
        loss_sum, hits, selected = _mlm_sums(model, batch, accelerator.device)
        loss += loss_sum
        correct += hits
        count += selected
    loss, correct, count = (accelerator.reduce(t, "sum") for t in (loss, correct, count))
    model.train(was_training)
    n = max(float(count), 1.0)
    return {"val/loss": float(loss) / n, "val/accuracy": float(correct) / n}


def _time_is_up(started: float, config: PretrainConfig, accelerator) -> bool:
    if config.max_minutes is None:
        return False
    # every process must agree, or one would wait forever for the others at the next collective
    flag = torch.tensor(
        float(time.perf_counter() - started > 60 * config.max_minutes), device=accelerator.device
    )
    return bool(accelerator.reduce(flag, "sum") > 0)


def _finish(
    accelerator,
    model,
    data: TrainingData,
    config: PretrainConfig,
    progress: _Progress,
    last: dict[str, float],
    started: float,
) -> PretrainResult:
    output = Path(config.output)
    final_dir, curve = None, None
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(
        model
    )  # gathers sharded (FSDP / ZeRO-3) weights; every rank calls
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped = getattr(unwrapped, "_orig_mod", unwrapped)  # torch.compile wrapper
        final_dir = save_pretrained(unwrapped, data.tokenizer, output / "final", state_dict=state_dict)
        curve = plot_loss_curve(
            output / "metrics.jsonl", output / "loss_curve.png", baseline=data.unigram_entropy
        )
    accelerator.wait_for_everyone()
    from .monitor import read_metrics

    return PretrainResult(
        output=output,
        final_model=final_dir,
        steps=progress.step,
        train_loss=last.get("train/loss"),
        val_loss=last.get("val/loss"),
        val_accuracy=last.get("val/accuracy"),
        unigram_entropy=data.unigram_entropy,
        tokens_seen=progress.tokens,
        seconds=time.perf_counter() - started,
        loss_curve=curve,
        history=read_metrics(output / "metrics.jsonl") if accelerator.is_main_process else [],
    )
