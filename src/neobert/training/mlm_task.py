"""Pretraining: MLM on packed (or padded) rows, as a task of the training core (:mod:`.trainer`).

``pretrain(config)`` is the entry point used by the CLI and the tests. The core owns device, precision,
distribution, accumulation, clipping, the NaN guard, checkpoints and logging; this module owns the data and
the loss:

1. each step takes ``tokens_per_step / seq_len`` rows from a deterministic :class:`RowStream`; process ``r``
   takes every ``world``-th micro-batch of ``micro_batch_size`` rows;
2. each row is masked with a generator keyed by (seed, step, row), so the data of a step does not depend on
   the number of processes or the micro-batch size, and a resumed run sees exactly the same batches;
3. a micro-batch's loss is its summed masked-token cross-entropy and its count its masked tokens: the core
   divides by the step's *global* count, so accumulation and data parallelism give one big batch's gradient.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..cards import write_card
from ..cards.hub import BackgroundPusher, PushReport
from ..common.io import write_json
from ..common.tables import fmt, markdown_table
from ..inference.encoders import write_model_files
from ..model.execution import eval_mode
from .batching import collate_packed, micro_batches_for
from .card import RunFacts, pretrain_card
from .checkpointing import STATE_FILE
from .config import PretrainConfig
from .data_setup import TrainingData, open_training_data
from .loss import masked_lm_loss_sum
from .masking import IGNORE_INDEX, generator_for, mask_tokens
from .monitor import plot_loss_curve, read_metrics
from .phase_run import PhasedStream, fitted_warmup, lr_multiplier, make_stream, phase_mask_rate, phase_record
from .phases import apply_model_settings, phase_at, plan
from .schedule import make_lambda_scheduler
from .stream import RowStream
from .trainer import LossTerms, NonFiniteLossError, Trainer, TrainerSettings

__all__ = ["NonFiniteLossError", "PretrainResult", "evaluate", "pretrain"]

# what may not change between a run and its resumption
RESUME_KEYS = ("preset", "model", "data", "optim", "schedule", "tokens_per_step", "micro_batch_size", "seed")
# settings added after checkpoints were already being written (issue 34), at the value that keeps the old
# behaviour: left out of the fingerprint at that value, so those checkpoints still resume
LATER_DEFAULTS = {
    "data": {"mask_rate_shape": "linear"},
    "schedule": {"decay_shape": "1-sqrt"},
    "optim": {
        "muon_momentum": 0.95,
        "muon_nesterov": True,
        "muon_ns_steps": 5,
        "muon_adjust_lr": "match_rms_adamw",
    },
}


def resume_fingerprint(config: PretrainConfig) -> dict[str, Any]:
    """What may not change between a run and its resumption (phases, and their scales, when there are any)."""
    settings = config.to_dict()
    fingerprint = {key: settings[key] for key in RESUME_KEYS}
    for section, defaults in LATER_DEFAULTS.items():
        for key, value in defaults.items():
            if fingerprint[section].get(key) == value:
                del fingerprint[section][key]
    if config.phases:
        fingerprint.update({key: settings[key] for key in ("phases", "scale", "context_scale")})
    return fingerprint


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
    precision: str = "fp32"  # the precision actually run
    exports: list[Path] = field(default_factory=list)  # checkpoints exported on the way (push_every)
    push: PushReport | None = None  # what reached the Hub (push_to), and what failed

    @property
    def summary(self) -> str:
        """The run in a Markdown table: steps, tokens, time, losses beside the unigram baseline, files."""
        no_split = "n/a (no validation split)" if self.val_loss is None else fmt(self.val_loss, digits=3)
        rows = [
            ("steps", f"{self.steps:,}"),
            ("tokens seen", f"{self.tokens_seen:,}"),
            ("minutes", f"{self.seconds / 60:.1f}"),
            ("last train loss", fmt(self.train_loss, digits=3)),
            ("validation loss", no_split),
            ("unigram baseline", fmt(self.unigram_entropy, digits=3)),
            ("validation accuracy", fmt(self.val_accuracy, digits=3)),
            ("final model", str(self.final_model)),
            ("loss curve", str(self.loss_curve)),
        ]
        if self.exports:
            rows.append(("exported checkpoints", f"{len(self.exports)} under {self.exports[0].parent}"))
        if self.push is not None:
            pushed = ", ".join(p.revision for p in self.push.pushed) or "none"
            rows.append(("pushed revisions", pushed))
            rows += [(f"push failed: {rev}", why) for rev, why in self.push.failed.items()]
        return "pretraining result\n\n" + markdown_table(["metric", "value"], rows)


def trainer_settings(
    config: PretrainConfig, progress_bar: bool = True, device: str | None = None
) -> TrainerSettings:
    """The core's settings for a pretraining config (the training benchmark builds the same ones)."""
    model_config = config.model_config()
    return TrainerSettings(
        max_steps=config.max_steps,
        output=config.output,
        log_dir=config.output,
        report_to=tuple(config.report_to),
        precision=config.precision,
        probe_shape=(model_config.hidden_size, model_config.intermediate_size),
        device=device or config.device,
        clip_grad_norm=config.optim.clip_grad_norm,
        micro_batch_size=config.micro_batch_size,
        log_every=config.log_every,
        save_every=config.save_every,
        keep_last=config.keep_last,
        max_minutes=config.max_minutes,
        start_from=config.decay_from,
        branch_may_change=("schedule",),
        compile=config.compile,
        activation_checkpointing=config.activation_checkpointing,
        progress_bar=progress_bar,
        description="pretrain",
    )


