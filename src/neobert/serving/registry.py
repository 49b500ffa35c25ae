"""The model side of a service: the models a model process holds (:class:`ModelSet`), what they take in memory
and which to evict. What the model process loads (``load(config)``) and calls (``call(model_call, texts)``), one
model or several: the HTTP side only knows names and states (:class:`.served.ServedSet`).

- **A model's bytes** are its parameters' and buffers' (each storage once), counted when it is loaded, and
  estimated before from its weight files' headers (safetensors: numbers x the bytes of the served precision;
  an ONNX export: its graph's files). Not the process's RSS: RSS also holds the interpreter, torch's
  libraries, the allocator's free pages and the answers being built, moves with every request, and cannot be
  told apart per model, while a model's weights are what loading or evicting it adds or frees.
- **The budget** (``max_memory``): before a load, the least recently used models and adapters that are not
  pinned are evicted until the new one fits (an adapter's base is in use while its adapter is, and evicting a
  base evicts its adapters). A model (for an adapter: with its base) that cannot fit beside the pinned ones is
  refused at start, both sizes named.
- **Adapters share their base**: each is loaded into its base (peft, :func:`~neobert.inference.kinds.adapter.attach`);
  a call's rows name the adapter each runs through (:attr:`.tasks.ModelCall.rows`), so requests for different
  adapters of one base run in one forward (:data:`MIXED_TASKS`; the tasks that batch their own way run one
  forward per adapter within the call).

The model process runs one call at a time, so a model is loaded once however many requests ask for it
first, and never evicted under a running call; the lock guards the bookkeeping where several threads of the
HTTP process share one set (``--no-model-process --workers N``, which takes no budget).
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..common import memory
from ..common.config import ModelConfig
from ..inference.adapters import ADAPTER_WEIGHTS, read_adapter
from ..inference.backends import choose_runtime, export_beside
from ..inference.directories import ONNX_CONFIG_FILE
from ..inference.encoders import is_preset, resolve_model_precision
from ..inference.kinds import kind_of
from ..inference.kinds.adapter import attach, detach, module_bytes
from ..inference.kinds.adapter import saved_tensor_bytes as header_bytes
from ..inference.model_info import count_parameters
from ..inference.registration import declared_head
from ..inference.run import ROW_TAGS, RowTags, tagged
from ..runtime.hardware import BF16_MARGIN
from .catalog import CatalogError, ModelEntry
from .config import ServeConfig
from .onnx_backend import OnnxBackend
from .served import ServedModel, ServedSet
from .tasks import COUNT, LOAD, UNLOAD, ModelCall
from .threads import ServingProbe, ThreadChoice, ThreadPolicy, choose_pair, pinned
from .torch_backend import TorchBackend

log = logging.getLogger(__name__)

# tasks whose every forward goes through inference.run.batched_inputs, so each row carries its adapter into it
# (one forward for several adapters); the others run one forward per adapter within the call
MIXED_TASKS = frozenset(
    {
        "embed",
        "embed_all",
        "embed_sparse",
        "classify",
        "predict",
        "rerank",
        "tokens",
        COUNT,
        "tokenize",
        "decode",
    }
)


class BudgetError(RuntimeError):
    """A model cannot be loaded within the memory budget beside the pinned ones."""


@dataclass
class Held:
    """A loaded model or adapter: its backend (an adapter's: its base's), its bytes, when it was last used."""

    backend: Any
    nbytes: int
    used: int
    wrapper: Any = None  # a base with adapters: peft's wrapper of its model


class ModelSet:
    """The models of one model process: loaded on first use (all at start without a budget), evicted least
    recently used under ``max_memory``; :meth:`call` is the function the queue calls."""

    def __init__(self, config: ServeConfig):
        self.config, self.catalog, self.budget = config, config.catalog, config.memory_budget
        self.held: dict[str, Held] = {}
        self.estimates: dict[str, int | None] = {}
        self.described: dict[str, ServedModel] = {}
        self.loads: dict[str, int] = {}
        self.evictions: dict[str, int] = {}
        self.threads: ThreadChoice | None = None
        self.clock = itertools.count()
        self.lock = threading.RLock()
        self.version, self.sent = 0, -1  # the state's version, and the last one a call answer carried

    @classmethod
    def load(cls, config: ServeConfig) -> ModelSet:
        """The set at start: sizes checked against the budget, the default model loaded first (its threads
        measured), then the pinned ones; adapters loaded and checked against their base (and, under a
        budget, unloaded again: they load on first use); without a budget every model is loaded."""
        models = cls(config)
        models.check_sizes()
        models.ensure(models.catalog.default)
        for entry in models.catalog.entries:
            if entry.pinned or models.budget is None:
                models.ensure(entry.name)
            elif entry.adapter:
                models.ensure(entry.name)
                models.evict(entry.name)
        return models

    # --- sizes -----------------------------------------------------------------------------------------

    def estimate(self, entry: ModelEntry) -> int | None:
        """Bytes ``entry`` will take once loaded (exact once it has been), or None where unknown."""
        if entry.name not in self.estimates:
            self.estimates[entry.name] = estimate_bytes(self.config, entry)
        return self.estimates[entry.name]

    def need(self, name: str) -> int:
        """Bytes ``name`` takes with what it needs (an adapter: its base)."""
        entry = self.catalog[name]
        own = self.estimate(entry) or 0
        return own + (self.need(entry.base) if entry.adapter else 0)

    def check_sizes(self) -> None:
        """Refuse at start a model that cannot fit the budget beside the pinned models (both sizes named)."""
        if self.budget is None:
            return
        pinned = {e.name for e in self.catalog.entries if e.pinned}
        pinned |= {self.catalog[n].base for n in pinned if self.catalog[n].adapter}
        held = sum(self.estimate(self.catalog[n]) or 0 for n in pinned)
        for entry in self.catalog.entries:
            with_base = {entry.name, entry.base} - {None} - pinned
            size = held + sum(self.estimate(self.catalog[n]) or 0 for n in with_base)
            if size > self.budget:
                raise CatalogError(too_large(entry, self.need(entry.name), size, self.budget, sorted(pinned)))

    def used(self) -> int:
        return sum(h.nbytes for h in self.held.values())

    # --- loading and evicting ---------------------------------------------------------------------------

    def ensure(self, name: str, keep: frozenset[str] = frozenset()) -> Any:
        """The backend ``name`` runs on (an adapter: its base's, the adapter loaded into it), loaded if it
        is not, and marked used; ``keep``: models that must not be evicted to make room (the others of the
        same call)."""
        with self.lock:
            entry = self.catalog[name]
            kept = {name, entry.base, *keep}
            base = self.ensure(entry.base, keep) if entry.adapter else None
            if name not in self.held:
                self.make_room(self.estimate(entry) or 0, keep=kept)
                self.held[name] = self.load_one(entry, base)
                self.loads[name] = self.loads.get(name, 0) + 1
                self.version += 1
                self.make_room(0, keep=kept)
            self.held[name].used = next(self.clock)
            return self.held[name].backend

    def load_one(self, entry: ModelEntry, base: Any) -> Held:
        """Load ``entry``: a model by its backend, an adapter into its (loaded) base; its bytes measured."""
        if entry.adapter:
            holder = self.held[entry.base]
            before = module_bytes(base.model)
            holder.wrapper = attach(base.model, read_adapter(entry.source), entry.name, holder.wrapper)
            nbytes = module_bytes(base.model) - before
            self.estimates[entry.name] = nbytes
            self.described.setdefault(entry.name, self.described[entry.base])
            return Held(base, nbytes, 0)
        log.info("loading model %s (%s)", entry.name, entry.source)
        if self.config.runs_onnx(entry):
            backend = OnnxBackend.load(self.config, entry, self.threads)
        elif self.config.backend == "auto" and (export := carried_export(self.config, entry)) is not None:
            backend = load_measured(self.config, entry, export, self.threads)
        else:
            backend = TorchBackend.load(self.config, entry, self.threads)
        self.threads = self.threads or backend.threads
        nbytes = backend.nbytes()
        self.estimates[entry.name] = nbytes
        self.described[entry.name] = backend.info()
        return Held(backend, nbytes, 0)

    def make_room(self, need: int, keep: set[str | None]) -> None:
        """Evict the least recently used models that are not pinned nor in ``keep`` until ``need`` more
        bytes fit the budget."""
        while self.budget is not None and self.used() + need > self.budget:
            victim = self.victim(keep)
            if victim is None:
                loaded = ", ".join(f"{n} ({h.nbytes:,} bytes)" for n, h in self.held.items())
                raise BudgetError(
                    f"{need:,} more bytes do not fit --max-memory {self.budget:,}: loaded are {loaded}, "
                    "each pinned or in use"
                )
            self.evict(victim)

    def victim(self, keep: set[str | None]) -> str | None:
        """The least recently used model that may go: not pinned, not kept, no kept or pinned adapter over
        it."""
        pinned = {e.name for e in self.catalog.entries if e.pinned}
        kept_bases = {
            self.catalog[n].base for n in keep | pinned if n in self.catalog and self.catalog[n].adapter
        }
        free = [
            (held.used, name)
            for name, held in self.held.items()
            if name not in keep and name not in kept_bases and not self.catalog[name].pinned
        ]
        return min(free)[1] if free else None

    def evict(self, name: str) -> None:
        """Unload ``name`` (a base: its adapters first); its memory is handed back to the system."""
        with self.lock:
            if name not in self.held:
                return
            for adapter in self.catalog.adapters_of(name):
                self.evict(adapter.name)
            entry, held = self.catalog[name], self.held.pop(name)
            if entry.adapter:
                base = self.held[entry.base]
                base.wrapper = detach(base.wrapper, name)
            log.info("evicted %s (%s bytes)", name, f"{held.nbytes:,}")
            self.evictions[name] = self.evictions.get(name, 0) + 1
            self.version += 1
            del held
            gc.collect()
            memory.release()

    # --- calls --------------------------------------------------------------------------------------------

    def info(self) -> ServedSet:
        """What the set serves and holds (it crosses processes)."""
        return ServedSet(self.catalog.default, dict(self.described), self.state(), self.budget)

    def state(self) -> dict[str, dict[str, Any]]:
        """Per model: loaded or not, its bytes (measured once loaded, estimated before), loads, evictions."""
        out = {}
        for entry in self.catalog.entries:
            out[entry.name] = {
                "loaded": entry.name in self.held,
                "bytes": self.estimate(entry),
                "loads": self.loads.get(entry.name, 0),
                "evictions": self.evictions.get(entry.name, 0),
            }
        return out

    def call(self, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int, dict[str, Any]]:
        """One model call on the model (and adapters) it names, loading what it needs; the answer carries
        the set's state where it changed since the last answer (``counts["models"]``)."""
        if call.task in (LOAD, UNLOAD):
            results = [(self.control(call, texts), 0)]
            answer: tuple[list[Any], int, dict[str, Any]] = (results, 0, {"long": 0, "truncated": 0})
        else:
            name = call.model or self.catalog.default
            adapters = sorted({row for row in call.rows if row is not None})
            keep = frozenset(adapters)
            try:
                backend = self.ensure(name, keep)
                for adapter in adapters:
                    self.ensure(adapter, keep)
            except BudgetError:
                if len(adapters) < 2:
                    raise
                # the call's adapters do not fit together: one adapter's rows at a time, each loaded in turn
                answer = by_row_group(call, texts, lambda row, part: self.run_group(name, call, row, part))
            else:
                answer = run_rows(backend, call, texts)
        if self.version != self.sent:
            self.sent = self.version
            answer[2]["models"] = self.info()
        return answer

    def run_group(self, name: str, call: ModelCall, row: str | None, texts: list[Any]) -> Any:
        """The rows of one adapter (``row``; None: the model ``name`` itself) of ``call``."""
        backend = self.ensure(name if row is None else row)
        return run_rows(backend, replace(call, rows=(row,) * len(texts)), texts)

    def control(self, call: ModelCall, texts: list[Any]) -> ServedModel | None:
        """``load``: an entry (texts[0]: a new one, or None for a known name) loaded, what it serves;
        ``unload``: the model evicted and, where it was added over HTTP, forgotten."""
        name = call.model or self.catalog.default
        with self.lock:
            if call.task == LOAD:
                entry = texts[0] if texts else None
                if entry is not None and entry.name not in self.catalog:
                    self.catalog = self.catalog.with_entry(entry)
                    try:
                        self.check_sizes()
                        self.ensure(entry.name)
                    except BaseException:
                        self.catalog = self.catalog.without(entry.name)
                        self.version += 1
                        raise
                self.ensure(name)
                return self.described[name]
            self.evict(name)
            self.catalog = self.catalog.without(name)
            self.version += 1
            return None


def carried_export(config: ServeConfig, entry: ModelEntry) -> Path | None:
    """The export a model directory carries (DIR/onnx) where ``--backend auto`` measures it beside PyTorch:
    an embedding export of a bare encoder or masked LM, served as it was exported (truncated, its own
    tokenizer, dense vectors)."""
    if (
        entry.tokenizer
        or config.sparse
        or config.long_documents != "truncate"
        or entry.head not in ("auto", "base")
    ):
        return None
    if not Path(entry.source).is_dir() or kind_of(entry.source).embedding != "dense":
        return None
    export = export_beside(entry.source)
    if export is None:
        return None
    config_file = Path(entry.source) / "config.json"
    heads = (
        json.loads((export / ONNX_CONFIG_FILE).read_text()).get("head"),
        declared_head(json.loads(config_file.read_text())),
    )
    return export if heads[0] == "base" and heads[1] in ("base", "mlm") else None


def load_measured(config: ServeConfig, entry: ModelEntry, export: Path, threads: Any) -> Any:
    """``entry`` on whichever of PyTorch (fp32, bf16) and its export's runtimes the measurement takes
    (:func:`neobert.inference.backends.choose_runtime`, every candidate at the export's thread count); an
    export taken keeps the PyTorch backend as its companion for what the graph does not serve. Where the
    calls adapt to the load (:func:`keeps_pytorch`), the companion is loaded at once and the two are a pair
    (:func:`neobert.serving.threads.choose_pair`): calls under load, and a lone call where one text runs
    faster there, may run on PyTorch's threads."""
    from transformers import PretrainedConfig

    chosen = ThreadPolicy.at_start(config, fixed="measured at the export's thread count")
    opened = choose_runtime(entry.source, config.precision, chosen.threads, config.backend_cache)
    if opened.runtime == "torch":
        opened.encoder = None  # the candidate's weights, before the backend loads its own
        gc.collect()
        memory.release()
        pytorch = replace(config, backend="torch", precision=opened.precision)
        backend = TorchBackend.load(pytorch, entry, threads)
        backend.backend_reason = opened.reason
        return backend
    pair = keeps_pytorch(config)
    precision = pytorch_precision(opened, entry, config) if pair else "fp32"
    pytorch = replace(config, backend="torch", precision=precision)
    settings = json.loads((Path(entry.source) / "config.json").read_text(encoding="utf-8"))
    backend = OnnxBackend(
        config,
        opened.encoder,
        PretrainedConfig.from_dict(settings),
        chosen,
        opened.runtime,
        opened.precision,
        opened.reason,
        companion=lambda: TorchBackend.load(pytorch, entry, chosen),
        companion_head=declared_head(settings),
    )
    if pair:
        on_export = ServingProbe(backend)  # the model process's calls run on the export unless placed
        backend.threads = choose_pair(
            ServingProbe(backend.pytorch()),
            lambda texts: on_export(chosen.threads, texts),
            opened.label,
            chosen.threads,
            f"torch {precision}",
        )
    return backend


def keeps_pytorch(config: ServeConfig) -> bool:
    """Whether ``--backend auto``, taking a model directory's export, keeps its PyTorch backend beside it for
    calls under load: where the HTTP side places each call (one model process of its own; no pinned count)."""
    return config.model_process and config.workers == 1 and pinned(config.threads) is None


def pytorch_precision(opened: Any, entry: ModelEntry, config: ServeConfig) -> str:
    """The precision of a pair's PyTorch: the faster of its measured candidates (bf16 only by
    :data:`~neobert.runtime.hardware.BF16_MARGIN`, as auto takes it); a cached choice, without timings,
    the precision probe's."""
    timings = opened.choice.timings_ms if opened.choice is not None else {}
    fp32, bf16 = timings.get("torch fp32"), timings.get("torch bf16")
    if bf16 is not None and (fp32 is None or bf16 * BF16_MARGIN <= fp32):
        return "bf16"
    if fp32 is not None or bf16 is not None:
        return "fp32"
    return resolve_model_precision(entry.source, config.precision)


def run_rows(backend: Any, call: ModelCall, texts: list[Any]) -> tuple[list[Any], int, dict[str, Any]]:
    """``call`` on ``backend`` with each text through its row's adapter: tagged texts in one forward for
    :data:`MIXED_TASKS`, else one group per adapter, each forward under its adapter's tag."""
    rows = call.rows or (None,) * len(texts)
    if all(row is None for row in rows):
        return backend.call(call, texts)
    if call.task in MIXED_TASKS:
        return backend.call(
            call, [text if row is None else tagged(text, row) for text, row in zip(texts, rows)]
        )

    def under_tag(row: str | None, part: list[Any]) -> tuple[list[Any], int, dict[str, Any]]:
        outer = ROW_TAGS.set(RowTags((row,), uniform=True))
        try:
            return backend.call(call, part)
        finally:
            ROW_TAGS.reset(outer)

    return by_row_group(call, texts, under_tag)


def by_row_group(
    call: ModelCall, texts: list[Any], run: Callable[[str | None, list[Any]], tuple[list[Any], int, dict]]
) -> tuple[list[Any], int, dict[str, Any]]:
    """``run(row, texts)`` for each adapter's texts of ``call`` in turn, the answers put back in order."""
    rows = call.rows or (None,) * len(texts)
    groups: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row, []).append(i)
    answers: list[Any] = [None] * len(texts)
    tokens, counts = 0, {"long": 0, "truncated": 0}
    for row, members in groups.items():
        part, used, seen = run(row, [texts[i] for i in members])
        for i, answer in zip(members, part):
            answers[i] = answer
        tokens += used
        counts = {name: counts[name] + seen.get(name, 0) for name in counts}
    return answers, tokens, counts


