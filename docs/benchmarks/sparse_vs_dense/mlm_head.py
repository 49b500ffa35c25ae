"""Give a BERT sentence encoder without an MLM head (all-MiniLM-L6-v2) a masked-LM head, for SPLADE.

    PYTHONPATH=src python docs/benchmarks/sparse_vs_dense/mlm_head.py MODEL_DIR CORPUS OUTPUT [--steps N]

The model loads as ``BertForMaskedLM``: the decoder is tied to the word embeddings (trained), the transform
(dense 384 x 384, GELU, LayerNorm) and the output bias are new. Only those new parameters are trained; the
encoder and the embeddings stay frozen, so the saved model's encoder is exactly MODEL_DIR's and SPLADE
fine-tuning starts from the same encoder as dense fine-tuning. Training: BERT's masking (15% of tokens; 80%
[MASK], 10% random, 10% kept) on 128-token windows of CORPUS (one document per line), batches of 32, AdamW
at 1e-3 with 5% linear warm-up then linear decay; the cross-entropy is computed at the masked positions only.
The last 5% of the windows are held out to report the masked-token loss and accuracy before and after.

Then the output bias is shifted by one constant, which leaves the masked-LM model unchanged (softmax does
not see a constant added to every logit) but not SPLADE, which keeps the entries with a *positive* logit: a
new head's logit level is arbitrary (here most of the 30,522 logits came out positive, so SPLADE vectors were
nearly full). The shift makes a logit positive where the entry is more likely than the head's perplexity on
held-out masked tokens allows (p > 1 / perplexity) at the average position: it subtracts
mean(logsumexp(logits)) - held-out masked-token loss, the mean over the real tokens of the held-out windows,
unmasked (as SPLADE sees text). (p > 1 / V, a shift of mean logsumexp - log V, was tried first: it left 92%
of the entries of a 128-token window positive.) ``--shift-only`` applies this to an OUTPUT already trained.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertForMaskedLM


def windows(tokenizer, corpus: Path, length: int) -> torch.Tensor:
    """The corpus's token ids cut into windows of ``length`` (with [CLS] ... [SEP]), shape (N, length)."""
    ids: list[int] = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            ids.extend(tokenizer(line, add_special_tokens=False)["input_ids"])
            ids.append(tokenizer.sep_token_id)
    body = length - 2
    n = len(ids) // body
    chunks = torch.tensor(ids[: n * body]).view(n, body)
    cls = torch.full((n, 1), tokenizer.cls_token_id)
    sep = torch.full((n, 1), tokenizer.sep_token_id)
    return torch.cat([cls, chunks, sep], dim=1)


