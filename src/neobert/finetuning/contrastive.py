"""Contrastive fine-tuning of any encoder into an embedding model: the paper's protocol (Section 4, Table 4),
as a task of the training core (:mod:`neobert.training.trainer`).

InfoNCE on cosine similarity at temperature 0.07: each query scores its positive against every other
positive and every hard negative of the batch (in-batch negatives plus hard negatives). Under several
processes (``torchrun``) the candidates of all processes are gathered, with a gather whose backward sums the
gradient of every process's loss into the rows' owner, so each process's loss is the sum over its own
queries and the core's global-count normalisation gives exactly the gradient of the global mean. Each batch
comes from one data set, data sets drawn in proportion to size^alpha, queries prefixed with their data
set's instruction, masked mean pooling, 2,000 steps by default. ``matryoshka_dims`` adds the same loss at each
truncated width (Matryoshka). :func:`train` is shared with SPLADE training (:mod:`.sparse`). The core adds resumable checkpoints
(``resume``), precision (``auto``, ``fp32`` or bf16 autocast), clipping at 1.0, the NaN guard and logging (``OUTPUT/metrics.jsonl``, TensorBoard).

Entry point: :func:`run` (a :class:`ContrastiveConfig` in, a :class:`ContrastiveResult` out; a settings
mapping or file through :meth:`ContrastiveConfig.from_dict` / ``from_file``); the CLI ``neobert finetune
contrastive`` is a thin layer over it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..cards import CardInfo, DataSource, wall_time, write_card
from ..common.config import PRECISIONS, check_precision, load_mapping
from ..common.io import write_dir, write_json
from ..common.tables import fmt
from ..data.readers import ON_ERROR
from ..evaluation.instructions import TEMPLATE, apply_instruction
from ..inference.encoders import MATRYOSHKA_KEY, Encoder, embed_batch, load_encoder, tokenize
from ..training.lora import LoraReport, LoraSettings, adapt, fingerprint, save_with_adapter
from ..training.schedule import make_scheduler
from ..training.trainer import LossTerms, Trainer, TrainerSettings, model_widths
from .card import FinetuneFacts, finetune_card
from .config import FinetuneConfigError, check_lora, config_from_dict
from .contrastive_data import BatchSampler, ContrastiveDataset, Example, load_datasets
from .distillation import Distillation


@dataclass
class ContrastiveConfig(LoraSettings):
    model: str  # model directory, NeoBERT preset or hub id
    data: list[str]  # data set specs, see contrastive_data.parse_data_spec
    output: str  # directory for the fine-tuned model
    tokenizer: str | None = None  # tokenizer directory (default: the model's own)
    steps: int = 2000  # optimizer steps
    batch_size: int = 64  # queries per process per step
    lr: float = 2e-5  # peak learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    clip_grad_norm: float | None = 1.0  # gradient-norm clipping; None: off
    warmup_steps: int = 100  # linear warmup, then linear decay
    temperature: float = 0.07  # InfoNCE temperature
    alpha: float = 0.5  # data sets are sampled in proportion to size^alpha
    hard_negatives: int = 1  # at most this many hard negatives per query
    max_length: int = 512  # truncate texts to this many tokens
    instructions: dict[str, str] = field(default_factory=dict)  # data set name -> instruction override
    template: str = TEMPLATE
    seed: int = 0  # random seed (data order)
    log_every: int = 10  # steps between loss logs
    save_every: int = 500  # steps between resumable checkpoints (OUTPUT/checkpoints, removed at the end)
    resume: bool = False  # continue an interrupted run of OUTPUT
    device: str | None = None  # cpu, cuda ... (default: this process's GPU if any)
    # auto (bf16 autocast where measured faster for this model here) | fp32 | bf16
    precision: str = field(default="auto", metadata={"choices": PRECISIONS})
    activation_checkpointing: bool = False  # recompute each block's activations in the backward
    show_progress: bool = True  # progress bar
    license: str | None = None  # the license the model card names (none unless given), e.g. apache-2.0
    # Matryoshka: the loss at each of these widths (the first N dimensions), summed; e.g. 768,512,256,128,64
    matryoshka_dims: list[int] = field(default_factory=list)
    # a bad data row (a missing field, teacher scores of the wrong length): raise naming its file and line, or
    # skip and count it
    on_error: str = field(default="raise", metadata={"choices": ON_ERROR})
    # weight of the KL divergence from a teacher's scores (the data's "scores": positive, then each negative,
    # e.g. a cross-encoder's from neobert mine --teacher) to the student's over the same candidates (its logits:
    # similarity / temperature), added to the contrastive loss
    distillation: float = 0.0
    # weight of MarginMSE to the teacher's scores: ((s_pos - s_neg) - (t_pos - t_neg))^2 over each query's own
    # negatives (s the similarity itself), averaged per query, added to the contrastive loss
    margin_mse: float = 0.0

    def __post_init__(self) -> None:
        check_precision(self.precision, FinetuneConfigError)
        if self.distillation < 0 or self.margin_mse < 0:
            raise FinetuneConfigError(
                f"distillation and margin_mse must be >= 0, got {self.distillation}, {self.margin_mse}"
            )
        if self.on_error not in ON_ERROR:
            raise FinetuneConfigError(f"on_error must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")
        check_lora(self)
        dims = list(self.matryoshka_dims or [])
        if any(int(d) < 1 for d in dims) or len(set(dims)) != len(dims):
            raise FinetuneConfigError(f"matryoshka_dims must be distinct positive widths, got {dims}")
        self.matryoshka_dims = sorted((int(d) for d in dims), reverse=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContrastiveConfig:
        """A config from a settings mapping: unknown keys raise; old names (``bf16: true|false``) load with a
        FutureWarning (:func:`neobert.common.config.renamed_settings`)."""
        return config_from_dict(cls, data)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> ContrastiveConfig:
        return cls.from_dict({**load_mapping(path, FinetuneConfigError), **overrides})


@dataclass
class ContrastiveResult:
    """What a run of :func:`train` gives back (contrastive, SPLADE and late-interaction training alike)."""

    output: Path
    steps: int
    losses: list[float]  # mean loss of each logging window
    dataset_steps: dict[str, int]
    seconds: float


def dataset_sizes(datasets: Any) -> list[dict[str, Any]]:
    """The training data sets as a run's record lists them: name, source, size."""
    return [{"name": d.name, "source": d.source, "size": len(d)} for d in datasets]


