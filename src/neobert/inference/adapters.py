"""A LoRA adapter directory: what it holds, how it is written, and how a card says to load it.

A fine-tuning run with ``--lora`` writes the directory a full fine-tuning would write, with the transformer at
its root replaced by an adapter in peft's own layout: ``adapter_config.json`` (peft's ``LoraConfig``, whose
``base_model_name_or_path`` names the base as the run was given it) and ``adapter_model.safetensors`` (the
LoRA matrices, and the modules trained in full: peft's ``modules_to_save``), beside ``adapter_base.json``,
which says how to build the model the adapter applies to::

    {"base_model_name_or_path": "...", "head": "sequence-classification",
     "config": {"num_labels": 2, "id2label": {...}, "label2id": {...}, ...},
     "model_type": "neobert", "hidden_size": 768, "vocab_size": 30522}

``head`` is a :data:`~neobert.inference.registration.HEADS` key (its ``auto_class`` loads the base),
``config`` the config fields the base is loaded with (a classifier's labels and pooling; empty for a bare
encoder or a masked-LM model). Then ``PeftModel.from_pretrained(base, directory)`` is the fine-tuned model.
There is no ``config.json`` at the root: transformers would take the directory for a whole model with an
adapter embedded in it. The sentence-transformers files of an embedding, SPLADE or late-interaction run
(``modules.json``, ``1_Pooling/``, ``1_Dense/`` ...) are written as a full run writes them.

:func:`load_adapted` reads one back over its base (what a service or a fold calls; training one is
:mod:`neobert.training.lora`).
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from ..common.io import atomic_dir
from .encoders import (
    is_preset,
    load_model,
    model_dir,
    resolve_tokenizer,
    save_pretrained,
    write_tokenizer_files,
)
from .registration import HEADS, head_of

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_BASE = "adapter_base.json"
ADAPTER_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, ADAPTER_BASE)
# what peft's task types mean, for an adapter written elsewhere (no adapter_base.json)
PEFT_TASK_HEADS = {"SEQ_CLS": "sequence-classification", "TOKEN_CLS": "token-classification"}
# config fields a labelled head is loaded with (the rest is the base's own)
HEAD_FIELDS = ("num_labels", "id2label", "label2id", "problem_type", "classifier_pooling")
LORA = "LORA"  # the one peft type read here: LoRA's


class AdapterError(ValueError):
    """An adapter directory that cannot be read or applied to its base: the message names the adapter and why."""


@dataclass
class AdapterInfo:
    """An adapter directory, described: its base, the head its base is loaded with, its LoRA settings."""

    path: Path
    base: str  # adapter_config.json's base_model_name_or_path, as written
    head: str  # a HEADS key
    config: dict[str, Any] = field(default_factory=dict)  # config fields the base is loaded with
    r: int = 0
    alpha: float = 0.0
    targets: list[str] | str = field(default_factory=list)  # a regular expression where peft was given one
    trained_fully: list[str] = field(default_factory=list)  # peft's modules_to_save
    model_type: str | None = None  # the base's (transformers' config.model_type)
    hidden_size: int | None = None
    vocab_size: int | None = None
    described: bool = False  # it has an adapter_base.json (its head and config are known, not guessed)

    @property
    def weights(self) -> Path:
        return self.path / ADAPTER_WEIGHTS

    @property
    def source(self) -> str:
        """Where the base is here: a directory as written (from here), or beside the adapter where the name
        is relative; otherwise as written (a preset, a Hub id)."""
        for candidate in (Path(self.base).expanduser(), self.path / self.base):
            if candidate.is_dir():
                return str(candidate.resolve())
        return self.base


def needs_peft(what: str) -> Any:
    """The peft package (the ``lora`` extra), or an error saying ``what`` needs it and how to install it
    (peft is imported only where it is used)."""
    try:
        import peft
    except ImportError as err:
        raise ImportError(f"{what} needs peft ({err}): pip install 'neobert[lora]'") from None
    return peft


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 asks transformers 5 for ``is_gradient_checkpointing``, which warns that the name is deprecated
    on every adapter built or loaded: a message about the libraries, not about the user's run."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a peft adapter (``adapter_config.json``)."""
    return (Path(path).expanduser() / ADAPTER_CONFIG).is_file()


