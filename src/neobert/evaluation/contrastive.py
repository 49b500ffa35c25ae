"""Contrastive fine-tuning of any encoder into an embedding model: the paper's protocol (Section 4, Table 4).

InfoNCE on cosine similarity at temperature 0.07: each query scores its positive against every other
positive and every hard negative of the batch (in-batch negatives plus hard negatives). Under DDP the
candidates of all processes are gathered, the local part keeping its gradient, so the negatives are those of
the global batch. Each batch comes from one data set, data sets drawn in proportion to size^alpha, queries
prefixed with their data set's instruction, masked mean pooling, 2,000 steps by default.

Entry point: :func:`run` (a :class:`ContrastiveConfig` in, a :class:`ContrastiveResult` out); the CLI
``neobert finetune contrastive`` is a thin layer over it.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..encoders import Encoder, embed_batch, load_encoder, tokenize
from .contrastive_data import BatchSampler, ContrastiveDataset, Example, load_datasets
from .instructions import TEMPLATE, apply_instruction


@dataclass
class ContrastiveConfig:
    model: str
    data: list[str]  # data set specs, see contrastive_data.parse_data_spec
    output: str
    tokenizer: str | None = None
    steps: int = 2000
    batch_size: int = 64  # queries per process per step
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 100
    temperature: float = 0.07
    alpha: float = 0.5  # data set sampling exponent
    hard_negatives: int = 1  # at most this many hard negatives per query
    max_length: int = 512
    instructions: dict[str, str] = field(default_factory=dict)  # data set name -> instruction override
    template: str = TEMPLATE
    seed: int = 0
    log_every: int = 10
    device: str | None = None
    bf16: bool = False
    gradient_checkpointing: bool = False
    show_progress: bool = True


@dataclass
class ContrastiveResult:
    output: Path
    steps: int
    losses: list[float]  # mean loss of each logging window
    dataset_steps: dict[str, int]
    seconds: float


def info_nce(
    queries: torch.Tensor, candidates: torch.Tensor, targets: torch.Tensor, temperature: float = 0.07
) -> torch.Tensor:
    """Mean over queries of -log softmax(cos(q, candidates) / temperature)[target].

    queries (B, C), candidates (N, C), targets (B,) index of each query's positive among the candidates.
    """
    q = F.normalize(queries.float(), dim=-1)
    c = F.normalize(candidates.float(), dim=-1)
    logits = q @ c.T / temperature  # (B, N)
    return F.cross_entropy(logits, targets)


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` from every process, concatenated in rank order (row counts may differ).

    Only this process's rows carry gradient; the others are constants. Every process then computes the
    same global loss, and backpropagation gives each one the exact gradient of that loss with respect to
    its own rows: the gradient of the whole is the sum over processes (see :func:`run`).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    world, rank = dist.get_world_size(), dist.get_rank()
    count = torch.tensor([x.shape[0]], device=x.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    padded = x.new_zeros((max(sizes), *x.shape[1:]))
    padded[: x.shape[0]] = x.detach()
    parts = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    rows = [part[:n] for part, n in zip(parts, sizes)]
    rows[rank] = x  # the local part keeps its graph
    return torch.cat(rows)


def contrastive_loss(
    queries: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, temperature: float = 0.07
) -> torch.Tensor:
    """InfoNCE of every query of the global batch against all its positives and hard negatives.

    queries and positives (B, C), row i of one paired with row i of the other; negatives (M, C), any count
    (a hard negative of one query is an in-batch negative of all others). Under DDP all three are gathered
    from every process, so the value is the same everywhere.
    """
    all_queries = gather_with_grad(queries)  # (B_global, C)
    candidates = torch.cat([gather_with_grad(positives), gather_with_grad(negatives)])
    targets = torch.arange(all_queries.shape[0], device=queries.device)
    return info_nce(all_queries, candidates, targets, temperature)


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


def step_loss(encoder: Encoder, texts: list[str], n_queries: int, config: ContrastiveConfig) -> torch.Tensor:
    # One forward over every text of the step: one graph, which DDP requires, and one padded batch.
    inputs = tokenize(encoder, texts, config.max_length)
    device_type = encoder.device.type
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.bf16):
        vectors = embed_batch(encoder, inputs)  # (T, C)
    q, p, n = vectors.split([n_queries, n_queries, len(texts) - 2 * n_queries])
    return contrastive_loss(q, p, n, config.temperature)


@torch.no_grad()
def dataset_loss(encoder: Encoder, dataset: ContrastiveDataset, config: ContrastiveConfig) -> float:
    """Mean InfoNCE over consecutive batches of ``dataset`` in file order, dropout off: a fixed measurement."""
    was_training = encoder.model.training
    encoder.model.eval()
    total, count = 0.0, 0
    for start in range(0, len(dataset), config.batch_size):
        examples = dataset.examples[start : start + config.batch_size]
        texts, n_queries, _ = batch_texts(examples, dataset, config)
        total += float(step_loss(encoder, texts, n_queries, config)) * n_queries
        count += n_queries
    encoder.model.train(was_training)
    return total / count


def lr_lambda(warmup: int, total: int) -> Any:
    """Linear warmup to the peak, then linear decay to zero at ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def _distributed_setup(config: ContrastiveConfig) -> tuple[int, int, torch.device]:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); pick this process's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if config.device:
        device = torch.device(config.device)
    elif torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world, device


