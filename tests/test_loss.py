"""MLM loss normalised by the global count of masked tokens: gradient accumulation and data parallelism
give the gradients of one big batch."""

import math
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import neobert
from neobert.training import masked_lm_loss_sum, normalize_loss

V = 128  # the tiny preset's vocabulary


def test_loss_sum_is_the_summed_cross_entropy():
    logits = torch.randn(5, V, dtype=torch.bfloat16)
    labels = torch.tensor([3, 7, -100, 9, 1])
    log_probs = logits.float().log_softmax(-1)
    expected = -sum(log_probs[i, labels[i]] for i in (0, 1, 3, 4))
    out = masked_lm_loss_sum(logits, labels)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    # full (B, L, V) logits with (B, L) labels give the same
    torch.testing.assert_close(masked_lm_loss_sum(logits[None], labels[None]), expected)


def test_normalize_loss_and_empty_steps():
    assert normalize_loss(torch.tensor(6.0), torch.tensor(3)).item() == 2.0
    assert normalize_loss(torch.tensor(6.0), 3, world_size=4).item() == 8.0
    assert normalize_loss(torch.tensor(0.0), torch.tensor(0)).item() == 0.0  # no masked token: no NaN


def masked_count(labels) -> torch.Tensor:
    """Labelled tokens (label != -100) in the given micro-batches: the count a step normalises by."""
    return sum((lab != -100).sum() for lab in labels)


def _model():
    torch.manual_seed(0)
    cfg = neobert.NeoBERTConfig.from_model_config(neobert.ModelConfig.from_name("tiny"))
    return neobert.NeoBERTForMaskedLM(cfg)


def _micro_batch(seed: int, rows: int, length: int, rate: float) -> dict:
    """Random padded rows with masked labels at a given rate (so micro-batches hold unequal counts)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, length // 2 :] = 0
    ids[mask == 0] = 0
    chosen = (torch.rand(rows, length, generator=g) < rate) & (mask == 1)
    chosen[1, 1] = True  # at least one masked token
    labels = torch.where(chosen, ids, -100)
    return {"input_ids": torch.where(chosen, 4, ids), "attention_mask": mask, "labels": labels}


def _grads(model) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def _accumulate(model, micro_batches, count, world_size=1) -> float:
    """What the trainer does: per-micro-batch sums over masked positions only, scaled by the global count."""
    total = 0.0
    for mb in micro_batches:
        selected = mb["labels"] != -100
        out = model(mb["input_ids"], mb["attention_mask"], masked_positions=selected)  # (N, V), no loss
        assert out.loss is None
        labels = mb["labels"][selected]
        assert out.logits.shape == (labels.numel(), V)
        loss = normalize_loss(masked_lm_loss_sum(out.logits, labels), count, world_size=world_size)
        loss.backward()
        total += loss.item()
    return total


def _merged(model, micro_batches) -> float:
    merged = {k: torch.cat([mb[k] for mb in micro_batches]) for k in micro_batches[0]}
    loss = model(**merged).loss  # the model's own mean over every labelled token
    loss.backward()
    return loss.item()


def test_gradient_accumulation_equals_the_merged_batch():
    model = _model()
    micro = [_micro_batch(1, 2, 24, rate=0.05), _micro_batch(2, 2, 24, rate=0.5)]
    counts = [int((mb["labels"] != -100).sum()) for mb in micro]
    assert counts[1] > 3 * counts[0]  # unequal, so a mean of means would differ
    count = masked_count([mb["labels"] for mb in micro])
    assert count.item() == sum(counts)

    accumulated = _accumulate(model, micro, count)
    grads_acc = _grads(model)
    merged = _merged(model, micro)
    grads_merged = _grads(model)
    assert accumulated == pytest.approx(merged, rel=1e-5)
    for a, b in zip(grads_acc, grads_merged):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)

    # control: averaging per-micro-batch means is not the same loss
    means = [model(**mb).loss.item() for mb in micro]
    assert not math.isclose(sum(means) / 2, merged, rel_tol=1e-3)


def test_simulated_data_parallel_equals_the_merged_batch():
    """Two ranks of two micro-batches each; the wrapper averages their gradients, as DDP does."""
    model = _model()
    ranks = [
        [_micro_batch(3, 2, 16, 0.1), _micro_batch(4, 2, 16, 0.3)],
        [_micro_batch(5, 2, 16, 0.6), _micro_batch(6, 2, 16, 0.2)],
    ]
    count = sum(masked_count([mb["labels"] for mb in r]) for r in ranks)  # the all_reduce
    per_rank = []
    for r in ranks:
        _accumulate(model, r, count, world_size=2)
        per_rank.append(_grads(model))
    _merged(model, [mb for r in ranks for mb in r])
    for g0, g1, expected in zip(*per_rank, _grads(model)):
        torch.testing.assert_close((g0 + g1) / 2, expected, atol=1e-6, rtol=1e-4)


def _worker(rank: int, init_file: str, results) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        labels = [torch.tensor([1, -100, 2]), torch.tensor([-100, 3])] if rank == 0 else [torch.tensor([4])]
        count = masked_count(labels)
        dist.all_reduce(count)
        # default world_size comes from torch.distributed
        results[rank] = (count.item(), normalize_loss(torch.tensor(12.0), count).item())
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed with gloo"
)
def test_global_count_is_all_reduced_over_processes(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(str(tmp_path / "init"), results), nprocs=2, join=True)
        results = dict(results)
    # 3 labelled tokens on rank 0 and 1 on rank 1: 4 in all; 12 * 2 processes / 4
    assert results == {0: (4, 6.0), 1: (4, 6.0)}


def test_the_pretraining_step_computes_its_loss_once(monkeypatch):
    """The MLM task asks the model for logits at the masked positions only and sums the cross-entropy itself:
    one cross-entropy per micro-batch, not a second one inside the model that is thrown away."""
    import torch.nn.functional as F

    from neobert.training import collate_packed, iter_packed_rows
    from neobert.training.mlm_task import _mlm_sums

    model = _model()
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(5, V, (n,), generator=g).numpy() for n in (9, 14, 6)]
    batch = collate_packed(list(iter_packed_rows(docs, 16, open_rows=2)), pad_id=0, seq_len=16)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 2::3] = batch["input_ids"][:, 2::3]
    labels[batch["attention_mask"] == 0] = -100
    batch["labels"] = labels
    calls = []
    cross_entropy = F.cross_entropy
    monkeypatch.setattr(F, "cross_entropy", lambda *a, **k: calls.append(k) or cross_entropy(*a, **k))
    loss_sum, _, count = _mlm_sums(model, batch, torch.device("cpu"))
    assert len(calls) == 1 and calls[0]["reduction"] == "sum"
    assert count == (labels != -100).sum()
    monkeypatch.undo()
    out = model(
        batch["input_ids"],
        labels=labels,
        cu_seqlens=batch["cu_seqlens"],
        max_seqlen=batch["max_seqlen"],
        position_ids=batch["position_ids"],
        masked_positions=labels != -100,
    )
    torch.testing.assert_close(loss_sum / count, out.loss)
