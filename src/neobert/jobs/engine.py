"""Where a job's pieces run: in this process (``local``) or on a Ray cluster (``ray``), with the same code.

A job is a list of pieces and a worker class. ``Worker(**kwargs)`` loads what it needs once (a model, a
tokenizer); ``worker(piece)`` does one piece, writes its output whole (an atomic rename) and returns a
JSON-ready record of what it did. The local engine makes one worker and calls it piece after piece; the Ray
engine streams the pieces through Ray Data's ``map_batches`` over an actor pool, so each actor keeps its
worker loaded, holds ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs, and is restarted by Ray (its
piece retried) if it dies. Since a piece's output appears whole or not at all, under one name that depends
only on the piece, a retried piece never doubles its output: every job is exactly once, and a re-run skips
what is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..common.progress import progress_bar
from ..data.readers import DataError, is_url
from .settings import EngineSettings


def shared_output(output: str) -> Path:
    """A job's output directory: a path every worker can write (workers write their shards themselves)."""
    if is_url(str(output)):
        raise DataError(
            f"{output}: a job writes its output to a filesystem path that every worker can reach (a local disk, "
            "or NFS, Lustre or a bucket mounted as a filesystem on a cluster), not to a URL"
        )
    return Path(output)


@contextlib.contextmanager
def cluster(settings: EngineSettings) -> Iterator[Any]:
    """Ray, connected: to ``settings.address``, to the cluster already initialised in this process, or to
    one started here for the job (on loopback only, and stopped after it)."""
    try:
        import ray
    except ImportError:
        raise ImportError("--engine ray needs Ray: pip install 'neobert[ray]'", name="ray") from None
    started = not ray.is_initialized()
    here = started and settings.address is None and not os.environ.get("RAY_ADDRESS")
    with contextlib.ExitStack() as stack:
        if here:  # a cluster of this job's own: on loopback, without the dashboard
            stack.enter_context(loopback_only())
            ray.init(
                _node_ip_address="127.0.0.1",
                include_dashboard=False,
                logging_level="warning",
                log_to_driver=False,
            )
        elif started:
            ray.init(address=settings.address, logging_level="warning", log_to_driver=False)
        if started:
            stack.callback(ray.shutdown)
        # a context of its own: one left from another cluster this process used holds that cluster's state
        context = ray.data.DataContext()
        ray.data.DataContext._set_current(context)
        context.enable_progress_bars = False  # the job's own bar counts texts and tokens
        context.print_on_execution_start = False
        context.wait_for_min_actors_s = (
            600  # every worker loaded before the first piece: work spreads over all
        )
        yield ray


# Ray 2.60 turns a node address of 127.0.0.1 into the machine's outward one (``resolve_ip_for_localhost``) and
# binds its gRPC servers (GCS, raylet, workers) on every interface; only its single-machine mode (on by default
# for macOS and Windows, named by this variable) keeps the node on loopback, and every process then binds
# 127.0.0.1, the runtime-env agent and the autoscaler monitor included (tests/test_ray_edges.py lists them).
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Ray's single-machine mode while a job's own cluster starts and runs: in this process (Ray reads the
    variable when imported: the constant it set is changed too) and in every process the cluster starts."""
    from ray._private import ray_constants

    before, constant = os.environ.get(SINGLE_MACHINE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = constant
        if before is None:
            os.environ.pop(SINGLE_MACHINE, None)
        else:
            os.environ[SINGLE_MACHINE] = before


def pool_size(ray: Any, settings: EngineSettings) -> int:
    """``settings.workers``, or as many workers as the cluster's GPUs (or CPUs) hold."""
    if settings.workers:
        return settings.workers
    resources = ray.cluster_resources()
    if settings.gpus_per_worker:
        return max(1, int(resources.get("GPU", 0) / settings.gpus_per_worker))
    return max(1, int(resources.get("CPU", 1) / settings.cpus_per_worker))


@dataclass
class PoolStats:
    """How a job's pieces ran: workers, pieces, and the wall-clock span from the first piece's start to the
    last one's end (worker start-up and the plan excluded: the steady rate of the pool)."""

    workers: int = 0
    pieces: int = 0
    span_seconds: float = 0.0
    busy_seconds: float = 0.0  # summed over pieces


