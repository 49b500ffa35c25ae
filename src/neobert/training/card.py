"""The model card of a pretraining export (the final model and every checkpoint exported on the way)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cards import CardInfo, DataSource, Result, wall_time
from ..common.tables import fmt
from ..data.shards import MANIFEST, read_manifest
from .config import PretrainConfig


@dataclass
class RunFacts:
    """What the run had done when the directory was written."""

    step: int
    tokens_seen: int
    seconds: float
    precision: str  # the precision actually run: bf16 | fp32
    processes: int
    metrics: dict[
        str, float
    ]  # val/loss, val/accuracy, train/loss measured at ``step`` (absent: not measured)
    unigram_entropy: float | None
    final: bool
    phases: list[dict[str, Any]] = field(default_factory=list)  # what each phase was set to and saw


def prepared_dirs(config: PretrainConfig) -> list[Path]:
    """The prepared data directories the run read: those given, and OUTPUT/data for raw files."""
    paths = [Path(p) for p in config.data.paths]
    dirs = [p for p in paths if (p / MANIFEST).is_file()]
    if len(dirs) < len(paths) and (Path(config.output) / "data" / MANIFEST).is_file():
        dirs.append(Path(config.output) / "data")
    return dirs


def data_facts(config: PretrainConfig) -> tuple[list[DataSource], list[tuple[str, Any]]]:
    """The sources the prepared data came from (as their manifests name them) and its sizes."""
    sources: list[DataSource] = []
    stats = {"train documents": 0, "train tokens": 0, "validation documents": 0, "validation tokens": 0}
    for directory in prepared_dirs(config):
        manifest = read_manifest(directory)
        sources += [DataSource.from_spec(spec) for spec in manifest["config"]["inputs"]]
        totals = manifest.get("totals", {})
        for split in ("train", "validation"):
            stats[f"{split} documents"] += totals.get(split, {}).get("documents", 0)
            stats[f"{split} tokens"] += totals.get(split, {}).get("tokens", 0)
    return sources, list(stats.items()) if sources else []


def optimizer_facts(config: PretrainConfig) -> list[tuple[str, Any]]:
    """The optimizer in words (its every setting is in the card's settings too)."""
    o = config.optim
    if o.name != "muon":
        return [
            ("optimizer", f"{o.name} (lr {o.lr:g}, betas {tuple(o.betas)}, weight decay {o.weight_decay:g})")
        ]
    return [
        (
            "optimizer",
            f"Muon for the hidden 2-D weights (momentum {o.muon_momentum:g}, nesterov "
            f"{o.muon_nesterov}, {o.muon_ns_steps} Newton-Schulz steps, lr adjustment {o.muon_adjust_lr}) "
            f"and AdamW for embeddings, norms, biases and the output layer (betas {tuple(o.betas)}); "
            f"lr {o.lr:g}, weight decay {o.weight_decay:g}",
        )
    ]


def schedule_facts(config: PretrainConfig) -> list[tuple[str, Any]]:
    """The learning-rate schedule and masking rate in words."""
    s, d = config.schedule, config.data
    shape = f"{s.kind}, warmup {s.warmup_steps:,} steps, floor {s.final_ratio:g} x peak"
    if s.kind == "wsd":
        shape += f", decay {s.decay_steps if s.decay_steps is not None else '10%'} steps ({s.decay_shape})"
    rate = (
        f"{d.mask_rate:g}"
        if d.mask_rate_end is None
        else f"{d.mask_rate:g} -> {d.mask_rate_end:g} ({d.mask_rate_shape})"
    )
    return [("learning-rate schedule", shape), ("masking rate", rate)]


def phase_facts(phases: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """One line per phase: its steps, rows, masking, lr, model settings and the data it drew."""
    if len(phases) < 2:
        return []
    rows = []
    for i, p in enumerate(phases):
        drawn = ", ".join(f"{name} {n:,}" for name, n in p["documents_drawn"].items())
        sampling = ", ".join(f"{name} {w:.3g}" for name, w in p["sampling"].items())
        rate = p["mask_rate"]
        rows.append(
            (
                f"phase {i + 1}: {p['name']}",
                f"steps {p['first_step']:,}-{p['first_step'] + p['steps']:,} ({p['steps_trained']:,} trained, "
                f"{p['tokens_trained']:,} tokens), rows of {p['seq_len']:,}, masking {rate[0]:g}"
                + (f" -> {rate[1]:g}" if rate[1] != rate[0] else "")
                + f", peak lr {p['peak_lr']:g} ({p['schedule']['kind']}), model {p['model'] or 'unchanged'}; "
                f"sampling {sampling}; documents drawn {drawn}",
            )
        )
    return rows


def _run_facts(config: PretrainConfig, facts: RunFacts) -> list[tuple[str, str]]:
    """The card's rows about the run: precision, steps, tokens, time, losses, optimizer, schedule, phases."""
    run = [
        ("precision run", facts.precision),
        ("processes", facts.processes),
        ("steps", f"{facts.step:,}"),
        ("tokens seen", f"{facts.tokens_seen:,}"),
        ("wall time", wall_time(facts.seconds)),
        ("last training loss (logged at this step)", fmt(facts.metrics.get("train/loss"), digits=4)),
        ("unigram baseline (entropy of the token frequencies)", fmt(facts.unigram_entropy, digits=4)),
    ]
    run += optimizer_facts(config) + schedule_facts(config) + phase_facts(facts.phases)
    if facts.final and facts.step < config.max_steps:
        run.append(("stopped", f"at step {facts.step:,} of {config.max_steps:,} (time limit or early stop)"))
    return run


def pretrain_card(
    config: PretrainConfig, facts: RunFacts, model: Any, loss_curve: str | None = None
) -> CardInfo:
    """The card of a model exported by :func:`neobert.training.mlm_task.pretrain` at ``facts.step``."""
    c = model.config
    sources, stats = data_facts(config)
    start = f"continued from `{config.init_from}`" if config.init_from else "from scratch"
    if config.decay_from:
        start = f"as a decay branched from the stable run's checkpoint `{config.decay_from}`"
    what = (
        "the final model"
        if facts.final
        else f"the checkpoint at step {facts.step:,} (of up to {config.max_steps:,})"
    )
    description = (
        f"A NeoBERT masked language model ({c.num_hidden_layers} layers x {c.hidden_size} hidden, preset "
        f"`{config.preset}`) pretrained {start} with `neobert pretrain`: {what} of a run that had trained "
        f"{facts.step:,} steps on {facts.tokens_seen:,} tokens when this directory was written."
    )
    run = _run_facts(config, facts)
    data_name = ", ".join(s.hub_id or s.name for s in sources) or "training data"
    results = [
        Result(
            "fill-mask",
            "Masked language modelling",
            f"held-out documents of {data_name}",
            data_name,
            metric,
            facts.metrics[key],
            "validation",
            "neobert pretrain",
        )
        for key, metric in (("val/loss", "loss"), ("val/accuracy", "accuracy"))
        if key in facts.metrics
    ]
    limits = [
        "Pretrained with masked language modelling only: fine-tune it (`neobert finetune ...`) before using "
        "it to classify, tag or embed.",
        f"Inputs longer than {c.max_length:,} tokens must be truncated or chunked.",
    ]
    return CardInfo(
        head="mlm",
        description=description,
        command="neobert pretrain",
        data=sources,
        data_stats=stats,
        settings=config.to_dict(),
        run=run,
        results=results,
        loss_curve=loss_curve,
        license=config.license,
        limits=limits,
        tags=["pretraining", "masked-lm"],
        name=Path(config.output).name + ("" if facts.final else f" (step {facts.step})"),
    )
