"""The ``--long-documents`` options shared by ``embed``, ``classify`` and ``tag``, and the note they print."""

from __future__ import annotations

import argparse

from rich.console import Console

from ..long_documents import EXTEND_METHODS, POLICIES, LongDocuments, LongReport


def add_long_document_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("texts longer than the model window")
    group.add_argument("--long-documents", choices=POLICIES, default="truncate",
                       help="truncate (counted and reported) | chunk (windows, results pooled / averaged) | "
                       "extend (NeoBERT: RoPE scaled to the text's length)")  # fmt: skip
    group.add_argument(
        "--stride", type=int, help="chunk: tokens shared by neighbouring windows (default: a quarter)"
    )
    group.add_argument(
        "--rope-scaling", choices=EXTEND_METHODS, default="yarn", help="extend: RoPE scaling method"
    )


def long_document_settings(args: argparse.Namespace) -> LongDocuments:
    return LongDocuments(args.long_documents, args.stride, args.rope_scaling)


def note_long_documents(
    console: Console, report: LongReport | None, settings: LongDocuments, noun: str
) -> None:
    """One yellow line when texts exceeded the window: how many, and what the policy did."""
    if report is None or not report.long:
        return
    if report.truncated:
        what = "truncated to the window (--long-documents chunk or extend keeps all of them)"
    else:
        what = f"handled by '{settings.policy}' ({report.rows:,} model rows in all)"
    console.print(
        f"[yellow]note:[/] {report.long:,} {noun}(s) longer than the model window: {what}", highlight=False
    )
