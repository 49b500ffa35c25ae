"""The models one service serves, by name (:class:`Catalog` of :class:`ModelEntry`): from ``--model`` (a
source, or ``NAME=SOURCE``, repeated) and a models file, with each adapter's base resolved and checked. Both
sides read it: the HTTP side knows names, kinds and bases; the model side (:mod:`.registry`) loads what the
entries name.

A models file (YAML, or JSON for ``.json``)::

    default: search            # the model of a request that names none (default: the first)
    models:
      - name: search           # what a request's model field says
        path: /models/neobert  # a directory, a preset or a Hub id
        pin: true              # never evicted (--max-memory)
      - name: tickets
        path: /adapters/tickets
        base: search           # an adapter: the entry it runs over (checked against its adapter_config.json)

Every entry's keys are :data:`ENTRY_KEYS`; a duplicate name or an unknown key is refused naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..common.config import load_mapping
from ..inference.adapters import AdapterError, AdapterInfo, read_adapter, same_base
from ..inference.kinds import kind_of

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")  # a name given as NAME=SOURCE (no "/", no "=")
ENTRY_KEYS = ("name", "path", "base", "pin", "head", "tokenizer")
FILE_KEYS = ("models", "default")
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class CatalogError(ValueError):
    """The models given cannot be served as given: the message names the model, the file and the key."""


@dataclass(frozen=True)
class ModelEntry:
    """One model of the service: its name, its source, and for an adapter the name of its base's entry."""

    name: str
    source: str  # a directory, a preset or a Hub id
    kind: str  # its directory kind (neobert.inference.kinds): "adapter" for a LoRA adapter
    base: str | None = None  # an adapter: the entry it runs over
    head: str = "auto"
    tokenizer: str | None = None
    pinned: bool = False
    fields: dict[str, Any] = field(default_factory=dict)  # config fields its head is loaded with (labels)

    @property
    def adapter(self) -> bool:
        return self.base is not None


@dataclass(frozen=True)
class Catalog:
    """The entries in order (the first given first), and the default's name."""

    entries: tuple[ModelEntry, ...]
    default: str
    several: bool = False  # more than one model, or a models file: requests may name one
    by_name: dict[str, ModelEntry] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_name.update({entry.name: entry for entry in self.entries})

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    def __getitem__(self, name: str) -> ModelEntry:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def adapters_of(self, base: str) -> list[ModelEntry]:
        return [entry for entry in self.entries if entry.base == base]

    def with_entry(self, entry: ModelEntry) -> Catalog:
        """This catalog and one more entry (an adapter loaded over HTTP); a name taken is refused."""
        if entry.name in self.by_name:
            raise CatalogError(f"a model named {entry.name!r} is already served")
        return Catalog((*self.entries, entry), self.default, True)

    def without(self, name: str) -> Catalog:
        return Catalog(tuple(e for e in self.entries if e.name != name), self.default, True)


def parse_bytes(value: Any, what: str = "max_memory") -> int:
    """Bytes from an integer or a size with a unit (``8GiB``, ``500MB``, ``1.5e9``)."""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-z]*)\s*", str(value).lower())
    if match is None or match[2] not in UNITS:
        raise CatalogError(f"{what} must be bytes, e.g. 2000000000, 500MB or 8GiB; got {value!r}")
    number = int(float(match[1]) * UNITS[match[2]])
    if number < 1:
        raise CatalogError(f"{what} must be positive, got {value!r}")
    return number


def build_catalog(
    models: Sequence[str], models_file: str | None, head: str, tokenizer: str | None, pins: Sequence[str]
) -> Catalog:
    """The catalog of ``--model`` values (``SOURCE`` or ``NAME=SOURCE``; ``head`` and ``tokenizer`` apply to
    them) and the models file, the pinned names marked; adapters' bases resolved and checked."""
    given = [command_line_entry(value, head, tokenizer) for value in models]
    default, listed = (None, []) if models_file is None else read_models_file(models_file)
    raw = [*given, *listed]
    if not raw:
        raise CatalogError("no model to serve: give --model (repeatable) or --models-file")
    names = [entry["name"] for entry in raw]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        where = f" (--model and {models_file})" if models_file else ""
        raise CatalogError(
            f"model name(s) given twice{where}: {', '.join(twice)}; each name serves one model"
        )
    entries = resolve_bases([entry_of(item) for item in raw])
    unknown = sorted(set(pins) - {e.name for e in entries})
    if unknown:
        raise CatalogError(f"--pin names no served model: {', '.join(unknown)}; served: {', '.join(names)}")
    entries = [replace(e, pinned=e.pinned or e.name in pins) for e in entries]
    default = default or entries[0].name
    if default not in {e.name for e in entries}:
        raise CatalogError(f"{models_file}: default {default!r} is none of the models ({', '.join(names)})")
    several = len(entries) > 1 or models_file is not None
    return Catalog(tuple(entries), default, several)


