"""The model in a process of its own, beside the HTTP process (as text-embeddings-inference separates its
router from its backend).

Why: in one process, every request the event loop handles (parsing, a 503, JSON encoding) takes the GIL
from the model thread between its kernels; under a storm of clients that retry at once, answering
refusals starves the model (docs/serving.md measures it). Here the HTTP process keeps the queue, the
limits and every refusal; a model process only ever sees merged batches, over a pipe:

    parent -> child   (call, texts, threads)            one model call (a tasks.ModelCall; texts may be (query, doc) pairs) on
                                                        ``threads`` torch threads (None: as they are; a pair
                                                        of runtimes: its export, threads.CALL_THREADS)
    child -> parent   ("ok", results, tokens, counts)   or ("error", "Type: message", refused: a ValueError)

A child loads the model with ``load(config)`` (a picklable function, e.g. ``registry.ModelSet.load``) and answers
``("ready", info)`` or ``("error", message)`` once. It ignores SIGINT (a Ctrl-C reaches the whole process
group; the HTTP process decides when to stop) and ends when its pipe closes, so it never outlives the
HTTP process. The child is a fresh interpreter (``python -m neobert.serving.worker FD``) on one end of a
socket pair: never a fork (a fork of a process that has run torch's thread pools can hang), and unlike
multiprocessing's ``spawn`` it does not re-run the caller's main script.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

from ..common import memory
from .config import TRIM_BYTES
from .threads import CALL_THREADS, set_threads

if TYPE_CHECKING:
    from .tasks import ModelCall

log = logging.getLogger(__name__)


class ModelProcessError(RuntimeError):
    """A model call failed in the model process, or the process is gone."""


class ModelProcessGone(ModelProcessError):
    """The model process exited (killed, out of memory) before answering; the pool starts another."""


class ModelCallRefused(ValueError):
    """A model call the model process refused as asked (a ValueError there: e.g. an adapter that does not fit
    its model): the message says why, and nothing failed."""


def _main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    load, config = conn.recv()
    try:
        model = load(config)
    except Exception as err:  # the parent raises it: "this model would serve nothing ...", a bad path
        conn.send(("error", f"{type(err).__name__}: {err}", isinstance(err, (ValueError, OSError))))
        return
    conn.send(("ready", model.info()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the HTTP process is gone
            return
        if message is None:
            return
        call, texts, threads = message
        placed = CALL_THREADS.set(threads)  # a pair's backend reads where the HTTP side placed the call
        try:
            if threads is not None:
                set_threads(threads)
            data = ForkingPickler.dumps(("ok", *model.call(call, texts)))
        except Exception as err:
            traceback.print_exc()  # the server log (the child shares the parent's stderr)
            conn.send(("error", f"{type(err).__name__}: {err}", isinstance(err, ValueError)))
            continue
        finally:
            CALL_THREADS.reset(placed)
        conn.send_bytes(
            data
        )  # what conn.send does, with the size known: a large answer is followed by a trim
        if len(data) >= TRIM_BYTES and getattr(config, "release_memory", True):
            del data
            memory.release()


class ModelProcess:
    """One model process and its end of the pipe; :meth:`call` is one model call (one caller at a time)."""

    def __init__(self, load: Callable[[Any], Any], config: Any):
        ours, theirs = socket.socketpair()
        # the child finds this package where the parent found it (a source checkout, an editable install)
        path = os.pathsep.join(p for p in (*sys.path, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "neobert.serving.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": path},
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send((load, config))

    def alive(self) -> bool:
        return self.process.poll() is None

    def ready(self) -> Any:
        """Wait for the model to load: what it serves (``load(config).info()``), or the reason it could not (ValueError / RuntimeError)."""
        while not self.conn.poll(0.2):
            if not self.alive():
                raise ModelProcessError(
                    f"the model process exited while loading (code {self.process.returncode})"
                )
        status, *payload = self.conn.recv()
        if status == "error":
            message, user_error = payload
            raise (ValueError if user_error else ModelProcessError)(message)
        return payload[0]

    def call(
        self, call: ModelCall, texts: list[Any], threads: int | None = None
    ) -> tuple[list[Any], int, dict[str, int]]:
        try:
            self.conn.send((call, texts, threads))
            status, *payload = self.conn.recv()
        except (EOFError, OSError) as err:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
            raise ModelProcessGone(
                f"the model process exited (code {self.process.returncode}) during this request"
            ) from err
        if status == "error":
            message, refused = payload
            raise (ModelCallRefused if refused else ModelProcessError)(message)
        results, tokens, counts = payload
        return results, tokens, counts

    def close(self, timeout: float = 30.0) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.conn.close()


class WorkerPool:
    """``config.workers`` model processes; :meth:`call` runs on whichever is idle (the queue's worker
    threads, one per process, never wait for one).

    A process that exits (killed, out of memory) is replaced by a fresh one: before a call if it died while
    idle (the call then runs on the new one), after the call it died in (that call fails with
    :class:`ModelProcessGone`, which the HTTP side answers 503 + Retry-After). ``restarts`` counts them.
    """

    def __init__(self, config: Any, load: Callable[[Any], Any]):
        self._load, self.config, self.restarts = load, config, 0
        self.processes = [ModelProcess(load, config) for _ in range(config.workers)]
        try:
            infos = [p.ready() for p in self.processes]  # they load side by side
        except BaseException:
            self.close()
            raise
        self.model = infos[0]  # what the models serve (a ServedSet)
        self._idle: queue.SimpleQueue[ModelProcess] = queue.SimpleQueue()
        for process in self.processes:
            self._idle.put(process)

    def call(
        self, call: ModelCall, texts: list[Any], threads: int | None = None
    ) -> tuple[list[Any], int, dict[str, int]]:
        """One model call on an idle process, on ``threads`` torch threads (None: the process's current)."""
        process = self._idle.get()
        try:
            if not process.alive():
                process = self._replace(process)
            return process.call(call, texts, threads)
        except ModelProcessGone:
            process = self._replace(process)
            raise
        finally:
            self._idle.put(process)

    def each(self, call: ModelCall, texts: list[Any]) -> list[tuple[list[Any], int, dict[str, Any]]]:
        """One call on every process in turn, each taken when idle (loading or unloading a model over HTTP:
        every process holds its own models)."""
        taken = [self._idle.get() for _ in self.processes]
        try:
            return [process.call(call, texts) for process in taken]
        finally:
            for process in taken:
                self._idle.put(process)

    def _replace(self, dead: ModelProcess) -> ModelProcess:
        """A fresh process for ``dead`` (which is kept, and tried again next call, if the new one fails)."""
        log.warning("the model process exited (code %s); starting another", dead.process.poll())
        dead.close(timeout=1)
        fresh = ModelProcess(self._load, self.config)
        try:
            fresh.ready()
        except Exception:
            log.exception("the replacement model process failed to start")
            fresh.close(timeout=1)
            return dead
        self.processes[self.processes.index(dead)] = fresh
        self.restarts += 1
        return fresh

    def alive(self) -> bool:
        return all(p.alive() for p in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.close()


if __name__ == "__main__":
    _main(int(sys.argv[1]))
