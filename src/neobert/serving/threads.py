"""The model process's thread count, measured at start for the model and machine at hand (as precision
``auto`` is, :mod:`neobert.runtime.hardware`), instead of assumed.

Why measured: the best count depends on both. The ``small`` preset in fp32 on a 2-core AVX2 CPU is fastest
behind the service with one model thread (the HTTP process needs the other core, and a second OpenMP thread
waits for it); the 250M ``neobert`` shape in bf16 on a 2-core AVX-512 BF16 CPU serves 1.4-1.65x more with
two (its matmuls are long enough to pay for the barrier). So at start the model process times one merged
batch of short texts (:class:`ServingProbe`) with each candidate count: each warmed up until two calls
agree (a cold model's first calls are slow, unevenly per count), then in interleaved rounds (so other work
on the machine slows every candidate alike), each round's time taken over the first candidate's in the same
round and the median of those kept (a multi-threaded call that other work interrupts, as the HTTP process
will while serving, counts as it ran; a best-of would hide it; drift between rounds cancels), with more
rounds while the choice is a close call; it takes the fewest threads within :data:`MARGIN` of the fastest:
more threads must pay for the core they take from the HTTP side.

``--threads N`` pins it; so does ``NEOBERT_SERVE_THREADS=N`` for a whole process tree (the test suite pins
1). The choice is cached per process and model shape; ``/info`` and the start-up line say what was chosen
and why. Every branch is a plain function that tests force (tests/test_serving_threads.py).

Per call, under load (:func:`threads_for_call`): no single count is best at every load for a fast model
(issue 24: the ``small`` preset on a 2-core Xeon serves 1 client best on two threads, 32 clients best on
one). With one client the HTTP process idles while the model runs; with requests waiting, it parses,
encodes and answers them while the model runs, and a model that takes every core makes the two fight. So
with the model in its own process, the HTTP process measures its own CPU per text answered
(:class:`HttpCost`), and each model call taken while other requests wait runs on the probe's count that
is cheapest once that HTTP work is counted: a count that takes every core adds it, one that leaves a core
free runs beside it. Without a backlog, or before the HTTP side is measured, the start-up choice. Pinned
counts, several model processes and ONNX Runtime do not adapt (they carry no probe timings).

Per call, between runtimes (:func:`choose_pair`): ``--backend auto`` decides between PyTorch and an export at
start from single calls at the export's thread count, but the ranking moves with the load (docs/benchmarks.md:
a 2-core Xeon capped to AVX-512 BF16, OpenVINO fp32 on one thread served one client best and PyTorch on both
cores eight). Where auto takes the export of a model it could serve on PyTorch too, the model process keeps both (a
pair: :class:`ExportPlacement`) and times the export beside PyTorch's counts on the same probe and on one text.
The merged batch alone misleads: on a 2-core EPYC (docs/benchmarks.md) PyTorch bf16 on two threads ran it
1.1-1.9x faster than OpenVINO bf16 on one, for MiniLM and the 250M shape alike, while one text ran about 1.1x
faster on PyTorch for the 250M shape and 1.3x slower for MiniLM, and one client was served about 1.15x faster
and 1.3x slower. So a call without a backlog runs where one text runs fastest (the export unless PyTorch on a
probed count is :data:`LONE_MARGIN` faster: the HTTP process idles while it runs), and a call under a
backlog is costed as above at its own number of texts (:func:`per_text`: a fixed cost per call and a cost
per text, through the two probes). A call placed on PyTorch carries its count over the pipe;
:data:`CALL_THREADS` tells the model process's backend which it was.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

from .tasks import ModelCall

THREADS_ENV = "NEOBERT_SERVE_THREADS"
MARGIN = 1.2  # more threads are taken only when the probe runs at least this much faster with them
MIN_ROUNDS, MAX_ROUNDS, BUDGET = (
    5,
    15,
    3.0,
)  # interleaved timed rounds (after the warm-up): 5, more while < 3 s
WARM_UP_CALLS, WARM_UP_BUDGET, STEADY = 5, 1.5, 0.1  # warm-up per candidate: until two calls agree within 10%
CLOSE = 0.08  # a choice within 8% of the margin is a close call: rounds go on (up to twice the budget)
PROBE_TEXTS = 4  # texts in the probe batch: a small merged batch of the bench's 16-word requests
PROBE_TEXT = "the quick brown fox jumps over the lazy dog while the service measures how fast it runs"
_CACHE: dict[tuple, ThreadChoice] = {}
EXPORT = "export"  # the export's option in a pair's probe (choose_pair), beside PyTorch's thread counts
# a pair's call without a backlog runs on PyTorch only when a single text runs at least this much faster there
# than on the export (auto took the export on its wider probe: a tie, or the noise of a few rounds, keeps it)
LONE_MARGIN = 1.05
# the torch threads the HTTP side placed the model process's current call on (None: the model's start-up
# placement: its count, or for a pair its export); the worker sets it around each call
CALL_THREADS: ContextVar[int | None] = ContextVar("CALL_THREADS", default=None)


@dataclass(frozen=True)
class ExportPlacement:
    """The export ``--backend auto`` took for a model whose process keeps PyTorch beside it (a pair): its
    runtime and precision (``label``), the threads its graph was compiled for, and its time on the probe
    PyTorch's counts were timed on (``ms``, the merged batch; ``one_ms``, one text)."""

    label: str
    threads: int
    ms: float
    pytorch: str = "torch fp32"  # the PyTorch beside it: its runtime and precision
    lone: int | None = None  # where a call without a backlog runs: None the export, or PyTorch's count
    one_ms: float | None = None


