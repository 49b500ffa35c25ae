"""Memory after large answers: return what glibc's allocator keeps once a big answer is freed.

An answer of many token states (``/embed_all``) is built from large buffers in both processes: the model
process's float arrays and their pickle, the HTTP process's JSON (a Python float per number, then the
text). When they are freed, glibc's malloc keeps much of it for reuse (its mmap threshold rises after the
first large free, so later large buffers come from the heap, whose top it keeps), and a server that
answered one burst stays that large. :func:`release` asks glibc to hand free pages back
(``malloc_trim(0)``); the service calls it after an answer of :data:`TRIM_BYTES` or more (not after every
answer: pages handed back are faulted in again on reuse). docs/benchmarks/serve/memory/ measures RSS with
and without it (``release_memory``). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

TRIM_BYTES = (
    4 * 2**20
)  # an answer (or a model call's pickled results) at least this large is followed by a trim


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