def is_adapted(model: Any) -> bool:
    """Whether ``model`` is a peft model (it saves its adapter, not its weights)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def read_adapter(path: str | os.PathLike) -> AdapterInfo:
    """The adapter directory ``path``, described; a clear error where it holds no adapter, an unreadable one,
    another peft type than LoRA, or one that names no base."""
    path = Path(path).expanduser()
    if not is_adapter_dir(path):
        raise FileNotFoundError(f"{path} is not a LoRA adapter directory: it holds no {ADAPTER_CONFIG}")
    try:
        peft = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        base_file = path / ADAPTER_BASE
        base = json.loads(base_file.read_text(encoding="utf-8")) if base_file.is_file() else {}
    except (OSError, ValueError) as err:
        raise AdapterError(f"{path}: not a readable adapter directory ({err})") from None
    kind = str(peft.get("peft_type", "")).upper()
    if kind != LORA:
        raise AdapterError(
            f"{path / ADAPTER_CONFIG}: peft_type {kind or 'missing'}; only LoRA adapters are read"
        )
    declared = peft.get("base_model_name_or_path") or base.get("base_model_name_or_path")
    if not declared:
        raise AdapterError(
            f"{path / ADAPTER_CONFIG}: base_model_name_or_path is missing, so its base is unknown"
        )
    targets = peft.get("target_modules") or []
    return AdapterInfo(
        path=path,
        base=str(declared),
        head=base.get("head") or PEFT_TASK_HEADS.get(peft.get("task_type") or "", "base"),
        config=_json_config(base.get("config") or {}),
        r=int(peft.get("r") or 0),
        alpha=float(peft.get("lora_alpha") or 0.0),
        targets=targets if isinstance(targets, str) else sorted(targets),
        trained_fully=list(peft.get("modules_to_save") or []),
        model_type=base.get("model_type"),
        hidden_size=base.get("hidden_size"),
        vocab_size=base.get("vocab_size"),
        described=bool(base.get("head")),
    )


def _json_config(fields: dict[str, Any]) -> dict[str, Any]:
    """Config fields as adapter_base.json holds them, as transformers wants them: JSON's keys are text, and a
    config's ``id2label`` is keyed by the ids (transformers converts them only where it reads a config.json)."""
    fields = dict(fields)
    if isinstance(fields.get("id2label"), dict):
        fields["id2label"] = {int(k): v for k, v in fields["id2label"].items()}
    return fields


def head_fields(config: Any, head: str) -> dict[str, Any]:
    """The config fields a model with ``head`` is loaded with over its base: a labelled head's labels (and
    NeoBERT's classifier pooling); nothing for a bare encoder or a masked-LM model."""
    if not HEADS[head].labelled:
        return {}
    fields = {name: getattr(config, name, None) for name in HEAD_FIELDS}
    if head != "sequence-classification":
        fields.pop("problem_type")
    if getattr(config, "model_type", None) != "neobert":
        fields.pop("classifier_pooling")
    return {k: v for k, v in fields.items() if v is not None}


