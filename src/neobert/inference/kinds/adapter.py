"""The adapter directory kind, and the service's adapters over a shared base. What an adapter directory is
(its files, reading it, its base, its key check, peft's import) is :mod:`neobert.inference.adapters`; this
module keeps what is the kind's and the service's own. Loaded alone (:meth:`AdapterKind.load`) an adapter is
its base, loaded by the base's own kind with the head its ``adapter_base.json`` describes, the adapter merged
into the weights; the service instead keeps one base and many adapters beside it (:func:`attach`,
:func:`detach`), and runs rows of different adapters in one forward: each LoRA layer reads the rows' adapters
from :data:`neobert.inference.run.ROW_TAGS` (:func:`route_rows`) and adds each adapter's delta to its rows'
slice (peft's mixed-adapter batches, ``adapter_names``, where the rows are not ordered by adapter).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import torch

from ..adapters import (
    AdapterInfo,
    adapter_usage,
    apply_adapter,
    is_adapter_dir,
    needs_peft,
    quiet_peft,
    read_adapter,
)
from ..directories import DirectoryKind
from ..encoders import Encoder, apply_precision
from ..run import ROW_TAGS, RowTags

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


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


def attach(model: torch.nn.Module, adapter: AdapterInfo, name: str, wrapper: Any = None) -> Any:
    """Load ``adapter`` into ``model`` under ``name`` (in place: peft replaces the targeted layers); returns
    peft's wrapper (``wrapper`` where one is given: the model's adapters so far). Refused by name where the
    adapter targets layers the model lacks, or a tensor it saved has no place in the model
    (:func:`neobert.inference.adapters.apply_adapter`)."""
    peft = needs_peft(f"adapter {name}")
    with quiet_peft():
        wrapper = apply_adapter(peft, model, adapter, name, adapter.source, wrapper)
    wrapper.eval()
    route_rows(model)
    _forget_plain_deltas(model)
    return wrapper


def detach(wrapper: Any, name: str) -> Any:
    """Remove adapter ``name``; the wrapper, or None once the model has no adapter left (its layers are then
    plain again, as before the first :func:`attach`)."""
    remaining = [n for n in wrapper.peft_config if n != name]
    _forget_plain_deltas(wrapper)
    if not remaining:
        wrapper.unload()
        return None
    if name in wrapper.active_adapters:
        wrapper.set_adapter(remaining[0])
    wrapper.delete_adapter(name)
    return wrapper


def route_rows(model: torch.nn.Module) -> None:
    """Make every LoRA layer (and peft's modules-to-save wrappers) of ``model`` run each row through the
    adapter its tag names (:data:`ROW_TAGS`; an untagged row or forward: the base alone). A LoRA layer adds
    each adapter's delta to its rows' slice of the base layer's output where each adapter's rows are
    contiguous (:func:`neobert.inference.run.batched_inputs` orders a batch's rows by tag): one forward with
    the adapter set where all rows have one, the base layer alone where none has, no per-row gather and
    scatter; peft's mixed batches (``adapter_names``) otherwise, and for LoRA variants (DoRA ...)."""
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    for module in model.modules():
        if getattr(module, "_rows", False):
            continue
        if isinstance(module, LoraLayer) and isinstance(module, torch.nn.Module):
            module.forward = partial(_lora_rows, module, module.forward)
            module._rows = True
        elif isinstance(module, AuxiliaryTrainingWrapper):
            module.register_forward_pre_hook(_adapter_names, with_kwargs=True)
            module._rows = True


def _lora_rows(module: Any, peft_forward: Callable[..., torch.Tensor], x: torch.Tensor, *args, **kwargs):
    """A LoRA layer's forward over rows tagged by adapter (:func:`route_rows`)."""
    runs = _runs(ROW_TAGS.get(), len(x))
    if module.disable_adapters or module.merged or kwargs.get("adapter_names") is not None:
        return peft_forward(x, *args, **kwargs)
    if runs is None or any(tag in module.lora_variant for tag, _, _ in runs):
        return peft_forward(x, *args, adapter_names=_names(ROW_TAGS.get(), len(x)), **kwargs)
    result = module.base_layer(x, *args, **kwargs)
    for tag, start, stop in runs:
        if tag is None or tag not in module.lora_A:
            continue
        whole = stop - start == len(x)
        part, out = (x, result) if whole else (x[start:stop], result[start:stop])
        plain = None if module.training else _plain_delta(module, tag)
        if plain is not None and out.is_contiguous() and out.dtype == part.dtype == plain[0].dtype:
            # out += scaling (x A^T) B^T in place: two products, no module calls, no output-sized temporaries
            lora_a_t, lora_b_t = plain
            low = torch.mm(part.reshape(-1, part.shape[-1]), lora_a_t)
            out.view(-1, out.shape[-1]).addmm_(low, lora_b_t, alpha=module.scaling[tag])
        else:
            lora_a, lora_b = module.lora_A[tag], module.lora_B[tag]
            low = lora_a(module.lora_dropout[tag](part.to(lora_a.weight.dtype)))
            out += (lora_b(low) * module.scaling[tag]).to(result.dtype)
    return result


def _plain_delta(module: Any, tag: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(A^T, B^T) of adapter ``tag`` of a LoRA layer whose delta is two plain products (Linear A and B, no
    bias), as views of its weights; None otherwise. Cached on the layer (a service call runs hundreds of
    small adapter products, and their module calls cost more than the products): :func:`attach` and
    :func:`detach` clear it."""
    cache = module.__dict__.setdefault("_plain_deltas", {})
    if tag not in cache:
        lora_a, lora_b = module.lora_A[tag], module.lora_B[tag]
        linear = type(lora_a) is torch.nn.Linear and type(lora_b) is torch.nn.Linear
        cache[tag] = (lora_a.weight.t(), lora_b.weight.t()) if linear and lora_b.bias is None else None
    return cache[tag]


def _forget_plain_deltas(model: torch.nn.Module) -> None:
    for module in model.modules():
        module.__dict__.pop("_plain_deltas", None)


@lru_cache(maxsize=64)
def _runs(rows: RowTags | None, count: int) -> tuple[tuple[str | None, int, int], ...] | None:
    """The adapters of ``count`` items (rows or tokens) of the forward tagged ``rows`` as runs (adapter,
    start, stop), each adapter one run; None where an adapter's items are not contiguous."""
    if rows is None:
        return ((None, 0, count),)
    items = rows.per_item(count)
    runs: list[tuple[str | None, int, int]] = []
    for i, tag in enumerate(items):
        name = None if tag is None else str(tag)
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], i + 1)
        else:
            runs.append((name, i, i + 1))
    return tuple(runs) if len({tag for tag, _, _ in runs}) == len(runs) else None


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
    """A peft LoRA adapter directory. ``load_base(source, tokenizer, head, precision, sparse, fields)`` loads
    its base (the registry's ``load_for_inference``, handed over so that this kind imports no other)."""

    name = "adapter"
    library = "peft"
    loaded_with = "peft over its base model"
    exports_onnx = False

    def __init__(self, load_base: Callable[..., Encoder], base_kind: Callable[[str], DirectoryKind]):
        self.load_base, self.base_kind = load_base, base_kind

    def matches(self, path: Path) -> bool:
        return is_adapter_dir(path)

    def validate(self, path: Path) -> None:
        read_adapter(path)

    def load(
        self, source, tokenizer=None, head="auto", precision="auto", sparse=False, fields=None
    ) -> Encoder:
        """The base (by its kind, on the padded fp32 path; with the head and config fields its
        ``adapter_base.json`` describes unless ``head`` names another) with the adapter merged into its weights,
        then ``precision``: what the base serves, computed as base plus adapter."""
        adapter = read_adapter(source)
        if adapter.described and head in ("auto", adapter.head):
            head, fields = adapter.head, {**adapter.config, **(fields or {})}
        encoder = self.load_base(adapter.source, tokenizer, head, None, sparse, fields)
        attach(encoder.model, adapter, "adapter").merge_and_unload()
        if precision is not None:
            apply_precision(encoder.model, precision)
        return encoder

    def declared_embedding(self, source: str | os.PathLike) -> Any:
        base = read_adapter(source).source
        return self.base_kind(base).declared_embedding(base)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        return adapter_usage(directory, texts)

    def other_ways(self, head: str) -> str:
        return (
            "Folded into a plain model directory (`neobert merge --method lora --inputs . --output FOLDED`), "
            "it loads as any model of its kind, without peft. `neobert serve --model NAME=.` serves it over "
            "its base, beside other adapters of the same base (one forward for all of them; docs/serving.md, "
            "Several models).\n"
        )
