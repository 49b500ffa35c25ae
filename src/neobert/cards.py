"""Model cards: the README.md (YAML front matter + Markdown) written into every model directory we produce.

A card tells whoever receives a directory what it is, how to load it, what it was trained on, with which
settings, on which machine, and how well it did. It is built with ``huggingface_hub``'s card types
(:class:`~huggingface_hub.ModelCard`, :class:`~huggingface_hub.ModelCardData`,
:class:`~huggingface_hub.EvalResult`), so ``ModelCard.load(dir / "README.md")`` parses it back and the Hub
shows its ``model-index`` as evaluation results.

Every fact comes from the caller (the task that just ran: :class:`CardInfo`) or from the directory itself
(architecture, tokenizer, weights); nothing is estimated. The results table of the body is rendered from
the front matter's ``model-index``, so :func:`update_card` (``neobert eval ... --update-card``) replaces the
entries of a task and redraws the table, and the two never disagree.

Each task builds its own :class:`CardInfo` (``training/card.py`` for pretraining, the fine-tuning modules,
the sentence-transformers and ONNX exports); this module renders and writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import AutoTokenizer

from .encoders import is_preset
from .hardware import cpu_info
from .io import write_text
from .model_info import model_info
from .tables import fmt, markdown_table

CARD = "README.md"
# what a head is for, in the Hub's pipeline vocabulary
PIPELINES = {
    "mlm": "fill-mask",
    "base": "feature-extraction",
    "sentence-embedding": "sentence-similarity",
    "sequence-classification": "text-classification",
    "token-classification": "token-classification",
}
# the Auto class of each head, for the transformers snippet
AUTO_CLASSES = {
    "mlm": "AutoModelForMaskedLM",
    "base": "AutoModel",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
}
RESULTS_START, RESULTS_END = "<!-- neobert:results -->", "<!-- /neobert:results -->"
EXAMPLE_TEXTS = ("NeoBERT is a next-generation encoder.", "A second, longer example sentence for the batch.")
HASH_LIMIT = 2**31  # files larger than 2 GiB are described by name and size only (hashing would take minutes)
VERSIONED = ("neobert", "torch", "transformers", "huggingface_hub", "tokenizers", "accelerate",
             "sentence-transformers", "onnxruntime")  # fmt: skip
CITATION = """@article{lebreton2025neobert,
  title   = {NeoBERT: A Next-Generation BERT},
  author  = {Le Breton, Lola and Fournier, Quentin and El Mezouar, Mariam and Morris, John X. and Chandar, Sarath},
  journal = {Transactions on Machine Learning Research},
  year    = {2025},
  url     = {https://arxiv.org/abs/2502.19587}
}"""
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
            task_type=self.task_type, task_name=self.task_name, dataset_name=self.dataset_name,
            dataset_type=self.dataset_type, dataset_config=self.config, dataset_split=self.split,
            metric_type=self.metric_type,
            metric_value=float(self.value), metric_args={"source": self.source} if self.source else None,
        )  # fmt: skip

    def same_task(self, other: EvalResult) -> bool:
        """Whether ``other`` is an entry of the same task on the same data (so this run's replaces it): the
        identity model-index itself groups by (task type, data set type, config, split)."""
        return (other.task_type, other.dataset_type, other.dataset_config, other.dataset_split) == (
            self.task_type, self.dataset_type, self.config, self.split)  # fmt: skip


@dataclass
class CardInfo:
    """What a run knows about the model it wrote; every field is a fact of that run (None: not known)."""

    head: str  # a key of PIPELINES
    description: str  # what the model is, one paragraph
    command: str  # what wrote it, e.g. "neobert pretrain"
    library: str = "transformers"  # transformers | sentence-transformers | onnx
    base_model: str | None = None  # a hub id, only when fine-tuned from a model known by one
    data: list[DataSource] = field(default_factory=list)
    data_stats: list[tuple[str, Any]] = field(default_factory=list)  # (what, number), e.g. ("train documents", n)
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
        if self.head not in PIPELINES:
            raise CardError(f"unknown head {self.head!r}; one of {', '.join(PIPELINES)}")


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
    found = [("python", platform.python_version())]
    for name in VERSIONED:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return found


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


# -- the body --------------------------------------------------------------------------------------------


def _config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def architecture(directory: Path) -> str:
    """``neobert info``'s table for a NeoBERT directory; the config's main numbers for another model."""
    config = _config(directory)
    if config.get("model_type") == "neobert":
        return model_info(str(directory)).summary.split("\n\n", 1)[1]
    keys = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
            "vocab_size", "max_position_embeddings")  # fmt: skip
    rows = [(k, config[k]) for k in keys if k in config]
    return markdown_table(["field", "value"], rows) if rows else "Not recorded in this directory.\n"


def _example_tokens(directory: Path, texts: tuple[str, ...]) -> int | None:
    """Tokens of the longest of ``texts`` under the directory's tokenizer (the snippet pads to it)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception:  # no tokenizer files: the snippet's shape is given symbolically
        return None
    return max(len(ids) for ids in tokenizer(list(texts))["input_ids"])


def _mask_text(directory: Path) -> str:
    special = directory / "special_tokens_map.json"
    mask = "[MASK]"
    if special.is_file():
        value = json.loads(special.read_text(encoding="utf-8")).get("mask_token", mask)
        mask = value.get("content", mask) if isinstance(value, dict) else value
    return f"Paris is the {mask} of France."


def usage(directory: Path, info: CardInfo) -> tuple[str, str]:
    """The card's first Python snippet (run against the directory itself: ``path = "."``) and the line it
    prints: the output's shape, computed here from the directory's config and tokenizer."""
    config = _config(directory)
    labels = len(config.get("id2label") or {}) or None
    hidden = config.get("hidden_size")
    if info.library == "sentence-transformers":
        code = ("import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
                "from sentence_transformers import SentenceTransformer\n\n"
                'model = SentenceTransformer(".")  # this directory, or its Hub repo id\n'
                f"vectors = model.encode({list(EXAMPLE_TEXTS)!r})\n"
                "print(tuple(vectors.shape))")  # fmt: skip
        return code, f"({len(EXAMPLE_TEXTS)}, {hidden})"
    if info.library == "onnx":
        call = "classify" if info.head == "sequence-classification" else "encode"
        width = labels if call == "classify" else hidden
        code = ("from neobert.export.runtime import OnnxEncoder  # onnxruntime + tokenizers, no torch (pip install 'neobert[onnx]')\n\n"
                'encoder = OnnxEncoder(".")  # this directory\n'
                f"outputs = encoder.{call}({list(EXAMPLE_TEXTS)!r})\n"
                "print(tuple(outputs.shape))")  # fmt: skip
        return code, f"({len(EXAMPLE_TEXTS)}, {width})"
    auto = AUTO_CLASSES[info.head if info.head in AUTO_CLASSES else "base"]
    texts = (_mask_text(directory),) if info.head == "mlm" else EXAMPLE_TEXTS
    length = _example_tokens(directory, texts) or "L"
    output = {"mlm": ("logits", config.get("vocab_size")), "sequence-classification": ("logits", labels),
              "token-classification": ("logits", labels)}.get(info.head, ("last_hidden_state", hidden))  # fmt: skip
    shape = (len(texts), labels) if info.head == "sequence-classification" else (len(texts), length, output[1])
    code = ("import neobert  # registers NeoBERT with transformers' Auto classes (pip install neobert); no remote code\n"
            "import torch\n"
            f"from transformers import {auto}, AutoTokenizer\n\n"
            'path = "."  # this directory, or its Hub repo id (and revision=... for a checkpoint)\n'
            "tokenizer = AutoTokenizer.from_pretrained(path)\n"
            f"model = {auto}.from_pretrained(path).eval()\n"
            f"batch = tokenizer({list(texts)!r}, padding=True, return_tensors=\"pt\")\n"
            "with torch.no_grad():\n"
            f"    output = model(**batch).{output[0]}\n"
            "print(tuple(output.shape))")  # fmt: skip
    return code, "(" + ", ".join(str(n) for n in shape) + ")"


def _other_ways(info: CardInfo) -> str:
    """How else to load it: the other two of transformers, sentence-transformers and ONNX Runtime."""
    st = ("```python\nimport neobert\nfrom neobert.integrations.sentence_transformers import save_sentence_transformer\n"
          "from sentence_transformers import SentenceTransformer\n\n"
          'save_sentence_transformer(".", None, "st-model")  # mean pooling over this encoder\n'
          'model = SentenceTransformer("st-model")\n```\n')  # fmt: skip
    onnx = ("```bash\nneobert export onnx --model . --output onnx-model  # checked against PyTorch at export\n```\n\n"
            '```python\nfrom neobert.export.runtime import OnnxEncoder\nencoder = OnnxEncoder("onnx-model")\n```\n')  # fmt: skip
    if info.library == "onnx":
        return ("This directory holds `model.onnx` (and `model_int8.onnx` where quantized), the tokenizer and "
                "`onnx_config.json`; any ONNX Runtime program can run it with the inputs `input_ids` and "
                "`attention_mask`. The PyTorch model it was exported from loads with transformers' Auto "
                "classes after `import neobert`.\n")  # fmt: skip
    if info.library == "sentence-transformers":
        return ("The root of this directory is also a transformers model (`AutoModel.from_pretrained(\".\")` after "
                "`import neobert`; pool `last_hidden_state` over the attention mask as `modules.json`'s Pooling says to "
                "get the same vectors).\n\nONNX Runtime:\n\n" + onnx)  # fmt: skip
    if info.head in ("mlm", "base"):
        return "sentence-transformers (embeddings):\n\n" + st + "\nONNX Runtime:\n\n" + onnx
    if info.head == "token-classification":
        return "ONNX Runtime: `neobert export onnx` exports the encoder of this directory, not its tagging head.\n"
    return "ONNX Runtime (the classifier's logits):\n\n" + onnx


def results_table(results: list[EvalResult]) -> str:
    """The body's results: one row per ``model-index`` entry, exactly its value."""
    if not results:
        return "No evaluation results recorded yet (`neobert eval ... --update-card` adds them).\n"
    rows = [(r.task_name or r.task_type, r.dataset_name + (f" ({r.dataset_config})" if r.dataset_config else ""),
             r.dataset_split or "", r.metric_type,
             fmt(float(r.metric_value), digits=4), (r.metric_args or {}).get("source", "")) for r in results]  # fmt: skip
    return markdown_table(["task", "data", "split", "metric", "value", "from"], rows)


def _results_block(results: list[EvalResult]) -> str:
    return f"{RESULTS_START}\n{results_table(results)}{RESULTS_END}"


def render(directory: Path, info: CardInfo) -> str:
    """The README.md text of ``info`` for ``directory`` (front matter and body)."""
    directory = Path(directory)
    name = info.name or directory.name
    data = card_data(info, name)
    code, printed = usage(directory, info)
    first = {"onnx": "ONNX Runtime", "sentence-transformers": "sentence-transformers"}.get(info.library,
                                                                                             "transformers")
    parts = [f"# {name}\n", info.description + "\n", "## How to load it\n", f"With {first}:\n",
             f"```python\n{code}\n```\n", f"prints `{printed}`.\n", _other_ways(info),
             "## Architecture\n", architecture(directory)]  # fmt: skip
    parts += ["## Training data\n", _data_section(info)]
    if info.settings or info.run:
        parts += ["## Training\n" if info.settings else "## How it was made\n", f"Written by `{info.command}`.\n"]
        if info.run:
            parts.append(markdown_table(["", "value"], [(k, _cell(v)) for k, v in info.run]))
        if info.settings:
            parts += ["Every setting of the run:\n", markdown_table(["setting", "value"],
                      [(k, _cell(v)) for k, v in flatten(info.settings)])]  # fmt: skip
    env = [("machine", machine()), *versions()]
    parts += ["Environment this card was written in:\n", markdown_table(["", ""], env)]
    parts += ["## Results\n", _results_block(data.eval_results or []) + "\n"]
    if info.loss_curve:
        parts += ["## Loss curve\n", f"![loss curve]({info.loss_curve})\n"]
    for title, text in info.sections:
        parts += [f"## {title}\n", text.rstrip() + "\n"]
    parts += ["## Intended uses and limits\n", _limits(directory, info)]
    parts += ["## Citation\n", "NeoBERT (Le Breton et al., TMLR 2025):\n", f"```bibtex\n{CITATION}\n```\n"]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(parts)


def card_data(info: CardInfo, name: str) -> ModelCardData:
    hub = [s.hub_id for s in info.data if s.hub_id]
    tags = ["neobert", PIPELINES[info.head], *info.tags]
    return ModelCardData(
        model_name=name,
        library_name=info.library,
        pipeline_tag=PIPELINES[info.head],
        tags=list(dict.fromkeys(tags)),
        base_model=info.base_model,
        datasets=hub or None,
        license=info.license,
        metrics=sorted({r.metric_type for r in info.results}) or None,
        eval_results=[r.eval_result() for r in info.results] or None,
    )


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) if value else "(none)"
    return "(unset)" if value is None else str(value).replace("|", "\\|")


def _data_section(info: CardInfo) -> str:
    if not info.data and not info.data_stats:
        return "Not recorded by the command that wrote this directory.\n"
    text = ""
    if info.data:
        rows = [((s.hub_id and f"[{s.hub_id}](https://huggingface.co/datasets/{s.hub_id}) ({s.name})") or s.name,
                 f"{s.size:,}" if s.size is not None else "", s.sha256 or "", s.note) for s in info.data]  # fmt: skip
        text += markdown_table(["source", "bytes", "sha256", "note"], rows)
    if info.data_stats:
        text += "\n" + markdown_table(["", "count"], [(k, _cell(f"{v:,}" if isinstance(v, int) else v))
                                                        for k, v in info.data_stats])  # fmt: skip
    return text


def lowercases(directory: Path) -> bool:
    """Whether the directory's tokenizer lowercases text (``do_lower_case``, or a lowercasing normalizer in
    tokenizer.json, as BERT's uncased WordPiece has)."""
    config = directory / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("do_lower_case"):
        return True
    path = directory / "tokenizer.json"
    if not path.is_file():
        return False

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Lowercase" or node.get("lowercase") is True:
                return True
            return any(walk(v) for v in node.values())
        return isinstance(node, list) and any(walk(v) for v in node)

    return walk(json.loads(path.read_text(encoding="utf-8")).get("normalizer"))


def _limits(directory: Path, info: CardInfo) -> str:
    lines = list(info.limits)
    if lowercases(directory):
        lines.append("The tokenizer is uncased: it lowercases text, so case carries no information.")
    if _config(directory).get("model_type") == "neobert":
        lines.append("Loading needs `pip install neobert` (its import registers the model type with "
                     "transformers' Auto classes); no `trust_remote_code` is needed.")  # fmt: skip
    lines.append("Numbers above are this run's own measurements on the data named; they say nothing about "
                 "other data or domains.")  # fmt: skip
    return "".join(f"- {line}\n" for line in lines)


# -- writing, reading, updating --------------------------------------------------------------------------


def write_card(directory: str | os.PathLike, info: CardInfo) -> Path:
    """Write ``directory/README.md`` for ``info`` (atomically) and return its path."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise CardError(f"{directory} is not a model directory (no config.json); the card describes one")
    return write_text(directory / CARD, render(directory, info))


def read_card(directory: str | os.PathLike) -> ModelCard:
    """The card of ``directory``, parsed (a clear error when there is none)."""
    path = Path(directory) / CARD
    if not path.is_file():
        raise CardError(f"{directory} has no {CARD} model card")
    return ModelCard.load(path)


def update_card(directory: str | os.PathLike, results: list[Result]) -> Path:
    """Put ``results`` into ``directory``'s card: entries of the same task (type, name, data set, split)
    are replaced, others kept; the body's results table is redrawn from the front matter. A directory
    without a card (e.g. one written by another tool) gets a minimal one first."""
    directory = Path(directory)
    if not (directory / CARD).is_file() or RESULTS_START not in (directory / CARD).read_text(encoding="utf-8"):
        write_card(directory, CardInfo(head=_head(directory), library=_library(directory),
                                       description=_minimal_description(directory), command="(not recorded)"))  # fmt: skip
    card = read_card(directory)
    kept = [old for old in card.data.eval_results or [] if not any(new.same_task(old) for new in results)]
    entries = kept + [r.eval_result() for r in results]
    card.data.eval_results = entries or None
    card.data.metrics = sorted({e.metric_type for e in entries}) or None
    card.data.model_name = card.data.model_name or directory.name
    text = card.text
    start, end = text.find(RESULTS_START), text.find(RESULTS_END)
    if start < 0 or end < start:
        raise CardError(f"{directory / CARD}: the results markers are missing; write the card again")
    text = text[:start] + _results_block(entries) + text[end + len(RESULTS_END) :]
    return write_text(directory / CARD, f"---\n{card.data.to_yaml()}\n---\n{text}")


def _head(directory: Path) -> str:
    if (directory / "modules.json").is_file():
        return "sentence-embedding"
    architectures = " ".join(_config(directory).get("architectures") or [])
    for suffix, head in (("MaskedLM", "mlm"), ("SequenceClassification", "sequence-classification"),
                         ("TokenClassification", "token-classification")):  # fmt: skip
        if suffix in architectures:
            return head
    return "base"


def _library(directory: Path) -> str:
    if (directory / "model.onnx").is_file():
        return "onnx"
    return "sentence-transformers" if (directory / "modules.json").is_file() else "transformers"


def _minimal_description(directory: Path) -> str:
    model_type = _config(directory).get("model_type", "unknown")
    return (f"A `{model_type}` model directory. Its training was not recorded by `neobert`; this card holds "
            "the evaluation results `neobert eval ... --update-card` added.")  # fmt: skip
