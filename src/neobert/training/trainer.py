"""The one training-loop core: pretraining, fine-tuning and contrastive training each drive it with a task.

The trainer owns what every loop needs and no task should repeat: the device and the process group
(accelerate: one CPU or GPU, DDP through torchrun / ``accelerate launch``, FSDP, DeepSpeed), precision
(bf16 autocast over fp32 weights, or fp32, for every task: accelerate wraps the prepared model's forward, so a
task's evaluations through :meth:`Trainer.unwrapped` run in it too), gradient accumulation with the loss normalised by the *global*
count of target units, clipping, the NaN guard, the learning-rate schedule, atomic checkpoints with
resume, logging (TensorBoard, ``metrics.jsonl``, a tqdm bar) and the final export.

A task (:class:`TrainTask`) owns its data and its loss: ``batches(step)`` gives this process's
micro-batches of an optimizer step, ``count(batch)`` the number of target units of one (masked tokens,
examples, queries: known before the forward), and ``loss(model, batch)`` the *summed* loss over them. One
step then minimises ``sum of loss over every micro-batch of every process / global count``, so
accumulation and data parallelism give the gradient of one big batch (see :mod:`.loss`).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..common.io import write_dir, write_text
from ..common.progress import progress_bar
from ..model import compile_blocks
from ..runtime.hardware import resolve_precision
from .checkpointing import latest_checkpoint, load_checkpoint, save_checkpoint
from .loss import normalize_loss
from .monitor import RunLogger
from .optim import use_fused_adamw
from .schedule import sync_lr


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


@dataclass
class LossTerms:
    """One micro-batch's summed loss (with its graph) and detached sums to log as ``sum / count``."""

    loss_sum: torch.Tensor
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. {"accuracy": correct predictions}
    tokens: int = 0  # real tokens processed, for tokens/s


class TrainTask(Protocol):
    def batches(self, step: int) -> list[Any]: ...  # this process's micro-batches of step ``step`` (0-based)

    def count(self, batch: Any) -> torch.Tensor: ...  # target units of a micro-batch, a 0-d tensor

    def loss(self, model: torch.nn.Module, batch: Any) -> LossTerms: ...

    def after_step(self, step: int, final: bool) -> tuple[dict[str, float], bool]: ...  # (metrics, stop)

    def state_objects(self) -> list[Any]: ...  # what a checkpoint restores besides model/optimizer/RNG


@dataclass
class TrainerSettings:
    max_steps: int
    output: str | Path | None = None  # checkpoints under OUTPUT/checkpoints; None: no checkpoints
    log_dir: str | Path | None = None  # metrics.jsonl and TensorBoard events; None: no log files
    tensorboard_dir: str | Path | None = None  # default: LOG_DIR/tensorboard
    report_to: tuple[str, ...] = ("tensorboard",)
    precision: str = "fp32"  # bf16 (autocast over fp32 weights) | fp32 | auto (the faster here, measured)
    probe_shape: tuple[int, int] = (
        768,
        3072,
    )  # (hidden, intermediate) size "auto" times: model_widths(model)
    device: str | None = None  # "cpu" forces the CPU; None: the GPU of this process when there is one
    clip_grad_norm: float | None = 1.0
    micro_batch_size: int | None = None  # rows per micro-batch (DeepSpeed's config needs it)
    log_every: int = 10
    save_every: int | None = None  # None: only the last step
    keep_last: int = 3
    max_minutes: float | None = None  # stop (and save) after this much wall time
    # another run's checkpoint to start from when OUTPUT holds none (a decay branched from a stable run):
    # its state is loaded whole; settings named in ``branch_may_change`` may differ from its fingerprint
    start_from: str | Path | None = None
    branch_may_change: tuple[str, ...] = ()
    compile: bool = False
    activation_checkpointing: bool = False
    find_unused_parameters: bool = False  # DDP: some parameters get no gradient (e.g. an unused pooler)
    progress_bar: bool = True
    description: str = "train"


