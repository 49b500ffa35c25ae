"""Running the service: ``serve(config)`` in the foreground (``neobert serve``), or a
:class:`BackgroundServer` on a free port of 127.0.0.1 (tests and ``neobert bench serve``).

Shutdown (SIGINT / SIGTERM, or ``should_exit``) is uvicorn's graceful one: stop accepting connections,
let the in-flight requests finish (up to ``graceful_timeout`` seconds), then stop the model workers.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn

from .app import create_app
from .config import ServeConfig
from .routes import DIALECTS
from .service import Service


def build_server(
    service: Service, port: int | None = None, dialects: Sequence[Any] = DIALECTS
) -> uvicorn.Server:
    config = service.config
    settings = uvicorn.Config(
        create_app(service, dialects),
        host=config.host,
        port=config.port if port is None else port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=config.graceful_timeout,
        lifespan="on",
    )
    return uvicorn.Server(settings)


def serve(config: ServeConfig | dict[str, Any], on_ready: Any = None) -> None:
    """Load the model, then serve until SIGINT / SIGTERM (main thread only: it installs signal handlers)."""
    if isinstance(config, dict):
        config = ServeConfig.from_dict(config)
    service = Service.load(config)
    if on_ready is not None:
        on_ready(service)
    server = build_server(service)
    # uvicorn re-raises the signal it shut down on once it is done; by then it has been handled, so the
    # command ends normally (exit 0) instead of dying from it.
    handled = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in handled.items():
            signal.signal(sig, handler)


class BackgroundServer:
    """The service on a free port of ``config.host`` in a background thread, speaking ``dialects``
    (:data:`.routes.DIALECTS`); ``stop()`` shuts it down gracefully. Use as a context manager."""

    def __init__(self, service: Service, startup_timeout: float = 60.0, dialects: Sequence[Any] = DIALECTS):
        self.service = service
        self.server = build_server(service, port=0, dialects=dialects)
        self.thread = threading.Thread(target=self.server.run, name="neobert-serve", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{service.config.host}:{self.port}"

    def stop(self, timeout: float | None = None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop(60)
