"""``neobert embed``: one vector per line of a text file, written to a .npy file."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.markup import escape

from ..config import PRECISIONS, check_precision
from ..encoders import apply_precision, load_model, resolve_tokenizer
from ..inference import encode
from ..io import atomic_file
from ..long_documents import TRUNCATE, LongDocuments, LongReport
from ..long_documents import embed as embed_long
from .common import (
    CLIError,
    add_command,
    add_model_arguments,
    empty_rows,
    make_console,
    note_empty_rows,
    quiet_transformers,
)
from .long_documents import add_long_document_arguments, long_document_settings, note_long_documents


@dataclass
class EmbedResult:
    output: Path
    shape: tuple[int, int]
    pooling: str
    normalized: bool
    seconds: float
    empty_rows: list[int]  # 1-based lines whose text is empty or blank (embedded as such, and reported)
    long: LongReport | None = None  # what the long-document policy did (None with an explicit max_length)


def read_texts(path: str | os.PathLike) -> list[str]:
    """One text per line (line i -> row i, blank lines kept as empty texts); errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise CLIError(f"input file {path} does not exist" if not path.exists() else f"{path} is not a file")
    texts = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CLIError(
                    f"{path}, line {number}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column "
                    f"{err.start + 1}); re-encode the file as UTF-8"
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")  # a byte-order mark is not part of the text
            texts.append(line.rstrip("\r\n"))
    if not any(text.strip() for text in texts):
        raise CLIError(f"input file {path} is empty: expected one text per line")
    return texts


def run(
    model: str,
    input: str | os.PathLike,
    output: str | os.PathLike,
    batch_size: int = 32,
    pooling: str = "mean",
    normalize: bool = True,
    max_length: int | None = None,
    tokenizer: str | None = None,
    show_progress: bool = True,
    precision: str = "auto",
    max_tokens: int | None = None,
    long_documents: LongDocuments = TRUNCATE,
) -> EmbedResult:
    """Embed every line of ``input`` with ``model`` and save the (lines, hidden) float32 array to ``output``.

    ``precision="bf16"`` runs NeoBERT models on the fast path (bf16 weights, unpadded attention; embeddings
    within cosine 0.99 of fp32, typically > 0.999); ``fp32`` is exact; ``auto`` (default) takes the one that
    is faster for this model on this machine (measured). Other encoders run as loaded.
    """
    check_precision(precision)
    texts = read_texts(input)  # validate the input before paying for the model
    start = time.perf_counter()
    tok = resolve_tokenizer(model, tokenizer)
    encoder = apply_precision(load_model(model, task="base"), precision)
    report = None
    if max_length is None:  # the model's window: the long-document policy decides
        vectors, report = embed_long(
            encoder, tok, texts, long_documents, pooling, normalize, batch_size, max_tokens, show_progress
        )
    else:
        vectors = encode(
            encoder,
            tok,
            texts,
            batch_size=batch_size,
            pooling=pooling,
            normalize=normalize,
            max_length=max_length,
            show_progress=show_progress,
            max_tokens=max_tokens,
        )
    with atomic_file(output, "wb") as handle:
        np.save(handle, vectors)
    path = Path(output)
    seconds = time.perf_counter() - start
    return EmbedResult(path, vectors.shape, pooling, normalize, seconds, empty_rows(texts), report)


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = run(
        args.model,
        args.input,
        args.output,
        batch_size=args.batch_size,
        pooling=args.pooling,
        normalize=not args.no_normalize,
        max_length=args.max_length,
        tokenizer=args.tokenizer,
        precision=args.precision,
        max_tokens=args.max_tokens,
        long_documents=long_document_settings(args),
    )
    n, dim = result.shape
    norm = "L2-normalized" if result.normalized else "not normalized"
    console = make_console()
    console.print(
        f"wrote {n:,} x {dim} float32 vectors ({result.pooling} pooling, {norm}) to "
        f"{escape(str(result.output))} in {result.seconds:.1f}s",
        highlight=False,
        soft_wrap=True,
    )
    note_empty_rows(
        console, result.empty_rows, "line", "their rows embed an empty text, so that row i is line i"
    )
    note_long_documents(console, result.long, long_document_settings(args), "line")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "embed",
        _main,
        help="embed a text file (one text per line) into a .npy array",
        description="Embed each line of a UTF-8 text file; row i of the output is line i.",
    )
    add_model_arguments(parser)
    parser.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    parser.add_argument("--output", required=True, help="where to write the .npy array (lines x hidden)")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per batch at most")
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="padded tokens per batch at most (default: 4,096 on the CPU, the fastest setting measured; "
        "no limit on a GPU)",
    )
    parser.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    parser.add_argument(
        "--no-normalize", action="store_true", help="keep raw vectors (default: unit L2 norm)"
    )
    parser.add_argument(
        "--max-length", type=int, help="truncate texts to this many tokens (default: the model's max_length)"
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto: the faster of fp32 and bf16 for this model here (measured); bf16: NeoBERT fast path (bf16 weights, unpadded; cosine > 0.99 to fp32); fp32: exact",
    )
    add_long_document_arguments(parser)
