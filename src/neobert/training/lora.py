"""LoRA fine-tuning (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") through peft.

:class:`LoraSettings` are fields of every fine-tuning config (``--lora --lora-r 8 --lora-alpha 16
--lora-dropout 0.1 --lora-targets qkv,w12,w3``). :func:`adapt` is the one place a model is wrapped, before
the trainer prepares it: each target linear layer learns a rank-``r`` update ``B @ A`` scaled by ``alpha /
r`` (peft's ``LoraConfig``), the rest is frozen, and what the base does not have trains in full (peft's
``modules_to_save``): a task's new head, a module the checkpoint lacked. The trainer then sees a peft model:
its checkpoints, resume, precision and processes are those of any model. The directory a run writes is
:mod:`neobert.inference.adapters`', whose :func:`~neobert.inference.adapters.load_adapted` reads one back
over its base (the model card's snippet does the same with peft alone); :func:`fold` (``neobert merge
--method lora``) merges it into a plain model directory.

Default targets are decided per model family by what its layers are called (:data:`DEFAULT_TARGETS`):
every linear layer of the encoder's blocks, i.e. NeoBERT's fused per-head ``qkv``, the attention output
``wo``, the fused SwiGLU input ``w12`` ([gate | up]) and output ``w3``; a BERT-family model's ``query``,
``key``, ``value`` and its ``dense`` layers (attention output, FFN in and out).

A new fine-tuning command (the reranker of the retrieval issue, say) gets ``--lora`` in four steps, as
``classify`` and ``contrastive`` do: its config inherits :class:`LoraSettings` (a ``TrainSettings`` config
already does); the model goes through :func:`adapt` before the trainer prepares it (``classification_task.fit``
does it given ``base=`` and ``missing_keys=``, :func:`neobert.finetuning.contrastive.train` for the
embedding tasks); the best model is written by :func:`neobert.inference.adapters.save_model` (or
:func:`save_with_adapter` beside sentence-transformers' files); its card gets the :class:`LoraReport`
(``FinetuneFacts.lora``) and its report :func:`report_entry`. ``fingerprint`` keeps resume exact.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from ..common.io import move_into
from ..common.tables import fmt
from ..inference.adapters import (
    ADAPTER_FILES,
    Adapted,
    is_adapted,
    load_adapted,
    needs_peft,
    quiet_peft,
    write_adapter_files,
)
from ..inference.encoders import is_preset, write_model_files

# Per model family (config.model_type): the linear layers LoRA adapts by default (those present are used)
_BERT = ("query", "key", "value", "dense")
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "neobert": ("qkv", "wo", "w12", "w1", "w3"),  # w1: the GELU FFN of the BERT-like ablation models
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "camembert": _BERT,
    "electra": _BERT,
    "distilbert": ("q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"),
    "modernbert": ("Wqkv", "Wo", "Wi"),
}
WEIGHT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass(kw_only=True)
class LoraSettings:
    """LoRA: train an adapter instead of every weight (any fine-tuning command that trains an encoder)."""

    lora: bool = False  # train a LoRA adapter (peft) instead of every weight; a new head still trains in full
    lora_r: int = 8  # LoRA rank: each adapted layer learns an update B @ A of this rank
    lora_alpha: float = 16.0  # the update is scaled by lora_alpha / lora_r
    # dropout on the adapted layers' inputs (the adapter's path only); 0 by default, as peft's: on a CPU 0.05
    # made a training step slower than full fine-tuning (docs/benchmarks/lora/results.md)
    lora_dropout: float = 0.0
    # linear layers to adapt, by name (a layer whose name ends with it); default: the model family's
    # (NeoBERT qkv,wo,w12,w3; BERT / RoBERTa query,key,value,dense; DistilBERT; ModernBERT)
    lora_targets: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.lora_r, int) or isinstance(self.lora_r, bool) or self.lora_r < 1:
            raise ValueError(f"lora_r must be a positive integer, got {self.lora_r!r}")
        if not self.lora_alpha > 0:
            raise ValueError(f"lora_alpha must be positive, got {self.lora_alpha!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if isinstance(self.lora_targets, str):
            self.lora_targets = [t.strip() for t in self.lora_targets.split(",") if t.strip()]
        if not self.lora:
            defaults = LoraSettings.__dataclass_fields__
            changed = [
                name
                for name in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets")
                if getattr(self, name)
                != (defaults[name].default_factory() if name == "lora_targets" else defaults[name].default)
            ]
            if changed:
                options = ", ".join(f"{n} (--{n.replace('_', '-')})" for n in changed)
                raise ValueError(
                    f"LoRA is off, and {options} only apply to a LoRA adapter: add --lora (lora: true) to "
                    "train one, or drop them to fine-tune every weight"
                )


LORA_FIELDS = tuple(f.name for f in fields(LoraSettings))


def fingerprint(settings: dict[str, Any]) -> dict[str, Any]:
    """A run's settings as its checkpoints record them: the LoRA fields only where LoRA is on, so a run
    without it resumes from checkpoints written before the fields existed."""
    return settings if settings.get("lora") else {k: v for k, v in settings.items() if k not in LORA_FIELDS}


@dataclass
class LoraReport:
    """What :func:`adapt` did: the adapter's settings, what it adapted, what trains in full, the counts."""

    base: str  # the base as the run was given it (adapter_config.json's base_model_name_or_path)
    r: int
    alpha: float
    dropout: float
    targets: list[str]  # the adapted layers' names
    trained_fully: list[str]  # modules trained in full (the new head, what the checkpoint lacked)
    trainable: int  # parameters that get gradients
    total: int  # parameters of the model a full fine-tuning trains

    @property
    def share(self) -> float:
        return self.trainable / max(self.total, 1)

    def rows(self) -> list[tuple[str, Any]]:
        """For a card or a summary: one (what, value) row each."""
        return [
            ("base model", self.base),
            ("rank r, alpha, dropout", f"{self.r}, {fmt(self.alpha)}, {fmt(self.dropout)}"),
            ("adapted layers", ", ".join(self.targets)),
            ("trained in full", ", ".join(self.trained_fully) or "nothing"),
            ("trainable parameters", f"{self.trainable:,} of {self.total:,} ({fmt(self.share, 100, 2)}%)"),
        ]


