"""Every script under docs/ (the benchmarks' drivers and reports) imports names that exist: each
``neobert`` module it imports, anywhere in its body, imports, and each name it takes from one is defined
there. The scripts themselves run for minutes to hours; their imports are what rots silently when code
moves (issue 38: they had kept module names that no longer exist)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
SCRIPTS = sorted(DOCS.rglob("*.py"))


def neobert_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names taken from it) for every ``neobert`` import of ``path``."""
    rows = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            rows += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "neobert"]
        elif (
            isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("neobert")
        ):
            rows.append((node.lineno, node.module, [a.name for a in node.names]))
    return rows


def test_the_scripts_are_found_and_import_neobert():
    assert len(SCRIPTS) >= 10
    assert sum(bool(neobert_imports(p)) for p in SCRIPTS) >= 10


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_neobert_name_a_docs_script_imports_exists(path):
    missing = []
    for line, module, names in neobert_imports(path):
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as err:
            missing.append(f"{path.name}:{line}: {module} ({err})")
            continue
        for name in names:
            if not hasattr(imported, name) and importlib.util.find_spec(f"{module}.{name}") is None:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert missing == []