def info_nce(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 0.07,
    reduction: str = "mean",
    cosine: bool = True,
) -> torch.Tensor:
    """-log softmax(cos(q, candidates) / temperature)[target], averaged (or summed) over queries; with
    ``cosine=False`` the raw dot product replaces the cosine (sparse vectors: SPLADE's scores).

    queries (B, C), candidates (N, C), targets (B,) index of each query's positive among the candidates.
    """
    logits = similarity(queries, candidates, cosine) / temperature  # (B, N)
    return F.cross_entropy(logits, targets, reduction=reduction)


def similarity(queries: torch.Tensor, candidates: torch.Tensor, cosine: bool = True) -> torch.Tensor:
    """(B, N) cosine similarity (or dot product) of queries (B, C) and candidates (N, C), in float32."""
    q = F.normalize(queries.float(), dim=-1) if cosine else queries.float()
    c = F.normalize(candidates.float(), dim=-1) if cosine else candidates.float()
    return q @ c.T


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherRows(torch.autograd.Function):
    """Rows of every process in rank order; the backward sums every process's gradient for this process's
    rows (every process's loss depends on them), so gradients cross processes exactly."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        count = torch.tensor([x.shape[0]], device=x.device)
        counts = [torch.zeros_like(count) for _ in range(world)]
        dist.all_gather(counts, count)
        sizes = [int(c) for c in counts]
        padded = x.new_zeros((max(sizes), *x.shape[1:]))  # all_gather needs equal shapes
        padded[: x.shape[0]] = x
        parts = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        ctx.start, ctx.count = sum(sizes[:rank]), sizes[rank]
        return torch.cat([part[:n] for part, n in zip(parts, sizes)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.start : ctx.start + ctx.count]


def gather_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Rows of ``x`` from every process, concatenated in rank order (row counts may differ), and where
    this process's rows start. Differentiable across processes (see :class:`_GatherRows`)."""
    if not _distributed():
        return x, 0
    counts = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([x.shape[0]], device=x.device))
    return _GatherRows.apply(x), int(sum(int(c) for c in counts[: dist.get_rank()]))


