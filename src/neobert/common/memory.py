"""Memory handed back to the system: what glibc's allocator keeps once large buffers are freed.

When large buffers are freed (a service's answer of many token states, the runtimes ``--backend auto``
measured and left), glibc's malloc keeps much of it for reuse (its mmap threshold rises after the first
large free, so later large buffers come from the heap, whose top it keeps), and a process that held them
once stays that large. :func:`release` asks glibc to hand free pages back (``malloc_trim(0)``); pages
handed back are faulted in again on reuse, so callers release after large frees, not after every one
(the service: :data:`neobert.serving.config.TRIM_BYTES`). docs/benchmarks/serve/memory/ measures RSS with
and without it (``release_memory``). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, another system)."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release() -> bool:
    """Hand the allocator's free pages back to the system; whether anything was released (False without
    glibc)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of process ``pid`` (this one by default), from ``/proc`` (Linux)."""
    with open(f"/proc/{pid or os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