@dataclass
class RunState:
    """What a checkpoint restores besides model, optimizer, scheduler, RNG and the task's objects."""

    step: int = 0
    tokens: int = 0
    stopped: bool = False  # the task ended the run early (early stopping): a resumed run is finished

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "tokens": self.tokens, "stopped": int(self.stopped)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.tokens = int(state["step"]), int(state["tokens"])
        self.stopped = bool(state.get("stopped", 0))


@dataclass
class StepStats:
    loss: float  # the step's mean loss over every target unit of every process
    count: float
    sums: dict[str, float]
    tokens: int
    grad_norm: float


def model_widths(model: torch.nn.Module) -> tuple[int, int]:
    """(hidden, intermediate) size of ``model`` (inside DDP / torch.compile), what precision ``auto`` times:
    an :class:`TrainerSettings` ``probe_shape``. A config without ``intermediate_size`` counts 4 x hidden."""
    for attr in ("module", "_orig_mod"):  # DistributedDataParallel, torch.compile
        model = getattr(model, attr, model)
    config = getattr(model, "config", None)
    hidden = getattr(config, "hidden_size", 768)
    return hidden, getattr(config, "intermediate_size", 4 * hidden)


def make_accelerator(settings: TrainerSettings):
    """accelerate's Accelerator for these settings (one per run; see :func:`_fresh_state`)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedDataParallelKwargs

    cuda = torch.cuda.is_available() and settings.device != "cpu"
    if settings.device not in (None, "cpu") and not torch.cuda.is_available():
        raise ValueError(f"device {settings.device!r} requested but CUDA is not available")
    device = "cuda" if cuda else "cpu"
    bf16 = resolve_precision(settings.precision, *settings.probe_shape, device, training=True) == "bf16"
    _fresh_state(AcceleratorState, "bf16" if bf16 else "no")
    ddp = DistributedDataParallelKwargs(find_unused_parameters=settings.find_unused_parameters)
    return Accelerator(mixed_precision="bf16" if bf16 else "no", cpu=not cuda, kwargs_handlers=[ddp])


def _fresh_state(state_cls: Any, mixed_precision: str) -> None:
    # accelerate keeps one process-wide state and refuses a second Accelerator with another precision;
    # successive single-process runs (tests, a GLUE sweep) may differ, so forget the previous run's choice.
    if not state_cls._shared_state:  # no Accelerator yet in this process
        return
    state = state_cls()
    if state.num_processes == 1 and state.mixed_precision != mixed_precision:
        state_cls._reset_state()


def apply_deepspeed_accumulation(config: dict, accumulation: int, micro_batch_size: int | None) -> dict:
    """Fill DeepSpeed's ``gradient_accumulation_steps`` / ``train_micro_batch_size_per_gpu`` in ``config``
    (in place). ``auto`` (or absent) takes the run's values; an explicit different number raises, naming the
    setting, rather than training another batch than the config asks for."""
    for key, value in (
        ("gradient_accumulation_steps", accumulation),
        ("train_micro_batch_size_per_gpu", micro_batch_size),
    ):
        current = config.get(key, "auto")
        if value is None:
            continue
        if current in ("auto", None):
            config[key] = value
        elif int(current) != value:
            raise ValueError(
                f"the DeepSpeed config sets {key}={current} but this run needs {value} "
                f"(tokens_per_step / (seq_len x micro_batch_size x processes)); set it to 'auto'"
            )
    return config


def is_main_process() -> bool:
    """True in the process that writes files (rank 0 under torchrun / accelerate launch; always alone)."""
    from accelerate import PartialState

    return PartialState().is_main_process


def wait_for_everyone() -> None:
    """A barrier across the processes of a launched run (a no-op alone)."""
    from accelerate import PartialState

    PartialState().wait_for_everyone()


class Trainer:
    """One run: the accelerator, the prepared model / optimizer / scheduler, and the loop over a task."""

    def __init__(self, settings: TrainerSettings):
        self.settings = settings
        self.accelerator = make_accelerator(settings)
        self.state = RunState()
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.compile_seconds: float | None = None  # spent in compile_blocks (compilation itself is lazy)

    def set_accumulation(self, micro_batches: int) -> None:
        """Micro-batches per process per step. Under DeepSpeed they are handed to its own accumulation
        (accelerate marks the last micro-batch of a step as the boundary, where DeepSpeed's trainer steps);
        elsewhere the trainer accumulates itself. Call before :meth:`prepare`."""
        if self.accelerator.distributed_type.value != "DEEPSPEED":
            return
        config = self.accelerator.state.deepspeed_plugin.deepspeed_config
        apply_deepspeed_accumulation(config, micro_batches, self.settings.micro_batch_size)
        self.accelerator.gradient_accumulation_steps = micro_batches

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def precision(self) -> str:
        """The precision this run actually trains in: bf16 (autocast) or fp32."""
        return "bf16" if self.accelerator.mixed_precision == "bf16" else "fp32"

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def print(self, *args: Any) -> None:
        self.accelerator.print(*args)

    def prepare(self, model: torch.nn.Module, make_optimizer: Callable, make_scheduler=None) -> None:
        """Place ``model`` on the device, build the optimizer (``make_optimizer(model, fused)``; fused AdamW
        on CUDA once it passed its first-use check) and the scheduler (``make_scheduler(optimizer)``), then wrap them for distribution."""
        if self.settings.activation_checkpointing:
            model.gradient_checkpointing_enable()
        model.to(self.device).train()
        if self.settings.compile:  # regional: each encoder block in place, before any wrapper
            self.compile_seconds = compile_blocks(model)
        optimizer = make_optimizer(model, use_fused_adamw(self.device))
        self.scheduler = make_scheduler(optimizer) if make_scheduler else None
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def unwrapped(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)

    # -- one optimizer step ------------------------------------------------------------------------------
    def train_step(self, task: TrainTask, batches: list[Any]) -> StepStats:
        """Forward and backward every micro-batch, clip, guard, step: what the training benchmark times."""
        acc, model = self.accelerator, self.model
        if not batches:
            raise ValueError("a training step needs at least one micro-batch on every process")
        counts = torch.stack([torch.as_tensor(task.count(b), device=self.device) for b in batches])
        global_count = acc.reduce(counts.sum().to(torch.float64), "sum")
        # accelerate divides by its accumulation steps outside DeepSpeed, DeepSpeed's trainer inside it
        scale = acc.gradient_accumulation_steps
        loss_total = torch.zeros((), device=self.device, dtype=torch.float64)
        sums: dict[str, torch.Tensor] = {}
        tokens = 0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            acc.sync_gradients = last  # DeepSpeed's accumulation boundary: its trainer steps there
            with contextlib.nullcontext() if last else acc.no_sync(model):
                terms = task.loss(model, batch)
                loss_total += terms.loss_sum.detach().to(torch.float64)
                for key, value in terms.sums.items():
                    sums[key] = sums.get(key, 0) + value.detach().to(torch.float64)
                tokens += terms.tokens
                if last:  # before the last backward, where DeepSpeed would already step
                    reduced = self._reduce_stats(loss_total, sums)
                    self._guard(reduced["loss"] / max(float(global_count), 1.0), 0.0)
                acc.backward(normalize_loss(terms.loss_sum, global_count, world_size=self.world) * scale)
        clip = self.settings.clip_grad_norm or float("inf")
        grad_norm = acc.clip_grad_norm_(model.parameters(), clip)  # None under DeepSpeed (it clips itself)
        count = float(global_count)
        loss = reduced.pop("loss") / max(count, 1.0)
        grad = float(grad_norm) if grad_norm is not None else 0.0
        self._guard(loss, grad)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepStats(loss, count, reduced, tokens * self.world, grad)

    def _reduce_stats(self, loss_total: torch.Tensor, sums: dict[str, torch.Tensor]) -> dict[str, float]:
        keys = sorted(sums)
        vector = torch.stack([loss_total, *(torch.as_tensor(sums[k]) for k in keys)])
        # one all-reduce and host sync for every logged sum (the grad norm's float() and the tasks' token counts are
        # the step's other syncs)
        values = self.accelerator.reduce(vector, "sum").tolist()
        return {"loss": values[0], **dict(zip(keys, values[1:]))}

    def _guard(self, loss: float, grad_norm: float) -> None:
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return
        self.optimizer.zero_grad(set_to_none=True)
        what = "loss" if not math.isfinite(loss) else "gradient norm"
        raise NonFiniteLossError(
            f"non-finite {what} (loss {loss}, grad norm {grad_norm}) at step {self.state.step + 1}; stopping "
            "before the optimizer step. The last checkpoint is the last good state."
        )

    # -- the loop ----------------------------------------------------------------------------------------
    def run(
        self,
        task: TrainTask,
        resume: bool = False,
        fingerprint: dict[str, Any] | None = None,
        on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    ) -> dict[str, float]:
        """Train until ``max_steps`` (or the time limit, or the task asks to stop); the last metrics."""
        settings, started = self.settings, time.perf_counter()
        objects = [self.scheduler] if self.scheduler is not None else []
        self.accelerator.register_for_checkpointing(*objects, self.state, *task.state_objects())
        fingerprint = json.loads(json.dumps(fingerprint or {}))  # tuples -> lists, as stored
        self._start(resume, fingerprint)
        logger = None
        if self.is_main and settings.log_dir is not None:
            logger = RunLogger(settings.log_dir, settings.report_to, fingerprint, settings.tensorboard_dir)
        bar = progress_bar(
            total=settings.max_steps,
            initial=self.state.step,
            desc=settings.description,
            unit="step",
            leave=False,
            disable=not (settings.progress_bar and self.is_main),
        )
        window = _Window()
        last: dict[str, float] = {}
        try:
            while self.state.step < settings.max_steps and not self.state.stopped:
                stats = self.train_step(task, task.batches(self.state.step))
                self.state.step += 1
                self.state.tokens += stats.tokens
                window.add(stats)
                bar.update(1)
                step = self.state.step
                out_of_time = self._time_is_up(started)
                final = out_of_time or step == settings.max_steps
                if step % settings.log_every == 0 or final:
                    last.update(window.flush(step, self.scheduler, stats, logger, bar))
                metrics, stop = task.after_step(step, final)
                self.state.stopped = stop
                last.update(metrics)
                if logger is not None and metrics:
                    logger.log(step, metrics)
                if self._save_due(step) or final or stop:
                    self.save(fingerprint)
                if on_step_end is not None:
                    on_step_end(step, last)
                if out_of_time or stop:
                    break
        finally:
            bar.close()
            if logger is not None:
                logger.close()
        return last

    def _save_due(self, step: int) -> bool:
        every = self.settings.save_every
        return every is not None and step % every == 0

    def save(self, fingerprint: dict[str, Any]) -> None:
        if self.settings.output is None:
            return
        root = Path(self.settings.output) / "checkpoints"
        state = {"step": self.state.step, "config": fingerprint}
        save_checkpoint(self.accelerator, root, self.state.step, state, self.settings.keep_last)

    def _start(self, resume: bool, fingerprint: dict[str, Any]) -> None:
        if self.settings.output is None:
            return
        root = Path(self.settings.output) / "checkpoints"
        path = latest_checkpoint(root)
        if not resume and path is not None:
            raise FileExistsError(
                f"{self.settings.output} already holds checkpoints of a run: pass --resume to continue it, "
                "or choose another output"
            )
        may_change: tuple[str, ...] = ()
        branched = path is None and self.settings.start_from is not None
        if branched:
            path, may_change = Path(self.settings.start_from), self.settings.branch_may_change
        elif not resume:
            return
        if path is None:
            self.print(f"no checkpoint under {root}: starting from scratch")
            return
        self._check_fingerprint(path, fingerprint, may_change)
        state = load_checkpoint(self.accelerator, path)
        if self.scheduler is not None:
            sync_lr(self.scheduler)  # a branched run's schedule, not the one stored with the checkpoint
        if self.is_main and self.settings.log_dir is not None:
            _forget_after(Path(self.settings.log_dir) / "metrics.jsonl", state["step"])
        what = "branched from" if branched else "resumed from"  # a decay from a stable run's checkpoint
        self.print(f"{what} {path} at step {state['step']}")

    def _check_fingerprint(
        self, path: Path, fingerprint: dict[str, Any], may_change: tuple[str, ...]
    ) -> None:
        state_file = path / "trainer_state.json"
        if not state_file.is_file():
            raise FileNotFoundError(f"{path} is not a complete training checkpoint (no trainer_state.json)")
        saved = json.loads(state_file.read_text(encoding="utf-8")).get("config", {})
        for key, value in fingerprint.items():
            if key not in may_change and not _same_setting(saved.get(key), value):
                raise ValueError(
                    f"cannot resume from {path}: config {key!r} changed ({saved.get(key)!r} -> {value!r})"
                )

    def _time_is_up(self, started: float) -> bool:
        if self.settings.max_minutes is None:
            return False
        # every process must agree, or one would wait forever for the others at the next collective
        late = float(time.perf_counter() - started > 60 * self.settings.max_minutes)
        return bool(self.accelerator.reduce(torch.tensor(late, device=self.device), "sum") > 0)

    # -- export ------------------------------------------------------------------------------------------
    def export(self, build: Callable[[torch.nn.Module, dict, Path], None], final: str | Path) -> Path | None:
        """Write the trained model with ``build(unwrapped_model, state_dict, tmp_dir)`` to ``final`` atomically
        (the main process; every process takes part in gathering sharded FSDP / ZeRO-3 weights)."""
        self.accelerator.wait_for_everyone()
        state_dict = self.accelerator.get_state_dict(self.model)
        path = None
        if self.is_main:
            model = self.unwrapped()
            path = write_dir(lambda tmp: build(model, state_dict, tmp), final)
        self.accelerator.wait_for_everyone()
        return path


class _Window:
    """Sums of the steps since the last log line."""

    def __init__(self) -> None:
        self.loss, self.count, self.tokens, self.sums = 0.0, 0.0, 0, {}
        self.time = time.perf_counter()

    def add(self, stats: StepStats) -> None:
        self.loss += stats.loss * stats.count
        self.count += stats.count
        self.tokens += stats.tokens
        for key, value in stats.sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def flush(
        self, step: int, scheduler: Any, stats: StepStats, logger: RunLogger | None, bar: Any
    ) -> dict[str, float]:
        now = time.perf_counter()
        n = max(self.count, 1.0)
        metrics = {"train/loss": self.loss / n, **{f"train/{k}": v / n for k, v in self.sums.items()}}
        if scheduler is not None:
            metrics["train/lr"] = scheduler.get_last_lr()[0]
        metrics["train/grad_norm"] = stats.grad_norm
        if self.tokens:
            metrics["train/tokens_per_second"] = self.tokens / max(now - self.time, 1e-9)
        postfix = {"loss": f"{metrics['train/loss']:.4f}"}
        if "train/tokens_per_second" in metrics:
            postfix["tok_s"] = f"{metrics['train/tokens_per_second']:.0f}"
        bar.set_postfix(postfix)
        if logger is not None:
            logger.log(step, metrics)
        self.__init__()
        return metrics


def _forget_after(metrics: Path, step: int) -> None:
    """Drop what was logged after the checkpoint's step: those steps run again."""
    if not metrics.is_file():
        return
    kept = [
        line
        for line in metrics.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["step"] <= step
    ]
    write_text(metrics, "".join(line + "\n" for line in kept))


def _same_setting(saved: Any, value: Any) -> bool:
    """Whether a resumed run's setting equals the one its checkpoint was written with. A setting that a
    later version added, and that the new run leaves unset (None), is absent from older checkpoints and
    matches."""
    if isinstance(saved, dict) and isinstance(value, dict):
        return (
            all(_same_setting(saved[k], v) if k in saved else v is None for k, v in value.items())
            and saved.keys() <= value.keys()
        )
    return saved == value