def _transformer(module: torch.nn.Module) -> tuple[str, PreTrainedModel]:
    """The transformers model a LoRA adapter applies to: ``module`` itself, or its one transformers child
    (a late-interaction model's encoder, beside its projection)."""
    if isinstance(module, PreTrainedModel):
        return "", module
    found = [(n, c) for n, c in module.named_children() if isinstance(c, PreTrainedModel)]
    if len(found) != 1:
        raise TypeError(f"LoRA needs one transformers model in {type(module).__name__}, found {len(found)}")
    return found[0]


def _parts(name: str, module: torch.nn.Module, tied: torch.nn.Module | None) -> list[str]:
    """``module`` (named ``name``) as modules to train in full, without the output layer ``tied`` to the
    frozen input embeddings (BERT's decoder is its embedding table: it stays tied, and frozen)."""
    if tied is None or not any(m is tied for m in module.modules()):
        return [name] if any(True for _ in module.parameters()) else []
    if module is tied:
        return []
    return [part for sub, child in module.named_children() for part in _parts(f"{name}.{sub}", child, tied)]


def trained_fully(model: PreTrainedModel, missing_keys: Iterable[str] = ()) -> list[str]:
    """The modules of ``model`` that train in full under LoRA: its head (every top-level module besides its
    base model) and every module holding a weight the checkpoint lacked (``missing_keys``: transformers'
    loading info), since only the adapter directory can carry them."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out if out is not None and inp is not None and out.weight is inp.weight else None
    names: list[str] = []
    if model.base_model is not model:
        for name, child in model.named_children():
            if name != model.base_model_prefix:
                names += _parts(name, child, tied)
    for key in sorted(missing_keys):
        module = key.rpartition(".")[0]
        holder = model.get_submodule(module) if module else model
        inside = any(module == n or module.startswith(n + ".") for n in names)
        if module and not inside and (tied is None or not any(m is tied for m in holder.modules())):
            names.append(module)
    return sorted(set(names))


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def resolve_targets(
    model: PreTrainedModel, given: list[str], fully: list[str]
) -> tuple[list[str], list[str]]:
    """(the target names LoRA adapts, the layers they would match inside modules trained in full: excluded).
    A given name that matches no linear layer, or a model family without defaults, is a clear error naming
    the model's linear layers."""
    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    inside = [n for n in linear if any(n == f or n.startswith(f + ".") for f in fully)]
    candidates = [n for n in linear if n not in inside]
    names = ", ".join(sorted({n.rpartition(".")[2] for n in candidates}))
    model_type = getattr(model.config, "model_type", None)
    wanted = list(given) or list(DEFAULT_TARGETS.get(model_type, ()))
    if not wanted:
        raise ValueError(
            f"no default LoRA targets for {model_type!r} models; name them with --lora-targets (lora_targets) "
            f"from its linear layers: {names}"
        )
    found = [t for t in wanted if any(_matches(n, t) for n in candidates)]
    missing = [t for t in wanted if t not in found] if given else ([] if found else wanted)
    if missing:
        head = f" outside the modules trained in full ({', '.join(fully)})" if fully else ""
        raise ValueError(
            f"LoRA target(s) {', '.join(missing)} match no linear layer of this {model_type} model "
            f"({type(model).__name__}){head}; its linear layers are called: {names}"
        )
    excluded = [n for n in inside if any(_matches(n, t) for t in found)]
    return found, excluded