def mask(batch: torch.Tensor, tokenizer, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: inputs and labels (-100 where not predicted)."""
    special = (batch == tokenizer.cls_token_id) | (batch == tokenizer.sep_token_id)
    chosen = (torch.rand(batch.shape, generator=generator) < 0.15) & ~special
    labels = torch.where(chosen, batch, torch.full_like(batch, -100))
    roll = torch.rand(batch.shape, generator=generator)
    inputs = batch.clone()
    inputs[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    random_ids = torch.randint(len(tokenizer), batch.shape, generator=generator)
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, labels


def masked_loss(
    model: BertForMaskedLM, inputs: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():  # the encoder is frozen
        hidden = model.bert(input_ids=inputs, attention_mask=torch.ones_like(inputs)).last_hidden_state
    where = labels != -100
    logits = model.cls(hidden[where])  # (masked, V): the vocabulary projection at masked positions only
    target = labels[where]
    return F.cross_entropy(logits, target), (logits.argmax(-1) == target).float().mean()


def evaluate(model: BertForMaskedLM, data: torch.Tensor, tokenizer, batch_size: int) -> dict[str, float]:
    generator = torch.Generator().manual_seed(1)
    losses, accs = [], []
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            loss, acc = masked_loss(model, *mask(data[start : start + batch_size], tokenizer, generator))
            losses.append(float(loss))
            accs.append(float(acc))
    return {"loss": sum(losses) / len(losses), "accuracy": sum(accs) / len(accs)}


def shift_bias(model: BertForMaskedLM, data: torch.Tensor, batch_size: int, loss: float) -> dict[str, float]:
    """Subtract mean logsumexp - log V from the output bias (see the module's docstring); non-zeros per
    window of the SPLADE max pooling, before and after."""
    lse, before = [], []
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            logits = model(input_ids=data[start : start + batch_size]).logits  # (B, L, V)
            lse.append(torch.logsumexp(logits, dim=-1).flatten())
            before.append(float((logits.amax(dim=1) > 0).sum(dim=-1).float().mean()))
        shift = float(torch.cat(lse).mean()) - loss  # loss: the held-out masked-token cross-entropy
        model.cls.predictions.bias -= shift  # the decoder's bias is the same tensor
        after = [float((model(input_ids=data[i : i + batch_size]).logits.amax(dim=1) > 0).sum(-1).float().mean())
                 for i in range(0, len(data), batch_size)]  # fmt: skip
    return {"shift": shift, "nonzeros_per_window_before": sum(before) / len(before),
            "nonzeros_per_window_after": sum(after) / len(after)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("corpus", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shift-only", action="store_true", help="only shift the bias of OUTPUT's trained head"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = BertForMaskedLM.from_pretrained(args.output if args.shift_only else args.model).eval()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    for p in model.parameters():
        p.requires_grad_(False)
    head = [*model.cls.predictions.transform.parameters(), model.cls.predictions.bias]
    for p in head:
        p.requires_grad_(True)
    data = windows(tokenizer, args.corpus, args.length)
    data = data[torch.randperm(len(data), generator=torch.Generator().manual_seed(args.seed))]
    n_val = max(1, len(data) // 20)
    val, train = data[:n_val], data[n_val:]
    if args.shift_only:
        log_file = args.output / "mlm_head.json"
        log = json.loads(log_file.read_text(encoding="utf-8"))
        shifted = shift_bias(model, val, args.batch_size, log["after"]["loss"])
        print(f"bias shifted: {shifted}", flush=True)
        model.save_pretrained(args.output)
        log_file.write_text(json.dumps({**log, "bias_shift": shifted}, indent=2) + "\n", encoding="utf-8")
        return
    model.eval()  # no dropout: the frozen encoder gives the states SPLADE will start from
    before = evaluate(model, val, tokenizer, args.batch_size)
    print(f"{len(train)} training windows, {n_val} held out; before: {before}", flush=True)
    optimizer = torch.optim.AdamW(head, lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / (args.steps - warmup)))
    )
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(train), generator=generator)
    position, window = 0, []
    for step in range(args.steps):
        if position + args.batch_size > len(order):
            order, position = torch.randperm(len(train), generator=generator), 0
        batch = train[order[position : position + args.batch_size]]
        position += args.batch_size
        loss, _ = masked_loss(model, *mask(batch, tokenizer, generator))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        window.append(float(loss.detach()))
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}: loss {sum(window) / len(window):.4f} ({time.perf_counter() - start:.0f}s)",
                  flush=True)  # fmt: skip
            window = []
    after = evaluate(model, val, tokenizer, args.batch_size)
    seconds = time.perf_counter() - start
    print(f"after: {after} (perplexity {math.exp(after['loss']):.1f}); {seconds:.0f}s", flush=True)
    shifted = shift_bias(model, val, args.batch_size, after["loss"])
    print(f"bias shifted: {shifted}", flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    log = {"source": args.model, "corpus": str(args.corpus), "steps": args.steps, "batch_size": args.batch_size,
           "lr": args.lr, "length": args.length, "windows": len(train), "held_out_windows": n_val,
           "before": before, "after": after, "seconds": seconds, "bias_shift": shifted}  # fmt: skip
    (args.output / "mlm_head.json").write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