def with_decay_branch(config: PretrainConfig) -> PretrainConfig:
    """``config`` with ``max_steps`` = the branch checkpoint's step + ``schedule.decay_steps`` when it decays
    from another run's checkpoint (``decay_from``); unchanged otherwise."""
    if config.decay_from is None:
        return config
    state = Path(config.decay_from) / STATE_FILE
    if not state.is_file():
        raise FileNotFoundError(
            f"decay_from {config.decay_from} is not a training checkpoint (no {STATE_FILE}); give a directory "
            "OUTPUT/checkpoints/step-N of the stable run"
        )
    if Path(config.output).resolve() == Path(config.decay_from).resolve().parent.parent:
        raise ValueError("a decay branched from a run's checkpoint needs its own output directory")
    step = int(json.loads(state.read_text(encoding="utf-8"))["step"])
    return config.override(max_steps=step + config.schedule.decay_steps)


def prepare_trainer(trainer: Trainer, config: PretrainConfig, model: torch.nn.Module) -> None:
    """Model, the optimizer (AdamW fused on CUDA, or Muon + AdamW) and the schedule over every phase,
    prepared on ``trainer``."""
    phases = plan(config)
    for phase in phases:
        fitted, given = fitted_warmup(phase), phase.config.schedule.warmup_steps
        if fitted != given:
            trainer.print(
                f"warning: {phase.name}: schedule.warmup_steps {given} does not fit in its {phase.steps} steps; "
                f"warming up over {fitted} steps instead"
            )

    def optimizer(model: torch.nn.Module, fused: bool) -> torch.optim.Optimizer:
        return config.optim.build(model, fused)

    def scheduler(optimizer: torch.optim.Optimizer) -> Any:
        return make_lambda_scheduler(optimizer, lr_multiplier(phases, config.optim.lr))

    trainer.prepare(model, optimizer, scheduler)