def adapt(
    module: torch.nn.Module, settings: LoraSettings, base: str, missing_keys: Iterable[str] = ()
) -> tuple[torch.nn.Module, LoraReport]:
    """Wrap the transformers model of ``module`` (itself, or its one transformers child) with a LoRA adapter
    over the base ``base`` (as the run names it: adapter_config.json's ``base_model_name_or_path``); the
    module to train and what was done. A preset (random weights no directory holds) is refused."""
    peft = needs_peft("LoRA fine-tuning (--lora)")
    if is_preset(base):
        raise ValueError(
            f"LoRA trains an adapter over a base model's weights, and {base!r} is a preset with random weights "
            "that no directory holds: save the model first (a directory) or fine-tune it in full (no --lora)"
        )
    name, model = _transformer(module)
    total = sum(p.numel() for p in module.parameters())
    fully = trained_fully(model, missing_keys)
    targets, excluded = resolve_targets(model, settings.lora_targets, fully)
    config = peft.LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=targets,
        exclude_modules=excluded or None,
        modules_to_save=fully or None,
    )
    with quiet_peft():
        adapted = peft.get_peft_model(model, config)
    adapted.peft_config["default"].base_model_name_or_path = str(base)
    if name:
        setattr(module, name, adapted)
        beside = [n for n, c in module.named_children() if n != name and any(True for _ in c.parameters())]
        fully = [*fully, *beside]  # a late-interaction projection: outside the adapter, trained in full
        adapted = module
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    report = LoraReport(
        str(base),
        settings.lora_r,
        settings.lora_alpha,
        settings.lora_dropout,
        targets,
        fully,
        trainable,
        total,
    )
    return adapted, report


def merged_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` with its adapter merged into the weights (peft's ``merge_and_unload``): the
    plain model a full fine-tuning would have, for the savers that write a directory from one."""
    merged = copy.deepcopy(module)
    name, inner = ("", merged) if hasattr(merged, "merge_and_unload") else _peft_child(merged)
    if not name:
        return inner.merge_and_unload()
    setattr(merged, name, inner.merge_and_unload())
    return merged


def _peft_child(module: torch.nn.Module) -> tuple[str, Any]:
    for name, child in module.named_children():
        if hasattr(child, "merge_and_unload"):
            return name, child
    raise TypeError(f"{type(module).__name__} holds no LoRA adapter")


def save_with_adapter(
    module: torch.nn.Module, tokenizer: Any, output: str | os.PathLike, save: Callable[[Any, Path], Any]
) -> Path:
    """The directory ``save(model, directory)`` writes for a full fine-tuning (sentence-transformers' files,
    say), with the transformer at its root as the adapter of the peft model ``module`` instead of its
    weights. Staged beside ``output``, then each entry moved in whole; files already there (logs) stay."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".neobert-lora-", dir=output) as staging:
        built = Path(staging) / "built"
        save(merged_copy(module), built)
        for name in WEIGHT_FILES:
            (built / name).unlink(missing_ok=True)
        write_adapter_files(module if is_adapted(module) else _peft_child(module)[1], tokenizer, built)
        move_into(built, output)
    return output


def fold(directory: str | os.PathLike, output: Path, base: str | None = None) -> tuple[Any, Adapted]:
    """Write ``directory`` (an adapter directory) with its adapter merged into the base's weights into the
    directory ``output`` (not atomic: :func:`neobert.training.merge.merge` stages it): every file but the
    adapter's, and the merged model at the root. The merged model and what was loaded."""
    adapted = load_adapted(directory, base)
    merged = adapted.model.merge_and_unload()
    for entry in Path(directory).iterdir():
        if entry.name in (*ADAPTER_FILES, "README.md") or entry.name.startswith("."):
            continue
        if entry.is_dir():
            shutil.copytree(entry, output / entry.name)
        else:
            shutil.copyfile(entry, output / entry.name)
    write_model_files(merged, adapted.tokenizer, output)
    return merged, adapted


def report_entry(report: LoraReport | None) -> dict[str, Any] | None:
    """A run report's LoRA entry (metrics.json): the report's fields and the trainable share."""
    return None if report is None else {**asdict(report), "share": report.share}
