"""Pieces shared by the CLI commands: the error type, the console, model and tokenizer resolution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console


class CLIError(Exception):
    """A problem with the user's input, reported as one line without a traceback."""


def make_console(console: Console | None = None) -> Console:
    return console if console is not None else Console()


def quiet_transformers() -> None:
    """Hide transformers' per-file progress bars and info chatter: the commands report what matters."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def is_preset(name_or_path: str) -> bool:
    from ..config import PRESETS

    return name_or_path in PRESETS and not Path(name_or_path).is_dir()


def add_model_arguments(parser: Any) -> None:
    parser.add_argument(
        "--model", required=True, help="model directory, preset name (random weights) or hub id"
    )
    parser.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="tokenizer directory (default: the model directory's, or bert-base-uncased for presets)",
    )


PRECISIONS = ("bf16", "fp32")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise CLIError(f"precision must be bf16 or fp32, got {precision!r}")


def apply_precision(model: Any, precision: str) -> Any:
    """NeoBERT models (any head) go on the fast path: bf16 weights for ``bf16``, float32 for ``fp32`` (exact),
    unpadded attention either way. Other encoders run as loaded."""
    check_precision(precision)
    if hasattr(getattr(model, "base_model", model), "model_config"):  # a NeoBERT model
        import torch

        from ..fastpath import fast_inference

        fast_inference(model, torch.bfloat16 if precision == "bf16" else None)
    return model


def empty_rows(texts: list[str]) -> list[int]:
    """1-based positions of the texts that are empty or blank."""
    return [i + 1 for i, text in enumerate(texts) if not text.strip()]


def note_empty_rows(console: Console, rows: list[int], noun: str, consequence: str) -> None:
    """One yellow line naming the empty rows (the first ten), if any."""
    if rows:
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        console.print(
            f"[yellow]note:[/] {len(rows):,} {noun}(s) have an empty text ({noun}s {shown}); {consequence}",
            highlight=False,
        )
