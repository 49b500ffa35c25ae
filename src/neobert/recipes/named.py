"""The named pretraining recipes (``neobert pretrain --recipe NAME``): NeoBERT's and its successors', each a
phases file in ``neobert/configs/recipes/`` written at full size, run at any size with ``scale`` (tokens)
and ``context_scale`` (row lengths). docs/pretraining.md gives each recipe's numbers and their sources."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from ..common.config import ConfigError
from ..training.config import PretrainConfig

RECIPES = ("neobert", "modernbert", "ettin", "mmbert")


def recipe_text(name: str) -> str:
    """The recipe file's text (YAML)."""
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; the recipes are {', '.join(RECIPES)}")
    return resources.files("neobert.configs").joinpath(f"recipes/{name}.yaml").read_text(encoding="utf-8")


def recipe_config(name: str, **changes: Any) -> PretrainConfig:
    """The recipe ``name`` with dotted keys changed (as ``PretrainConfig.from_file``), e.g.
    ``recipe_config("modernbert", preset="tiny", scale=1e-7, context_scale=0.125)``."""
    with resources.as_file(resources.files("neobert.configs").joinpath(f"recipes/{name}.yaml")) as path:
        recipe_text(name)  # names the recipes on a wrong name
        return PretrainConfig.from_file(Path(path), **changes)
