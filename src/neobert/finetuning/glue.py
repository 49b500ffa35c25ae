"""``neobert finetune glue``: GLUE dev with the paper's protocol, for any encoder.

Per task: a sweep over the grid (one run without one), each run up to ``epochs`` epochs with evaluation
every ``eval_every`` steps and early stopping; the sweep's best checkpoint is kept in ``OUTPUT/<task>/best``.
RTE, MRPC and STS-B start from MNLI's best checkpoint (MNLI runs first). At the end: ``OUTPUT/results.md``
(Table 3's layout) and ``OUTPUT/results.json``.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..cards import CardInfo, DataSource, Result, update_card, wall_time, write_card
from ..common.io import replace_dir
from ..common.progress import progress_bar
from ..inference.encoders import check_vocab, is_preset, max_positions, resolve_tokenizer
from ..training.trainer import is_main_process, wait_for_everyone
from .card import FinetuneFacts, finetune_card
from .classification_task import EvalSpec, fit, is_better
from .config import FinetuneConfigError, GlueConfig, TrainSettings
from .data import EncodedDataset
from .glue_report import GlueResults, GlueTaskResult, table3_average, write_glue_report, write_sweep_report
from .glue_tasks import HUB_DATASET, MNLI_TRANSFER_TASKS, GlueTask, load_split, local_file, resolve_tasks
from .models import load_classifier
from .sweep import SweepRow, best_index, expand_grid, load_grid, run_label


def run_glue(config: GlueConfig | dict[str, Any]) -> GlueResults:
    """Fine-tune and evaluate ``config.model`` on the GLUE tasks of ``config.tasks``."""
    if isinstance(config, dict):
        config = GlueConfig.from_dict(config)
    tasks = resolve_tasks(config.tasks)
    _check_lora_transfer(config, tasks)
    points = expand_grid(load_grid(config.grid), config.train_settings(), config.max_configs, config.seed)
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    output = Path(config.output)
    results: dict[str, GlueTaskResult] = {}
    for task in progress_bar(
        tasks, desc="GLUE tasks", unit="task", disable=not config.show_progress or len(tasks) < 2
    ):
        source = config.model
        if task.name in MNLI_TRANSFER_TASKS:
            if config.from_mnli is not None:
                source = config.from_mnli
            elif config.transfer_from_mnli and "mnli" in results:
                source = str(results["mnli"].checkpoint)
        results[task.name] = _run_task(config, task, source, points, tokenizer, output / task.name)
    report = write_glue_report(config, results, output) if is_main_process() else None
    if config.update_card and is_main_process():
        if not (Path(config.model) / "config.json").is_file():
            raise ValueError(
                f"--update-card: {config.model} is not a local model directory, so it has no card"
            )
        update_card(config.model, [r for t in results.values() for r in _results(config, t.task, t.metrics)])
    wait_for_everyone()
    return report or GlueResults(
        config.model, results, table3_average(results), output / "results.md", output / "results.json"
    )


def _check_lora_transfer(config: GlueConfig, tasks: list[GlueTask]) -> None:
    """LoRA with the MNLI transfer is refused: MNLI's best is an adapter over --model, and an adapter for
    RTE, MRPC or STS-B over that adapter would name a base no directory holds."""
    lora = config.lora or any(load_grid(config.grid).get("lora", []))  # on, or on at a grid point
    transfer = [t.name for t in tasks if t.name in MNLI_TRANSFER_TASKS]
    names = {t.name for t in tasks}
    if lora and transfer and (config.from_mnli or (config.transfer_from_mnli and "mnli" in names)):
        raise FinetuneConfigError(
            f"LoRA trains adapters over --model, and {', '.join(transfer)} would start from MNLI's model: "
            "pass --no-mnli-transfer (and no --from-mnli), or fine-tune in full (no --lora)"
        )


def _encode(
    config: GlueConfig, task: GlueTask, tokenizer: Any, max_length: int
) -> tuple[EncodedDataset, dict[str, EncodedDataset]]:
    def encoded(split: str, limit: int | None) -> EncodedDataset:
        texts, pairs, labels = load_split(task, split, config.data_dir, limit)
        return EncodedDataset(tokenizer, texts, pairs, labels, max_length, config.show_progress)

    train = encoded("train", config.max_train_samples)
    return train, {split: encoded(split, config.max_eval_samples) for split in task.validation_splits}


def _run_task(
    config: GlueConfig,
    task: GlueTask,
    source: str,
    points: list[tuple[dict[str, Any], TrainSettings]],
    tokenizer: Any,
    task_dir: Path,
) -> GlueTaskResult:
    spec = EvalSpec(task.metrics, task.score, task.regression)
    id2label = dict(enumerate(task.label_names)) if task.label_names else None
    overrides = config.preset_overrides if is_preset(source) else None
    cache: dict[int, tuple[EncodedDataset, dict[str, EncodedDataset]]] = {}
    rows: list[SweepRow] = []
    sweep = progress_bar(
        points, desc=f"{task.title} sweep", unit="run", disable=not config.show_progress or len(points) < 2
    )
    for point, settings in sweep:
        torch.manual_seed(settings.seed)  # the same head initialisation for every grid point
        model, missing = load_classifier(source, task.num_labels, id2label, overrides, loading_info=True)
        check_vocab(model, tokenizer)
        max_length = min(settings.max_length, max_positions(model, tokenizer))
        if max_length not in cache:  # tokenize once per task (unless the grid sweeps max_length)
            cache[max_length] = _encode(config, task, tokenizer, max_length)
        train, splits = cache[max_length]
        start = time.perf_counter()
        fitted = _fit_point(
            config,
            task,
            (model, source, missing),
            tokenizer,
            (train, splits),
            spec,
            settings,
            task_dir,
            run_label(point),
        )
        rows.append(SweepRow.from_fit(point, fitted, time.perf_counter() - start))
        precision = fitted.precision
        if is_main_process():
            _keep_if_best(rows, fitted.checkpoint, task_dir / "best")
            write_sweep_report(task, rows, task_dir)  # after every run, so a long sweep shows progress
        wait_for_everyone()  # e.g. MNLI's best is in place before a transfer task loads it
        del model, fitted
    chosen = rows[best_index(rows)]
    if is_main_process():
        write_card(task_dir / "best", _card(config, task, source, chosen, rows, precision, train, splits))
    wait_for_everyone()
    return GlueTaskResult(
        task,
        chosen.score,
        chosen.metrics,
        chosen.notes,
        chosen.point,
        chosen.best_step,
        task_dir / "best",
        source,
        rows,
    )


def _fit_point(
    config: GlueConfig,
    task: GlueTask,
    loaded: tuple[Any, str, list[str]],
    tokenizer: Any,
    data: tuple[EncodedDataset, dict[str, EncodedDataset]],
    spec: EvalSpec,
    settings: TrainSettings,
    task_dir: Path,
    label: str,
) -> Any:
    """One grid point's fine-tuning into ``task_dir/.candidate-LABEL`` (the result's ``checkpoint``), its
    resumable state and TensorBoard log under the same label, so the points of a sweep never share a
    directory. ``loaded``: the model, the source it was loaded from, the weights its checkpoint lacked."""
    train, splits = data
    model, source, missing = loaded
    return fit(
        model,
        tokenizer,
        train,
        splits,
        spec,
        settings,
        task_dir / f".candidate-{label}",
        config,
        log_dir=task_dir / "tensorboard" / label,
        description=f"{task.title} {label}",
        state_dir=task_dir / f".state-{label}",
        base=source,
        missing_keys=missing,
    )


def _card(
    config: GlueConfig,
    task: GlueTask,
    source: str,
    chosen: SweepRow,
    rows: list[SweepRow],
    precision: str,
    train: EncodedDataset,
    splits: dict[str, EncodedDataset],
) -> CardInfo:
    """The card of OUTPUT/<task>/best: the sweep's chosen run, its numbers as in OUTPUT/<task>/sweep.json."""
    hub = config.data_dir is None
    splits_read = ("train", *task.validation_splits)
    data = (
        [DataSource(f"hf:{HUB_DATASET}:{task.name}", hub_id=HUB_DATASET)]
        if hub
        else [DataSource.from_spec(local_file(task, Path(config.data_dir), split)) for split in splits_read]
    )
    kind = HUB_DATASET if hub else task.name
    run = [
        ("precision run", precision),
        ("runs in the sweep", len(rows)),
        ("chosen run's steps", f"{chosen.steps:,}"),
        ("best evaluation (the saved model)", f"step {chosen.best_step:,}"),
        ("stopped early", chosen.stopped_early),
        ("wall time of the chosen run", wall_time(chosen.seconds)),
    ]
    settings = {**config.to_dict(), "chosen grid point": chosen.point or "(no grid)"}
    facts = FinetuneFacts(
        head="sequence-classification",
        command="neobert finetune glue",
        task=f"GLUE {task.title}",
        model=source,
        settings=settings,
        data=data,
        data_stats=[
            ("training examples", len(train)),
            *((f"{s} examples", len(d)) for s, d in splits.items()),
        ],
        run=run,
        results={(f"GLUE {task.title}", kind, split): m for split, m in chosen.metrics.items()},
        labels=list(task.label_names) or None,
        license=config.license,
        lora=chosen.lora,
        limits=["Scores are on GLUE's validation (dev) split, which also selected the run and the step."],
    )
    return finetune_card(facts)


def _results(config: GlueConfig, task: GlueTask, metrics: dict[str, dict[str, float]]) -> list[Result]:
    """A task's dev scores (split -> metric -> value, as results.json) as entries of the base model's card."""
    kind = HUB_DATASET if config.data_dir is None else task.name
    return [
        Result(
            "text-classification",
            f"GLUE {task.title}",
            f"GLUE {task.title}",
            kind,
            metric,
            value,
            split,
            "neobert finetune glue",
            config=task.name,
        )
        for split, values in metrics.items()
        for metric, value in values.items()
        if not math.isnan(value)
    ]


def _keep_if_best(rows: list[SweepRow], candidate: Path, best_dir: Path) -> None:
    """Keep only the sweep's best checkpoint on disk (60 full checkpoints per task would not fit):
    the last run's replaces ``best_dir`` if it beats every earlier run, else it is deleted."""
    if len(rows) == 1 or is_better(rows[-1].score, rows[best_index(rows[:-1])].score):
        replace_dir(candidate, best_dir)
    else:
        shutil.rmtree(candidate, ignore_errors=True)
