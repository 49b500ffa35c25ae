"""MTEB for any encoder: an adapter implementing the ``mteb`` package's encoder interface, and Table 4.

:class:`MTEBEncoder` satisfies ``mteb.models.EncoderProtocol`` (mteb >= 2): ``encode(inputs, *,
task_metadata, hf_split, hf_subset, prompt_type)`` receives a DataLoader of ``{"text": [...]}`` batches,
prefixes each text with the task's query or corpus instruction (see :mod:`.instructions`) and returns unit
L2 rows of the masked mean of the last hidden states; ``similarity`` is the cosine. It subclasses nothing
from mteb, so this module imports without the package (``pip install 'neobert[mteb]'``); only
:attr:`MTEBEncoder.mteb_model_meta` and :func:`run` import it.

A SPLADE ``SparseEncoder`` directory (``neobert finetune sparse``) goes through mteb's own sparse-model path
instead (``mteb.models.SparseEncoderWrapper``: sparse vectors, dot-product scores, the model's own prompts; no
instructions of ours).

Table 4's layout: one row per model; columns the mean main score per task type (Class., Clust.,
PairClass., Rerank., Retr., STS, Summ.) and the mean over all tasks, scores x 100.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..cards import Result
from ..common.io import write_text
from ..common.tables import markdown_table
from ..inference.encoders import Encoder, load_encoder
from ..inference.run import encode
from .embedding_files import embedding_of
from .instructions import TaskInstruction, apply_instruction, task_instruction
from .report import defined, nan_mean, write_json

# Table 4's columns: MTEB task type -> header.
TABLE4_COLUMNS = {
    "Classification": "Class.",
    "Clustering": "Clust.",
    "PairClassification": "PairClass.",
    "Reranking": "Rerank.",
    "Retrieval": "Retr.",
    "STS": "STS",
    "Summarization": "Summ.",
}
DEFAULT_BENCHMARK = "MTEB(eng, v1)"  # the 56 English tasks of the paper's Table 4


class MTEBEncoder:
    """An :class:`~neobert.inference.encoders.Encoder` seen through mteb's ``EncoderProtocol``."""

    def __init__(
        self,
        encoder: Encoder,
        use_instructions: bool = True,
        instructions: dict[str, TaskInstruction] | None = None,
        batch_size: int = 32,
        show_progress: bool = False,
    ):
        self.encoder = encoder
        self.use_instructions = use_instructions
        self.instructions = instructions or {}
        self.batch_size = batch_size
        self.show_progress = show_progress
        self._meta = None

    @property
    def mteb_model_meta(self) -> Any:
        if self._meta is None:
            from mteb.models import ModelMeta

            self._meta = ModelMeta.create_empty(
                {
                    "name": meta_name(self.encoder.name),
                    "revision": "local",
                    "embed_dim": self.encoder.hidden_size,
                    "max_tokens": self.encoder.max_length,
                    "n_parameters": sum(p.numel() for p in self.encoder.base.parameters()),
                    "framework": ["PyTorch"],
                    "similarity_fn_name": "cosine",
                    "use_instructions": self.use_instructions,
                    "modalities": ["text"],
                }
            )
        return self._meta

    def instruction(self, task_metadata: Any, prompt_type: Any = None) -> str:
        """The instruction for this task and side (query or document); '' when instructions are off."""
        if not self.use_instructions:
            return ""
        pair = task_instruction(
            task_metadata.name,
            str(task_metadata.type),
            getattr(task_metadata, "prompt", None),
            self.instructions,
        )
        side = getattr(prompt_type, "value", prompt_type)
        return pair.corpus if side == "document" else pair.query

    def encode(
        self,
        inputs: Iterable[dict],
        *,
        task_metadata: Any,
        hf_split: str = "",
        hf_subset: str = "",
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        instruction = self.instruction(task_metadata, prompt_type)
        texts = [apply_instruction(instruction, text) for batch in inputs for text in batch["text"]]
        return encode(
            self.encoder.model,
            self.encoder.tokenizer,
            texts,
            max_length=self.encoder.max_length,
            batch_size=kwargs.get("batch_size") or self.batch_size,
            normalize=True,
            show_progress=self.show_progress,
            desc=f"{task_metadata.name} {getattr(prompt_type, 'value', '') or ''}".strip(),
        )

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        a, b = _unit_rows(embeddings1), _unit_rows(embeddings2)
        return a @ b.T

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        return (_unit_rows(embeddings1) * _unit_rows(embeddings2)).sum(-1)


def meta_name(model: str) -> str:
    """mteb wants ``organization/name``: a hub id as it is, a directory or preset as ``local/<name>``."""
    if model.count("/") == 1 and not Path(model).exists():
        return model
    return f"local/{Path(model.rstrip('/')).name or 'model'}"


def _unit_rows(x: Any) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).float()
    x = x.reshape(1, -1) if x.dim() == 1 else x
    return torch.nn.functional.normalize(x, dim=-1)


@dataclass
class TaskRow:
    task: str
    task_type: str
    main_score: float  # x 100


@dataclass
class MTEBReport:
    models: dict[str, list[TaskRow]] = field(default_factory=dict)
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)


