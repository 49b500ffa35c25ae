"""Every name a package exports exists and imports (the original code exported names that did not)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import neobert

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(neobert.__path__, prefix="neobert.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_and_its_all_resolves(name):
    module = importlib.import_module(name)
    for exported in getattr(module, "__all__", []):
        assert getattr(module, exported, None) is not None, f"{name}.__all__ names missing {exported!r}"


def test_import_registers_the_auto_classes():
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    config = AutoConfig.for_model("neobert", **neobert.ModelConfig.from_name("tiny").to_dict())
    assert isinstance(config, neobert.NeoBERTConfig)
    assert isinstance(AutoModel.from_config(config), neobert.NeoBERTModel)
    assert isinstance(AutoModelForMaskedLM.from_config(config), neobert.NeoBERTForMaskedLM)
