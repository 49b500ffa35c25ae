"""``neobert serve``: the HTTP service (docs/serving.md). Options are the fields of
:class:`neobert.serving.ServeConfig` (their comments are the help); an option left out keeps the default."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..common.config import PRECISIONS
from ..inference.long_documents import EXTEND_METHODS, POLICIES
from ..serving.config import ServeConfig, ServeConfigError, head_choices
from .common import CLIError, add_command, make_console, quiet_transformers
from .options import config_from_args


def _serve(args: argparse.Namespace) -> int:
    try:
        from ..serving.server import serve  # FastAPI and uvicorn: the optional 'serve' extra
    except ImportError as err:
        raise CLIError(
            f"neobert serve needs FastAPI and uvicorn ({err}): pip install 'neobert[serve]'"
        ) from None

    quiet_transformers()
    try:
        config = config_from_args(ServeConfig, args)
    except ServeConfigError as err:
        raise CLIError(str(err)) from None
    console = make_console()

    def ready(service) -> None:
        console.print(escape(service.startup_line()), highlight=False)

    serve(config, on_ready=ready)
    console.print("stopped: in-flight requests finished")
    return 0


HELP = "HTTP service: embeddings (also OpenAI-style), classification, reranking, tagging, fill-mask"
DESCRIPTION = (
    "Serve any encoder, on PyTorch or ONNX Runtime (an export of `neobert export onnx`), over HTTP with dynamic batching, a bounded queue, limits, an optional API key, /info, "
    "/health and /metrics (Prometheus). Needs pip install 'neobert[serve]'. See docs/serving.md."
)
CHOICES = {
    "head": head_choices(),
    "precision": PRECISIONS,
    "long_documents": POLICIES,
    "rope_scaling": EXTEND_METHODS,
}


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(subparsers, "serve", _serve, HELP, DESCRIPTION, config=ServeConfig, choices=CHOICES)
