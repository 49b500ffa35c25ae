"""``neobert finetune contrastive``: the paper's contrastive fine-tuning, for any encoder.

``neobert.cli.finetune`` calls :func:`register` with its own subparsers, so the command lives under
``neobert finetune``. Multi-GPU: launch with ``torchrun --nproc-per-node N -m neobert.cli.main finetune
contrastive ...``; negatives are then gathered across processes.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.markup import escape

from .common import CLIError, make_console, quiet_transformers


def _instructions(values: list[str] | None, path: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if path is not None:
        if not Path(path).is_file():
            raise CLIError(f"instruction file {path} does not exist")
        out.update(json.loads(Path(path).read_text(encoding="utf-8")))
    for value in values or []:
        name, sep, text = value.partition("=")
        if not sep:
            raise CLIError(f"--instruction expects NAME=TEXT, got {value!r}")
        out[name] = text
    return out


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    from ..finetuning.contrastive import ContrastiveConfig, run

    config = ContrastiveConfig(
        model=args.model,
        data=args.data,
        output=args.output,
        tokenizer=args.tokenizer,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps,
        temperature=args.temperature,
        alpha=args.alpha,
        hard_negatives=args.hard_negatives,
        max_length=args.max_length,
        instructions=_instructions(args.instruction, args.instructions),
        seed=args.seed,
        log_every=args.log_every,
        save_every=args.save_every,
        resume=args.resume,
        device=args.device,
        bf16=args.bf16,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    result = run(config)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only the first process reports
        return 0
    steps = ", ".join(f"{name} {n}" for name, n in result.dataset_steps.items())
    first, last = result.losses[0], result.losses[-1]
    make_console().print(
        f"{result.steps} steps ({steps}); loss {first:.4f} -> {last:.4f}; saved a sentence-transformers and "
        f"transformers model to {escape(str(result.output))} in {result.seconds:.1f}s",
        highlight=False,
        soft_wrap=True,
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "contrastive",
        help="contrastive fine-tuning into an embedding model (InfoNCE, in-batch + hard negatives)",
        description="InfoNCE on cosine similarity with in-batch and hard negatives; one data set per batch, "
        "data sets sampled by size^alpha; instructions prefixed to queries; mean pooling.",
    )
    parser.add_argument("--model", required=True, help="model directory, NeoBERT preset or hub id")
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (default: the model's own)")
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="[NAME=]SOURCE",
        help="a data set: FILE.jsonl (query, positive, optional negatives), hub:ID[:CONFIG][@SPLIT], or a "
        "known name (all-nli, gooaq); repeat for several",
    )
    parser.add_argument("--output", required=True, help="directory for the fine-tuned model")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64, help="queries per process per step")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.07)
    parser.add_argument(
        "--alpha", type=float, default=0.5, help="data sets are sampled in proportion to size^alpha"
    )
    parser.add_argument(
        "--hard-negatives", type=int, default=1, help="hard negatives used per query, at most"
    )
    parser.add_argument("--max-length", type=int, default=512, help="truncate texts to this many tokens")
    parser.add_argument(
        "--instruction", action="append", metavar="NAME=TEXT", help="instruction of data set NAME"
    )
    parser.add_argument("--instructions", metavar="JSON", help="JSON file: data set name -> instruction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=500, help="steps between resumable checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run of --output")
    parser.add_argument("--device", help="cpu, cuda ... (default: this process's GPU if any)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.set_defaults(func=_main)
