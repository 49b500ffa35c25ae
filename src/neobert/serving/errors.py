"""Errors of the service, in OpenAI's shape: ``{"error": {"message", "type", "param"}}``.

401 without the API key, 404 for an endpoint the model does not serve, 413 for requests over the limits,
422 for malformed JSON or wrong types (``param`` names the field), 503 + ``Retry-After`` when the queue is
full, the model process died or the server is shutting down, 500 without internals for anything
unexpected (the traceback goes to the server log only).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from .batcher import QueueFull, ShuttingDown
from .schemas import ErrorResponse
from .worker import ModelProcessGone

log = logging.getLogger(__name__)


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        401: "no or wrong API key (Authorization: Bearer KEY)",
        403: "loading models over HTTP is off (no --model-root), or the path lies outside the model roots",
        404: "the model does not serve this endpoint, or no model of that name is served",
        409: "a model of that name is already served",
        413: "too many texts, a text too long (characters, or tokens with truncate: false), body too large",
        422: "malformed JSON, wrong types, missing or unknown fields, bad option values",
        500: "unexpected error (details in the server log only)",
        503: "the queue is full (Retry-After) or the server is shutting down",
    }
    return {code: {"model": ErrorResponse, "description": what[code]} for code in codes}


MODEL_ERRORS = documented(401, 404, 413, 422, 500, 503)


class ServiceError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: dict | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.headers, self.code = status, message, param, headers, code


ERROR_TYPES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "request_too_large",
    422: "invalid_request",
    503: "overloaded",
}


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int, message: str, param: str | None = None, headers=None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "ours", "tei", "RerankDocumentIn"}


def field_name(loc: tuple) -> str:
    """A pydantic error location as a field path: ('body', 'texts', 0) -> texts[0]."""
    # pydantic names the union member tried ("str", "list[str]", "constrained-str"): not a field, so left out
    parts = [
        p
        for p in loc
        if p != "body" and not (isinstance(p, str) and (p in _TYPE_TAGS or any(c in p for c in "[-`")))
    ]
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def validation_problems(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(field, message) per field, in order. Where a field may take several shapes (a text, texts, token
    ids), the shape the value had speaks: a broken constraint ("at least 1 character", "greater than or
    equal to 0") wins over "should be a valid list" from the shapes it was not."""
    shaped: dict[Any, bool] = {}  # per top-level field: whether some shape got past the type check
    for e in errors:
        if not str(e.get("type", "")).endswith("_type"):
            shaped[_top(e)] = True
    problems: dict[str, str] = {}
    for e in errors:
        if e.get("type") == "json_invalid":
            reason = e.get("ctx", {}).get("error", "parse error")
            problems.setdefault("body", f"the body is not valid JSON ({reason})")
        elif not (shaped.get(_top(e)) and str(e.get("type", "")).endswith("_type")):
            problems.setdefault(field_name(tuple(e.get("loc", ()))), _message(e))
    return list(problems.items())


def _message(error: dict[str, Any]) -> str:
    """pydantic's message, except for a text UTF-8 cannot encode (a lone surrogate): where it is."""
    if error.get("type") == "string_unicode" and isinstance(error.get("input"), str):
        return unicode_problem(error["input"]) or str(error.get("msg"))
    return str(error.get("msg", "invalid"))


def unicode_problem(text: str) -> str | None:
    """Why UTF-8 cannot encode ``text`` (a lone surrogate, which JSON's escapes can carry), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"not valid Unicode ({err.reason} at character {err.start})"
    return None


def _top(error: dict[str, Any]) -> Any:
    loc = [p for p in error.get("loc", ()) if p != "body"]
    return loc[0] if loc else None


def add_error_handlers(app: FastAPI, service: Any) -> None:
    """Every error as ``{"error": {"message", "type", "param"}}`` with its status (module doc)."""
    retry = {"Retry-After": str(service.config.retry_after)}

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> Response:
        problems = validation_problems(err.errors())
        message = "; ".join(f"{name}: {msg}" for name, msg in problems)
        return error_response(422, message, problems[0][0] if problems else None)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, err: ServiceError) -> Response:
        return error_response(err.status, err.message, err.param, err.headers, err.code)

    @app.exception_handler(QueueFull)
    async def full(request: Request, err: QueueFull) -> Response:
        await asyncio.sleep(service.config.refusal_delay)  # see Guard: a refusal costs no CPU while it waits
        return error_response(
            503, f"server busy: {err}; retry after {service.config.retry_after} s", headers=retry
        )

    @app.exception_handler(ShuttingDown)
    async def closing(request: Request, err: ShuttingDown) -> Response:
        return error_response(503, str(err), headers=retry)

    @app.exception_handler(ModelProcessGone)
    async def model_gone(request: Request, err: ModelProcessGone) -> Response:
        log.error("%s on %s", err, request.url.path)
        return error_response(503, f"{err}; a new one is starting: retry", headers=retry)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        if (
            err.status_code == 400
        ):  # FastAPI's answer to a body it cannot decode (not UTF-8): a 422 like the rest
            return error_response(422, f"body: the body is not valid JSON ({err.detail})", "body")
        return error_response(err.status_code, str(err.detail), headers=err.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal error; the server log has the details")
