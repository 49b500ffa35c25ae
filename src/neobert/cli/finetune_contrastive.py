"""``neobert finetune contrastive`` (the paper's contrastive fine-tuning, for any encoder) and ``neobert
finetune sparse`` (SPLADE from any masked-LM model, on the same data files).

``neobert.cli.finetune`` calls :func:`register` with its own subparsers, so the command lives under
``neobert finetune``. Multi-GPU: launch with ``torchrun --nproc-per-node N -m neobert.cli.main finetune
contrastive ...``; negatives are then gathered across processes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.markup import escape

from ..evaluation.instructions import dataset_instructions
from ..finetuning import late_interaction, rerank, sparse
from ..finetuning.contrastive import ContrastiveConfig, run
from ..training.trainer import is_main_process
from .common import add_command, make_console, quiet_transformers
from .options import config_from_args


def _main(args: argparse.Namespace) -> int:
    config = config_from_args(
        ContrastiveConfig, args, instructions=dataset_instructions(args.instructions, args.instruction)
    )
    return _report(run, config, "a sentence-transformers and transformers model", steps_by_dataset=True)


def _sparse(args: argparse.Namespace) -> int:
    config = config_from_args(
        sparse.SparseConfig, args, instructions=dataset_instructions(args.instructions, args.instruction)
    )
    return _report(
        sparse.run, config, "a sentence-transformers SparseEncoder (and transformers masked-LM) model"
    )


def _late(args: argparse.Namespace) -> int:
    config = config_from_args(
        late_interaction.LateInteractionConfig,
        args,
        instructions=dataset_instructions(args.instructions, args.instruction),
    )
    return _report(
        late_interaction.run, config, "a late-interaction (PyLate ColBERT / MultiVectorEncoder) model"
    )


def _rerank(args: argparse.Namespace) -> int:
    config = config_from_args(rerank.RerankConfig, args)
    return _report(
        rerank.run, config, f"a sentence-transformers CrossEncoder ({config.activation} activation)"
    )


def _report(train: Callable[[Any], Any], config: Any, saved: str, steps_by_dataset: bool = False) -> int:
    """Train, then (on the first process only, under torchrun) say what was trained and where it went."""
    quiet_transformers()
    result = train(config)
    if not is_main_process():
        return 0
    steps = ", ".join(f"{name} {n}" for name, n in result.dataset_steps.items())
    first, last = result.losses[0], result.losses[-1]
    make_console().print(
        f"{result.steps} steps{f' ({steps})' if steps_by_dataset else ''}; loss {first:.4f} -> {last:.4f}; "
        f"saved {saved} to {escape(str(result.output))} in {result.seconds:.1f}s",
        highlight=False,
        soft_wrap=True,
    )
    return 0


HELP = "contrastive fine-tuning into an embedding model (InfoNCE, in-batch + hard negatives)"
DESCRIPTION = (
    "InfoNCE on cosine similarity with in-batch and hard negatives; one data set per batch, data sets "
    "sampled by size^alpha; instructions prefixed to queries; mean pooling."
)


SPARSE_HELP = "SPLADE fine-tuning of a masked-LM model into a sparse retriever (contrastive + FLOPS)"
SPARSE_DESCRIPTION = (
    "SPLADE (max over tokens of log(1 + ReLU(MLM logits))) trained with the in-batch contrastive loss on dot "
    "products plus the FLOPS regulariser on queries and documents (weights grown quadratically over the first "
    "third of the run); the same data files as finetune contrastive; saves a sentence-transformers SparseEncoder."
)


LATE_HELP = "late-interaction (ColBERT) fine-tuning: token vectors scored by MaxSim"
LATE_DESCRIPTION = (
    "Any encoder plus a linear projection to --dim dimensions per token; query and document markers, queries "
    "expanded with mask tokens to --query-length, punctuation dropped from documents (up to --max-length tokens); "
    "InfoNCE on MaxSim with in-batch and hard negatives; the same data files as finetune contrastive; saves a "
    "PyLate ColBERT directory that sentence-transformers' MultiVectorEncoder loads."
)


RERANK_HELP = "cross-encoder (reranker) fine-tuning: BCE, LambdaLoss, ListNet, RankNet, MarginMSE or KL"
RERANK_DESCRIPTION = (
    "Any encoder with a one-logit head reads each (query, document) pair; each query's positive and up to "
    "--hard-negatives negatives are scored together (the data files of finetune contrastive, e.g. neobert mine's); "
    "pointwise BCE, listwise LambdaLoss (NDCG-Loss2 weights) or ListNet, pairwise RankNet, or distillation of the "
    "data's teacher scores (MarginMSE, KL); saves a sentence-transformers CrossEncoder (sigmoid activation after "
    "bce, none after the other losses)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    _register(subparsers, "contrastive", _main, HELP, DESCRIPTION, ContrastiveConfig, ())
    _register(
        subparsers,
        "sparse",
        _sparse,
        SPARSE_HELP,
        SPARSE_DESCRIPTION,
        sparse.SparseConfig,
        ("matryoshka_dims",),
    )
    _register(
        subparsers,
        "late-interaction",
        _late,
        LATE_HELP,
        LATE_DESCRIPTION,
        late_interaction.LateInteractionConfig,
        ("matryoshka_dims",),
    )
    _register(
        subparsers,
        "rerank",
        _rerank,
        RERANK_HELP,
        RERANK_DESCRIPTION,
        rerank.RerankConfig,
        ("matryoshka_dims", "temperature", "instructions", "distillation", "margin_mse"),
        instructions=False,
    )


def _register(
    subparsers: argparse._SubParsersAction,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    description: str,
    config: type,
    skipped: tuple[str, ...],
    instructions: bool = True,
) -> None:
    """The command ``name``: an option per field of ``config`` but ``skipped``; ``instructions``: the queries
    take their data set's instruction (--instruction, --instructions)."""
    skip = ("data", "template", "show_progress", *skipped)
    parser = add_command(subparsers, name, func, help, description, config=config, skip=skip)
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="[NAME=]SOURCE",
        help="a data set: FILE.jsonl (query, positive, optional negatives), hub:ID[:CONFIG][@SPLIT], or a "
        "known name (all-nli, gooaq); repeat for several",
    )
    if not instructions:
        return
    parser.add_argument(
        "--instruction", action="append", metavar="NAME=TEXT", help="instruction of data set NAME"
    )
    parser.add_argument("--instructions", metavar="JSON", help="JSON file: data set name -> instruction")