def candidate_scores(
    queries: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, cosine: bool = True
) -> tuple[torch.Tensor, int, int]:
    """(B, N) similarity of this process's queries to every process's positives, then every process's hard
    negatives (cosine, or the dot product); where this process's positives and its negatives start among them.

    queries and positives (B, C), row i of one paired with row i of the other; negatives (M, C), any count
    (a hard negative of one query is an in-batch negative of all others)."""
    all_positives, offset = gather_rows(positives)
    all_negatives, negative_offset = gather_rows(negatives)
    candidates = torch.cat([all_positives, all_negatives])
    return similarity(queries, candidates, cosine), offset, all_positives.shape[0] + negative_offset


def contrastive_loss_sum(
    queries: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    temperature: float = 0.07,
    cosine: bool = True,
    teacher: Distillation | None = None,
) -> torch.Tensor:
    """Summed InfoNCE of this process's queries against every positive and hard negative of every process
    (:func:`candidate_scores`), plus the ``teacher``'s distillation terms. Summed over processes and divided
    by the global query count, this is the global batch's mean loss."""
    scores, offset, negatives_at = candidate_scores(queries, positives, negatives, cosine)
    targets = offset + torch.arange(queries.shape[0], device=queries.device)
    loss = F.cross_entropy(scores / temperature, targets, reduction="sum")
    if teacher is not None:
        loss = loss + teacher.loss(scores, temperature, offset, negatives_at)
    return loss


def batch_texts(
    examples: list[Example], dataset: ContrastiveDataset, config: ContrastiveConfig
) -> tuple[list[str], int, int]:
    """All texts of a batch, [queries | positives | negatives], with the query and negative counts.

    Queries get the data set's instruction; documents are encoded as they are.
    """
    queries = [apply_instruction(dataset.instruction, ex.query, config.template) for ex in examples]
    positives = [ex.positive for ex in examples]
    negatives = [n for ex in examples for n in ex.negatives[: config.hard_negatives]]
    return queries + positives + negatives, len(queries), len(negatives)


def step_loss(
    encoder: Encoder,
    texts: list[str],
    n_queries: int,
    config: ContrastiveConfig,
    teacher: Distillation | None = None,
) -> torch.Tensor:
    """Summed loss of this process's queries (see :func:`contrastive_loss_sum`); the teacher's terms at the
    full width."""
    # One forward over every text of the step: one graph, which DDP requires, and one padded batch.
    # precision is the trainer's: it autocasts the prepared model's forward (see training.trainer)
    inputs = tokenize(encoder, texts, config.max_length)
    vectors = embed_batch(encoder, inputs)  # (T, C)
    q, p, n = vectors.split([n_queries, n_queries, len(texts) - 2 * n_queries])
    if not config.matryoshka_dims:
        return contrastive_loss_sum(q, p, n, config.temperature, teacher=teacher)
    # Matryoshka (Kusupati et al. 2022): the same loss on the first d dimensions, for each d, summed
    widths = config.matryoshka_dims
    return sum(
        contrastive_loss_sum(
            q[:, :d], p[:, :d], n[:, :d], config.temperature, teacher=teacher if i == 0 else None
        )
        for i, d in enumerate(widths)
    )