def write_adapter(model: Any, directory: Path) -> None:
    """The adapter files of the peft model ``model`` into ``directory`` (as they are, not atomic): peft's
    ``adapter_config.json`` and ``adapter_model.safetensors``, and ``adapter_base.json``."""
    model.save_pretrained(str(directory), save_embedding_layers=False)
    (directory / "README.md").unlink(missing_ok=True)  # peft's generic card: the run writes its own
    base = model.get_base_model()
    head = head_of(base)
    config = base.config
    facts = {
        "base_model_name_or_path": model.peft_config["default"].base_model_name_or_path,
        "head": head,
        "config": head_fields(config, head),
        "model_type": getattr(config, "model_type", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "vocab_size": getattr(config, "vocab_size", None),
    }
    text = json.dumps(facts, indent=2, sort_keys=True, default=str) + "\n"
    (directory / ADAPTER_BASE).write_text(text, encoding="utf-8")


def write_adapter_files(model: Any, tokenizer: Any, directory: Path) -> None:
    """The adapter directory of the peft model ``model`` into ``directory`` (not atomic): the adapter files
    (:func:`write_adapter`) and the tokenizer's, as a model directory of the base holds them."""
    write_adapter(model, directory)
    write_tokenizer_files(model.get_base_model(), tokenizer, directory)


def save_model(
    model: Any, tokenizer: Any, output_dir: str | os.PathLike, extra_files: dict[str, str] | None = None
) -> Path:
    """``output_dir`` written whole (atomically): for a peft model its adapter directory, for any other model
    the model directory of :func:`neobert.inference.encoders.save_pretrained`; ``extra_files``: name -> text."""
    if not is_adapted(model):
        return save_pretrained(model, tokenizer, output_dir, extra_files=extra_files)
    with atomic_dir(output_dir) as tmp:
        write_adapter_files(model, tokenizer, tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    return Path(output_dir)


def adapter_usage(directory: Path, texts: tuple[str, ...]) -> tuple[str, str]:
    """A model card's snippet for the adapter directory ``directory`` (its base from the directory's own
    ``adapter_base.json``, then ``PeftModel.from_pretrained``) and the shape it prints."""
    info = read_adapter(directory)
    entry = HEADS[info.head]
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    if entry.width == "vocab":
        texts = (f"Paris is the {tokenizer.mask_token} of France.",)
    length = max(len(ids) for ids in tokenizer(list(texts), return_token_type_ids=False)["input_ids"])
    labels = len(info.config.get("id2label") or {}) or info.config.get("num_labels")
    width = {"hidden": info.hidden_size, "vocab": info.vocab_size, "labels": labels}[entry.width]
    shape = (len(texts), length, width) if entry.per_token else (len(texts), width)
    mismatched = ", ignore_mismatched_sizes=True" if info.config else ""
    ids = (
        'base["config"]["id2label"] = {int(k): v for k, v in base["config"]["id2label"].items()}  # JSON keys\n'
        if "id2label" in info.config
        else ""
    )
    code = (
        "import json\n\n"
        "import neobert  # registers NeoBERT with transformers' Auto classes (pip install neobert peft)\n"
        "import torch\n"
        "from peft import PeftModel\n"
        f"from transformers import {entry.auto_class_name}, AutoTokenizer\n\n"
        'path = "."  # this directory: a LoRA adapter (peft) over the base it names, and the tokenizer\n'
        'with open(f"{path}/adapter_base.json") as f:\n'
        "    base = json.load(f)  # the base model and the head fields it is loaded with\n"
        f"{ids}model = {entry.auto_class_name}.from_pretrained(\n"
        f'    base["base_model_name_or_path"], **base["config"]{mismatched}\n'
        ")\n"
        "model = PeftModel.from_pretrained(model, path).eval()  # the adapter, and the head trained in full\n"
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        f'batch = tokenizer({list(texts)!r}, padding=True, return_tensors="pt", return_token_type_ids=False)\n'
        "with torch.no_grad():\n"
        f"    output = model(**batch).{entry.output}\n"
        "print(tuple(output.shape))"
    )
    return code, "(" + ", ".join(str(n) for n in shape) + ")"


# -- an adapter directory read back -------------------------------------------------------------------------


@dataclass
class Adapted:
    """An adapter directory loaded over its base: the peft model (eval mode), its tokenizer, what it is."""

    model: Any
    tokenizer: Any
    base: str  # the base it was loaded over
    info: AdapterInfo


def same_base(given: str, named: str) -> bool:
    """Whether the base ``given`` is the one an adapter names: the same text, or the same local directory."""
    if given == named:
        return True
    a, b = Path(given).expanduser(), Path(named).expanduser()
    return a.is_dir() and b.is_dir() and a.resolve() == b.resolve()


def load_adapted(directory: str | os.PathLike, base: str | None = None) -> Adapted:
    """The adapter directory ``directory`` over its base (``base``: the base named to check it against; by
    default the one it names), as a peft model in eval mode. An adapter over another base than ``base``, a
    preset base or weights that do not fit the base are refused, naming both."""
    peft = needs_peft(f"loading the LoRA adapter {directory}")
    info = read_adapter(directory)
    if base is not None and not same_base(str(base), info.source):
        raise ValueError(
            f"{directory} is a LoRA adapter over {info.base} (its adapter_config.json's "
            f"base_model_name_or_path), not over {base}: fold it over the base it was trained on"
        )
    source = str(base or info.source)
    if is_preset(source):
        raise ValueError(f"{directory}: its base {source!r} is no model directory or hub id to load")
    model_dir(source)  # a clear error for a path that names no model directory
    model_type = AutoConfig.from_pretrained(source).model_type
    if info.model_type and model_type != info.model_type:
        raise ValueError(
            f"the adapter in {info.path} was trained over a {info.model_type} model, and its "
            f"base {source} is a {model_type} model"
        )
    model = load_model(source, head=info.head, **loading_fields(info.config))
    with quiet_peft():
        adapted = apply_adapter(peft, model, info, "default", source)
    tokenizer = resolve_tokenizer(source, info.path)
    return Adapted(adapted.eval(), tokenizer, source, info)


def loading_fields(config: dict[str, Any]) -> dict[str, Any]:
    """What a base is loaded with for an adapter whose head has the config fields ``config`` (labels): those
    fields, and leave for the head's weights to differ from the base's (the adapter brings its own)."""
    return {**config, "ignore_mismatched_sizes": True} if config else {}


def apply_adapter(
    peft: Any, model: torch.nn.Module, info: AdapterInfo, name: str, source: str, wrapper: Any = None
) -> Any:
    """The adapter ``info`` loaded into ``model`` under ``name`` (peft; into ``wrapper``, the model's peft
    wrapper, where it has adapters already); returns the wrapper. Refused by name (the adapter's, where it is
    not peft's ``default``), before peft touches the model, where a saved tensor has no place in it
    (:func:`check_keys`), and where peft finds its targets in no layer of the model."""
    what = f"the adapter in {info.path}" if name == "default" else f"adapter {name} ({info.path})"
    check_keys(model, info, source, what)
    # the adapter in the base's dtype (peft would keep a bf16 base's adapters in fp32): it computes as its base
    # does, and a bf16 service adds its deltas with two products (neobert.inference.kinds.adapter._lora_rows)
    same_dtype = {"adapter_name": name, "autocast_adapter_dtype": False}
    try:
        if wrapper is None:
            return peft.PeftModel.from_pretrained(model, str(info.path), **same_dtype)
        wrapper.load_adapter(str(info.path), **same_dtype)
        return wrapper
    except (RuntimeError, ValueError, KeyError) as err:
        raise AdapterError(f"{what} does not fit the base {source}: {err}") from None


def check_keys(model: torch.nn.Module, info: AdapterInfo, source: str, what: str) -> None:
    """Every tensor the adapter saved must have its place in ``model`` (peft would only warn of the others,
    and the model would silently go without them): a layer the model has, and for a module trained in full
    (a classifier head, peft's ``modules_to_save``) a parameter of the same shape. Refused naming the
    tensors, and where LoRA matrices are among them, the model's linear layers (its targets are not
    there: another architecture)."""
    if not info.weights.is_file():
        return
    with safe_open(str(info.weights), "pt") as f:
        shapes = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
    modules = {n for n, _ in model.named_modules()}
    parameters = {n: tuple(p.shape) for n, p in model.named_parameters()}
    misplaced, lora = [], False
    for key, shape in shapes.items():  # base_model.model.<layer>.lora_A.weight, base_model.model.<module>.<p>
        name = key.removeprefix("base_model.model.")
        layer = name.split(".lora_")[0]
        if layer not in modules and layer.rpartition(".")[0] not in modules:
            misplaced.append(key)
            lora = lora or ".lora_" in name
        elif ".lora_" not in name and name in parameters and parameters[name] != shape:
            misplaced.append(f"{key} {list(shape)} (the model's is {list(parameters[name])})")
    if not misplaced:
        return
    more = f" and {len(misplaced) - 8} more" if len(misplaced) > 8 else ""
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )
    targets = (
        f"; it targets {info.targets}, and this model's linear layers are named {', '.join(linear)}"
        if lora
        else ""
    )
    head = f"{info.head}{', ' + str(info.config) if info.config else ''}"
    raise AdapterError(
        f"{what} holds weights of layers the base {source} (a {type(model).__name__}) does not have or holds "
        f"in another shape: {', '.join(misplaced[:8])}{more}{targets}; was it trained over another model, or "
        f"with another head than {head}?"
    )
