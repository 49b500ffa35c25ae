"""``neobert eval``: embedding and language-model evaluation of any encoder.

- ``eval mteb``: the ``mteb`` package's tasks through our encoder adapter (instructions, mean pooling);
  Table 4's layout.
- ``eval embeddings``: STS, retrieval, classification, clustering and pair classification on local files.
- ``eval pppl``: pseudo-perplexity per length bin, CSV and a Figure-2 plot.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from rich.markup import escape

from ..evaluation import embedding_files as files
from ..evaluation import mteb_adapter, pppl
from ..evaluation.instructions import read_instruction_file
from .common import CLIError, make_console, quiet_transformers

FAMILY_OPTIONS = {
    "sts": "JSONL of sentence1, sentence2, score",
    "pair_classification": "JSONL of sentence1, sentence2, label (0/1)",
    "clustering": "JSONL of text, label",
    "classification": "directory with train.jsonl and test.jsonl (text, label)",
    "retrieval": "directory with queries.jsonl, corpus.jsonl and qrels.tsv (or qrels.jsonl)",
}


def _instructions(path: str | None) -> dict:
    if path is None:
        return {}
    if not Path(path).is_file():
        raise CLIError(f"instruction file {path} does not exist")
    return read_instruction_file(path)


def _print_files(files: list[Path], seconds: float) -> None:
    console = make_console()
    for path in files:
        console.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
    console.print(f"done in {seconds:.1f}s", highlight=False)


def _mteb(args: argparse.Namespace) -> int:
    quiet_transformers()
    try:
        import mteb  # noqa: F401
    except ImportError as err:
        raise ImportError("`neobert eval mteb` needs the mteb package: pip install 'neobert[mteb]'") from err
    tasks = mteb_adapter.select_tasks(args.tasks, args.benchmark, args.task_types)
    report = mteb_adapter.run(
        args.model,
        tasks,
        args.output,
        use_instructions=not args.no_instructions,
        instructions=_instructions(args.instructions),
        tokenizer=args.tokenizer,
        batch_size=args.batch_size,
        device=_device(args.device),
    )
    make_console().print(mteb_adapter.table4_markdown(report), highlight=False, markup=False, soft_wrap=True)
    _print_files(report.files, report.seconds)
    return 0


def _embeddings(args: argparse.Namespace) -> int:
    quiet_transformers()
    tasks = files.discover_tasks(args.tasks_dir) if args.tasks_dir else []
    for family in FAMILY_OPTIONS:
        for path in getattr(args, family) or []:
            if not Path(path).exists():
                raise CLIError(f"--{family.replace('_', '-')} {path} does not exist")
            tasks.append(
                files.TaskSpec(
                    family, Path(path).stem if Path(path).is_file() else Path(path).name, Path(path)
                )
            )
    if not tasks:
        raise CLIError("no task given: pass --tasks-dir DIR or per-family options such as --sts FILE")
    report = files.run(
        args.model,
        tasks,
        args.output,
        instructions=_instructions(args.instructions),
        tokenizer=args.tokenizer,
        batch_size=args.batch_size,
        seed=args.seed,
        device=_device(args.device),
    )
    make_console().print(files.to_markdown(report), highlight=False, markup=False, soft_wrap=True)
    _print_files(report.files, report.seconds)
    return 0


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _pppl(args: argparse.Namespace) -> int:
    quiet_transformers()
    report = pppl.run(
        args.model,
        args.input,
        args.output,
        bins=args.bins,
        rope_scaling=args.rope_scaling,
        context=args.context,
        tokenizer=args.tokenizer,
        copies=args.copies,
        max_positions=args.max_positions,
        max_docs_per_bin=args.max_docs_per_bin,
        device=_device(args.device),
    )
    make_console().print(pppl.markdown(report.bins), highlight=False, markup=False, soft_wrap=True)
    _print_files(report.files, report.seconds)
    return 0


def _device(name: str | None) -> str:
    return name or ("cuda" if torch.cuda.is_available() else "cpu")


def _common(parser: argparse.ArgumentParser, output: str, model_help: str = "") -> None:
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="model directory, NeoBERT preset or hub id; repeat to compare several models" + model_help,
    )
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (default: the model's own)")
    parser.add_argument("--output", default=output, help=f"results directory (default: {output})")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate encoders: MTEB, local embedding tasks, pseudo-perplexity"
    )
    commands = parser.add_subparsers(title="evaluations", dest="evaluation", metavar="EVALUATION")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    mteb = commands.add_parser("mteb", help="MTEB tasks with instructions and mean pooling (Table 4)")
    _common(mteb, "results/mteb")
    mteb.add_argument("--tasks", nargs="+", help="MTEB task names (default: every task of --benchmark)")
    mteb.add_argument(
        "--benchmark", help="an mteb benchmark name (default: 'MTEB(eng, v1)', the paper's 56 tasks)"
    )
    mteb.add_argument("--task-types", nargs="+", help="keep these task types only, e.g. STS Retrieval")
    mteb.add_argument(
        "--instructions", help="JSON: task -> instruction or {query, corpus} (overrides the table)"
    )
    mteb.add_argument("--no-instructions", action="store_true", help="encode texts as they are (zero-shot)")
    mteb.add_argument("--batch-size", type=int, default=32)
    mteb.set_defaults(func=_mteb)

    emb = commands.add_parser(
        "embeddings", help="STS, retrieval, classification, clustering, pair classification on local files"
    )
    _common(emb, "results/embeddings")
    emb.add_argument(
        "--tasks-dir", help="directory of task files, one subdirectory per family (see docs/evaluation.md)"
    )
    for family, what in FAMILY_OPTIONS.items():
        emb.add_argument(f"--{family.replace('_', '-')}", action="append", metavar="PATH", help=what)
    emb.add_argument("--instructions", help="JSON: task -> instruction or {query, corpus} (default: none)")
    emb.add_argument("--batch-size", type=int, default=32)
    emb.add_argument("--seed", type=int, default=0, help="for k-means and logistic regression")
    emb.set_defaults(func=_embeddings)

    pp = commands.add_parser("pppl", help="pseudo-perplexity per sequence-length bin (Figure 2)")
    _common(pp, "results/pppl", "; PATH@yarn[:LENGTH] extends one model's RoPE")
    pp.add_argument("--input", required=True, help="documents: .jsonl with a text field, or one per line")
    pp.add_argument(
        "--bins", type=_int_list, default=[128, 256, 512, 1024, 2048, 4096], help="upper bin edges in tokens"
    )
    pp.add_argument(
        "--rope-scaling", choices=["none", "linear", "ntk", "yarn"], help="extend every NeoBERT model's RoPE"
    )
    pp.add_argument("--context", type=int, help="length the RoPE scaling extends to (default: none)")
    pp.add_argument("--copies", type=int, default=32, help="masked copies of a document per forward")
    pp.add_argument(
        "--max-positions", type=int, help="score at most this many tokens per document (evenly spread)"
    )
    pp.add_argument("--max-docs-per-bin", type=int, help="use at most this many documents per bin")
    pp.set_defaults(func=_pppl)