class ContrastiveTask:
    """One batch of one data set per step, for the training core; its state is the sampler's position."""

    def __init__(
        self,
        encoder: Encoder,
        datasets: list[ContrastiveDataset],
        config: ContrastiveConfig,
        trainer: Trainer,
    ):
        self.encoder, self.datasets, self.config, self.trainer = encoder, datasets, config, trainer
        self.sampler = BatchSampler(
            datasets, config.batch_size, config.alpha, config.seed, trainer.rank, trainer.world
        )
        self.dataset_steps = {d.name: 0 for d in datasets}

    def batches(self, step: int) -> list[tuple[list[str], int, list[list[float]]]]:
        """The step's texts (:func:`batch_texts`), its query count and the teacher's scores of exactly the
        candidates it took (each query's positive and first ``hard_negatives`` negatives)."""
        index, examples = self.sampler.next_batch()
        self.dataset_steps[self.datasets[index].name] += 1
        texts, n_queries, _ = batch_texts(examples, self.datasets[index], self.config)
        k = self.config.hard_negatives
        teacher = [list(ex.scores[: 1 + min(len(ex.negatives), k)]) for ex in examples]
        return [(texts, n_queries, teacher)]

    def count(self, batch: tuple[list[str], int, list[list[float]]]) -> torch.Tensor:
        return torch.tensor(batch[1])

    def loss(self, model: torch.nn.Module, batch: tuple[list[str], int, list[list[float]]]) -> LossTerms:
        texts, n_queries, teacher = batch
        # the prepared (possibly DDP-wrapped) bare encoder stands in for the encoder's own
        encoder = Encoder(model, self.encoder.tokenizer, self.encoder.name, self.encoder.max_length)
        return LossTerms(
            step_loss(encoder, texts, n_queries, self.config, Distillation.of(teacher, self.config))
        )

    def after_step(self, step: int, final: bool) -> tuple[dict[str, float], bool]:
        return {}, False

    def state_objects(self) -> list[Any]:
        return [self.sampler, self]

    def state_dict(self) -> dict[str, Any]:
        return {"dataset_steps": dict(self.dataset_steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset_steps = dict(state["dataset_steps"])


def run(
    config: ContrastiveConfig, on_step_end: Callable[[int, dict[str, float]], None] | None = None
) -> ContrastiveResult:
    """Fine-tune ``config.model`` contrastively and save it to ``config.output`` (see :func:`save_embedding_model`).

    ``on_step_end(step, metrics)`` is called after every step (and its checkpoint, if one is due)."""
    trained = train(config, ContrastiveTask, on_step_end=on_step_end)
    trainer, task = trained.trainer, trained.task
    if trainer.is_main:
        save_trained(trained, config.output, lambda e, d: save_embedding_model(e, d, config.matryoshka_dims))
        _write_log(Path(config.output), config, trained.datasets, trained.losses, task.dataset_steps)
        limits = [
            "Mean pooling, vectors not normalized: compare them with cosine similarity.",
            "No evaluation ran with the training: `neobert eval embeddings|mteb --model DIR --update-card` "
            "adds results to this card.",
        ]
        card = run_card(
            config,
            trained,
            task.dataset_steps,
            trainer,
            head="sentence-embedding",
            command="neobert finetune contrastive",
            task="sentence embedding",
            loss="InfoNCE",
            limits=limits,
        )
        write_card(config.output, card)
    trainer.accelerator.wait_for_everyone()
    return ContrastiveResult(
        Path(config.output),
        trainer.state.step,
        trained.losses,
        task.dataset_steps,
        time.perf_counter() - trained.start,
    )


@dataclass
class Trained:
    """What :func:`train` hands to the task that saves: the trained encoder, the trainer, the task's state."""

    encoder: Encoder
    trainer: Trainer
    task: Any
    datasets: list[ContrastiveDataset]
    losses: list[float]  # mean loss of each logging window (main process only)
    start: float  # time.perf_counter() at the start
    module: torch.nn.Module | None = (
        None  # what was trained (the encoder, or the task's own module around it)
    )
    lora: LoraReport | None = None  # a LoRA run: what was adapted (``module`` holds the peft model)


def save_trained(trained: Trained, output: str | os.PathLike, save: Callable[[Encoder, Path], Any]) -> None:
    """The trained model into ``output`` by ``save`` (the run's saver of a whole model); after a LoRA run,
    the same directory with the transformer at its root as the adapter (:func:`neobert.training.lora.
    save_with_adapter`)."""
    encoder = trained.encoder
    if trained.lora is None:
        save(encoder, Path(output))
        return

    def whole(model: torch.nn.Module, directory: Path) -> None:
        save(Encoder(model, encoder.tokenizer, encoder.name, encoder.max_length), directory)

    save_with_adapter(trained.module, encoder.tokenizer, output, whole)


def train(
    config: ContrastiveConfig,
    make_task: Callable[[Encoder, list[ContrastiveDataset], Any, Trainer], Any],
    head: str = "base",
    on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    module: Callable[[Encoder], torch.nn.Module] | None = None,
    description: str = "contrastive",
    model_kwargs: dict[str, Any] | None = None,
) -> Trained:
    """The training of every query/document task (``finetune contrastive``, ``sparse``, ``late-interaction``,
    ``rerank``): load the data, then ``config.model`` with ``head`` (``base``: the bare encoder is trained;
    ``mlm`` or ``sequence-classification``: the whole model, the head's settings from ``model_kwargs``, e.g.
    ``num_labels``; ``module(encoder)``, where given: a module of the task's own around the encoder, e.g. the
    encoder and a projection), run ``make_task(encoder, datasets, config, trainer)`` on the trainer (AdamW,
    linear warm-up and decay), and remove the resume checkpoints of the finished run."""
    start = time.perf_counter()
    if config.steps < 1 or config.batch_size < 1 or config.save_every < 1:
        raise ValueError("steps, batch_size and save_every must be positive")
    output = Path(config.output)
    # bad data fails before the model loads
    datasets = load_datasets(config.data, config.instructions, config.on_error)
    torch.manual_seed(config.seed)
    # trainer.prepare moves it to the device
    encoder = load_encoder(config.model, config.tokenizer, head=head, **(model_kwargs or {}))
    too_wide = [d for d in getattr(config, "matryoshka_dims", []) if d > encoder.hidden_size]
    if too_wide:
        raise FinetuneConfigError(
            f"matryoshka_dims {too_wide} exceed the model's {encoder.hidden_size} dimensions ({config.model})"
        )
    trained_module = (
        module(encoder) if module is not None else encoder.base if head == "base" else encoder.model
    )
    report = None
    if config.lora:  # the adapter over the transformer the directory's root holds
        trained_module, report = adapt(trained_module, config, config.model)
    trainer = Trainer(
        _trainer_settings(config, model_widths(encoder.base), description)  # the progress bar's label
    )
    for d in datasets:
        if d.skipped:
            trainer.print(
                f"{len(d.skipped):,} bad row(s) of {d.name} skipped (on-error skip), e.g. {d.skipped[0]}"
            )
    task = make_task(encoder, datasets, config, trainer)

    _prepare(trainer, trained_module, config)
    recorded = fingerprint({k: v for k, v in asdict(config).items() if k not in _RUN_CONTROLS})
    trainer.run(task, resume=config.resume, fingerprint=recorded, on_step_end=on_step_end)
    encoder.model.eval()
    losses = _window_losses(output / "metrics.jsonl") if trainer.is_main else []
    if trainer.is_main:
        shutil.rmtree(output / "checkpoints", ignore_errors=True)  # finished: the resume state has served
    return Trained(encoder, trainer, task, datasets, losses, start, trained_module, report)


def _prepare(trainer: Trainer, module: torch.nn.Module, config: ContrastiveConfig) -> None:
    """Hand ``module`` to the trainer with AdamW and a linear warm-up, then a linear decay to 0."""

    def optimizer(model: torch.nn.Module, fused: bool) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay, fused=fused)

    warmup = min(config.warmup_steps, config.steps - 1)
    if warmup < config.warmup_steps:
        trainer.print(
            f"warning: {config.warmup_steps} warmup steps do not fit in {config.steps}; using {warmup}"
        )

    def scheduler(optimizer: torch.optim.Optimizer) -> Any:  # linear warmup, then linear decay to 0
        return make_scheduler(
            optimizer,
            warmup_steps=warmup,
            total_steps=config.steps,
            kind="linear",
            final_ratio=0.0,
            decay_fraction=1.0,
        )

    trainer.prepare(module, optimizer, scheduler)


# settings that may change between a run and its resumption
_RUN_CONTROLS = ("resume", "show_progress", "log_every", "save_every", "device", "license")


def _trainer_settings(
    config: ContrastiveConfig, widths: tuple[int, int], description: str
) -> TrainerSettings:
    return TrainerSettings(
        max_steps=config.steps,
        output=config.output,
        log_dir=config.output,
        precision=config.precision,
        probe_shape=widths,  # precision "auto" is measured at the model's widths
        device=config.device,
        clip_grad_norm=config.clip_grad_norm,
        log_every=config.log_every,
        save_every=config.save_every,
        keep_last=1,
        activation_checkpointing=config.activation_checkpointing,
        find_unused_parameters=True,  # e.g. BERT's pooler: the bare encoder's pooled output is not used
        progress_bar=config.show_progress,
        description=description,  # the progress bar's label
    )


def run_card(
    config: ContrastiveConfig,
    trained: Any,
    dataset_steps: dict[str, int],
    trainer: Trainer,
    *,
    head: str,
    command: str,
    task: str,
    loss: str,
    limits: list[str],
) -> CardInfo:
    """The card of a model :func:`train` trained (contrastive or sparse): its data sets, settings and run (no
    evaluation ran: see eval)."""
    seconds = time.perf_counter() - trained.start
    losses = trained.losses
    run = [
        ("precision run", trainer.precision),
        ("steps", f"{trainer.state.step:,}"),
        ("wall time", wall_time(seconds)),
        (f"last logged training loss ({loss})", fmt(losses[-1] if losses else None, digits=4)),
        *((f"steps drawn from {name}", f"{n:,}") for name, n in dataset_steps.items()),
    ]
    data = []
    for d in trained.datasets:
        source = DataSource.from_spec(d.source)
        source.note = f"{d.name}: {len(d):,} examples" + (f"; {source.note}" if source.note else "")
        data.append(source)
    facts = FinetuneFacts(
        head=head,
        command=command,
        task=task,
        model=config.model,
        settings=asdict(config),
        data=data,
        data_stats=[],
        run=run,
        license=config.license,
        limits=limits,
        lora=trained.lora,
    )
    return finetune_card(facts)


def _window_losses(metrics: Path) -> list[float]:
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["train/loss"] for r in records if "train/loss" in r]


