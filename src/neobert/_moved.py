"""The modules issue 32 moved from the package root into folders, and the one mechanism that keeps their old
names working.

``MOVED`` maps each old dotted name to its new one. :class:`MovedFinder`, put first on ``sys.meta_path`` by
``neobert/__init__.py``, answers an import of an old name (``import neobert.encoders``, ``from
neobert.config import ModelConfig``, a pickle or a Ray actor that names ``neobert.sparse``) with THE module
of the new name: ``sys.modules`` holds one object under both names, so monkeypatching either name patches
the one module, and nothing is executed twice. ``neobert.__getattr__`` serves ``neobert.encoders`` as an
attribute the same way. (No moved module is a package, so the table names modules only.)

``neobert.inference`` is not in the table: it is the inference package now, and it serves the names the old
module defined from :mod:`neobert.inference.run` (see ``neobert/inference/__init__.py``).

The old names stay silent (no warning) for one release (the next after 0.1.0); the release after it makes
them warn (a ``DeprecationWarning`` in ``_Alias.create_module``), and the one after that removes this table.
Nothing inside ``src/`` or ``tests/`` imports an old name (``tests/test_moved.py`` checks it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED = {
    # floor 0: neobert.common
    "neobert.config": "neobert.common.config",
    "neobert.io": "neobert.common.io",
    "neobert.tables": "neobert.common.tables",
    "neobert.progress": "neobert.common.progress",
    # floor 1: neobert.runtime
    "neobert.hardware": "neobert.runtime.hardware",
    "neobert.fastpath": "neobert.runtime.fastpath",
    # floor 2: neobert.inference (the old module neobert.inference is neobert.inference.run)
    "neobert.encoders": "neobert.inference.encoders",
    "neobert.capabilities": "neobert.inference.capabilities",
    "neobert.registration": "neobert.inference.registration",
    "neobert.directories": "neobert.inference.directories",
    "neobert.long_documents": "neobert.inference.long_documents",
    "neobert.sparse": "neobert.inference.sparse",
    "neobert.late_interaction": "neobert.inference.late_interaction",
    "neobert.quantization": "neobert.inference.quantization",
    "neobert.model_info": "neobert.inference.model_info",
    # floor 2: publishing beside the cards it publishes
    "neobert.hub": "neobert.cards.hub",
    # floor 3: a model over files, beside neobert embed
    "neobert.predict": "neobert.jobs.predict",
    "neobert.indexing": "neobert.jobs.index",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new name (imported on demand, never a second copy)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # the import system overwrites __spec__; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED`; every other name goes on to the next finder."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put one :class:`MovedFinder` first on ``sys.meta_path`` (again after a reload: still one)."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != MovedFinder.__name__]
    sys.meta_path.insert(0, MovedFinder())


def module_attribute(package: str, name: str) -> ModuleType:
    """``neobert.<name>`` as an attribute of the package, for an old name (``neobert.encoders``)."""
    if f"{package}.{name}" not in MOVED:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return importlib.import_module(f"{package}.{name}")
