"""ASGI middleware of the service (:class:`Guard`): the model a URL names, the API key, paced queue-full
refusals, the body limit and the request metrics, before any routing or parsing."""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..common import memory
from .config import TRIM_BYTES
from .errors import error_body, error_response
from .playground import open_path
from .routes.core import ASKED, MODELS_PREFIX, Asked

# no API key needed (nor for reading the playground page, which asks for the key: playground.open_path)
OPEN_PATHS = ("/health", "/openapi.json", "/docs", "/docs/oauth2-redirect")
TRIM_DELAY_S = 0.2  # a trim waits this long after a large answer, so answers ending together share one


class Guard:
    """ASGI middleware, before any routing or parsing: checks the API key (401), refuses a model request
    while the queue is full (503 after ``refusal_delay`` seconds of asynchronous waiting, so the refusal
    costs almost no CPU and a client that retries at once is slowed down), refuses bodies over the size
    limit (413, before reading them when the length is declared), records every request's status and
    latency in the metrics, and after a large answer returns freed memory to the system (:mod:`neobert.common.memory`)."""

    def __init__(self, app: Any, service: Any, model_paths: dict[str, str], paths: tuple[str, ...]):
        self.app, self.service = app, service
        config = service.config
        self.limit = config.max_body_bytes
        self.release_memory, self._trim_pending = getattr(config, "release_memory", True), False
        key = service.api_key
        self.expected = key.encode() if key else None  # the token after the scheme
        several = service.catalog.several  # any model route may be asked of some model
        self.model_paths = {path for path, task in model_paths.items() if several or task in service.tasks}
        self.paths = set(paths)  # the metrics' endpoint label; others count as "other"
        busy = error_body(
            503,
            f"server busy: {config.max_queue} requests are already waiting; retry after {config.retry_after} s",
        )
        self.busy = _raw_json(503, busy, [(b"retry-after", str(config.retry_after).encode())])
        self.unauthorized = _raw_json(
            401,
            error_body(
                401,
                "missing or wrong API key: send the header Authorization: Bearer KEY",
                None,
                "invalid_api_key",
            ),
            [(b"www-authenticate", b"Bearer")],
        )

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        asked = Asked()
        scope = self.routed(scope, asked)
        token = ASKED.set(asked)
        path = scope["path"]
        endpoint = path if path in self.paths else "other"
        status, sent = [500], [0]

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                sent[0] += len(message.get("body", b""))
            await send(message)

        try:
            if (
                self.expected is not None
                and path not in OPEN_PATHS
                and not open_path(scope.get("method", ""), path)
                and not self._authorized(scope)
            ):
                await _send_raw(send_status, self.unauthorized)
                return
            if path in self.model_paths and self.service.batcher.full():
                await asyncio.sleep(self.service.config.refusal_delay)
                await _send_raw(send_status, self.busy)
                return
            declared = dict(scope.get("headers") or []).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.limit:
                response = error_response(
                    413, f"request body of {int(declared):,} bytes; the limit is {self.limit:,}"
                )
                await response(scope, receive, send_status)
                return
            await self.app(scope, self._limited(receive), send_status)
        finally:
            ASKED.reset(token)
            model = asked.model or (asked.prefix or "")
            self.service.metrics.request(endpoint, status[0], model, time.perf_counter() - start)
            if sent[0] >= TRIM_BYTES and self.release_memory:
                self._trim_soon()

    def routed(self, scope: dict, asked: Asked) -> dict:
        """``/models/NAME/PATH`` is ``PATH`` asked of model NAME (a served name, the longest that fits;
        else the first segment, which the route then answers 404 naming the models served)."""
        path = scope["path"]
        if not path.startswith(MODELS_PREFIX):
            return scope
        rest = path[len(MODELS_PREFIX) :]
        names = sorted(self.service.catalog.names, key=len, reverse=True)
        name = next((n for n in names if rest.startswith(n + "/")), rest.split("/", 1)[0])
        if not rest.startswith(name + "/"):
            return scope
        asked.prefix = name
        inner = rest[len(name) :]
        return {**scope, "path": inner, "raw_path": inner.encode()}

    def _trim_soon(self) -> None:
        """After a large answer (sent, its buffers freed): return free memory to the system in a moment,
        once for answers that end together (:mod:`neobert.common.memory`)."""
        if self._trim_pending:
            return
        self._trim_pending = True

        def trim() -> None:
            self._trim_pending = False
            memory.release()

        asyncio.get_running_loop().call_later(TRIM_DELAY_S, trim)

    def _authorized(self, scope: dict) -> bool:
        """``Authorization: Bearer KEY``; the scheme in any case (RFC 9110: schemes are case-insensitive),
        the key compared in constant time."""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    token.strip(), self.expected or b""
                )
        return False

    def _limited(self, receive: Any) -> Any:
        received = [0]

        async def limited() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.limit:
                    raise HTTPException(413, f"request body over the limit of {self.limit:,} bytes")
            return message

        return limited


def _raw_json(status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> tuple[dict, dict]:
    """A response built once (the ASGI start and body messages), for the answers sent most often."""
    content = JSONResponse(body).body
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(content)).encode()),
            *headers,
        ],
    }
    return start, {"type": "http.response.body", "body": content}


async def _send_raw(send: Any, response: tuple[dict, dict]) -> None:
    await send(response[0])
    await send(response[1])
