"""Run a ladder: every rung x seed is an ordinary pretraining run, then ``finetune classify`` per task.

Layout of the output directory::

    DIR/corpora/  DIR/tokenizers/<name>/  DIR/data/<corpus>--<tokenizer>/  DIR/tasks/<task>/{train,validation}.csv
    DIR/runs/<rung>/seed-<s>/            a pretraining run directory (checkpoints/, final/, metrics.jsonl)
    DIR/runs/<rung>/seed-<s>/pretrain.json       written when pretraining finished
    DIR/runs/<rung>/seed-<s>/downstream/<task>/  a `finetune classify` output (metrics.json)
    DIR/runs/<rung>/seed-<s>/result.json         written last: the run is finished and is skipped next time
    DIR/ladder.md, DIR/ladder.png                the report

A killed run is picked up where it stopped: pretraining resumes from its last checkpoint (the trainer's own
resume), a finished pretraining is not repeated, finished fine-tunings are kept. Rungs run in order, each
with all its seeds, because a rung may start from an earlier one (``init_from``) of the same seed.

Seeds are independent, so several processes may share one directory, each with ``only_seed`` (one per
core: ``neobert ablate --only-seed 0`` beside ``--only-seed 1``); the shared preparation (corpora,
tokenizers, prepared data, task files) is made once, under a file lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoTokenizer

from ..common.config import ModelConfig
from ..common.io import write_dir, write_json, write_text
from ..data import TokenDataset, default_tokenizer_dir, train_tokenizer
from ..finetuning.classify import run_classify
from ..inference.encoders import save_pretrained
from ..jobs.prepare import PrepareConfig, prepare
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from ..recipes.default_run import shipped_tokenizer
from ..training.checkpointing import latest_checkpoint
from ..training.config import PretrainConfig
from ..training.mlm_task import pretrain
from .ladder import Ladder, LadderError, RungPlan, load_ladder, pretrain_config, resolve
from .report import write_report
from .sources import materialize_inputs, write_task


@dataclass
class AblateConfig:
    """Pretrain every rung of a ladder (one ordinary pretraining run directory per rung and seed), fine-tune
    each on the ladder's tasks with `finetune classify`, and write DIR/ladder.md and DIR/ladder.png. Finished
    runs are skipped and a killed run resumes: run the same command again."""

    ladder: str = (
        "figure1-laptop"  # figure1-laptop, figure1-gpu, smoke (a shipped ladder's name) or a YAML file
    )
    output: str = field(default="runs/ladder", metadata={"help": "the ladder's directory", "required": True})
    rungs: list[str] | None = None  # run only these (the report still shows every finished rung)
    seeds: int | None = None  # default: the ladder's
    max_steps: int | None = None  # override the scale's pretraining steps (quick looks)
    keep_checkpoints: bool = False  # keep each finished run's checkpoints (they are removed by default)
    only_seed: int | None = None  # run this seed alone (one process per seed shares DIR); default: all

    def __post_init__(self) -> None:
        if self.only_seed is not None and (isinstance(self.only_seed, bool) or self.only_seed < 0):
            raise LadderError(f"only_seed must be a seed number (0, 1, ...), got {self.only_seed!r}")


@dataclass
class LadderResult:
    output: Path
    report_md: Path
    report_png: Path | None
    ran: list[str] = field(default_factory=list)  # "rung/seed-s" trained by this call
    skipped: list[str] = field(default_factory=list)  # already finished


def run_ladder(config: AblateConfig, log: Callable[[str], None] = print) -> LadderResult:
    ladder = load_ladder(config.ladder)
    if config.max_steps is not None:
        ladder.scale.steps = config.max_steps
    plans = resolve(ladder)
    chosen = _choose(plans, config.rungs)
    seeds = [config.only_seed] if config.only_seed is not None else list(range(config.seeds or ladder.seeds))
    root = Path(config.output)
    root.mkdir(parents=True, exist_ok=True)
    todo = [
        (p, s) for p in chosen for s in seeds if not (_run_dir(root, p.name, s) / "result.json").is_file()
    ]
    result = LadderResult(root, root / "ladder.md", None)
    result.skipped = [f"{p.name}/seed-{s}" for p in chosen for s in seeds if (p, s) not in todo]
    for name in result.skipped:
        log(f"skip {name}: finished")
    for plan in chosen:
        if plan.out_of_reach:
            log(f"skip {plan.name}: out of reach at the {ladder.scale.name} scale ({plan.out_of_reach})")
    eta = _Eta(len(todo), ladder.scale.steps)
    for index, (plan, seed) in enumerate(todo):
        started = time.perf_counter()
        log(f"[{index + 1}/{len(todo)}] rung {plan.name} seed {seed}: {plan.change}")
        progress = lambda step, last, i=index, p=plan, s=seed: eta.step(i, step, last, p, s, log)  # noqa: E731
        run_rung(ladder, plan, seed, root, progress, config.keep_checkpoints)
        eta.finish(time.perf_counter() - started)
        result.ran.append(f"{plan.name}/seed-{seed}")
    result.report_md, result.report_png = write_report(ladder, plans, root)
    return result


def _choose(plans: list[RungPlan], names: list[str] | None) -> list[RungPlan]:
    runnable = [p for p in plans if not p.out_of_reach]
    if not names:
        return runnable
    known = {p.name: p for p in plans}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LadderError(f"unknown rung(s) {', '.join(unknown)}; this ladder has {', '.join(known)}")
    blocked = [f"{n} ({known[n].out_of_reach})" for n in names if known[n].out_of_reach]
    if blocked:
        raise LadderError(f"out of reach at this scale: {'; '.join(blocked)}")
    return [p for p in plans if p.name in names]


@contextlib.contextmanager
def shared_lock(root: Path):
    """Held while the ladder's shared files (corpora, tokenizers, prepared data, tasks) are made, so that
    processes running other seeds in the same directory wait for one another instead of racing."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".prepare.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_dir(root: Path, rung: str, seed: int) -> Path:
    return root / "runs" / rung / f"seed-{seed}"