class MLMTask:
    """Masked language modelling on the rows of each phase's :class:`RowStream`, for the training core."""

    def __init__(
        self, config: PretrainConfig, data: TrainingData, trainer: Trainer, stream: RowStream | None = None
    ):
        """``stream``: the rows of a run without phases (the training benchmark's); default: each phase's."""
        self.config, self.data, self.trainer = config, data, trainer
        self.phases = plan(config)
        streams = [stream] if stream is not None else [make_stream(phase, data) for phase in self.phases]
        self.stream = PhasedStream(streams)

    def mask_rate(self, step: int) -> float:
        """The masking rate of step ``step`` (0-based)."""
        return phase_mask_rate(self.phases, step)

    def batches(self, step: int) -> list[dict]:
        phase = phase_at(self.phases, step)
        if apply_model_settings(self.trainer.unwrapped(), phase.config.model) and step > 0:
            self.trainer.print(f"phase {phase.name} from step {step}: model settings {phase.config.model}")
        c = phase.config
        rows = self.stream.streams[phase.index].take(c.tokens_per_step // c.data.seq_len)
        return _my_micro_batches(
            rows, step, c, self.data, self.trainer.rank, self.trainer.world, self.mask_rate(step)
        )

    def count(self, batch: dict) -> torch.Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum()

    def loss(self, model: torch.nn.Module, batch: dict) -> LossTerms:
        loss_sum, hits, _ = _mlm_sums(model, batch, self.trainer.device)
        return LossTerms(loss_sum, {"accuracy": hits}, tokens=int(batch["attention_mask"].sum()))

    def after_step(self, step: int, final: bool) -> tuple[dict[str, float], bool]:
        phase = phase_at(self.phases, step - 1)  # the phase of the step just taken
        metrics = {}
        if step % self.config.log_every == 0 or final:
            metrics["train/mask_rate"] = self.mask_rate(step - 1)
            metrics["train/phase"] = float(phase.index)
        if step % self.config.eval_every and not final:
            return metrics, False
        return {**metrics, **self.evaluate(step)}, False

    def evaluate(self, step: int) -> dict[str, float]:
        phase = phase_at(self.phases, max(step - 1, 0))
        return evaluate(self.trainer.model, self.trainer.accelerator, self.data, phase.config)

    def record(self) -> list[dict[str, Any]]:
        """What each phase was set to and saw (the run manifest's and the card's phases)."""
        done = self.trainer.state.step
        return [phase_record(p, s, done, self.data) for p, s in zip(self.phases, self.stream.streams)]

    def state_objects(self) -> list[Any]:
        return [self.stream]


def pretrain(
    config: PretrainConfig,
    resume: bool = False,
    on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    progress_bar: bool = True,
) -> PretrainResult:
    """Train an MLM encoder from ``config``; returns the final metrics and where the model was exported."""
    from accelerate.utils import set_seed

    started = time.perf_counter()
    config = with_decay_branch(config)
    trainer = Trainer(trainer_settings(config, progress_bar))
    first = plan(config)[0].config
    trainer.set_accumulation(
        micro_batches_for(first.tokens_per_step, first.data.seq_len, first.micro_batch_size, trainer.world)
    )
    set_seed(config.seed)
    data = open_training_data(config, trainer.accelerator)
    prepare_trainer(trainer, config, data.build_model(plan(config)[0].config))
    task = MLMTask(config, data, trainer)
    fingerprint = resume_fingerprint(config)
    # uploads run on a thread of the main process: training never waits for the network
    pusher = (
        BackgroundPusher(config.push_to, report=trainer.print) if config.push_to and trainer.is_main else None
    )
    exports: list[Path] = []

    def step_end(step: int, metrics: dict[str, float]) -> None:
        if config.push_every and step % config.push_every == 0 and step < config.max_steps:
            facts = _facts(trainer, config, data, metrics, started, False)
            facts.phases = task.record()
            path = _export(trainer, data, config, facts, "exports")
            if path is not None:
                exports.append(path)
                if pusher is not None:
                    pusher.submit(path, path.name)
        if on_step_end is not None:
            on_step_end(step, metrics)

    try:
        last = trainer.run(task, resume=resume, fingerprint=fingerprint, on_step_end=step_end)
        if "val/loss" not in last:  # nothing left to train (a finished run resumed): evaluate for the result
            last.update(task.evaluate(trainer.state.step))
        result = _finish(trainer, data, config, last, started, task.record())
    except BaseException:
        if pusher is not None:
            pusher.close(timeout=0)  # the run failed: leave pending uploads, report nothing more
        raise
    result.exports = exports
    if pusher is not None:
        if result.final_model is not None:
            pusher.submit(result.final_model, None)  # the final model on main
        result.push = pusher.close()
    return result


def _facts(
    trainer: Trainer,
    config: PretrainConfig,
    data: TrainingData,
    metrics: dict[str, float],
    started: float,
    final: bool,
) -> RunFacts:
    """The run's facts now; losses only where they were measured at this very step."""
    step = trainer.state.step
    measured = dict(metrics) if final else {}
    if not final:
        if step % config.eval_every == 0:
            measured.update({k: v for k, v in metrics.items() if k.startswith("val/")})
        if step % config.log_every == 0 and "train/loss" in metrics:
            measured["train/loss"] = metrics["train/loss"]
    return RunFacts(
        step,
        trainer.state.tokens,
        time.perf_counter() - started,
        trainer.precision,
        trainer.world,
        measured,
        data.unigram_entropy,
        final,
    )


def _export(
    trainer: Trainer,
    data: TrainingData,
    config: PretrainConfig,
    facts: RunFacts,
    where: str,
    curve: Path | None = None,
) -> Path | None:
    """Export the model with its card: OUTPUT/final, or OUTPUT/exports/step-N on the way."""
    output = Path(config.output)
    target = output / "final" if facts.final else output / where / f"step-{facts.step}"

    def build(model: torch.nn.Module, state_dict: dict, tmp: Path) -> None:
        write_model_files(model, data.tokenizer, tmp, state_dict)  # + vocab.txt, no auto_map
        if curve is not None:
            shutil.copyfile(curve, tmp / curve.name)
        write_card(tmp, pretrain_card(config, facts, model, curve.name if curve is not None else None))

    return trainer.export(build, target)


def _my_micro_batches(
    rows, step: int, config: PretrainConfig, data: TrainingData, rank: int, world: int, rate: float
):
    """This process's micro-batches of the step: masked (``rate`` of the eligible tokens), collated tensors."""
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
                rate=rate,
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
    selected = batch["labels"] != IGNORE_INDEX
    out = model(
        input_ids=batch["input_ids"],
        cu_seqlens=batch["cu_seqlens"],
        max_seqlen=batch["max_seqlen"],
        position_ids=batch["position_ids"],
        masked_positions=selected,  # logits (N, V) at the N masked positions only; the loss is ours, once
    )
    targets = batch["labels"][selected]
    hits = (out.logits.detach().argmax(-1) == targets).sum()
    return masked_lm_loss_sum(out.logits, targets), hits, selected.sum()


def eval_mask_rate(config: PretrainConfig) -> float:
    """The fixed rate validation masks with: ``data.eval_mask_rate``, else the rate the run ends at."""
    data = config.data
    return next(r for r in (data.eval_mask_rate, data.mask_rate_end, data.mask_rate) if r is not None)


@torch.no_grad()
def evaluate(model, accelerator, data: TrainingData, config: PretrainConfig) -> dict[str, float]:
    """MLM loss and accuracy on a fixed set of validation rows with fixed masks."""
    if data.validation is None or len(data.validation) == 0:
        return {}
    stream = RowStream(
        data.validation,
        data.validation.lengths,
        config.data.seq_len,
        seed=12345,
        packing=config.data.packing,
        long_docs=config.data.long_docs,
    )
    rows = stream.take(config.eval_batches * config.micro_batch_size)  # the same rows whatever the world size
    rate = eval_mask_rate(config)
    batches = _my_micro_batches(
        rows, 0, config, data, accelerator.process_index, accelerator.num_processes, rate
    )
    loss = torch.zeros((), device=accelerator.device)
    correct = torch.zeros((), device=accelerator.device)
    count = torch.zeros((), device=accelerator.device)
    with eval_mode(model):
        for batch in batches:
            loss_sum, hits, selected = _mlm_sums(model, batch, accelerator.device)
            loss += loss_sum
            correct += hits
            count += selected
    loss, correct, count = (accelerator.reduce(t, "sum") for t in (loss, correct, count))
    n = max(float(count), 1.0)
    return {"val/loss": float(loss) / n, "val/accuracy": float(correct) / n}


def _finish(
    trainer: Trainer,
    data: TrainingData,
    config: PretrainConfig,
    last: dict[str, float],
    started: float,
    phases: list[dict[str, Any]],
) -> PretrainResult:
    output = Path(config.output)
    if trainer.is_main:  # the run manifest: what each phase was set to and saw
        write_json(
            output / "phases.json",
            {"steps": trainer.state.step, "tokens": trainer.state.tokens, "phases": phases},
        )
    curve = None
    if trainer.is_main:  # the curve first: the final directory carries it beside its card
        curve = plot_loss_curve(
            output / "metrics.jsonl", output / "loss_curve.png", baseline=data.unigram_entropy
        )
    facts = _facts(trainer, config, data, last, started, final=True)
    facts.phases = phases
    final_dir = _export(trainer, data, config, facts, "final", curve)
    trainer.accelerator.wait_for_everyone()
    return PretrainResult(
        output=output,
        final_model=final_dir,
        steps=trainer.state.step,
        train_loss=last.get("train/loss"),
        val_loss=last.get("val/loss"),
        val_accuracy=last.get("val/accuracy"),
        unigram_entropy=data.unigram_entropy,
        tokens_seen=trainer.state.tokens,
        seconds=time.perf_counter() - started,
        loss_curve=curve,
        history=read_metrics(output / "metrics.jsonl") if trainer.is_main else [],
        precision=trainer.precision,
    )
