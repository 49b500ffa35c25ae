"""The facts a card states, as the tasks hand them over: data sources, results, the run; and the
machine and library versions, read here."""

from __future__ import annotations

import hashlib
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult

from ..inference.encoders import is_preset
from ..inference.kinds import card_heads
from ..runtime.hardware import cpu_info
from ..runtime.hardware import versions as hardware_versions

CARD = "README.md"
HASH_LIMIT = 2**31  # files larger than 2 GiB are described by name and size only (hashing would take minutes)
VERSIONED = (
    "neobert",
    "torch",
    "transformers",
    "huggingface_hub",
    "tokenizers",
    "accelerate",
    "sentence-transformers",
    "onnxruntime",
)
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


class CardError(ValueError):
    """A model card cannot be written or updated (no model directory, a malformed card)."""


@dataclass
class DataSource:
    """One input of a training run: a Hub data set (``hf:``), a built-in corpus, or a local file."""

    name: str  # the hub id, the spec (stdlib:...), or the file's name
    hub_id: str | None = None
    size: int | None = None  # bytes, local files only
    sha256: str | None = None  # local files up to HASH_LIMIT
    note: str = ""

    @classmethod
    def from_spec(cls, spec: str | os.PathLike) -> DataSource:
        """Describe ``spec`` as the readers take it: ``hf:NAME[:CONFIG[:SPLIT]]``, ``stdlib:...``, a file or a
        directory of files (size and a hash over its files' hashes)."""
        spec = str(spec)
        if spec.startswith(("hf:", "hub:")):  # hf:NAME[:CONFIG[:SPLIT]], hub:ID[:CONFIG][@SPLIT]
            name = spec.partition(":")[2].split(":")[0].split("@")[0]
            return cls(spec, hub_id=name)
        if spec.startswith("stdlib:"):
            return cls(spec, note="docstrings of the Python standard library")
        path = Path(spec)
        if path.is_file():
            size = path.stat().st_size
            return cls(path.name, size=size, sha256=file_sha256(path) if size <= HASH_LIMIT else None)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            size = sum(p.stat().st_size for p in files)
            digest = hashlib.sha256()
            for p in files:
                digest.update(f"{p.relative_to(path)}\0{file_sha256(p)}\n".encode())
            return cls(path.name + "/", size=size, sha256=digest.hexdigest(), note=f"{len(files)} files")
        return cls(path.name, note="not found when this card was written")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Result:
    """One evaluation number, as a ``model-index`` entry (task, data set, metric, value)."""

    task_type: str  # e.g. fill-mask, text-classification, sentence-similarity
    task_name: str
    dataset_name: str
    dataset_type: str  # a hub id, or the local file / task name
    metric_type: str
    value: float
    split: str | None = None
    source: str | None = None  # the command that produced it
    # what tells apart entries of one task type on one data set (a GLUE task, a length bin): model-index
    # groups entries by task type, data set type, config and split, and keeps one task name per group
    config: str | None = None

    def eval_result(self) -> EvalResult:
        return EvalResult(
            task_type=self.task_type,
            task_name=self.task_name,
            dataset_name=self.dataset_name,
            dataset_type=self.dataset_type,
            dataset_config=self.config,
            dataset_split=self.split,
            metric_type=self.metric_type,
            metric_value=float(self.value),
            metric_args={"source": self.source} if self.source else None,
        )

    def same_task(self, other: EvalResult) -> bool:
        """Whether ``other`` is an entry of the same task on the same data (so this run's replaces it): the
        identity model-index itself groups by (task type, data set type, config, split)."""
        return (other.task_type, other.dataset_type, other.dataset_config, other.dataset_split) == (
            self.task_type,
            self.dataset_type,
            self.config,
            self.split,
        )


@dataclass
class CardInfo:
    """What a run knows about the model it wrote; every field is a fact of that run (None: not known)."""

    head: str  # a registered head, or what a directory kind calls its models (directories.card_heads)
    description: str  # what the model is, one paragraph
    command: str  # what wrote it, e.g. "neobert pretrain"
    library: str = "transformers"  # transformers | sentence-transformers | onnx
    base_model: str | None = None  # a hub id, only when fine-tuned from a model known by one
    data: list[DataSource] = field(default_factory=list)
    data_stats: list[tuple[str, Any]] = field(
        default_factory=list
    )  # (what, number), e.g. ("train documents", n)
    settings: dict[str, Any] = field(default_factory=dict)  # every training setting, nested sections allowed
    run: list[tuple[str, Any]] = field(default_factory=list)  # precision run, steps, tokens seen, wall time
    results: list[Result] = field(default_factory=list)
    loss_curve: str | None = None  # an image file inside the directory
    license: str | None = None
    limits: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)  # extra (title, Markdown) sections
    tags: list[str] = field(default_factory=list)
    name: str | None = None  # the card's title and model-index name; default: the directory's name

    def __post_init__(self) -> None:
        if self.head not in card_heads():
            raise CardError(f"unknown head {self.head!r}; one of {', '.join(card_heads())}")


def machine() -> str:
    """The CPU (and GPUs) this process runs on, named."""
    name = cpu_info()[0] or platform.machine()
    text = f"{name}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        text += "; GPU: " + ", ".join(gpus)
    return text


def versions() -> list[tuple[str, str]]:
    """Python and the installed versions of the libraries a model directory depends on."""
    found = hardware_versions()
    return [(name, found[name]) for name in ("python", *VERSIONED) if found.get(name)]


def hub_model_id(source: str) -> str | None:
    """``source`` when it names a Hub model (``owner/name`` that is no local path or preset), else None."""
    if is_preset(source) or Path(source).expanduser().exists():
        return None
    return source if HUB_ID.match(source) else None


def wall_time(seconds: float) -> str:
    """Seconds for a person: ``42 s``, ``7.3 minutes``, ``2.5 hours``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"


def flatten(settings: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``{"optim": {"lr": 1e-3}}`` -> ``[("optim.lr", 0.001)]``, in the mapping's order."""
    rows = []
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            rows += flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows
