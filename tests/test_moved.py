"""Issue 32's layout: the modules that lay at the package root live in folders, and their old names keep
working through one table (``neobert/_moved.py``) as the very module of the new name; nothing in src/ or
tests/ uses an old name."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import neobert
import neobert.inference
from neobert._moved import MOVED
from neobert.inference import run

ROOT = Path(neobert.__file__).parent
TESTS = Path(__file__).parent
OLD = re.compile(r"\bneobert\.(" + "|".join(old.split(".")[1] for old in MOVED) + r")\b")


def fresh(code: str) -> dict:
    """The JSON a fresh interpreter prints after running ``code`` (nothing of neobert imported before)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_table_names_every_old_module_and_no_file_is_left_at_the_root():
    assert len(MOVED) == 18
    for old, new in MOVED.items():
        assert not (ROOT / f"{old.split('.')[1]}.py").exists(), f"{old} is still a file at the root"
        assert importlib.util.find_spec(new).origin.endswith(new.replace(".", "/") + ".py")
    assert (ROOT / "inference" / "__init__.py").exists() and not (ROOT / "inference.py").exists()


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_name_is_the_module_of_its_new_name(old, new):
    module = importlib.import_module(new)
    assert importlib.import_module(old) is module
    assert sys.modules[old] is module
    assert getattr(neobert, old.split(".")[1]) is module  # neobert.encoders as an attribute
    assert module.__name__ == new and module.__spec__.name == new  # the alias does not rename the module
    exec(f"from neobert import {old.split('.')[1]} as alias", namespace := {})
    assert namespace["alias"] is module


def test_patching_the_old_name_patches_the_one_module(monkeypatch):
    import neobert.quantization as old

    import neobert.inference.quantization as new

    monkeypatch.setattr(old, "bytes_per_vector", lambda *args: -1)
    assert new.bytes_per_vector(384, "int8") == -1
    monkeypatch.undo()
    assert new.bytes_per_vector(384, "int8") == 384  # one byte a dimension
    monkeypatch.setattr("neobert.tables.MISSING", "missing")  # a string target through the old name
    assert importlib.import_module("neobert.common.tables").MISSING == "missing"


def test_an_unknown_name_is_still_an_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("neobert.no_such_module")
    with pytest.raises(AttributeError, match="no_such_module"):
        _ = neobert.no_such_module
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = neobert.inference.no_such_name


def test_the_inference_package_serves_the_old_inference_module():
    defined = set()
    for node in ast.parse(Path(run.__file__).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert {name for name in defined if not name.startswith("_")} == neobert.inference.RUN_NAMES
    for name in neobert.inference.RUN_NAMES:
        assert getattr(neobert.inference, name) is getattr(run, name)
    assert set(neobert.inference.__all__) == set(run.__all__)
    assert neobert.inference.sparse is importlib.import_module("neobert.inference.sparse")


def test_old_names_and_pickles_load_in_a_fresh_interpreter_without_loading_anything_early(tmp_path):
    from neobert.common.config import ModelConfig

    config = ModelConfig.from_name("tiny")
    blob = pickle.dumps(config, protocol=0)  # text protocol: the module name is a plain line
    assert b"neobert.common.config\n" in blob
    (tmp_path / "old.pkl").write_bytes(blob.replace(b"neobert.common.config\n", b"neobert.config\n"))
    code = f"""
import json, pickle, sys
import neobert
early = sorted(m for m in sys.modules if m.startswith("neobert"))
with open({str(tmp_path / "old.pkl")!r}, "rb") as f:
    config = pickle.load(f)  # a pickle (a Ray actor's argument) naming neobert.config
func = pickle.loads(b"cneobert.sparse\\nsplade_pool\\n.")
from neobert.inference import encode, classifier_rows
import neobert.config
from neobert.config import ModelConfig
from neobert.encoders import Encoder
from neobert import sparse, predict
import neobert.inference.encoders, neobert.common.config, neobert.inference.sparse, neobert.jobs.predict
print(json.dumps({{"early": early, "hidden": config.hidden_size,
    "same": [type(config) is neobert.common.config.ModelConfig, func is neobert.inference.sparse.splade_pool,
             neobert.config is neobert.common.config, Encoder is neobert.inference.encoders.Encoder,
             ModelConfig is neobert.ModelConfig, sparse is neobert.inference.sparse,
             predict is neobert.jobs.predict, encode.__module__ == "neobert.inference.run"]}}))
"""
    out = fresh(code)
    assert out["same"] == [True] * 8 and out["hidden"] == config.hidden_size
    # importing the package loads the model, the config and the head registry, and no other moved module
    assert out["early"] == sorted(
        {
            "neobert",
            "neobert._moved",
            "neobert.common",
            "neobert.common.config",
            "neobert.inference",
            "neobert.inference.registration",
        }
        | {m for m in out["early"] if m.startswith("neobert.model")}
    )


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import in ``path`` (relative ones resolved)."""
    name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = name.removesuffix(".__init__") if path.name == "__init__.py" else name.rpartition(".")[0]
    rows = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            rows += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            rows.append((node.lineno, base, [alias.name for alias in node.names]))
    return rows


def test_nothing_in_src_or_tests_uses_an_old_name():
    used = []
    for path in sorted([*ROOT.rglob("*.py"), *TESTS.rglob("*.py")]):
        if path.name in ("_moved.py", "test_moved.py"):
            continue
        text = path.read_text(encoding="utf-8")
        used += [
            f"{path.name}:{text[: m.start()].count(chr(10)) + 1}: {m.group()}" for m in OLD.finditer(text)
        ]
        for line, module, names in _imports(path) if path.is_relative_to(ROOT) else []:
            old = [f"{module}.{n}" for n in names if f"{module}.{n}" in MOVED]
            used += [f"{path.name}:{line}: {module} import {n}" for n in old]
    assert used == []


def test_src_imports_the_inference_submodules_not_the_package_namespace():
    """``neobert.inference`` serves the old module's names lazily for users; inside src/ every import names
    the submodule (``from ..inference.run import encode``), so no import goes through the namespace."""
    through = [
        f"{path.relative_to(ROOT)}:{line}: {n}"
        for path in sorted(ROOT.rglob("*.py"))
        for line, module, names in _imports(path)
        if module == "neobert.inference"
        for n in names
        if n not in neobert.inference.SUBMODULES
    ]
    assert through == []
