"""``neobert tag``: entities with character offsets from a fine-tuned token classifier, one JSON line per text."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.markup import escape

from ..data.readers import json_objects
from ..encoders import load_model, resolve_tokenizer
from ..io import write_text
from ..token_classification import tag
from .common import CLIError, add_command, make_console, quiet_transformers
from .embed import read_texts
from .long_documents import add_long_document_arguments, long_document_settings, note_long_documents


def read_input(path: str) -> list[str]:
    """Texts from a .jsonl file (a ``text`` field per line) or any other file (one text per line)."""
    if Path(path).suffix.lower() != ".jsonl":
        return read_texts(path)
    texts = []
    for number, row in json_objects(path):
        if not isinstance(row.get("text"), str):
            raise CLIError(f"{path}, line {number}: expected an object with a string 'text' field")
        texts.append(row["text"])
    if not texts:
        raise CLIError(f"input file {path} holds no text")
    return texts


def _tag(args: argparse.Namespace) -> int:
    quiet_transformers()
    if not Path(args.model).is_dir():
        raise CLIError(f"--model {args.model}: expected a fine-tuned token-classification model directory")
    texts = read_input(args.input)
    settings = long_document_settings(args)
    start = time.perf_counter()
    model = load_model(args.model, task="token-classification")
    tokenizer = resolve_tokenizer(args.model, args.tokenizer)
    entities, report = tag(model, tokenizer, texts, settings, batch_size=args.batch_size)
    lines = [
        json.dumps({"text": text, "entities": [e.to_dict() for e in row]}, ensure_ascii=False)
        for text, row in zip(texts, entities)
    ]
    write_text(args.output, "\n".join(lines) + "\n")
    console = make_console()
    found = sum(len(row) for row in entities)
    console.print(
        f"tagged {len(texts):,} texts: {found:,} entities in {time.perf_counter() - start:.1f} s -> "
        f"{escape(args.output)}",
        highlight=False,
    )
    note_long_documents(console, report, settings, "text")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "tag",
        _tag,
        help="tag entities with a fine-tuned token classifier (character offsets), JSONL out",
        description="One JSON line per input text: {text, entities: [{label, start, end, text, score}]}; "
        "offsets are characters of the text, end exclusive.",
    )
    parser.add_argument("--model", required=True, help="fine-tuned token-classification model directory")
    parser.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (default: the model's)")
    parser.add_argument("--input", required=True, help="text file (one text per line) or .jsonl with 'text'")
    parser.add_argument("--output", required=True, help="output .jsonl")
    parser.add_argument("--batch-size", type=int, default=32)
    add_long_document_arguments(parser)
