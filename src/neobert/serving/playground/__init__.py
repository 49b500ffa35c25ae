"""The playground: a page of the service (``GET /playground``) where a person tries the served model in a
browser before writing a client (docs/serving.md, "The playground"). Plain HTML, CSS and JavaScript shipped
as package data beside this module: no build step, nothing fetched from elsewhere; the page calls the same
public endpoints a client calls (``/info``, ``/v1/models``, ``/embed``, ``/rerank``, ``/classify``,
``/tokens``, ``/fill-mask``, ``/embed_sparse``, ``/maxsim``).

Its answers carry a Content Security Policy that allows the page's own script, style and icon and calls to
this origin only (:data:`CSP`). A browser's ``GET /`` (``Accept: text/html``) is redirected here;
``POST /`` keeps text-embeddings-inference's meaning."""

from __future__ import annotations

from importlib.resources import files
from types import MappingProxyType

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from ..errors import ServiceError

PATH = "/playground"
# the page's files: URL path -> (file beside this module, media type)
FILES = MappingProxyType(
    {
        PATH: ("index.html", "text/html; charset=utf-8"),
        f"{PATH}/playground.js": ("playground.js", "text/javascript; charset=utf-8"),
        f"{PATH}/playground.css": ("playground.css", "text/css; charset=utf-8"),
        f"{PATH}/icon.svg": ("icon.svg", "image/svg+xml"),
    }
)
# what the page may load and call: its own files and this origin's API, nothing inline, no frames
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = MappingProxyType(
    {
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }
)


def open_path(method: str, path: str) -> bool:
    """Whether a request reads the page (open without the API key: the page asks for the key itself)."""
    return method in ("GET", "HEAD") and (path in FILES or path == "/")


def add_playground(app: FastAPI) -> None:
    """The page's routes (outside the API's schema), and ``GET /``'s redirect of a browser to it."""
    here = files(__package__)
    for path, (name, media_type) in FILES.items():
        content = here.joinpath(name).read_bytes()

        def page(content: bytes = content, media_type: str = media_type) -> Response:
            return Response(content, media_type=media_type, headers=dict(HEADERS))

        app.add_api_route(path, page, methods=["GET"], include_in_schema=False)

    @app.get("/", include_in_schema=False)
    async def root_page(request: Request) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(PATH, status_code=303)
        raise ServiceError(
            405,
            f"GET / sends a browser to the playground ({PATH}); the API's root is POST / "
            "(text-embeddings-inference's meaning: the model's task by its head)",
            headers={"Allow": "POST"},
        )
