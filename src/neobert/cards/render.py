"""Rendering a card, writing it into a directory, reading it back and updating its results."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..common.io import write_text
from ..common.tables import MISSING, fmt, markdown_table
from ..inference.adapters import is_adapter_dir
from ..inference.directories import directory_config
from ..inference.kinds import describe_directory, pipeline_tag
from ..inference.model_info import model_info
from .facts import CARD, CardError, CardInfo, Result, flatten, machine, versions
from .usage import other_ways, usage

CITATION = """@article{lebreton2025neobert,
  title   = {NeoBERT: A Next-Generation BERT},
  author  = {Le Breton, Lola and Fournier, Quentin and El Mezouar, Mariam and Morris, John X. and Chandar, Sarath},
  journal = {Transactions on Machine Learning Research},
  year    = {2025},
  url     = {https://arxiv.org/abs/2502.19587}
}"""
RESULTS_START, RESULTS_END = "<!-- neobert:results -->", "<!-- /neobert:results -->"


def architecture(directory: Path) -> str:
    """``neobert info``'s table for a NeoBERT directory; the config's main numbers for another model."""
    config = directory_config(directory)
    if config.get("model_type") == "neobert":
        return model_info(str(directory)).summary.split("\n\n", 1)[1]
    keys = (
        "model_type",
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
    )
    rows = [(k, config[k]) for k in keys if k in config]
    if not rows and is_adapter_dir(directory):
        return "The base model's: this directory holds a LoRA adapter over it (see LoRA below).\n"
    return markdown_table(["field", "value"], rows) if rows else "Not recorded in this directory.\n"


def results_table(results: list[EvalResult]) -> str:
    """The body's results: one row per ``model-index`` entry, exactly its value."""
    if not results:
        return "No evaluation results recorded yet (`neobert eval ... --update-card` adds them).\n"
    rows = [
        (
            r.task_name or r.task_type,
            r.dataset_name + (f" ({r.dataset_config})" if r.dataset_config else ""),
            r.dataset_split or "",
            r.metric_type,
            fmt(float(r.metric_value), digits=4),
            (r.metric_args or {}).get("source", ""),
        )
        for r in results
    ]
    return markdown_table(["task", "data", "split", "metric", "value", "from"], rows)


def _results_block(results: list[EvalResult]) -> str:
    return f"{RESULTS_START}\n{results_table(results)}{RESULTS_END}"


def render(directory: Path, info: CardInfo) -> str:
    """The README.md text of ``info`` for ``directory`` (front matter and body)."""
    directory = Path(directory)
    name = info.name or directory.name
    data = card_data(info, name)
    code, printed, first = usage(directory, info)
    parts = [
        f"# {name}\n",
        info.description + "\n",
        "## How to load it\n",
        f"With {first}:\n",
        f"```python\n{code}\n```\n",
        f"prints `{printed}`.\n",
        other_ways(directory, info),
        "## Architecture\n",
        architecture(directory),
    ]
    parts += ["## Training data\n", _data_section(info)]
    if info.settings or info.run:
        parts += [
            "## Training\n" if info.settings else "## How it was made\n",
            f"Written by `{info.command}`.\n",
        ]
        if info.run:
            parts.append(markdown_table(["", "value"], [(k, _cell(v)) for k, v in info.run]))
        if info.settings:
            parts += [
                "Every setting of the run:\n",
                markdown_table(["setting", "value"], [(k, _cell(v)) for k, v in flatten(info.settings)]),
            ]
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
    tags = ["neobert", pipeline_tag(info.head), *info.tags]
    return ModelCardData(
        model_name=name,
        library_name=info.library,
        pipeline_tag=pipeline_tag(info.head),
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
        return ", ".join(map(str, value)) if value else MISSING
    return MISSING if value is None else str(value).replace("|", "\\|")


def _data_section(info: CardInfo) -> str:
    if not info.data and not info.data_stats:
        return "Not recorded by the command that wrote this directory.\n"
    text = ""
    if info.data:
        rows = [
            (
                (s.hub_id and f"[{s.hub_id}](https://huggingface.co/datasets/{s.hub_id}) ({s.name})")
                or s.name,
                f"{s.size:,}" if s.size is not None else "",
                s.sha256 or "",
                s.note,
            )
            for s in info.data
        ]
        text += markdown_table(["source", "bytes", "sha256", "note"], rows)
    if info.data_stats:
        text += "\n" + markdown_table(
            ["", "count"], [(k, _cell(f"{v:,}" if isinstance(v, int) else v)) for k, v in info.data_stats]
        )
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
    if directory_config(directory).get("model_type") == "neobert":
        lines.append(
            "Loading needs `pip install neobert` (its import registers the model type with "
            "transformers' Auto classes); no `trust_remote_code` is needed."
        )
    lines.append(
        "Numbers above are this run's own measurements on the data named; they say nothing about "
        "other data or domains."
    )
    return "".join(f"- {line}\n" for line in lines)


# -- writing, reading, updating --------------------------------------------------------------------------


def write_card(directory: str | os.PathLike, info: CardInfo) -> Path:
    """Write ``directory/README.md`` for ``info`` (atomically) and return its path."""
    directory = Path(directory)
    if not (directory / "config.json").is_file() and not is_adapter_dir(directory):
        raise CardError(
            f"{directory} is not a model directory (no config.json, no LoRA adapter); the card describes one"
        )
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
    if not (directory / CARD).is_file() or RESULTS_START not in (directory / CARD).read_text(
        encoding="utf-8"
    ):
        found = describe_directory(directory)
        if found is None:
            raise CardError(
                f"{directory} is not a model directory (no config.json, modules.json or onnx_config.json)"
            )
        write_card(
            directory,
            CardInfo(
                head=found.card_head,
                library=found.library,
                description=_minimal_description(directory),
                command="(not recorded)",
            ),
        )
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


def _minimal_description(directory: Path) -> str:
    model_type = directory_config(directory).get("model_type", "unknown")
    return (
        f"A `{model_type}` model directory. Its training was not recorded by `neobert`; this card holds "
        "the evaluation results `neobert eval ... --update-card` added."
    )