def run_rung(
    ladder: Ladder, plan: RungPlan, seed: int, root: Path, on_step_end=None, keep_checkpoints: bool = False
) -> dict[str, Any]:
    """Pretrain (or initialize) one rung with one seed, score it downstream, write ``result.json``."""
    run = _run_dir(root, plan.name, seed)
    with shared_lock(root):
        data_dir = prepared_data(ladder, plan.corpus, plan.tokenizer, root)
        tasks = {task: write_task(task, root / "tasks" / task) for task in ladder.downstream.tasks}
    config = pretrain_config(ladder, plan, seed, run, data_dir)
    if plan.init_from:
        source = _run_dir(root, plan.init_from, seed) / "final"
        if not (source / "config.json").is_file():
            raise LadderError(
                f"rung {plan.name} starts from {plan.init_from}, which has no model at {source}"
            )
        config = config.override(init_from=str(source))
    # the run's full config beside it: `neobert pretrain --config run/config.yaml` repeats it by hand
    write_text(run / "config.yaml", yaml.safe_dump(json.loads(json.dumps(config.to_dict())), sort_keys=False))
    pretrained = _read_json(run / "pretrain.json") if (run / "pretrain.json").is_file() else None
    if pretrained is None:
        pretrained = _pretrain(config, plan, run, on_step_end)
        write_json(run / "pretrain.json", pretrained, allow_nan=False)
    if not keep_checkpoints:
        shutil.rmtree(run / "checkpoints", ignore_errors=True)
    downstream = {}
    for task, (train, validation) in tasks.items():
        downstream[task] = _score(ladder, run / "final", train, validation, run / "downstream" / task, seed)
    result = {"rung": plan.name, "seed": seed, "pretrain": pretrained, "downstream": downstream}
    write_json(run / "result.json", result, allow_nan=False)
    return result


def _pretrain(config: PretrainConfig, plan: RungPlan, run: Path, on_step_end) -> dict[str, Any]:
    started = time.perf_counter()
    if not plan.pretrain:  # rung 0: the architecture with random weights, no training
        _export_random(config, run / "final")
        return {"steps": 0, "val_loss": None, "seconds": time.perf_counter() - started, "tokens": 0}
    resume = latest_checkpoint(run / "checkpoints") is not None  # a killed run continues from it
    if not resume:  # killed before its first checkpoint: its logged steps will be trained again
        (run / "metrics.jsonl").unlink(missing_ok=True)
    result = pretrain(config, resume=resume, on_step_end=on_step_end, progress_bar=False)
    if not (run / "final" / "config.json").is_file():
        raise RuntimeError(f"pretraining of {plan.name} exported no model under {run / 'final'}")
    return {
        "steps": result.steps,
        "val_loss": result.val_loss,
        "val_accuracy": result.val_accuracy,
        "train_loss": result.train_loss,
        "unigram_entropy": result.unigram_entropy,
        "tokens": result.tokens_seen,
        "seconds": result.seconds,
    }