@dataclass(frozen=True)
class ThreadChoice:
    """The model's thread count and why (``timings_ms``: the probe's median time per candidate); for a pair,
    the export beside PyTorch's counts (``export``) and each count's time on one text (``one_text_ms``)."""

    threads: int
    reason: str
    timings_ms: dict[int, float] = field(default_factory=dict)
    cores: int | None = None  # the cores the probe divided (measured choices only)
    export: ExportPlacement | None = None
    one_text_ms: dict[int, float] = field(default_factory=dict)

    @property
    def adapts(self) -> bool:
        """Whether calls under load may run on another count or runtime (:func:`threads_for_call`): only a
        measured choice (pinned counts, shared cores and an export alone carry no timings)."""
        return len(self.timings_ms) + (self.export is not None) > 1

    @property
    def start(self) -> int | None:
        """Where a call without a backlog runs: ``threads`` torch threads; for a pair, its
        :attr:`ExportPlacement.lone` (None: the export)."""
        return self.export.lone if self.export is not None else self.threads

    def label(self, placement: int | None) -> str:
        """A placement's name (metrics, ``/info``): its torch threads, or the export's runtime."""
        if placement is not None:
            return str(placement)
        return self.export.label if self.export is not None else "unknown"


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def candidates(cores: int) -> list[int]:
    """Thread counts worth timing: 1, half the cores, all but one, all."""
    return sorted({1, max(1, cores // 2), max(1, cores - 1), cores})


def pick(timings: dict[int, float], margin: float = MARGIN) -> int:
    """The fewest threads whose time is within ``margin`` of the fastest."""
    best = min(timings.values())
    return min(n for n, seconds in timings.items() if seconds <= best * margin)


def set_threads(threads: int) -> None:
    """Torch's thread count in this process, changed only when it differs: the one place it is set (the
    probe, the model's start, each call in the model process)."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pinned(threads: int) -> ThreadChoice | None:
    """The count the user fixed: ``threads`` (``--threads``), else the environment's (``THREADS_ENV``);
    None where neither pins it."""
    if threads:
        return ThreadChoice(threads, "pinned by --threads")
    value = os.environ.get(THREADS_ENV)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer, got {value!r}")
    return ThreadChoice(int(value), f"pinned by {THREADS_ENV}")


def choose_threads(
    threads: int,
    probe: Callable[[int], float] | None,
    cores: int | None = None,
    workers: int = 1,
    key: Any = None,
) -> ThreadChoice:
    """The thread count: ``threads`` if given (``--threads``), else the environment's pin, else measured
    with ``probe(n)`` (seconds of one model call on ``n`` threads), cached by ``key``."""
    fixed = pinned(threads)
    if fixed is not None:
        return fixed
    cores = cores or available_cores()
    if workers > 1:  # several model processes share the cores: measuring one alone would mislead
        share = max(1, cores // workers)
        return ThreadChoice(share, f"{workers} model processes share {cores} cores")
    options = candidates(cores)
    if probe is None or len(options) == 1:
        return ThreadChoice(options[-1], f"{cores} core(s)")
    if key is not None and (key, cores) in _CACHE:
        return _CACHE[(key, cores)]
    timings = measure(probe, options)
    chosen = pick(timings)
    shown = ", ".join(f"{n}: {ms:.0f} ms" for n, ms in timings.items())
    choice = ThreadChoice(
        chosen,
        f"measured at start (one batch of {PROBE_TEXTS} short texts; {shown}; "
        f"more threads must be {MARGIN}x faster)",
        timings,
        cores,
    )
    if key is not None:
        _CACHE[(key, cores)] = choice
    return choice


def measure(
    probe: Callable[[Any], float],
    options: list[Hashable],
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    budget: float = BUDGET,
    margin: float = MARGIN,
) -> dict[Any, float]:
    """Milliseconds of ``probe(n)`` per candidate: each warmed up until steady (:func:`warm_up`), then timed
    in interleaved rounds, ``min_rounds`` and more up to ``max_rounds`` while they take less than
    ``budget`` seconds, or while the choice at ``margin`` is too close to call (:func:`close_call`, up to
    twice the budget). Scored per round against the first candidate (:func:`paired_medians`), so a round the
    machine slowed for every candidate moves none against another."""
    warm_up(probe, options)
    times: dict[int, list[float]] = {n: [] for n in options}
    spent = 0.0
    for done in range(max_rounds):
        if (
            done >= min_rounds
            and spent > budget
            and (spent > 2 * budget or not close_call(paired_medians(times), margin))
        ):
            break
        for n in options:
            seconds = probe(n)
            spent += seconds
            times[n].append(seconds * 1e3)
    return paired_medians(times)


def warm_up(
    probe: Callable[[Any], float],
    options: list[Hashable],
    calls: int = WARM_UP_CALLS,
    budget: float = WARM_UP_BUDGET,
) -> None:
    """Call ``probe(n)`` for each candidate until two calls in a row agree within :data:`STEADY` (a cold
    model's first calls pay for page faults, allocations and kernel set-up per thread count), at most
    ``calls`` times or ``budget`` seconds each."""
    for n in options:
        last, spent = None, 0.0
        for _ in range(calls):
            seconds = probe(n)
            spent += seconds
            if (last is not None and abs(seconds - last) <= STEADY * last) or spent > budget:
                break
            last = seconds


def paired_medians(times: dict[Any, list[float]]) -> dict[Any, float]:
    """Each candidate's milliseconds: the first candidate's median round, times the median over rounds
    of each candidate's time over the first's in the same round (paired: drift between rounds cancels)."""
    first, *_ = times
    base = float(statistics.median(times[first]))
    return {
        n: base * float(statistics.median(t / b for t, b in zip(ms, times[first]))) for n, ms in times.items()
    }


def close_call(timings: dict[int, float], margin: float = MARGIN, band: float = CLOSE) -> bool:
    """Whether a candidate's time lies within ``band`` of the margin the choice is made at (the fastest's
    times ``margin``): a few more rounds might decide the other way."""
    best = min(timings.values())
    return any(abs(ms / (best * margin) - 1) <= band for ms in timings.values())


class ServingProbe:
    """Times one ``embed`` call (a SPLADE model's: ``embed_sparse``) of a model
    (:class:`neobert.serving.service.TorchBackend`) on ``n`` threads: a batch of :data:`PROBE_TEXTS` short
    texts, as the service merges them, or fewer (a pair's lone call: one)."""

    def __init__(self, model: Any):
        self.model = model
        self.texts = [PROBE_TEXT] * PROBE_TEXTS
        tasks = model.capabilities.tasks
        task = next(
            (t for t in ("embed", "embed_sparse") if t in tasks), tasks[0]
        )  # a SPLADE model: its vectors
        self.call = ModelCall.of(task, **_probe_options(model, task))
        if task == "fill-mask":
            self.texts = [f"{PROBE_TEXT} {model.tokenizer.mask_token}"] * PROBE_TEXTS
        elif task == "rerank":
            self.texts = [(PROBE_TEXT, PROBE_TEXT)] * PROBE_TEXTS

    def __call__(self, threads: int, texts: int = PROBE_TEXTS) -> float:
        set_threads(threads)
        batch = self.texts[:texts]
        started = time.perf_counter()
        self.model.call(self.call, batch)
        return time.perf_counter() - started


def _probe_options(model: Any, task: str) -> dict[str, Any]:
    if task == "embed":
        spec = model.capabilities.embedding
        return {"pooling": spec.pooling, "normalize": spec.normalize}
    return {"top_k": 1} if task == "fill-mask" else {}


def threads_for_call(
    choice: ThreadChoice,
    cores: int,
    backlog: int,
    http_ms_per_text: float | None,
    texts: int = PROBE_TEXTS,
) -> int | None:
    """Where one call of ``texts`` texts runs: its torch threads, or None for a pair's export. The start-up
    placement (:attr:`ThreadChoice.start`) without a ``backlog`` (no other request was waiting when the
    call's batch was taken), before the HTTP side's CPU per text is known, or for a choice that does not
    adapt (:attr:`ThreadChoice.adapts`). With a backlog, each probed placement is costed per text from the
    probe (``t``: :func:`per_text`, PyTorch's count ``n`` or the export at its threads) and ``h =
    http_ms_per_text``: taking every core, the HTTP work shares them (``t + h``); leaving a core free, it runs
    beside the model (``max(t, h)``). The cheapest wins; a tie goes to the export, then to fewer threads."""
    if not choice.adapts or backlog <= 0 or http_ms_per_text is None:
        return choice.start
    h = max(0.0, http_ms_per_text)

    def cost(ms: float, one: float | None, n: int) -> float:
        t = per_text(ms, one, texts)
        return t + h if n >= cores else max(t, h)

    costs: dict[int | None, float] = {
        n: cost(ms, choice.one_text_ms.get(n), n) for n, ms in choice.timings_ms.items()
    }
    if choice.export is not None:
        costs[None] = cost(choice.export.ms, choice.export.one_ms, choice.export.threads)
    return min(costs, key=lambda n: (costs[n], -1 if n is None else n))


def per_text(batch_ms: float, one_ms: float | None, texts: int) -> float:
    """Milliseconds a text in a call of ``texts`` texts, from the probe's merged batch (``batch_ms`` for
    :data:`PROBE_TEXTS`) and, where timed (a pair), one text (``one_ms``): a call's fixed cost and a cost per
    text through those two points (a pair's runtimes differ most in the fixed cost: on a 2-core EPYC
    MiniLM's OpenVINO bf16 ran one text 1.3x faster than PyTorch bf16 on both cores and the merged batch
    1.4x slower); else the batch's share."""
    if one_ms is None:
        return batch_ms / PROBE_TEXTS
    slope = max(0.0, (batch_ms - one_ms) / (PROBE_TEXTS - 1))
    return (one_ms - slope) / max(1, texts) + slope


def choose_pair(
    torch_probe: Callable[[int, int], float],
    export_probe: Callable[[int], float],
    export_label: str,
    export_threads: int,
    pytorch_label: str = "torch fp32",
    cores: int | None = None,
) -> ThreadChoice:
    """A pair's placements, measured at start: PyTorch's probe (``torch_probe(n, texts)``: seconds of a probe
    batch of ``texts`` on ``n`` threads) at each candidate count and the export's (``export_probe(texts)``, on
    the same texts at the threads its graph was compiled for), warmed up and timed in the same interleaved
    rounds (:func:`measure`): on the merged batch (:data:`PROBE_TEXTS`), for calls under load, and on one
    text, for a call without a backlog (:func:`lone_placement`)."""
    cores = cores or available_cores()
    options: list[Hashable] = [*candidates(cores), EXPORT]

    def probe(texts: int) -> Callable[[Any], float]:
        return lambda o: export_probe(texts) if o == EXPORT else torch_probe(o, texts)

    timings = measure(probe(PROBE_TEXTS), options)
    alone = measure(probe(1), options, margin=LONE_MARGIN)
    export_ms, export_alone = timings.pop(EXPORT), alone.pop(EXPORT)
    lone = lone_placement(alone, export_alone)

    def shown(ms: dict[int, float], export: float) -> str:
        counts = ", ".join(f"{pytorch_label} on {n}: {t:.1f} ms" for n, t in ms.items())
        return f"{export_label}: {export:.1f} ms, {counts}"

    where = export_label if lone is None else f"{pytorch_label} on {lone}"
    reason = (
        f"{export_label} on {export_threads} (the export auto took), {pytorch_label} kept beside it for calls "
        f"under load (one batch of {PROBE_TEXTS} short texts; {shown(timings, export_ms)}); a call without a "
        f"backlog on {where} (one text; {shown(alone, export_alone)})"
    )
    placement = ExportPlacement(export_label, export_threads, export_ms, pytorch_label, lone, export_alone)
    return ThreadChoice(export_threads, reason, timings, cores, placement, alone)


def lone_placement(timings: dict[int, float], export_ms: float, margin: float = LONE_MARGIN) -> int | None:
    """Where a pair's call without a backlog runs, from one text's milliseconds on PyTorch's counts
    (``timings``) and on the export: PyTorch's fastest count where it is ``margin`` faster, else None (the
    export auto took)."""
    fastest = min(timings, key=lambda n: (timings[n], n))
    return fastest if timings[fastest] * margin <= export_ms else None


HOLD_S = (
    1.0  # seconds a backlog is remembered: the count for load holds until the queue stays empty this long
)


class LoadMemory:
    """Whether the service is under load for a call: a backlog now, or one within the last ``hold`` seconds.
    Without it the count flaps: under steady load some batches find the queue momentarily empty, and each
    such call on every core (a second OpenMP thread sharing a core with the busy HTTP process) can run many
    times slower than its probe (measured on a 2-core Xeon: the `small` preset at 8 and 32 clients served 8%
    below `--threads 1` while flapping on 1-6% of its calls)."""

    def __init__(self, hold: float = HOLD_S, clock: Callable[[], float] = time.monotonic):
        self.hold, self.clock = hold, clock
        self._last: float | None = None

    def backlog(self, waiting: int) -> int:
        """The backlog a call is decided on: ``waiting``, or 1 while a recent backlog is remembered."""
        now = self.clock()
        if waiting > 0:
            self._last = now
            return waiting
        return 1 if self._last is not None and now - self._last < self.hold else 0


class HttpCost:
    """The HTTP process's CPU milliseconds per text answered, while serving: :meth:`update` after a model
    call with the process CPU seconds spent since the last call's answer and the texts this one answered
    (only over busy stretches: :meth:`ThreadPolicy.answered` decides). An exponentially weighted ratio of
    sums (CPU and texts are averaged alike, so a call weighs by its texts)."""

    def __init__(self, alpha: float = 0.2):
        self.alpha = alpha
        self._cpu: float | None = None
        self._texts = 0.0
        self.updates = 0

    def update(self, cpu_seconds: float, texts: int) -> float | None:
        """Add one call; the estimate after it (None while there is none)."""
        self.updates += 1
        if texts <= 0:
            return self.ms_per_text
        cpu = max(0.0, cpu_seconds)
        if self._cpu is None:
            self._cpu, self._texts = cpu, float(texts)
        else:
            a = self.alpha
            self._cpu = a * cpu + (1 - a) * self._cpu
            self._texts = a * texts + (1 - a) * self._texts
        return self.ms_per_text

    @property
    def ms_per_text(self) -> float | None:
        return None if self._cpu is None else self._cpu / self._texts * 1e3


def fixed_threads(threads: int, why: str) -> ThreadChoice:
    """A count that is not measured (``why``): ``threads``, the environment's pin, or all cores but one
    (the HTTP side keeps one)."""
    return pinned(threads) or ThreadChoice(max(1, available_cores() - 1), f"one less than the cores ({why})")


class ThreadPolicy:
    """The model's threads, in one object: at start, in the model process (:meth:`at_start`: pinned,
    shared by several model processes, fixed by the backend, or measured with the probe, then set); per
    call, in the HTTP process (an instance, :meth:`serving`): the start-up count, or under a backlog the
    count :func:`threads_for_call` picks from the probe and this process's CPU per text (:class:`HttpCost`)
    where the count adapts (one torch model process, a measured choice)."""

    def __init__(self, choice: ThreadChoice | None, adaptive: bool = False, measure_http: bool = False):
        self.choice = choice
        self.adaptive = bool(adaptive and choice is not None and choice.adapts)
        # this process's CPU per text answered, measured where the model runs elsewhere (in-process, the
        # model's own CPU would count)
        self.http_cost = HttpCost() if measure_http else None
        self.cores = (choice.cores if choice is not None else None) or available_cores()
        self.load = LoadMemory()  # a backlog holds the count for load a while (no flapping)
        self._cpu_mark, self._lock = time.process_time(), threading.Lock()
        self._busy = False  # whether requests were waiting at the last answer (the CPU since then counts)

    @staticmethod
    def at_start(
        config: Any, probe: Callable[[int], float] | None = None, key: Any = None, fixed: str | None = None
    ) -> ThreadChoice:
        """The model process's count (and torch's set to it): ``fixed`` names why a backend's count is not
        measured (:func:`fixed_threads`); else :func:`choose_threads` with ``probe``, cached by ``key``."""
        if fixed is not None:
            return fixed_threads(config.threads, fixed)
        workers = config.workers if config.model_process else 1
        choice = choose_threads(config.threads, probe, workers=workers, key=key)
        set_threads(choice.threads)
        return choice

    @classmethod
    def serving(cls, config: Any, model: Any) -> ThreadPolicy:
        """The HTTP process's policy for ``model`` (a :class:`.served.ServedModel`): adapts per call only
        with the model in one torch model process of its own whose count was measured."""
        pair = model.threads is not None and model.threads.export is not None
        adaptive = config.model_process and config.workers == 1 and (model.backend == "torch" or pair)
        return cls(model.threads, adaptive, measure_http=config.model_process)

    def for_call(self, waiting: int, texts: int = PROBE_TEXTS) -> int | None:
        """The model's threads for a call of ``texts`` texts whose batch was taken with ``waiting`` other
        requests queued (None: the model process's as they are, or a pair's export)."""
        return self.count(self.load.backlog(waiting), texts)

    def count(self, backlog: int, texts: int = PROBE_TEXTS) -> int | None:
        """The placement for a call decided on ``backlog`` (:func:`threads_for_call`)."""
        if self.choice is None:
            return None
        if not self.adaptive:
            return self.choice.start
        return threads_for_call(self.choice, self.cores, backlog, self.http_ms_per_text, texts)

    def label(self, placement: int | None) -> str:
        """What a call ran on, for ``neobert_model_calls{threads}``: its count, or a pair's export."""
        return "unknown" if self.choice is None else self.choice.label(placement)

    def answered(self, texts: int, waiting: int) -> None:
        """After a model call, with ``waiting`` requests queued now: this process's CPU since the last
        answer, over the texts this call answered, counted only if requests were waiting at that answer.
        Otherwise the stretch may hold idle time, whose CPU (the event loop's, health checks') would be
        charged to one call's texts: after 10 s idle a single request read 2.3 ms a text against 0.7 under
        load, and an hour's idle would read hundreds. The server's start is such a stretch too."""
        if self.http_cost is None:
            return
        with self._lock:
            now = time.process_time()
            cpu, self._cpu_mark = now - self._cpu_mark, now
            if self._busy:
                self.http_cost.update(cpu, texts)
            self._busy = waiting > 0

    @property
    def http_ms_per_text(self) -> float | None:
        """This process's CPU milliseconds per text answered, so far (None: in-process, or not yet)."""
        return None if self.http_cost is None else self.http_cost.ms_per_text

    def state(self) -> dict[str, Any]:
        """The ``/info`` fields that change while serving: the count a call taken under a backlog runs on
        now, and the HTTP side's CPU per text it is decided from; for a pair, the runtime such a call runs
        on and the one a call without a backlog runs on."""
        ms, under_load = self.http_ms_per_text, self.count(1)
        export = self.choice.export if self.choice is not None else None
        return {
            "threads_under_load": export.threads if export is not None and under_load is None else under_load,
            "runtime_under_load": self.runtime(under_load),
            "runtime_alone": self.runtime(self.count(0)),
            "http_ms_per_text": None if ms is None else round(ms, 3),
        }

    def runtime(self, placement: int | None) -> str | None:
        """A pair's runtime for a placement: the export's (None) or its PyTorch's (a count)."""
        export = self.choice.export if self.choice is not None else None
        if export is None:
            return None
        return export.label if placement is None else export.pytorch

    def describe(self) -> str:
        """The start-up line's words: the count, why, and whether it adapts under load."""
        choice = self.choice
        text = f"{choice and choice.threads} model thread(s): {choice and choice.reason}"
        if self.adaptive and choice is not None and choice.export is not None:
            text += (
                f"; while requests wait, per call {choice.export.label} or PyTorch on a probed count, whichever "
                "is fastest beside this process's measured CPU per text"
            )
        elif self.adaptive:
            text += (
                "; while requests wait, per call the probed count that is fastest beside this "
                "process's measured CPU per text"
            )
        return text
