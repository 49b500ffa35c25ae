"""Settings of ``neobert serve``: one dataclass; unknown keys raise, bad values name the setting."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import PRECISIONS, check_known_keys
from ..long_documents import EXTEND_METHODS, POLICIES

TASKS = ("auto", "base", "mlm", "sequence-classification", "token-classification")


class ServeConfigError(ValueError):
    """A serving setting is unknown or invalid."""


@dataclass(kw_only=True)
class ServeConfig:
    model: str  # model directory, preset name (random weights) or hub id
    tokenizer: str | None = None  # default: the model directory's; bert-base-uncased for presets
    task: str = "auto"  # which head to load; auto: the directory's architecture (presets: mlm)
    host: str = "127.0.0.1"
    port: int = 8000
    precision: str = "auto"  # NeoBERT models run on the fast path (unpadded): bf16, exact fp32, or auto (the faster here, measured)
    batching: bool = True  # merge requests that arrive together; False: one request per model call
    max_batch_tokens: int = 4096  # padded tokens per forward batch (the CPU optimum of `bench encode`)
    max_batch_texts: int = 64  # texts per model call: requests are merged until this many
    max_queue: int = 64  # requests waiting for the model; one more is answered 503 + Retry-After
    max_texts: int = 64  # texts per request (413 beyond)
    max_chars: int = 20_000  # characters per text (413 beyond)
    workers: int = 1  # model worker threads sharing the queue (each runs whole batches)
    long_documents: str = "truncate"  # truncate | chunk | extend, for texts longer than the model window
    stride: int | None = None  # chunk: tokens shared by neighbouring windows (default: a quarter window)
    rope_scaling: str = "yarn"  # extend: yarn | ntk | linear
    retry_after: int = 1  # seconds, the Retry-After of a 503
    graceful_timeout: float = 30.0  # seconds to finish in-flight requests on shutdown

    def __post_init__(self) -> None:
        for name in (
            "port",
            "max_batch_tokens",
            "max_batch_texts",
            "max_queue",
            "max_texts",
            "max_chars",
            "workers",
            "retry_after",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "port" else 1):
                kind = "a non-negative" if name == "port" else "a positive"
                raise ServeConfigError(f"{name} must be {kind} integer, got {value!r}")
        for name, choices in (
            ("task", TASKS),
            ("precision", PRECISIONS),
            ("long_documents", POLICIES),
            ("rope_scaling", EXTEND_METHODS),
        ):
            if getattr(self, name) not in choices:
                raise ServeConfigError(
                    f"{name} must be one of {', '.join(choices)}; got {getattr(self, name)!r}"
                )
        if self.graceful_timeout <= 0:
            raise ServeConfigError(f"graceful_timeout must be positive, got {self.graceful_timeout}")

    @property
    def max_body_bytes(self) -> int:
        """Largest request body accepted (413 beyond): the text limits at 4 UTF-8 bytes a character
        (JSON escapes aside), plus room for the other fields."""
        return self.max_texts * (4 * self.max_chars + 16) + 65_536

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServeConfig:
        check_known_keys(cls, data, "serve config", ServeConfigError)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