def _timed(run: Callable[[Any], dict], piece: Any) -> tuple[dict, float, float]:
    start = time.time()  # wall clock: comparable across the processes (and synchronised nodes) of a cluster
    record = run(piece)
    return record, start, time.time()


class _Actor:
    """A worker inside a Ray actor: ``threads`` for its kernels, pieces in and records out as bytes."""

    def __init__(self, worker: type, kwargs: dict, threads: int):
        os.environ["RAYON_NUM_THREADS"] = str(threads)  # the Rust tokenizer's pool, before its first use
        import torch

        torch.set_num_threads(threads)
        self.worker = worker(**kwargs)

    def __call__(self, batch: dict) -> dict:
        try:
            done = [_timed(self.worker, pickle.loads(item)) for item in batch["piece"]]
        except Exception as err:  # handed to the driver, which raises it as itself: Ray Data would reword it
            return {"record": [""], "start": [0.0], "end": [0.0], "error": [_pickled_error(err)]}
        return {
            "record": [json.dumps(r) for r, _, _ in done],
            "start": [s for _, s, _ in done],
            "end": [e for _, _, e in done],
            "error": [b""] * len(done),
        }


def _pickled_error(err: Exception) -> bytes:
    try:
        return pickle.dumps(err)
    except Exception:  # an exception that does not pickle: its type and message
        return pickle.dumps(RuntimeError(f"{type(err).__name__}: {err}"))


