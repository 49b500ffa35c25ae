"""The note ``embed``, ``classify`` and ``tag`` print when texts exceeded the model window."""

from __future__ import annotations

from rich.console import Console

from ..long_documents import LongReport


def note_long_documents(console: Console, report: LongReport | None, policy: str, noun: str) -> None:
    """One yellow line when texts exceeded the window: how many, and what the policy did."""
    if report is None or not report.long:
        return
    if report.truncated:
        what = "truncated to the window (--long-documents chunk or extend keeps all of them)"
    else:
        what = f"handled by '{policy}' ({report.rows:,} model rows in all)"
    console.print(
        f"[yellow]note:[/] {report.long:,} {noun}(s) longer than the model window: {what}", highlight=False
    )