def _export_random(config: PretrainConfig, final: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(TokenDataset(config.data.paths[0]).tokenizer_path))
    overrides = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id, **config.model}
    torch.manual_seed(config.seed)
    model_config = ModelConfig.from_name(config.preset, **overrides)
    model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(model_config))
    write_dir(lambda tmp: save_pretrained(model, tokenizer, tmp), final)


def _score(
    ladder: Ladder, model: Path, train: Path, validation: Path, out: Path, seed: int
) -> dict[str, Any]:
    """One ``finetune classify`` run (resumed if it was killed); its metrics. The fine-tuned model is
    removed once scored: the ladder keeps the pretrained models, not one classifier per task."""
    if (out / "metrics.json").is_file():
        return _read_json(out / "metrics.json")["metrics"]
    settings = {
        "model": str(model),
        "train": str(train),
        "validation": str(validation),
        "output": str(out),
        "seed": seed,
        "device": "cpu" if ladder.base.get("device") == "cpu" else None,
        "precision": "fp32" if ladder.base.get("precision") == "fp32" else "auto",
        "tensorboard": False,
        "show_progress": False,
        "resume": (out / "checkpoints").is_dir(),
        "max_train_samples": ladder.downstream.train_samples,
        "max_eval_samples": ladder.downstream.eval_samples,
        **ladder.downstream.settings,
    }
    result = run_classify(settings)
    shutil.rmtree(result.model_dir, ignore_errors=True)
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in result.metrics.items()}


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def prepared_data(ladder: Ladder, corpus: str, tokenizer: str, root: Path) -> Path:
    """The corpus tokenized with the tokenizer (``neobert data prepare``), made once per ladder output."""
    out = root / "data" / f"{corpus}--{tokenizer}"
    if (out / "manifest.json").is_file() and TokenDataset(out).complete:
        return out
    prepare(
        PrepareConfig(
            inputs=materialize_inputs(ladder.corpora[corpus].inputs, root / "corpora"),
            tokenizer=str(tokenizer_dir(ladder, tokenizer, root)),
            output=str(out),
            validation_fraction=PretrainConfig.from_dict(ladder.base).data.validation_fraction,
            progress=False,
        )
    )
    return out


def tokenizer_dir(ladder: Ladder, name: str, root: Path) -> Path:
    spec = ladder.tokenizers[name]
    out = root / "tokenizers" / name
    if spec.source == "bert-base-uncased":
        return default_tokenizer_dir()
    if spec.source == "default":
        return shipped_tokenizer(out)
    if spec.source is not None:
        if not Path(spec.source).is_dir():
            raise LadderError(f"tokenizer {name}: {spec.source} is not a directory")
        return Path(spec.source)
    if not (out / "tokenizer.json").is_file():
        inputs = materialize_inputs(ladder.corpora[spec.corpus].inputs, root / "corpora")
        write_dir(
            lambda tmp: train_tokenizer(inputs, kind=spec.train, vocab_size=spec.vocab_size, output_dir=tmp),
            out,
        )
    return out


class _Eta:
    """Progress lines: the rung, its step, and the ETA of the whole ladder (finished runs' mean time, or
    the current run's pace, for the runs left)."""

    def __init__(self, runs: int, steps: int, every: int = 25):
        self.runs, self.steps, self.every = runs, steps, every
        self.finished: list[float] = []
        self.started = time.perf_counter()

    def step(self, index: int, step: int, last: dict[str, float], plan: RungPlan, seed: int, log) -> None:
        if step % self.every and step != self.steps:
            return
        elapsed = time.perf_counter() - self.started
        this_run = elapsed / step * self.steps
        per_run = sum(self.finished) / len(self.finished) if self.finished else this_run
        left = (this_run - elapsed) + per_run * (self.runs - index - 1)
        loss = last.get("train/loss")
        loss_text = f" loss {loss:.3f}" if loss is not None else ""
        log(f"  {plan.name} seed {seed}: step {step}/{self.steps}{loss_text} | ladder ETA {_minutes(left)}")

    def finish(self, seconds: float) -> None:
        self.finished.append(seconds)
        self.started = time.perf_counter()


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"
