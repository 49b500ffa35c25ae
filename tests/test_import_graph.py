"""Every module imports, and the import graph among neobert modules has no cycle (function-local imports
included, so a cycle cannot hide inside a function)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import neobert

ROOT = Path(neobert.__file__).parent
# The packages under src/: neobert, and the console script's launcher above it (neobert_cli, the top floor)
PACKAGES = (ROOT, ROOT.parent / "neobert_cli")
# Optional extras: a module built on one of them is imported only when it is installed.
OPTIONAL = {"neobert.integrations.sentence_transformers": "sentence_transformers"}


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(p for package in PACKAGES for p in package.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported(node: ast.AST, package: str, modules: dict[str, Path]) -> set[str]:
    """The neobert modules an import statement names (relative imports resolved); empty for other nodes."""
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parent + ([node.module] if node.module else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    elif isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        return set()
    found = set()
    for target in targets:
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        if target in modules and target.startswith("neobert"):
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the neobert modules it imports anywhere in its body (relative imports resolved)."""
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = _package(name, path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            graph[name] |= _imported(node, package, modules) - {name}
    return graph


def local_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The neobert modules that module ``name`` (at ``path``) imports inside a function, nested ones included."""
    found, package = set(), _package(name, path)
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                found |= _imported(node, package, modules)
    return found


def function_local_imports() -> set[tuple[str, str]]:
    """(module, neobert module) for every import of a neobert module inside a function, over src/."""
    modules = module_names()
    return {(name, target) for name, path in modules.items() for target in local_imports(name, path, modules)}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph[child])))
    return None


def test_find_cycle_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


def test_graph_sees_function_local_and_relative_imports():
    graph = import_graph()
    assert "neobert.inference.encoders" in graph["neobert.inference.run"]  # a relative top-level import
    assert "neobert.common.config" in graph["neobert.inference.encoders"]  # two dots up
    assert "neobert.model" in graph["neobert.inference.encoders"]


def test_no_import_cycle_among_neobert_modules():
    assert find_cycle(import_graph()) is None


@pytest.mark.parametrize("name", sorted(module_names()))
def test_every_module_imports(name):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    importlib.import_module(name)


# The imports of neobert modules placed inside a function, each with its reason. An import is put in a function
# only for an optional extra or a heavy third-party module (those are imported inside the neobert module that
# needs them) or for a GPU-only kernel, never to dodge a cycle: a cycle is removed instead (issue 38 item 4).
LOCAL_IMPORTS = {
    ("neobert.cli.serve", "neobert.serving.server"): (
        "FastAPI and uvicorn, the 'serve' extra: serving/server.py imports uvicorn at its top; without them "
        "`neobert serve` stops in one line naming the extra, and every other command works"
    ),
    ("neobert.finetuning.contrastive", "neobert.integrations.sentence_transformers"): (
        "sentence-transformers, the 'st' extra, imported at the top of integrations/sentence_transformers.py: "
        "only saving a NeoBERT as a sentence-transformers directory needs it"
    ),
    ("neobert.recipes.demo", "neobert.integrations.sentence_transformers"): (
        "sentence-transformers, the 'st' extra: without it the demo skips its step 5, naming the extra"
    ),
    ("neobert_cli.launcher", "neobert.cli.main"): (
        "the console script's launcher answers --help and --version from parsers.json without importing "
        "neobert, whose __init__ imports torch and transformers to register the Auto classes (seconds); the "
        "real command line is imported only for a command line it does not answer (issue 42 item 3)"
    ),
}


def test_function_local_imports_of_neobert_modules_are_the_listed_ones():
    assert function_local_imports() == set(LOCAL_IMPORTS)
    assert all(reason.strip() for reason in LOCAL_IMPORTS.values())


def test_function_local_imports_are_found_relative_absolute_and_nested(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import json\n"
        "from ..data import readers\n"  # at the top: not function-local
        "def f():\n"
        "    from ..data.readers import DataError\n"
        "    import numpy\n"  # not a neobert module: an extra or a heavy library is imported where used
        "    def g():\n"
        "        import neobert.common.io\n"
        "class C:\n"
        "    async def h(self):\n"
        "        from . import engine\n"
    )
    modules = dict.fromkeys(
        ["neobert.data", "neobert.data.readers", "neobert.common.io", "neobert.jobs.engine"]
    )
    assert local_imports("neobert.jobs.planted", planted, modules) == {
        "neobert.data.readers",
        "neobert.common.io",
        "neobert.jobs.engine",
    }


# The floors of the house, bottom up (docs/architecture.md). A module imports its own floor or lower ones.
FLOORS = {
    # floor 0, neobert/common/: what every floor uses, importing nothing of neobert
    "neobert.common": 0,  # config (ModelConfig, presets, settings files), io (atomic writes), tables, progress
    "neobert.configs": 0,  # the shipped YAML recipes and vocabulary
    # floor 1: the model, what runs it fastest here, and the data, side by side
    "neobert.model": 1,
    "neobert.runtime": 1,  # hardware (CPU flags, measured precision; imports config only), fastpath (model/)
    "neobert.data": 1,
    # floor 2: the cores the tasks stand on
    "neobert.inference": 2,  # encoders, registration, directories, capabilities, run (encode, classifier_logits,
    # fill_mask), long_documents, sparse, late_interaction, quantization, model_info
    "neobert.cards": 2,  # model cards, and pushing a directory to the Hugging Face Hub (cards/hub.py)
    "neobert.training": 2,
    # the batch jobs: where their pieces run (engine: local or Ray), their output, settings; data preparation,
    # corpus embedding (embed: the driver, embed_config, embed_workers, embed_format: the shards index reads),
    # the search index over embed's token vectors; each stands on data/ and inference/ only
    "neobert.jobs": 2,
    # floor 3: the tasks
    "neobert.jobs.predict": 3,  # a model over a file of texts: classify, tag (token_classification), fill-mask
    "neobert.finetuning": 3,
    "neobert.evaluation": 3,
    "neobert.benchmarks": 3,
    "neobert.integrations": 3,
    "neobert.serving": 3,
    "neobert.token_classification": 3,
    "neobert.ablation": 3,
    "neobert.recipes": 3,  # whole runs: the embedded default run
    "neobert.export": 3,  # ONNX export (runs the model and the tokenizer) and its onnxruntime loader
    "neobert.cli": 4,
    # floor 5, outside the package: the console script's launcher (help from parsers.json; the rest to cli/)
    "neobert_cli": 5,
}


def floor(module: str) -> int | None:
    """The floor of ``module``: its longest prefix in FLOORS (None for the package's own __init__)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in FLOORS:
            return FLOORS[".".join(parts[:end])]
    return None


def test_every_module_has_a_floor():
    assert [m for m in module_names() if m != "neobert" and floor(m) is None] == []


def test_imports_point_down_cli_tasks_engines_model_data_config():
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if "neobert" not in (module, target) and floor(target) > floor(module)
    ]
    assert upward == []

    # model and data are side by side: neither imports the other
    def wing(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    across = [
        f"{m} -> {t}"
        for m, targets in import_graph().items()
        for t in targets
        if {wing(m), wing(t)} == {"model", "data"}
    ]
    assert across == []


def test_no_serving_function_is_long():
    """The serving wing stays a house of small parts (issue 24): no function over 60 lines, its subfolders
    (the routes package) included."""
    long, paths = [], sorted((ROOT / "serving").rglob("*.py"))
    assert ROOT / "serving" / "routes" / "core.py" in paths  # the subfolders are read
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert long == []


def test_no_function_is_long():
    """A function is read in one sitting (issue 32: the last ten over 60 lines were split into parts)."""
    long = set()
    for path in sorted(p for package in PACKAGES for p in package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and node.end_lineno - node.lineno + 1 > 60:
                long.add(f"{path.relative_to(ROOT.parent)}:{node.name}")
    assert long == set(), sorted(long)


def test_import_neobert_loads_the_model_config_and_head_registry_only():
    """``import neobert`` registers the Auto classes: it loads the model, the config and the head registry,
    no other module of the package, and puts no import hook on ``sys.meta_path`` (issue 38: no
    compatibility layer for old module names)."""
    code = (
        "import json, sys; import neobert; print(json.dumps([sorted(m for m in sys.modules if "
        "m.startswith('neobert')), [type(f).__module__ for f in sys.meta_path if 'neobert' in type(f).__module__]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    loaded, hooks = json.loads(done.stdout.strip().splitlines()[-1])
    assert hooks == []
    model = {m for m in loaded if m.startswith("neobert.model")}
    assert (
        set(loaded)
        == {
            "neobert",
            "neobert.common",
            "neobert.common.config",
            "neobert.inference",
            "neobert.inference.registration",
        }
        | model
    )
