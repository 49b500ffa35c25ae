"""What a backend serves, typed (:class:`ServedModel`): made once in the model process from the model's
:class:`~neobert.inference.capabilities.Capabilities` and the backend's own facts, sent to the HTTP process as it is
(it pickles), and read there by attribute: the routes, the service, the schema's bounds and ``/info``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from .threads import ThreadChoice


@dataclass(frozen=True)
class ServedModel:
    """A served model: its head and the tasks (endpoints) it serves, its shape, its embedding settings, the
    backend and precision it runs on, and the thread count chosen at start (None: the backend's own)."""

    head: str
    serves: tuple[str, ...]
    model_type: str
    dimensions: int  # the hidden size: an embedding's width
    max_input_tokens: int
    backend: Literal["torch", "onnx", "openvino"]
    precision: str  # torch: bf16 | fp32; onnx: the graph, fp32 | int8; openvino: fp32 | bf16 | int8-static
    pooling: str | None = None  # None: no embeddings
    normalize: bool | None = None
    embedding_settings_from: str | None = None
    labels: tuple[str, ...] | None = None
    prompts: Mapping[str, str] = field(default_factory=dict)  # prompt_name -> the text put before the input
    default_prompt_name: str | None = None
    matryoshka_dims: tuple[int, ...] = ()  # the widths ``dimensions`` may take without a warning
    not_served: Mapping[str, str] = field(default_factory=dict)  # the head's tasks it does not serve, and why
    mask_token: str | None = None
    vocab_size: int | None = None  # token ids are below it
    threads: ThreadChoice | None = None
    token_vectors: Mapping[str, Any] | None = None  # its token vectors' settings (a ColBERT model's)
    backend_reason: str | None = None  # why this backend and precision (named, or what auto measured)

    @classmethod
    def of(cls, capabilities: Any, **backend: Any) -> ServedModel:
        """From a model's capabilities (:meth:`~neobert.inference.capabilities.Capabilities.info`) and the backend's
        fields (``backend``, ``precision``, ``mask_token``, ``vocab_size``, ``threads``)."""
        known = {f.name for f in fields(cls)}
        described = {name: value for name, value in capabilities.info().items() if name in known}
        served = {**described, **backend}
        for name in ("serves", "labels", "matryoshka_dims"):
            if served.get(name) is not None:
                served[name] = tuple(served[name])
        return cls(**served)

    @classmethod
    def envelope(cls, models: Sequence[ServedModel]) -> ServedModel:
        """What any of ``models`` accepts, for the OpenAPI schema of a service of several: the widest width
        and vocabulary, every prompt, the mask token only where they share one, and only the tasks they all
        serve (a late-interaction model's texts-only inputs are stated only where every model is one)."""
        first, masks = models[0], {m.mask_token for m in models}
        serves = [task for task in first.serves if all(task in m.serves for m in models)]
        return replace(
            first,
            serves=tuple(serves),
            dimensions=max(m.dimensions for m in models),
            vocab_size=max((m.vocab_size or 0 for m in models), default=0) or None,
            prompts={name: text for m in models for name, text in m.prompts.items()},
            mask_token=first.mask_token if len(masks) == 1 else None,
        )

    def info(self) -> dict[str, Any]:
        """The model's part of ``/info`` (plain JSON data)."""
        body: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "threads"}
        for name in ("serves", "labels", "matryoshka_dims"):
            body[name] = None if body[name] is None else list(body[name])
        body["prompts"], body["not_served"] = dict(self.prompts), dict(self.not_served)
        body["token_vectors"] = dict(self.token_vectors) if self.token_vectors else None
        threads = self.threads
        return {**body, "threads": threads and threads.threads, "threads_reason": threads and threads.reason}


@dataclass(frozen=True)
class ServedSet:
    """What a model process serves, several models or one (:mod:`.registry`): the default's name, the models
    described so far (name -> :class:`ServedModel`: each one loaded once; an adapter's is its base's), every
    model's state (name -> loaded, bytes, loads, evictions) and the memory budget (None: no limit)."""

    default: str
    models: Mapping[str, ServedModel]
    state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    budget: int | None = None

    @property
    def model(self) -> ServedModel:
        """The default model's description."""
        return self.models[self.default]