def estimate_bytes(config: ServeConfig, entry: ModelEntry) -> int | None:
    """What ``entry`` will take once loaded, from its files' headers (module doc); None where unknown."""
    path = Path(entry.source).expanduser()
    if entry.adapter:
        weights = path / ADAPTER_WEIGHTS
        return header_bytes([weights], 4) if weights.is_file() else None  # peft holds adapters in fp32
    if config.runs_onnx(entry):
        stem = "model_int8" if config.onnx_variant == "int8" else "model"
        return sum(f.stat().st_size for f in path.glob(f"{stem}.onnx*")) or None
    precision = resolve_model_precision(entry.source, config.precision)
    width = 2 if precision == "bf16" else 4
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        return header_bytes(files, width) if files else None
    if is_preset(entry.source):
        return count_parameters(ModelConfig.from_name(entry.source))[1] * width
    return None


def too_large(entry: ModelEntry, need: int, size: int, budget: int, pinned: list[str]) -> str:
    """Why ``entry`` is refused at start: its size (with its base), beside the pinned models, over the budget."""
    what = f"model {entry.name} ({entry.source}) takes about {need:,} bytes"
    if entry.adapter:
        what += f" with its base {entry.base}"
    beside = f"; with the pinned {', '.join(pinned)}: {size:,} bytes" if pinned and size != need else ""
    return f"{what}{beside}: more than --max-memory {budget:,} bytes"


def with_model(call: ModelCall, model: str) -> ModelCall:
    return replace(call, model=model)
