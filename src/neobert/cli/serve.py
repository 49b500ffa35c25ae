"""``neobert serve``: the HTTP service (docs/serving.md). Flags are the fields of
:class:`neobert.serving.ServeConfig`; a flag left out keeps the dataclass default."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from rich.markup import escape

from ..serving.config import ServeConfig, ServeConfigError
from .common import CLIError, make_console, quiet_transformers

_HELP = {
    "model": "model directory, preset name (random weights) or hub id",
    "tokenizer": "tokenizer directory (default: the model directory's; bert-base-uncased for presets)",
    "task": "head to load; auto reads the directory's architecture (presets: mlm)",
    "precision": "NeoBERT weights on the fast path: bf16 or exact fp32",
    "batching": "merge requests that arrive together (--no-batching: one request per model call)",
    "max_batch_tokens": "padded tokens per forward batch",
    "max_batch_texts": "texts per model call (requests are merged up to this)",
    "max_queue": "requests waiting for the model; beyond, 503 with Retry-After",
    "max_texts": "texts per request; beyond, 413",
    "max_chars": "characters per text; beyond, 413",
    "workers": "model worker threads sharing the queue",
    "long_documents": "texts longer than the model window: truncate | chunk | extend",
    "stride": "chunk: tokens shared by neighbouring windows (default: a quarter window)",
    "rope_scaling": "extend: RoPE scaling method",
    "retry_after": "seconds in the Retry-After header of a 503",
    "graceful_timeout": "seconds to finish in-flight requests on shutdown",
}


def add_config_flags(parser: argparse.ArgumentParser, config_class: type, helps: dict[str, str]) -> None:
    """One flag per dataclass field (``--max-queue`` for ``max_queue``), typed by its annotation; booleans
    get ``--x / --no-x``. Defaults stay in the dataclass (a flag left out is not passed)."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default_text = "" if required or f.default is None else f" (default: {f.default})"
        help_text = helps.get(f.name, "") + default_text
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        args = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
        parser.add_argument(flag, type=args[0], default=None, required=required, help=help_text)


def _serve(args: argparse.Namespace) -> int:
    try:
        from ..serving.server import serve  # FastAPI and uvicorn: the optional 'serve' extra
    except ImportError as err:
        raise CLIError(
            f"neobert serve needs FastAPI and uvicorn ({err}): pip install 'neobert[serve]'"
        ) from None

    quiet_transformers()
    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    data = {name: value for name, value in vars(args).items() if name in fields and value is not None}
    try:
        config = ServeConfig.from_dict(data)
    except ServeConfigError as err:
        raise CLIError(str(err)) from None
    console = make_console()

    def ready(service) -> None:
        console.print(
            f"serving {escape(config.model)} ({service.task} head: {', '.join(service.tasks)}) on "
            f"http://{config.host}:{config.port}  (batching {'on' if config.batching else 'off'}, "
            f"queue {config.max_queue}, long documents: {config.long_documents})",
            highlight=False,
        )

    serve(config, on_ready=ready)
    console.print("stopped: in-flight requests finished")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="HTTP service: embeddings (also OpenAI-style), classification, tagging, fill-mask",
        description="Serve a model over HTTP with dynamic batching, a bounded queue, limits, /health and "
        "/metrics (Prometheus). Needs pip install 'neobert[serve]'. See docs/serving.md.",
    )
    add_config_flags(parser, ServeConfig, _HELP)
    parser.set_defaults(func=_serve)
