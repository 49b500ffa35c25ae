"""vLLM's dialect for adapters loaded while serving: ``POST /v1/load_lora_adapter`` and
``POST /v1/unload_lora_adapter``, in vLLM's shapes (``lora_name``, ``lora_path``; a plain-text success line),
so that the tools that manage a vLLM server's adapters manage ours. Why vLLM's and not llama.cpp's
``/models/load``: vLLM's takes the adapter's path with its name, which is what adding a model to a running
server needs, and adapters are what its endpoints are for, as ours are; llama.cpp's router loads only models
it was given at start.

Behind the API key (the middleware's, as every path but /health and the schema), and only where the server
was started with ``--model-root``: a path outside those directories is refused (403) before anything is
read there, so a request cannot make the server read an arbitrary path.
"""

from __future__ import annotations

from fastapi.responses import PlainTextResponse, Response
from pydantic import Field, StrictBool, StrictStr

from ..catalog import CatalogError
from ..errors import ServiceError, documented
from ..schemas import LenientRequest
from ..service import UnknownModel
from ..worker import ModelCallRefused
from .core import Routes

# --- requests -------------------------------------------------------------------------------------------


class LoadLoRAAdapterRequest(LenientRequest):
    lora_name: StrictStr = Field(description="the name requests will give in their model field")
    lora_path: StrictStr = Field(description="a peft LoRA adapter directory, inside a --model-root")
    load_inplace: StrictBool = Field(
        default=False, description="replace an adapter already served under this name"
    )
    base_model_name: StrictStr | None = Field(
        default=None,
        description="ours: the served model it runs over (default: the one its adapter_config.json names)",
    )


class UnloadLoRAAdapterRequest(LenientRequest):
    lora_name: StrictStr
    lora_int_id: int | None = Field(default=None, description="vLLM's; not used")


# --- routes ---------------------------------------------------------------------------------------------


def add(routes: Routes) -> None:
    app, service = routes.app, routes.service
    answers = {
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **documented(401, 403, 404, 409, 422),
    }

    @app.post("/v1/load_lora_adapter", response_class=Response, responses=answers, dependencies=routes.bearer)
    async def load_lora_adapter(request: LoadLoRAAdapterRequest) -> Response:
        """vLLM's: load a LoRA adapter (``lora_path``, inside a --model-root) and serve it as ``lora_name``
        over its base; 200 once it is loaded in every model process."""
        name = request.lora_name
        if request.load_inplace and name in service.catalog and service.catalog[name].adapter:
            await service.remove(name)
        try:
            await service.add_adapter(name, request.lora_path, request.base_model_name)
        except PermissionError as err:
            raise ServiceError(403, str(err), "lora_path") from None
        except CatalogError as err:
            status = 409 if "already served" in str(err) else 422
            raise ServiceError(status, str(err), "lora_name" if status == 409 else "lora_path") from None
        except (ModelCallRefused, ValueError) as err:
            raise ServiceError(422, str(err), "lora_path") from None
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post(
        "/v1/unload_lora_adapter", response_class=Response, responses=answers, dependencies=routes.bearer
    )
    async def unload_lora_adapter(request: UnloadLoRAAdapterRequest) -> Response:
        """vLLM's: stop serving the adapter ``lora_name`` and free its memory (requests already queued for
        it are answered first)."""
        if not service.config.model_root:
            raise ServiceError(403, "unloading over HTTP is off: the server was started without --model-root")
        try:
            await service.remove(request.lora_name)
        except UnknownModel as err:
            raise ServiceError(404, str(err), "lora_name", code="model_not_found") from None
        except CatalogError as err:
            raise ServiceError(422, str(err), "lora_name") from None
        return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' removed successfully.")