def run(config: ContrastiveConfig) -> ContrastiveResult:
    """Fine-tune ``config.model`` contrastively and save it to ``config.output`` (see :func:`save_embedding_model`)."""
    start = time.perf_counter()
    if config.steps < 1 or config.batch_size < 1:
        raise ValueError("steps and batch_size must be positive")
    rank, world, device = _distributed_setup(config)
    datasets = load_datasets(config.data, config.instructions)  # bad data fails before the model loads
    torch.manual_seed(config.seed)
    encoder = load_encoder(config.model, config.tokenizer, device=device)
    if config.gradient_checkpointing:
        encoder.model.gradient_checkpointing_enable()
    losses, dataset_steps = train(encoder, datasets, config, rank, world)
    output = Path(config.output)
    if rank == 0:
        save_embedding_model(encoder, output)
        _write_log(output, config, datasets, losses, dataset_steps)
    if world > 1:
        dist.barrier()
    return ContrastiveResult(output, config.steps, losses, dataset_steps, time.perf_counter() - start)


def train(
    encoder: Encoder,
    datasets: list[ContrastiveDataset],
    config: ContrastiveConfig,
    rank: int = 0,
    world: int = 1,
) -> tuple[list[float], dict[str, int]]:
    """The training loop: returns the mean loss of each logging window and the steps per data set."""
    model = encoder.model
    model.train()
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        # The bare encoder is what is called; BERT-like models hold a pooler it never uses.
        ddp = DistributedDataParallel(encoder.base, find_unused_parameters=not encoder.is_neobert)
        encoder = Encoder(ddp, encoder.tokenizer, encoder.name, encoder.max_length)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config.warmup_steps, config.steps))
    sampler = BatchSampler(datasets, config.batch_size, config.alpha, config.seed, rank, world)
    losses, window = [], torch.zeros((), device=encoder.device)
    dataset_steps = {d.name: 0 for d in datasets}
    bar = tqdm(range(config.steps), desc="contrastive", disable=not config.show_progress or rank > 0)
    for step in bar:
        index, examples = sampler.next_batch()
        dataset_steps[datasets[index].name] += 1
        texts, n_queries, _ = batch_texts(examples, datasets[index], config)
        loss = step_loss(encoder, texts, n_queries, config)
        optimizer.zero_grad(set_to_none=True)
        # Each process holds the exact gradient of the global loss for its own rows; DDP averages over
        # processes where the total is their sum, hence the factor.
        (loss * world).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        window += loss.detach()
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            losses.append(float(window) / ((step % config.log_every) + 1))  # the only host sync
            window.zero_()
            bar.set_postfix(loss=f"{losses[-1]:.4f}", data=datasets[index].name)
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f"loss became {losses[-1]} at step {step + 1}; lower --lr")
    model.eval()
    return losses, dataset_steps


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
    (output / "contrastive_training.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def save_embedding_model(encoder: Encoder, output: str | os.PathLike) -> Path:
    """One directory that is both a sentence-transformers model (mean pooling, no normalization) and a
    transformers model: ``SentenceTransformer(output)`` (after ``import neobert`` for NeoBERT) and
    ``AutoModel.from_pretrained(output)`` both load it."""
    output = Path(output)
    if encoder.is_neobert:
        from ..integrations.sentence_transformers import save_sentence_transformer

        return save_sentence_transformer(encoder.model, encoder.tokenizer, output, pooling="mean")
    return _save_generic_sentence_transformer(encoder, output)


def _save_generic_sentence_transformer(encoder: Encoder, output: Path) -> Path:
    import tempfile

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    # Stage the transformers files, then let sentence-transformers write its own layout from them.
    with tempfile.TemporaryDirectory(prefix="neobert-st-") as staging:
        encoder.base.save_pretrained(staging)
        encoder.tokenizer.save_pretrained(staging)
        transformer = Transformer(staging, max_seq_length=encoder.max_length)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(output))
    return output
