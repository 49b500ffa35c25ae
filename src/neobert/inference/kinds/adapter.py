"""A LoRA adapter directory in peft's own layout (``adapter_config.json`` naming its base in
``base_model_name_or_path``, ``adapter_model.safetensors``, maybe a tokenizer and a README card): recognised
here once, for every command. Loaded alone (:meth:`AdapterKind.load`) it is its base, loaded by the base's own
kind, with the adapter merged into the weights; the service instead keeps one base and many adapters beside it
(:func:`attach`, :func:`detach`), and runs rows of different adapters in one forward: each LoRA layer reads the
rows' adapters from :data:`neobert.inference.run.ROW_TAGS` (:func:`route_rows`), peft's mixed-adapter batches
(``adapter_names``).

peft is the optional ``lora`` extra: imported where it is used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..directories import DirectoryKind
from ..encoders import Encoder, apply_precision
from ..run import ROW_TAGS, RowTags

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
BASE = "__base__"  # peft's name for "no adapter" in a mixed batch
LORA = "LORA"  # the peft type served: mixed-adapter batches are LoRA's


class AdapterError(ValueError):
    """An adapter directory that cannot be served over its model: the message names the adapter and why."""


def needs_peft(what: str) -> Any:
    """The peft package, or an error saying which extra brings it."""
    try:
        import peft
    except ImportError as err:
        raise AdapterError(f"{what} needs peft ({err}): pip install 'neobert[lora]'") from None
    return peft


@dataclass(frozen=True)
class Adapter:
    """What an adapter directory declares: its base (as written, and where it is here), what it targets."""

    path: Path
    declared_base: str  # base_model_name_or_path as written
    base: str  # the base resolved: a directory here, or as written (a preset, a Hub id)
    targets: tuple[str, ...] | str  # target_modules (a regular expression where peft was given one)
    modules_to_save: tuple[str, ...]
    rank: int | None

    @property
    def weights(self) -> Path:
        return self.path / ADAPTER_WEIGHTS


def read_adapter(path: str | os.PathLike) -> Adapter:
    """The adapter at ``path`` (a directory with ``adapter_config.json``); refused by name where it is not a
    LoRA adapter or names no base."""
    directory = Path(path).expanduser()
    file = directory / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise AdapterError(f"{file}: not a readable adapter config ({err})") from None
    kind = str(config.get("peft_type", "")).upper()
    if kind != LORA:
        raise AdapterError(f"{file}: peft_type {kind or 'missing'}; only LoRA adapters are served")
    declared = config.get("base_model_name_or_path")
    if not declared:
        raise AdapterError(f"{file}: base_model_name_or_path is missing, so its base is unknown")
    targets = config.get("target_modules") or ()
    return Adapter(
        path=directory,
        declared_base=str(declared),
        base=resolve_base(str(declared), directory),
        targets=targets if isinstance(targets, str) else tuple(sorted(targets)),
        modules_to_save=tuple(config.get("modules_to_save") or ()),
        rank=config.get("r"),
    )


def resolve_base(declared: str, adapter_dir: Path) -> str:
    """Where the base an adapter names is: a directory as written (from here), or beside the adapter where
    the name is relative; otherwise as written (a preset, a Hub id)."""
    for candidate in (Path(declared).expanduser(), adapter_dir / declared):
        if candidate.is_dir():
            return str(candidate.resolve())
    return declared


def same_source(a: str, b: str) -> bool:
    """Whether two model sources name one model: the same directory (after resolving), or the same name."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.is_dir() or pb.is_dir():
        return pa.is_dir() and pb.is_dir() and pa.resolve() == pb.resolve()
    return a == b


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers, each storage once (tied weights count once)."""
    seen: dict[int, int] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def saved_tensor_bytes(files: Iterable[Path], float_bytes: int | None = None) -> int:
    """Bytes the tensors in safetensors ``files`` take once loaded, read from their headers (nothing else is
    read): their own size, or ``float_bytes`` per number for floating-point tensors (the dtype they will be
    served in)."""
    sizes = {
        "F64": 8,
        "F32": 4,
        "F16": 2,
        "BF16": 2,
        "I64": 8,
        "I32": 4,
        "I16": 2,
        "I8": 1,
        "U8": 1,
        "BOOL": 1,
    }
    total = 0
    for file in files:
        with open(file, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            numel = 1
            for n in entry["shape"]:
                numel *= n
            floating = entry["dtype"] in ("F64", "F32", "F16", "BF16")
            total += numel * (float_bytes if floating and float_bytes else sizes.get(entry["dtype"], 4))
    return total


def saved_keys(file: Path) -> set[str]:
    """The tensor names of a safetensors file, from its header."""
    with open(file, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return {name for name in header if name != "__metadata__"}


def attach(model: torch.nn.Module, adapter: Adapter, name: str, wrapper: Any = None) -> Any:
    """Load ``adapter`` into ``model`` under ``name`` (in place: peft replaces the targeted layers); returns
    peft's wrapper (``wrapper`` where one is given: the model's adapters so far). Refused by name where the
    adapter targets layers the model lacks, or its weights fit no layer of the model."""
    peft = needs_peft(f"adapter {name}")
    try:
        if wrapper is None:
            wrapper = peft.PeftModel.from_pretrained(model, str(adapter.path), adapter_name=name)
        else:
            wrapper.load_adapter(str(adapter.path), adapter_name=name)
    except (ValueError, KeyError) as err:
        if "not found in the base model" in str(err) or "Target modules" in str(err):
            raise AdapterError(missing_targets(model, adapter, name, str(err))) from None
        raise AdapterError(f"adapter {name} ({adapter.path}): {err}") from None
    wrapper.eval()
    check_weights(wrapper, adapter, name)
    route_rows(model)
    return wrapper


def missing_targets(model: torch.nn.Module, adapter: Adapter, name: str, detail: str) -> str:
    """Why an adapter's targets are not in the model, naming the model's linear layers."""
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )
    return (
        f"adapter {name} ({adapter.path}) targets {list(adapter.targets) or adapter.targets}, which this "
        f"{type(model).__name__} does not have (its linear layers are named {', '.join(linear)}): was it "
        f"trained over another architecture than {adapter.base}? ({detail.splitlines()[0]})"
    )


def check_weights(wrapper: Any, adapter: Adapter, name: str) -> None:
    """Every tensor the adapter saved went into a layer of the model (peft only warns of the others, and the
    adapter would then run without them)."""
    if not adapter.weights.is_file():
        return
    from peft.utils import get_peft_model_state_dict

    expected = set(get_peft_model_state_dict(wrapper, adapter_name=name))
    unused = sorted(saved_keys(adapter.weights) - expected)
    if unused:
        raise AdapterError(
            f"adapter {name} ({adapter.path}) holds {len(unused)} tensors for layers this "
            f"{type(wrapper.base_model.model).__name__} does not have, e.g. {', '.join(unused[:3])}: "
            f"was it trained over another architecture or head than {adapter.base}?"
        )


def detach(wrapper: Any, name: str) -> Any:
    """Remove adapter ``name``; the wrapper, or None once the model has no adapter left (its layers are then
    plain again, as before the first :func:`attach`)."""
    remaining = [n for n in wrapper.peft_config if n != name]
    if not remaining:
        wrapper.unload()
        return None
    if name in wrapper.active_adapters:
        wrapper.set_adapter(remaining[0])
    wrapper.delete_adapter(name)
    return wrapper


def route_rows(model: torch.nn.Module) -> None:
    """Make every LoRA layer (and peft's modules-to-save wrappers) of ``model`` run each row through the
    adapter its tag names (:data:`ROW_TAGS`; an untagged row or forward: the base alone)."""
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    for module in model.modules():
        if isinstance(module, (LoraLayer, AuxiliaryTrainingWrapper)) and not getattr(module, "_rows", False):
            module.register_forward_pre_hook(_adapter_names, with_kwargs=True)
            module._rows = True


def _adapter_names(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    first = args[0] if args else next(iter(kwargs.values()))
    kwargs["adapter_names"] = _names(ROW_TAGS.get(), len(first))
    return args, kwargs


@lru_cache(maxsize=16)
def _names(rows: RowTags | None, count: int) -> list[str]:
    """peft's ``adapter_names`` for ``count`` items (rows or tokens) of the forward tagged ``rows``."""
    if rows is None:
        return [BASE] * count
    return [BASE if tag is None else str(tag) for tag in rows.per_item(count)]


class AdapterKind(DirectoryKind):
    """A peft LoRA adapter directory. ``load_base(source, tokenizer, head, precision, sparse)`` loads its base
    (the registry's ``load_for_inference``, handed over so that this kind imports no other)."""

    name = "adapter"
    library = "peft"
    loaded_with = "peft"
    exports_onnx = False

    def __init__(self, load_base: Callable[..., Encoder], base_kind: Callable[[str], DirectoryKind]):
        self.load_base, self.base_kind = load_base, base_kind

    def matches(self, path: Path) -> bool:
        return (path / ADAPTER_CONFIG).is_file()

    def validate(self, path: Path) -> None:
        read_adapter(path)

    def load(self, source, tokenizer=None, head="auto", precision="auto", sparse=False) -> Encoder:
        """The base (by its kind, on the padded fp32 path) with the adapter merged into its weights, then
        ``precision``: what the base serves, computed as base plus adapter."""
        adapter = read_adapter(source)
        encoder = self.load_base(adapter.base, tokenizer, head, None, sparse)
        attach(encoder.model, adapter, "adapter").merge_and_unload()
        if precision is not None:
            apply_precision(encoder.model, precision)
        return encoder

    def declared_embedding(self, source: str | os.PathLike) -> Any:
        base = read_adapter(source).base
        return self.base_kind(base).declared_embedding(base)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        base = read_adapter(directory).base
        code = (
            "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
            "from peft import PeftModel\n"
            "from transformers import AutoModel, AutoTokenizer\n\n"
            f"base = AutoModel.from_pretrained({base!r})\n"
            'model = PeftModel.from_pretrained(base, ".").eval()  # this directory, or its Hub repo id\n'
            f"batch = AutoTokenizer.from_pretrained({base!r})({list(texts)!r}, padding=True, "
            'return_tensors="pt")\n'
            "print(tuple(model(**batch).last_hidden_state.shape[:1]))"
        )
        return code, f"({len(texts)},)"

    def other_ways(self, head: str) -> str:
        return (
            "`neobert serve --model NAME=.` serves it over its base, beside other adapters of the same base "
            "(one forward for all of them; docs/serving.md, Several models).\n"
        )
