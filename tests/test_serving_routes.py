"""The routes package (neobert.serving.routes): each app has its own route table (no module state shared by
two apps in one process), and the package's modules hold no mutable module-level containers."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from types import MappingProxyType

import pytest

pytest.importorskip("fastapi")

from neobert.serving import ServeConfig, routes
from neobert.serving.app import create_app
from neobert.serving.service import Service

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(head: str) -> Service:
    return Service.load(
        ServeConfig(model="tiny", head=head, precision="fp32", model_process=False, threads=1)
    )


def test_two_apps_in_one_process_keep_their_own_route_tables():
    masked, classifier = tiny("mlm"), tiny("sequence-classification")
    try:
        first = create_app(masked)
        before = dict(first.state.model_routes)
        second = create_app(classifier)
        # POST / is the head's: filling masks for the MLM, label scores for the classifier
        assert before["/"] == "fill-mask" and second.state.model_routes["/"] == "predict"
        assert (
            dict(first.state.model_routes) == before
        )  # building the second app changed nothing of the first
        assert first.state.model_routes is not second.state.model_routes
        # the same paths on both (every dialect's routes are declared for any model), each with its task
        assert set(before) == set(second.state.model_routes)
        assert before["/embed"] == "embed" and before["/v2/rerank"] == "rerank"
        with pytest.raises(TypeError):
            first.state.model_routes["/embed"] = "classify"  # read-only
        # the middleware refuses a full queue on the model paths of the app's own model only
        assert "/" in model_paths(first) and "/classify" not in model_paths(first)
        assert "/classify" in model_paths(second) and "/fill-mask" not in model_paths(second)
    finally:
        masked.close(1)
        classifier.close(1)


def model_paths(app) -> set[str]:
    stack = app.build_middleware_stack()  # Starlette's layers, outermost first
    while type(stack).__name__ != "Guard":
        stack = stack.app
    return stack.model_paths


def assigned(module) -> list[str]:
    """The names a module's own top-level statements assign (not what it imports)."""
    tree = ast.parse(Path(module.__file__).read_text())
    targets = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def test_the_routes_package_holds_no_mutable_module_state():
    modules = [routes] + [
        importlib.import_module(f"{routes.__name__}.{m.name}") for m in pkgutil.iter_modules(routes.__path__)
    ]
    assert {m.__name__.rsplit(".", 1)[1] for m in modules} >= {
        "core",
        "ours",
        "tei",
        "openai",
        "cohere",
        "status",
    }
    mutable = [
        f"{m.__name__}.{name}"
        for m in modules
        for name in assigned(m)
        if isinstance(getattr(m, name), (dict, list, set, bytearray))
    ]
    assert mutable == []
    assert "SERVICE_ROUTES" in assigned(routes.core)  # the scan reads the modules' own assignments
    assert isinstance(routes.tei.ROOT, MappingProxyType)


def test_a_model_call_is_typed_named_and_merges_by_value():
    from neobert.serving.tasks import Backend, ModelCall

    a = ModelCall.of("embed", True, pooling="mean", normalize=True, side="right")
    b = ModelCall.of("embed", side="right", normalize=True, pooling="mean")  # the same call, named otherwise
    assert (
        a == b and hash(a) == hash(b) and a.kwargs == {"pooling": "mean", "normalize": True, "side": "right"}
    )
    assert a != ModelCall.of("embed", False, pooling="mean", normalize=True, side="right")
    assert a != ModelCall.of("embed", pooling="cls", normalize=True, side="right")
    with pytest.raises(TypeError, match="a model call is a ModelCall, got tuple"):
        Backend().call(("embed", True, "mean", True), ["a text"])
