"""Merging checkpoints into one model (``neobert merge``): the average of the last k, an exponential moving
average over them in order, or TIES over several runs (e.g. decays branched from one stable checkpoint).

Inputs are model directories (``OUTPUT/final``, ``OUTPUT/exports/step-N``) or training checkpoints
(``OUTPUT/checkpoints/step-N``): anything holding a ``model.safetensors`` of the same architecture. The merged
directory takes its config and tokenizer from the template (the first input that has a config.json, or the
run's ``final``), and its card says what was merged and how.

TIES (Yadav et al. 2023, "TIES-Merging"), per tensor: each run's task vector t_i = theta_i - base is trimmed
to its ``density`` largest entries by magnitude (the rest set to 0), a sign is elected per entry as the sign
of the sum of the trimmed vectors, and the merged vector is the mean of the trimmed entries that agree with
it (0 where none does); the model is base + ``scale`` x merged. Arithmetic is float64, stored in the inputs'
dtype.

``lora`` folds a LoRA adapter directory (``finetune ... --lora``) into its base: W + (alpha / r) B A for each
adapted layer and the modules trained in full taken whole (peft's ``merge_and_unload``), written as the
directory a full fine-tuning would have written (:func:`neobert.training.lora.fold`). It is a merge, as TIES
is (a base plus a task's update), so it lives here with ``--base`` meaning the same; ``neobert export`` makes
artefacts for other runtimes (ONNX), and a folded directory exports like any other.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..cards import CardInfo, hub_model_id, write_card
from ..common.io import write_dir
from ..common.tables import markdown_table
from ..inference.kinds import describe_directory
from .checkpointing import list_checkpoints
from .lora import fold

METHODS = ("mean", "ema", "ties", "lora")
WEIGHTS = "model.safetensors"


@dataclass
class MergeConfig:
    """Merge checkpoints or models of one architecture into a model directory with its card."""

    inputs: list[str] = field(
        default_factory=list, metadata={"nargs": "+"}
    )  # model directories, checkpoints, or a run directory (its checkpoints); lora: one adapter directory
    output: str = "runs/merged"  # the merged model directory
    # mean (checkpoint averaging) | ema (in the inputs' order) | ties (needs base) | lora (an adapter folded
    # into its base: a plain model directory)
    method: str = "mean"
    last: int | None = None  # keep only the last K inputs (a run directory's last K checkpoints)
    ema_decay: float = 0.5  # ema: merged = decay x merged + (1 - decay) x next input, from the first input on
    # ties: the model the runs started from (e.g. the stable checkpoint they decayed from); lora: the base
    # the adapter is folded into (default: the one its adapter_config.json names; another is refused)
    base: str | None = None
    density: float = (
        0.2  # ties: the share of each task vector's entries kept (largest magnitudes, per tensor)
    )
    scale: float = 1.0  # ties: the merged task vector's multiplier
    template: str | None = (
        None  # where config.json and the tokenizer come from; default: the first input with them
    )


@dataclass
class MergeResult:
    output: Path
    method: str
    inputs: list[Path]
    tensors: int

    @property
    def summary(self) -> str:
        rows = [
            ("method", self.method),
            ("inputs", len(self.inputs)),
            ("tensors", self.tensors),
            ("model directory", str(self.output)),
        ]
        return "merge\n\n" + markdown_table(["what", "value"], rows)

    @property
    def notes(self) -> list[str]:
        return []


def resolve_inputs(inputs: list[str], last: int | None) -> list[Path]:
    """The weight directories to merge, in order: a run directory stands for its checkpoints."""
    found: list[Path] = []
    for item in map(Path, inputs):
        if (item / WEIGHTS).is_file():
            found.append(item)
        elif list_checkpoints(item / "checkpoints"):
            found += [path for _, path in list_checkpoints(item / "checkpoints")]
        else:
            raise FileNotFoundError(f"{item}: no {WEIGHTS} and no checkpoints under it to merge")
    if last is not None:
        if last <= 0:
            raise ValueError(f"last must be positive, got {last}")
        found = found[-last:]
    return found


def mean_merge(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: sum(s[k].double() for s in states) / len(states) for k in states[0]}


def ema_merge(states: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    merged = {k: v.double() for k, v in states[0].items()}
    for state in states[1:]:
        merged = {k: decay * merged[k] + (1.0 - decay) * state[k].double() for k in merged}
    return merged


def ties_merge(
    base: dict[str, torch.Tensor], states: list[dict[str, torch.Tensor]], density: float, scale: float = 1.0
) -> dict[str, torch.Tensor]:
    merged = {}
    for key, start in base.items():
        vectors = torch.stack([s[key].double() - start.double() for s in states])  # (runs, *shape)
        flat = vectors.reshape(len(states), -1)
        keep = max(1, math.ceil(density * flat.shape[1]))
        # the keep-th largest magnitude of each run: entries at or above it survive (ties at it survive too)
        threshold = flat.abs().topk(keep, dim=1).values[:, -1:]
        trimmed = torch.where(flat.abs() >= threshold, flat, torch.zeros_like(flat))
        sign = torch.sign(trimmed.sum(0))
        agree = (torch.sign(trimmed) == sign) & (trimmed != 0)
        count = agree.sum(0)
        total = torch.where(agree, trimmed, torch.zeros_like(trimmed)).sum(0)
        vector = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))
        merged[key] = start.double() + scale * vector.reshape(start.shape)
    return merged


def load_states(paths: list[Path]) -> list[dict[str, torch.Tensor]]:
    states = [load_file(str(p / WEIGHTS)) for p in paths]
    keys = sorted(states[0])
    for path, state in zip(paths[1:], states[1:]):
        if sorted(state) != keys or any(state[k].shape != states[0][k].shape for k in keys):
            raise ValueError(
                f"{path} holds another architecture than {paths[0]} (tensor names or shapes differ)"
            )
    return states


def merge(config: MergeConfig) -> MergeResult:
    """Merge ``config.inputs`` by ``config.method`` into ``config.output`` (config, tokenizer, weights, card)."""
    if config.method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {config.method!r}")
    if config.method == "lora":
        return fold_adapter(config)
    paths = resolve_inputs(config.inputs, config.last)
    if len(paths) < 2 and config.method != "ties":
        raise ValueError(f"merging needs at least two inputs; got {len(paths)}")
    states = load_states(paths)
    if config.method == "ties":
        if config.base is None:
            raise ValueError("ties needs --base: the model the merged runs started from")
        if not 0.0 < config.density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {config.density}")
        base_path = resolve_inputs([config.base], None)[-1]
        merged = ties_merge(load_states([paths[0], base_path])[1], states, config.density, config.scale)
    elif config.method == "ema":
        if not 0.0 <= config.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {config.ema_decay}")
        merged = ema_merge(states, config.ema_decay)
    else:
        merged = mean_merge(states)
    merged = {k: v.to(states[0][k].dtype).contiguous() for k, v in merged.items()}
    template = find_template(paths, config.template)
    write_dir(lambda tmp: _write(tmp, template, merged, config, paths), config.output)
    return MergeResult(Path(config.output), config.method, paths, len(merged))


def fold_adapter(config: MergeConfig) -> MergeResult:
    """``--method lora``: the adapter directory (the one input) folded into its base (``config.base``, or
    the base it names), written with every other file of the directory and a card: a plain model directory
    that the usual loaders read without peft (:func:`neobert.training.lora.fold`)."""
    if len(config.inputs) != 1:
        raise ValueError(f"--method lora folds one adapter directory; got {len(config.inputs)} inputs")
    adapter = Path(config.inputs[0])
    folded: dict = {}

    def build(tmp: Path) -> None:
        merged, adapted = fold(adapter, tmp, config.base)
        folded.update(tensors=len(merged.state_dict()), base=adapted.base)
        write_card(tmp, fold_card(tmp, adapter, adapted.base, config))

    write_dir(build, config.output)
    return MergeResult(Path(config.output), "lora", [adapter], folded["tensors"])


def fold_card(directory: Path, adapter: Path, base: str, config: MergeConfig) -> CardInfo:
    """The card of a folded adapter: what the directory is (its kind's name for it), the adapter and base."""
    described = describe_directory(directory)
    head = described.card_head if described is not None else "base"
    description = (
        f"The LoRA adapter `{adapter.name}` folded into its base model `{base}` with `neobert merge "
        "--method lora` (peft's merge_and_unload): a plain model directory, no adapter, no peft needed."
    )
    return CardInfo(
        head=head,
        description=description,
        command="neobert merge --method lora",
        library=described.library if described is not None else "transformers",
        base_model=hub_model_id(base),
        settings=vars(config).copy(),
        run=[("adapter", str(adapter)), ("base", base)],
        tags=["lora", "merge"],
        name=Path(config.output).name,
    )


def find_template(paths: list[Path], template: str | None) -> Path:
    run = paths[0].parent.parent  # a checkpoint's run directory
    exports = sorted((run / "exports").glob("step-*"), reverse=True)
    candidates = [Path(template)] if template else [*paths, run / "final", *exports]
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate
    raise FileNotFoundError("no config.json among the inputs or beside their run: give --template MODEL_DIR")


def _write(tmp: Path, template: Path, merged: dict, config: MergeConfig, paths: list[Path]) -> None:
    for item in template.iterdir():
        if item.is_file() and item.name not in (WEIGHTS, "README.md") and not item.name.endswith(".png"):
            shutil.copyfile(item, tmp / item.name)
    save_file(merged, str(tmp / WEIGHTS), metadata={"format": "pt"})
    write_card(tmp, merge_card(config, paths))


def merge_card(config: MergeConfig, paths: list[Path]) -> CardInfo:
    how = {
        "mean": f"the average of {len(paths)} checkpoints",
        "ema": f"an exponential moving average (decay {config.ema_decay:g}) over {len(paths)} checkpoints in order",
        "ties": f"TIES over {len(paths)} runs from base `{config.base}` (density {config.density:g}, "
        f"scale {config.scale:g})",
    }[config.method]
    description = f"A NeoBERT masked language model merged with `neobert merge`: {how}."
    run = [("method", config.method), *((f"input {i + 1}", str(p)) for i, p in enumerate(paths))]
    if config.method == "ties":
        run.append(("base", str(config.base)))
    return CardInfo(
        head="mlm",
        description=description,
        command="neobert merge",
        settings=vars(config).copy(),
        run=run,
        tags=["pretraining", "masked-lm", "merge"],
        name=Path(config.output).name,
    )