def _write_log(
    output: Path,
    config: ContrastiveConfig,
    datasets: list[ContrastiveDataset],
    losses: list[float],
    dataset_steps: dict[str, int],
) -> None:
    info = {
        "config": asdict(config),
        "datasets": [
            {"name": d.name, "source": d.source, "size": len(d), "instruction": d.instruction}
            for d in datasets
        ],
        "dataset_steps": dataset_steps,
        "losses": losses,
    }
    write_json(output / "contrastive_training.json", info, indent=2)


def save_embedding_model(
    encoder: Encoder, output: str | os.PathLike, matryoshka_dims: list[int] = ()
) -> Path:
    """One directory that is both a sentence-transformers model (mean pooling, no normalization) and a
    transformers model: ``SentenceTransformer(output)`` (after ``import neobert`` for NeoBERT) and
    ``AutoModel.from_pretrained(output)`` both load it. ``matryoshka_dims``, the widths the model was trained
    for, go into ``config_sentence_transformers.json`` (read by :func:`neobert.inference.encoders.embedding_spec`)."""
    output = Path(output)
    if encoder.is_neobert:
        from ..integrations.sentence_transformers import save_sentence_transformer

        save_sentence_transformer(encoder.model, encoder.tokenizer, output, pooling="mean")
    else:
        _save_generic_sentence_transformer(encoder, output)
    if matryoshka_dims:
        settings_file = output / "config_sentence_transformers.json"
        settings = json.loads(settings_file.read_text(encoding="utf-8")) if settings_file.is_file() else {}
        write_json(
            settings_file, {**settings, MATRYOSHKA_KEY: sorted(matryoshka_dims, reverse=True)}, indent=2
        )
    return output


def _save_generic_sentence_transformer(encoder: Encoder, output: Path) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    # Stage the transformers files, then let sentence-transformers write its own layout from them.
    with tempfile.TemporaryDirectory(prefix="neobert-st-") as staging:
        encoder.base.save_pretrained(staging)
        encoder.tokenizer.save_pretrained(staging)
        transformer = Transformer(staging, max_seq_length=encoder.max_length)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
        return write_dir(lambda tmp: model.save(str(tmp)), output)
