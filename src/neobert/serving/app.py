"""The HTTP side of ``neobert serve``: a FastAPI app over a :class:`~neobert.serving.service.Service`,
put together from its parts: :mod:`.routes` (one module per dialect over a shared core, one small function per
endpoint, each dialect's request and response shapes beside its routes), :mod:`.schemas` (what the shapes
share, and the limits the OpenAPI schema states), :mod:`.errors` (OpenAI-shaped errors and their mapping) and
:mod:`.middleware` (API key, paced refusals, body limit, metrics) and :mod:`.playground` (the page a person
tries the model in). The model runs behind the queue
(:mod:`.tasks` in the model process); nothing here tokenizes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .errors import add_error_handlers
from .middleware import Guard
from .playground import add_playground
from .routes import DIALECTS, LIMITS, SERVICE_ROUTES, add_routes
from .schemas import request_shapes, state_limits
from .served import ServedModel


def create_app(service: Any, dialects: Sequence[Any] = DIALECTS) -> FastAPI:
    """The app: the routes of ``dialects`` (:data:`.routes.DIALECTS`: each with ``add(routes)``), error
    handlers, the Guard middleware; on shutdown the model workers stop."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        # Uvicorn has finished the in-flight requests; stop the model workers.
        await asyncio.to_thread(service.close, service.config.graceful_timeout)

    app = FastAPI(
        title="neobert",
        summary="Embeddings (also OpenAI's shape), classification, reranking, token tagging, fill-mask",
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.model_routes = model_routes = add_routes(
        app, service, dialects
    )  # this app's own: path -> its task
    limits = {name: getattr(service.config, name) for name in LIMITS}
    stated: list[Any] = [None]  # the models the schema was stated for

    def openapi() -> dict[str, Any]:  # FastAPI's schema, with these models' and limits' bounds stated
        names = tuple(service.catalog.names) if service.catalog.several else ()
        known = (names, tuple(service.served))
        if app.openapi_schema is None or stated[0] != known:  # a model loaded or added since: stated anew
            app.openapi_schema, stated[0] = None, known
            models = [service.served[name] for name in service.served if name in service.catalog]
            app.openapi_schema = state_limits(
                FastAPI.openapi(app),
                request_shapes(app),
                limits,
                service.model if not names else ServedModel.envelope(models),
                calibrated=bool(service.config.calibration),
                names=names,
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    add_playground(app)  # the page (docs/serving.md, "The playground"), outside the schema
    add_error_handlers(app, service)
    app.add_middleware(
        Guard, service=service, model_paths=dict(model_routes), paths=(*model_routes, *SERVICE_ROUTES)
    )
    return app