def command_line_entry(value: str, head: str, tokenizer: str | None) -> dict[str, Any]:
    """``NAME=SOURCE`` (NAME: letters, digits, ``._:+-``), or a source alone, named by itself."""
    name, sep, source = value.partition("=")
    if not sep or not NAME.fullmatch(name) or not source:
        name, source = value, value
    return {"name": name, "path": source, "head": head, "tokenizer": tokenizer, "where": "--model"}


def read_models_file(path: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The default and the entries of a models file (module doc); a wrong shape or key is refused."""
    data = load_mapping(path, CatalogError)
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise CatalogError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(FILE_KEYS)}")
    listed = data.get("models")
    if not isinstance(listed, list) or not listed:
        raise CatalogError(f"{path}: `models` must be a list of entries ({', '.join(ENTRY_KEYS)})")
    entries = []
    for i, item in enumerate(listed):
        where = f"{path}: models[{i}]"
        if not isinstance(item, dict):
            raise CatalogError(f"{where} must be a mapping of {', '.join(ENTRY_KEYS)}")
        unknown = sorted(set(item) - set(ENTRY_KEYS))
        if unknown:
            raise CatalogError(
                f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(ENTRY_KEYS)}"
            )
        for key in ("name", "path"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise CatalogError(f"{where}: `{key}` must be a non-empty string")
        entries.append({**item, "where": where})
    default = data.get("default")
    return (str(default) if default is not None else None), entries


def entry_of(item: dict[str, Any]) -> ModelEntry:
    """An entry from its given keys (its base's name only as given: :func:`resolve_bases` checks it)."""
    kind = kind_of(item["path"]).name
    if item.get("base") is not None and kind != "adapter":
        raise CatalogError(
            f"{item['where']}: `base` is an adapter's, and {item['path']} is a {kind} directory, not an "
            "adapter (adapter_config.json)"
        )
    return ModelEntry(
        name=str(item["name"]),
        source=str(item["path"]),
        kind=kind,
        base=item.get("base") or ("?" if kind == "adapter" else None),
        head=str(item.get("head") or "auto"),
        tokenizer=item.get("tokenizer"),
        pinned=bool(item.get("pin", False)),
    )


def resolve_bases(entries: list[ModelEntry]) -> list[ModelEntry]:
    """Each adapter over its base's entry: the entry named as its base (which must be the model its
    adapter_config.json names), else the entry serving that model, else a new entry for it (named by its
    source); where the adapter's adapter_base.json describes another head than that entry's (a classifier's,
    with its labels), over an entry of the same model with that head (:func:`with_head`). An adapter over an
    adapter, or over an ONNX export, is refused."""
    out = list(entries)
    for i, entry in enumerate(out):
        if not entry.adapter:
            continue
        try:
            adapter = read_adapter(entry.source)
        except AdapterError as err:
            raise CatalogError(f"model {entry.name}: {err}") from None
        base = base_entry(entry, adapter, out)
        if base is None:
            base = ModelEntry(adapter.source, adapter.source, kind_of(adapter.source).name)
            out.append(base)
        if base.adapter or kind_of(base.source).backend != "torch":
            raise CatalogError(
                f"model {entry.name}: an adapter runs over a PyTorch model; its base {base.name} is a "
                f"{base.kind} directory"
            )
        headed = with_head(base, adapter, out)
        if headed not in out:
            out.append(headed)
        out[i] = replace(entry, base=headed.name)
    return out


def with_head(base: ModelEntry, adapter: AdapterInfo, entries: list[ModelEntry]) -> ModelEntry:
    """The entry of ``base``'s model loaded with the head ``adapter``'s adapter_base.json describes (as
    :func:`neobert.inference.adapters.load_adapted` loads it): ``base`` itself where it is so loaded (or the
    adapter describes none), else the entry already made for that head and those fields, else a new one,
    named ``BASE:HEAD`` (``BASE:HEAD:ADAPTER`` where that name serves other labels). Adapters of one base
    with the same head and labels share it."""
    if not adapter.described:
        return base
    head, fields = adapter.head, adapter.config
    if base.fields == fields and (
        base.head == head or (base.head == "auto" and head == "base" and not fields)
    ):
        return base
    for entry in entries:
        if (
            not entry.adapter
            and entry.source == base.source
            and entry.head == head
            and entry.fields == fields
        ):
            return entry
    taken = {entry.name for entry in entries}
    name = f"{base.name}:{head}"
    if name in taken:
        name = f"{name}:{adapter.path.name}"
    return ModelEntry(name, base.source, base.kind, head=head, tokenizer=base.tokenizer, fields=dict(fields))


def base_entry(entry: ModelEntry, adapter: AdapterInfo, entries: list[ModelEntry]) -> ModelEntry | None:
    """The entry ``entry`` (an adapter) runs over; a base named that is not the adapter's is refused."""
    if entry.base != "?":
        named = next((e for e in entries if e.name == entry.base), None)
        if named is None:
            raise CatalogError(
                f"model {entry.name}: its base {entry.base!r} is none of the models "
                f"({', '.join(e.name for e in entries)})"
            )
        if not same_base(named.source, adapter.source):
            raise CatalogError(
                f"model {entry.name}: the adapter {entry.source} was trained over {adapter.base} "
                f"(its adapter_config.json's base_model_name_or_path), but is declared over {named.name} "
                f"({named.source}): serve it over its own base, or correct one of the two"
            )
        return named
    return next((e for e in entries if not e.adapter and same_base(e.source, adapter.source)), None)


def adapter_entry(catalog: Catalog, name: str, path: Path, base: str | None) -> ModelEntry:
    """The entry of an adapter added to ``catalog`` while serving (``path`` already checked to lie inside
    the model roots): over ``base`` (a served model's name) where given, else over the served model its
    adapter_config.json names; refused by name where the name is taken or no served model is its base."""
    if not NAME.fullmatch(name):
        raise CatalogError(
            f"an adapter's name is letters, digits and ._:+- (not starting with those), got {name!r}"
        )
    if name in catalog:
        raise CatalogError(f"a model named {name!r} is already served; unload it first")
    if kind_of(path).name != "adapter":
        raise CatalogError(f"{path} is no LoRA adapter directory (it holds no adapter_config.json)")
    entries = list(catalog.entries)
    entry = ModelEntry(name, str(path), "adapter", base=base or "?")
    try:
        adapter = read_adapter(path)
        found = base_entry(entry, adapter, entries)
    except AdapterError as err:
        raise CatalogError(str(err)) from None
    if found is None or found.adapter:
        raise CatalogError(
            f"the adapter {path} was trained over {adapter.base}, which this service does not serve "
            f"(it serves {', '.join(e.source for e in entries if not e.adapter)})"
        )
    headed = with_head(found, adapter, entries)
    if headed not in entries:
        raise CatalogError(
            f"the adapter {path} runs over {found.name} with a {adapter.head} head {adapter.config}, which "
            f"this service does not load: serve it from the start (--model or the models file)"
        )
    return replace(entry, base=headed.name)


def inside_roots(path: str, roots: Sequence[str]) -> Path | None:
    """``path`` resolved, where it lies inside one of ``roots`` (both as written and with links followed:
    nothing outside the roots is looked at, and a link out of a root does not count); else None."""
    written = Path(path).expanduser()
    if not written.is_absolute():
        return None
    lexical = Path(*_normal_parts(written))
    for root in roots:
        top = Path(root).expanduser().absolute()
        if lexical.is_relative_to(Path(*_normal_parts(top))):
            real = lexical.resolve()
            if real.is_relative_to(top.resolve()):
                return real
    return None


def _normal_parts(path: Path) -> list[str]:
    """The parts of an absolute path with ``.`` and ``..`` applied as written (no file system look-up)."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if len(parts) > 1:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return parts


def check_roots(roots: Sequence[str]) -> None:
    """The ``--model-root`` directories must exist."""
    for root in roots:
        if not Path(root).expanduser().is_dir():
            raise CatalogError(f"--model-root {root} is not a directory")
