"""Progress bars for people: tqdm on a terminal, and on anything else (a log file, a pipe) one plain line at
a steady interval instead of an update per step.

tqdm on a file that is not a terminal still redraws on every update it is allowed (every 0.1 s), each redraw
a carriage return on the same line: a default run's log held over 2,000 of them on one line. Here, without
a TTY, an update is written at most every :data:`LOG_INTERVAL` seconds, each on a line of its own.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm.auto import tqdm

LOG_INTERVAL = 30.0  # seconds between progress lines when stderr is not a terminal


class LogLines:
    """A stream that writes each of tqdm's redraws as a line of its own (carriage returns dropped)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip("\n")
        if line.strip():
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(*args: Any, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)``; without a terminal on stderr (or ``file``), a line every
    :data:`LOG_INTERVAL` seconds at most, each on its own line."""
    stream = kwargs.get("file") or sys.stderr
    if not is_terminal(stream):
        kwargs["file"] = LogLines(stream)
        kwargs.setdefault("mininterval", LOG_INTERVAL)
        kwargs.setdefault("ascii", True)
        kwargs.pop("dynamic_ncols", None)
    return tqdm(*args, **kwargs)
