"""Settings of ``neobert serve``: one dataclass; unknown keys raise, bad values name the setting."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..common.config import PRECISIONS, check_known_keys, renamed_settings
from ..inference.backends import BACKENDS, EXPORT_VARIANTS
from ..inference.kinds import kind_of
from ..inference.long_documents import EXTEND_METHODS, POLICIES
from ..inference.registration import HEADS
from .catalog import Catalog, CatalogError, ModelEntry, build_catalog, check_roots, parse_bytes

API_KEY_ENV = "NEOBERT_API_KEY"
# an answer (or a model call's pickled results) at least this large is followed by a trim
# (:func:`neobert.common.memory.release`, where ``release_memory`` is on)
TRIM_BYTES = 4 * 2**20


def head_choices() -> tuple[str, ...]:
    """What ``--head`` takes: auto, or a registered head (registration.HEADS)."""
    return ("auto", *HEADS)


class ServeConfigError(ValueError):
    """A serving setting is unknown or invalid."""


@dataclass(kw_only=True)
class ServeConfig:
    # model directory, preset name (random weights), hub id or LoRA adapter directory; NAME=PATH names it:
    # repeated, several models in one service, the first the default (docs/serving.md, Several models)
    model: list[str] = field(default_factory=list, metadata={"nargs": "append"})
    # a YAML or JSON file of the models to serve: names, paths, adapters' bases, pins (docs/serving.md)
    models_file: str | None = None
    # bytes the models' weights may take in each model process (e.g. 8GiB, 500MB): models and adapters load
    # on first use, the least recently used are evicted to make room; default: no limit, all loaded at start
    max_memory: str | None = None
    pin: list[str] = field(
        default_factory=list, metadata={"nargs": "append"}
    )  # a model never evicted (repeatable)
    # a directory below which POST /v1/load_lora_adapter may load adapters (repeatable); without one,
    # loading over HTTP is refused
    model_root: list[str] = field(default_factory=list, metadata={"nargs": "append"})
    tokenizer: str | None = None  # tokenizer directory (default: the model's; bert-base-uncased for presets)
    head: str = "auto"  # which head to load; auto: the directory's architecture (presets: mlm)
    # also serve a masked-LM model's SPLADE vectors (POST /embed_sparse); a SPLADE SparseEncoder directory serves them without it
    sparse: bool = False
    # refuse (422) a `dimensions` the model was not trained for (not in /info's matryoshka_dims, not its full width) instead of serving it with a Warning header
    strict_dimensions: bool = False
    # float embeddings (N, dim) of sample texts, .npy (as `neobert embed --calibration`): the int8 / uint8 buckets of Cohere's embedding_types (without it those two are not offered)
    calibration: str | None = None
    host: str = "127.0.0.1"  # address to listen on
    port: int = 8000  # port to listen on (0: a free one)
    # torch; onnx (ONNX Runtime) or openvino (OpenVINO) on a `neobert export onnx` directory; auto: for an
    # export the fastest of ONNX Runtime and OpenVINO (fp32, bf16), measured at start; for a model directory
    # carrying its export in DIR/onnx those and PyTorch (fp32, bf16); torch for another model
    backend: str = field(default="auto", metadata={"choices": BACKENDS})
    # a JSON file keeping --backend auto's measured choice per export, machine and thread count: found there,
    # it is loaded (and checked) without measuring again; absent, measured and added (none: measured each start)
    backend_cache: str | None = None
    onnx_variant: str = field(
        default="fp32", metadata={"choices": EXPORT_VARIANTS}
    )  # an export's graph: fp32, int8 (ONNX Runtime's dynamic, --quantize int8) or int8-static (openvino only)
    precision: str = "auto"  # torch: NeoBERT's fast path in bf16, exact fp32, or auto (the faster here, measured); openvino: its inference precision
    # clients must send "Authorization: Bearer KEY" (default: the NEOBERT_API_KEY environment variable)
    api_key: str | None = field(default=None, repr=False)
    # the model runs in a process of its own beside the HTTP process, so request handling (refusals
    # included) never takes the model's GIL; off: a thread of the HTTP process
    model_process: bool = True
    # the model's threads; 0: measured at start for this model and machine, then fitted per call to the
    # load (docs/serving.md, Threads); N, or $NEOBERT_SERVE_THREADS: pinned
    threads: int = 0
    batching: bool = True  # merge requests that arrive together (off: one request per model call)
    max_batch_tokens: int = 4096  # padded tokens per forward batch (the CPU optimum of `bench encode`)
    max_batch_texts: int = 64  # texts per model call: requests are merged until this many
    max_queue: int = 64  # requests waiting for the model; one more is answered 503 + Retry-After
    max_texts: int = 64  # texts per request (413 beyond)
    max_chars: int = 20_000  # characters per text (413 beyond)
    # bytes of one answer that grows with tokens (/embed_all): tokens x hidden x bytes a number (JSON float 20,
    # base64 16/3, base64_float16 8/3); over it: 413 before the model runs (docs/serving.md, Answer budget)
    max_answer_bytes: int = 32 * 2**20
    # return freed memory to the system after a large answer (glibc malloc_trim, in both processes)
    release_memory: bool = True
    workers: int = 1  # model workers sharing the queue: processes with a model each (threads sharing one without model_process)
    long_documents: str = "truncate"  # truncate | chunk | extend, for texts longer than the model window
    stride: int | None = None  # chunk: tokens shared by neighbouring windows (default: a quarter window)
    rope_scaling: str = "yarn"  # extend: yarn | ntk | linear
    retry_after: int = 1  # seconds, the Retry-After of a 503
    # seconds a 503 (queue full) waits before it is sent, costing no CPU: a client that retries at once
    # is slowed to this pace instead of spinning against the refusal path
    refusal_delay: float = 0.25
    graceful_timeout: float = 30.0  # seconds to finish in-flight requests on shutdown

    def __post_init__(self) -> None:
        if isinstance(self.model, str):  # one model, as the Python API has always taken it
            self.model = [self.model]
        self._check_numbers()
        self._check_models()
        self._check_backends()

    def _check_numbers(self) -> None:
        for name in (
            "port",
            "max_batch_tokens",
            "max_batch_texts",
            "max_queue",
            "max_texts",
            "max_chars",
            "max_answer_bytes",
            "workers",
            "retry_after",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "port" else 1):
                kind = "a non-negative" if name == "port" else "a positive"
                raise ServeConfigError(f"{name} must be {kind} integer, got {value!r}")
        for name, choices in (
            ("head", head_choices()),
            ("backend", BACKENDS),
            ("onnx_variant", EXPORT_VARIANTS),
            ("precision", PRECISIONS),
            ("long_documents", POLICIES),
            ("rope_scaling", EXTEND_METHODS),
        ):
            if getattr(self, name) not in choices:
                raise ServeConfigError(
                    f"{name} must be one of {', '.join(choices)}; got {getattr(self, name)!r}"
                )
        if self.calibration is not None and not Path(self.calibration).is_file():
            raise ServeConfigError(f"calibration file {self.calibration} does not exist")
        if self.graceful_timeout <= 0:
            raise ServeConfigError(f"graceful_timeout must be positive, got {self.graceful_timeout}")
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 0:
            raise ServeConfigError(f"threads must be a non-negative integer, got {self.threads!r}")
        if not 0 <= self.refusal_delay <= 60:
            raise ServeConfigError(
                f"refusal_delay must be between 0 and 60 seconds, got {self.refusal_delay}"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise ServeConfigError("api_key must not be empty (leave it out to serve without a key)")

    def _check_models(self) -> None:
        try:
            catalog, budget = self.catalog, self.memory_budget
            check_roots(self.model_root)
        except CatalogError as err:
            raise ServeConfigError(str(err)) from None
        for entry in catalog.entries:
            if entry.head not in head_choices():
                raise ServeConfigError(f"model {entry.name}: head must be one of {', '.join(head_choices())}")
        if budget is not None and self.workers > 1:
            raise ServeConfigError(
                "max_memory with several model processes (--workers) is not supported: each would load and "
                "evict models of its own; serve with --workers 1"
            )
        if self.long_documents == "extend" and any(e.adapter for e in catalog.entries):
            raise ServeConfigError(
                "long_documents extend rebuilds the model per window scale, without its adapters; serve "
                "adapters with truncate or chunk"
            )

    def _check_backends(self) -> None:
        onnx = [self.runs_onnx(entry) for entry in self.catalog.entries]
        if any(onnx) and self.long_documents != "truncate":
            raise ServeConfigError(
                f"long_documents {self.long_documents} needs the torch backend; an ONNX export truncates at "
                "its max_length"
            )
        if self.backend == "onnx" and all(onnx) and self.precision != "auto":
            raise ServeConfigError(
                "precision applies to the torch and openvino backends; on onnx an export's is its variant "
                "(onnx_variant)"
            )
        if self.onnx and self.precision == "bf16" and self.onnx_variant != "fp32":
            raise ServeConfigError(f"precision bf16 runs the fp32 graph; onnx_variant is {self.onnx_variant}")
        if self.onnx_variant == "int8-static" and self.backend == "onnx":
            raise ServeConfigError(
                "onnx_variant int8-static (NNCF's, OpenVINO IR) needs the openvino backend"
            )
        if any(onnx) and self.sparse:
            raise ServeConfigError(
                "sparse (SPLADE vectors) needs the torch backend; an ONNX export has no MLM logits"
            )

    @cached_property
    def catalog(self) -> Catalog:
        """The models served, by name (:mod:`.catalog`): ``model`` and ``models_file``, ``pin`` marked."""
        return build_catalog(self.model, self.models_file, self.head, self.tokenizer, self.pin)

    def with_catalog(self, catalog: Catalog) -> ServeConfig:
        """These settings serving ``catalog`` (the models as they stand after loads over HTTP)."""
        copy = dataclasses.replace(self)
        copy.__dict__["catalog"] = catalog
        return copy

    @property
    def default(self) -> ModelEntry:
        """The model of a request that names none (the first given, or the models file's ``default``)."""
        return self.catalog[self.catalog.default]

    @property
    def default_model(self) -> str:
        """The default model's name (the ``--model`` value of a service of one model)."""
        return self.catalog.default

    @property
    def memory_budget(self) -> int | None:
        """``max_memory`` in bytes (None: no limit)."""
        return None if self.max_memory is None else parse_bytes(self.max_memory)

    def runs_onnx(self, entry: ModelEntry) -> bool:
        """Whether ``entry`` is an export's graph, run by ONNX Runtime or OpenVINO (``backend`` onnx or
        openvino, or auto and an export directory)."""
        if self.backend == "auto":
            return kind_of(entry.source).backend == "onnx"
        return self.backend in ("onnx", "openvino")

    @property
    def onnx(self) -> bool:
        """Whether the default model is an export's graph (``backend`` onnx or openvino, or auto and an
        export directory), run by ONNX Runtime or OpenVINO (:mod:`.onnx_backend`)."""
        return self.runs_onnx(self.default)

    @property
    def max_body_bytes(self) -> int:
        """Largest request body accepted (413 beyond): the text limits at 4 UTF-8 bytes a character
        (JSON escapes aside), plus room for the other fields."""
        return self.max_texts * (4 * self.max_chars + 16) + 65_536

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServeConfig:
        data = renamed_settings(
            data, "serve config", "serve", ServeConfigError
        )  # 'task' is 'head' (issue 24)
        check_known_keys(cls, data, "serve config", ServeConfigError)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