class Engine(Protocol):
    """Where a job's pieces run. Chosen once from the settings (:func:`engine_of`); a job calls its methods
    and never tests the engine's name."""

    settings: EngineSettings
    in_process: bool  # pieces run in this process, one after the other (a job may stream its input instead)

    def session(self) -> contextlib.AbstractContextManager[None]:
        """Held around a whole job, so that its plan and its pieces share one connection."""

    def run_pieces(
        self, worker: type, kwargs: dict, pieces: Sequence[Any], on_record: Callable[[dict], None]
    ) -> PoolStats:
        """``worker(**kwargs)(piece)`` for every piece, each record handed to ``on_record`` as it comes."""

    def map_items(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> list:
        """``[function(item, **kwargs) for item in items]``, in order."""

    def gpu_workers(self) -> bool:
        """Whether the workers run their models on a GPU."""

    def worker_threads(self) -> int:
        """Threads each worker's kernels use."""


class LocalEngine:
    """This process: one worker, piece after piece, every core its threads."""

    in_process = True

    def __init__(self, settings: EngineSettings):
        self.settings = settings

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield

    def run_pieces(
        self, worker: type, kwargs: dict, pieces: Sequence[Any], on_record: Callable[[dict], None]
    ) -> PoolStats:
        span = _Span(on_record)
        stats = PoolStats(pieces=len(pieces))
        if pieces:
            stats.workers, run = 1, worker(**kwargs)
            for piece in pieces:
                span.finished(*_timed(run, piece))
        return span.into(stats)

    def map_items(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> list:
        return [function(item, **kwargs) for item in items]

    def gpu_workers(self) -> bool:
        import torch

        return torch.cuda.is_available()

    def worker_threads(self) -> int:
        return os.cpu_count() or 1


class RayEngine:
    """A Ray cluster: pieces through an actor pool (each actor a worker, loaded once), items as tasks."""

    in_process = False

    def __init__(self, settings: EngineSettings):
        self.settings = settings

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return cluster(self.settings)

    def run_pieces(
        self, worker: type, kwargs: dict, pieces: Sequence[Any], on_record: Callable[[dict], None]
    ) -> PoolStats:
        settings, span = self.settings, _Span(on_record)
        stats = PoolStats(pieces=len(pieces))
        if not pieces:
            return stats
        with cluster(settings) as ray:
            stats.workers = min(pool_size(ray, settings), len(pieces))
            items = [{"piece": pickle.dumps(piece)} for piece in pieces]
            data = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
                _Actor,
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(size=stats.workers),
                num_cpus=settings.cpus_per_worker,
                num_gpus=settings.gpus_per_worker or None,
                fn_constructor_kwargs={"worker": worker, "kwargs": kwargs, "threads": settings.threads},
            )
            with plain_errors():
                for row in data.iter_rows():
                    if row["error"]:
                        raise pickle.loads(row["error"])
                    span.finished(json.loads(row["record"]), row["start"], row["end"])
        return span.into(stats)

    def map_items(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> list:
        if not items:
            return []
        with cluster(self.settings) as ray:
            task = ray.remote(num_cpus=self.settings.cpus_per_worker)(_pickled_call)
            with plain_errors():
                return ray.get([task.remote(function, item, kwargs) for item in items])

    def gpu_workers(self) -> bool:
        return self.settings.gpus_per_worker > 0

    def worker_threads(self) -> int:
        return self.settings.threads


# the engines by the name ``--engine`` gives (jobs/settings.py's ENGINES): the only place that reads it
ENGINE_CLASSES: dict[str, type] = {"local": LocalEngine, "ray": RayEngine}


def engine_of(settings: EngineSettings) -> Engine:
    """The engine the settings name."""
    return ENGINE_CLASSES[settings.engine](settings)


class _Span:
    """The records of finished pieces handed on, and the span from the first start to the last end."""

    def __init__(self, on_record: Callable[[dict], None]):
        self.on_record, self.first, self.last, self.busy = on_record, float("inf"), 0.0, 0.0

    def finished(self, record: dict, start: float, end: float) -> None:
        self.first, self.last = min(self.first, start), max(self.last, end)
        self.busy += end - start
        self.on_record(record)

    def into(self, stats: PoolStats) -> PoolStats:
        stats.span_seconds = max(0.0, self.last - self.first) if stats.pieces else 0.0
        stats.busy_seconds = self.busy
        return stats


def run_pieces(
    settings: EngineSettings,
    worker: type,
    kwargs: dict,
    pieces: Sequence[Any],
    on_record: Callable[[dict], None],
) -> PoolStats:
    """:meth:`Engine.run_pieces` on ``settings``' engine."""
    return engine_of(settings).run_pieces(worker, kwargs, pieces, on_record)


def map_items(
    settings: EngineSettings, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any
) -> list:
    """:meth:`Engine.map_items` on ``settings``' engine."""
    return engine_of(settings).map_items(function, items, **kwargs)


@contextlib.contextmanager
def plain_errors() -> Iterator[None]:
    """A worker's own exception raised here as itself (``rows.jsonl:3: empty text``, one line as under the local
    engine), not as Ray's remote traceback around it."""
    try:
        yield
    except Exception as err:
        cause = _cause(err)
        if cause is err:
            raise
        raise cause from None


def _cause(err: BaseException) -> BaseException:
    """The exception inside Ray's wrappers (a task's error, Ray Data's user-code error)."""
    seen = set()
    while id(err) not in seen:
        seen.add(id(err))
        inner = getattr(err, "cause", None)
        if not isinstance(inner, BaseException) and type(err).__module__.startswith("ray."):
            inner = err.__cause__
        if not isinstance(inner, BaseException):
            break
        err = inner
    return err


def _pickled_call(function: Callable[..., Any], item: Any, kwargs: dict) -> Any:
    return function(item, **kwargs)


def progress(total: int, unit: str, desc: str, show: bool) -> Any:
    """A bar over ``total`` items that also shows tokens/s (``tokens_rate``) and the ETA."""
    return progress_bar(
        total=total, unit=unit, desc=desc, disable=not show, dynamic_ncols=True, smoothing=0.1
    )


def count_tokens(bar: Any, records: int, tokens: int) -> None:
    """Advance the bar by one finished piece (``records`` items, ``tokens`` tokens)."""
    bar.tokens = getattr(bar, "tokens", 0) + tokens
    bar.update(records)
    elapsed = bar.format_dict.get("elapsed") or 0
    if elapsed:
        bar.set_postfix_str(f"{bar.tokens / elapsed:,.0f} tok/s", refresh=False)
