"""Dynamic batching: a bounded queue of requests and model worker threads that merge what is waiting.

A worker takes the oldest request, then (with merging on) every request already waiting with the same
key (task, options and model), up to ``max_texts`` texts; runs them as one model call (which cuts its rows
into token-budgeted batches); and hands each caller exactly its own rows. A request may carry a tag (the
adapter its texts run through): requests of equal keys merge whatever their tags, and the call then gets
``key.with_rows(tags)``, each text's tag. During the call, :meth:`Batcher.backlog`
(in the worker's thread) says how many other requests were waiting when its batch was taken (the model's
thread count under load depends on it, :func:`neobert.serving.threads.threads_for_call`). A full queue refuses at once
(:class:`QueueFull`) instead of growing a backlog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The request queue is at its limit; the caller should retry later."""


class ShuttingDown(Exception):
    """The batcher no longer takes requests."""


@dataclass
class Job:
    key: Hashable  # task, options and model: only jobs with the same key share a model call
    texts: Sequence[str]
    tag: Hashable = None  # the adapter its texts run through (None: the key's model itself)
    future: Future = field(default_factory=Future)
    enqueued: float = field(default_factory=time.perf_counter)


# run(key, texts) -> (one result per text, tokens computed)
RunFn = Callable[[Hashable, list[str]], tuple[list[Any], int]]
# on_call(requests, texts, tokens, seconds)
CallHook = Callable[[int, int, int, float], None]


class Batcher:
    def __init__(
        self,
        run: RunFn,
        max_queue: int,
        max_texts: int,
        merge: bool = True,
        workers: int = 1,
        on_call: CallHook | None = None,
    ):
        self._run, self._merge, self._max_texts, self._on_call = run, merge, max_texts, on_call
        self.max_queue = max_queue
        self._waiting: deque[Job] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._local = threading.local()  # per worker thread: the backlog of the batch it runs
        self._threads = [
            threading.Thread(target=self._loop, name=f"neobert-model-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> int:
        return len(self._waiting)

    def backlog(self) -> int:
        """In a worker thread during a model call: the requests that were waiting, besides the oldest, when
        the call's batch was taken (merged into it or not); 0 elsewhere."""
        return getattr(self._local, "backlog", 0)

    def full(self) -> bool:
        """Whether the queue is at its limit; no lock: the answer may be a moment old (:meth:`submit`
        decides under the lock)."""
        return len(self._waiting) >= self.max_queue

    def submit(
        self, key: Hashable, texts: Sequence[str], first: bool = False, tag: Hashable = None
    ) -> Future:
        """Queue ``texts`` (``first``: ahead of the waiting requests, for a quick call such as counting
        tokens; ``tag``: see the module doc); the future resolves to their results in order. Raises
        :class:`QueueFull`."""
        job = Job(key, list(texts), tag)
        with self._ready:
            if self._closed:
                raise ShuttingDown("the service is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{self.max_queue} requests are already waiting")
            if first:
                self._waiting.appendleft(job)
            else:
                self._waiting.append(job)
            self._ready.notify()
        return job.future

    def close(self, timeout: float | None = None) -> None:
        """Refuse new requests, finish every queued one, stop the workers."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if not jobs:
                return
            self._process(jobs)

    def _take(self) -> list[Job]:
        """The oldest job plus, when merging, the waiting jobs that share its key (up to the text limit);
        the others keep their places. Empty when closed and drained."""
        with self._ready:
            while not self._waiting and not self._closed:
                self._ready.wait()
            if not self._waiting:
                return []
            self._local.backlog = len(self._waiting) - 1
            first = self._waiting.popleft()
            jobs, texts = [first], len(first.texts)
            if self._merge:
                for job in list(self._waiting):
                    if texts >= self._max_texts:
                        break
                    if job.key == first.key and texts + len(job.texts) <= self._max_texts:
                        self._waiting.remove(job)
                        jobs.append(job)
                        texts += len(job.texts)
            return jobs

    def _process(self, jobs: list[Job]) -> None:
        texts = [text for job in jobs for text in job.texts]
        key, tags = jobs[0].key, tuple(job.tag for job in jobs for _ in job.texts)
        if any(tag is not None for tag in tags):
            key = key.with_rows(tags)
        start = time.perf_counter()
        try:
            results, tokens = self._run(key, texts)
        except Exception as err:  # every caller of the call learns it failed; the worker lives on
            log.exception("model call failed")
            for job in jobs:
                job.future.set_exception(err)
            return
        seconds = time.perf_counter() - start
        if self._on_call is not None:
            self._on_call(len(jobs), len(texts), tokens, seconds)
        offset = 0
        for job in jobs:
            job.future.set_result(results[offset : offset + len(job.texts)])
            offset += len(job.texts)