def rows_from_results(results: Any, tasks: Sequence[Any]) -> list[TaskRow]:
    """Main score (x 100) of every task that ran, from an ``mteb.evaluate`` result."""
    types = {t.metadata.name: str(t.metadata.type) for t in tasks}
    return [
        TaskRow(r.task_name, types.get(r.task_name, "?"), 100.0 * float(r.get_score()))
        for r in results.task_results
    ]


def category_averages(rows: Sequence[TaskRow]) -> dict[str, float]:
    """Mean main score per task type present (Table 4's order first), and ``Avg.`` over all tasks."""
    types = [t for t in TABLE4_COLUMNS if any(r.task_type == t for r in rows)]
    types += sorted({r.task_type for r in rows} - set(types))
    out = {t: nan_mean([r.main_score for r in rows if r.task_type == t]) for t in types}
    out["Avg."] = nan_mean([r.main_score for r in rows])
    return out


def table4_markdown(report: MTEBReport) -> str:
    all_rows = [r for rows in report.models.values() for r in rows]
    types = [t for t in category_averages(all_rows) if t != "Avg."]
    counts = {t: len({r.task for r in all_rows if r.task_type == t}) for t in types}
    header = [
        "Model",
        *(f"{TABLE4_COLUMNS.get(t, t)} ({counts[t]})" for t in types),
        f"Avg. ({len({r.task for r in all_rows})})",
    ]
    summary = []
    for model, rows in report.models.items():
        averages = category_averages(rows)
        summary.append([model, *(averages.get(t, float("nan")) for t in types), averages["Avg."]])
    per_task = [
        [model, r.task_type, r.task, r.main_score] for model, rows in report.models.items() for r in rows
    ]
    return (
        "## MTEB (Table 4 layout, main score x 100)\n\n"
        + markdown_table(header, summary)
        + "\n## Per task\n\n"
        + markdown_table(["Model", "Type", "Task", "Score"], per_task)
    )


def select_tasks(
    tasks: Sequence[str] | None = None, benchmark: str | None = None, task_types: Sequence[str] | None = None
) -> list[Any]:
    """Tasks by name, or a benchmark's tasks (default the paper's 56 English ones), optionally by type.

    Args:
        tasks: MTEB task names (default: every task of the benchmark)
        benchmark: an mteb benchmark name (default: 'MTEB(eng, v1)', the paper's 56 tasks)
        task_types: keep these task types only, e.g. STS Retrieval
    """
    import mteb

    if tasks:
        try:
            selected = list(mteb.get_tasks(tasks=list(tasks)))
        except KeyError as err:  # mteb names the unknown task and suggests close names
            raise ValueError(f"unknown MTEB task: {err.args[0]}") from None
    else:
        selected = list(mteb.get_benchmark(benchmark or DEFAULT_BENCHMARK).tasks)
    if task_types:
        selected = [t for t in selected if t.metadata.type in task_types]
    if not selected:
        raise ValueError("no MTEB task selected")
    return selected


def run(
    models: Sequence[str],
    tasks: Sequence[Any],
    output: str | os.PathLike | None = None,
    use_instructions: bool = True,
    instructions: dict[str, TaskInstruction] | None = None,
    tokenizer: str | None = None,
    batch_size: int = 32,
    device: str | None = None,
    show_progress: bool = True,
) -> MTEBReport:
    """Evaluate each model on ``tasks`` (mteb task objects) and write Table 4's Markdown and JSON.

    Args:
        models: model directories, NeoBERT presets or hub ids, each scored on every task (a SparseEncoder
            directory through mteb's sparse-model path)
        use_instructions: prepend the task instructions (off: encode texts as they are, zero-shot)
        tokenizer: tokenizer directory (default: the model's own)
        batch_size: texts per batch
    """
    import mteb

    start = time.perf_counter()
    report = MTEBReport()
    for name in models:
        embedding = embedding_of(name)
        if embedding == "multi-vector":
            raise ValueError(
                f"{name} is a late-interaction (multi-vector) model; mteb's encoder interface takes one vector "
                "per text: score it with `neobert eval embeddings` (MaxSim)"
            )
        if embedding == "sparse":
            from mteb.models import SparseEncoderWrapper

            adapter = SparseEncoderWrapper(str(name), device=device)
        else:
            adapter = MTEBEncoder(
                load_encoder(name, tokenizer, device=device),
                use_instructions,
                instructions,
                batch_size,
                show_progress,
            )
        results = mteb.evaluate(adapter, tasks, cache=None, show_progress_bar=show_progress, raise_error=True)
        report.models[name] = rows_from_results(results, tasks)
    report.seconds = time.perf_counter() - start
    if output is not None:
        report.files = write_report(report, Path(output))
    return report


def write_report(report: MTEBReport, output: Path) -> list[Path]:
    data = {
        model: {"averages": category_averages(rows), "tasks": [r.__dict__ for r in rows]}
        for model, rows in report.models.items()
    }
    return [
        write_json(output / "mteb_results.json", data),
        write_text(output / "mteb_results.md", table4_markdown(report)),
    ]


def card_results(report: MTEBReport) -> dict[str, list[Result]]:
    """Each model's MTEB main scores (x 100, as in the JSON) as model-card entries."""
    return {
        model: [
            Result(r.task_type, r.task, r.task, r.task, "main_score", r.main_score, None, "neobert eval mteb")
            for r in rows
            if defined(r.main_score)
        ]
        for model, rows in report.models.items()
    }
