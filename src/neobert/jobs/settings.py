"""Where a job runs: the engine settings every job's config carries (``--engine``, ``--workers``, ...).

Plain data, apart from the engines themselves (:mod:`neobert.jobs.engine`): every job's config
(:class:`neobert.jobs.prepare.PrepareConfig`, :class:`neobert.jobs.embed_config.EmbedConfig`) holds them as its
own fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("local", "ray")


@dataclass(kw_only=True)
class EngineSettings:
    """Where a job runs (the options every job shares)."""

    engine: str = field(
        default="local",
        metadata={
            "choices": ENGINES,
            "help": ("local: this process | ray: a Ray cluster's actor pool (pip install 'neobert[ray]')"),
        },
    )
    # ray: worker actors (default: the cluster's GPUs / --gpus-per-worker, else its CPUs / --cpus-per-worker)
    workers: int | None = None
    cpus_per_worker: float = 1.0  # ray: CPUs each worker holds (its threads)
    gpus_per_worker: float = 0.0  # ray: GPUs each worker holds (1: one actor per GPU)
    # ray: a running cluster to join (HOST:6379, or auto); default: one started on this machine for the job
    address: str | None = None
    # another job writing the same output directory: wait for it to finish (default: refuse, naming it)
    wait: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {self.engine!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be positive, got {self.workers}")
        if self.cpus_per_worker <= 0 or self.gpus_per_worker < 0:
            raise ValueError(
                f"cpus per worker must be positive and gpus per worker not negative; got "
                f"{self.cpus_per_worker} and {self.gpus_per_worker}"
            )
        if self.engine == "local" and (self.workers or self.address or self.gpus_per_worker):
            raise ValueError("--workers, --gpus-per-worker and --address are for --engine ray")

    @property
    def threads(self) -> int:
        """Threads a worker's kernels use (torch, the Rust tokenizer)."""
        return max(1, int(self.cpus_per_worker))
