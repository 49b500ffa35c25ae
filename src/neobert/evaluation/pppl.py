"""Pseudo-perplexity vs sequence length (the paper's Figure 2).

Every scored token of a document is masked in turn and predicted from the rest; the document's
pseudo-log-likelihood is the sum of those log-probabilities. Many masked copies of a document go through
one forward (``copies`` of them), each with a different position masked. Special tokens ([CLS], [SEP]) are
not scored. Documents are binned by length in tokens (specials included): bin ``e_i`` holds lengths in
``(e_{i-1}, e_i]``; documents longer than the last edge are truncated to it. A bin's pseudo-perplexity is
``exp(total NLL / total scored tokens)`` over its documents (token-weighted, as one long corpus).

A model spec may carry its own RoPE extension, ``PATH@yarn`` or ``PATH@yarn:8192`` (``linear``, ``ntk``,
or ``none`` = plain RoPE on more positions): the way to compare a 1024-token model with and without
context extension. A model asked for documents longer than it accepts gets NaN for those bins.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..cards import Result
from ..common.config import ROPE_SCALINGS, ModelConfig
from ..common.io import atomic_file
from ..common.progress import progress_bar
from ..common.tables import markdown_table
from ..data.readers import json_objects
from ..inference.encoders import Encoder, is_preset, load_encoder
from ..model import NeoBERTConfig, NeoBERTForMaskedLM

DEFAULT_BINS = (128, 256, 512, 1024, 2048, 4096)
ROPE_METHODS = ROPE_SCALINGS  # config.ROPE_SCALINGS: none | linear | ntk | yarn


@dataclass
class BinResult:
    model: str
    low: int
    high: int
    documents: int
    tokens: int
    nll: float  # summed over the bin's scored tokens

    @property
    def pppl(self) -> float:
        return math.exp(self.nll / self.tokens) if self.tokens else math.nan


@dataclass
class PPPLReport:
    bins: list[BinResult] = field(default_factory=list)
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)


@torch.no_grad()
def token_nll(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    mask_token_id: int,
    copies: int = 32,
) -> torch.Tensor:
    """-log p(token at each of ``positions`` | the rest of the document), one mask per copy, ``copies`` per forward.

    input_ids (L,) one document with its special tokens; positions (P,) indices to score. Returns (P,) float32.
    """
    out = []
    decode_masked_only = isinstance(model, NeoBERTForMaskedLM)
    for chunk in positions.split(copies):
        n = chunk.numel()
        batch = input_ids.expand(n, -1).clone()  # (n, L): copy i masks position chunk[i]
        rows = torch.arange(n, device=batch.device)
        batch[rows, chunk] = mask_token_id
        if decode_masked_only:
            selected = torch.zeros_like(batch, dtype=torch.bool)
            selected[rows, chunk] = True
            # NeoBERT decodes only the masked positions, in row order: (n, V) instead of (n, L, V).
            logits = model(input_ids=batch, masked_positions=selected).logits
        else:
            logits = model(input_ids=batch).logits[rows, chunk]  # (n, V)
        log_probs = F.log_softmax(logits.float(), dim=-1)
        out.append(-log_probs[rows, input_ids[chunk]])
    return torch.cat(out) if out else torch.zeros(0)


def scored_positions(tokenizer: Any, input_ids: Sequence[int], limit: int | None = None) -> torch.Tensor:
    """Indices of the non-special tokens, or ``limit`` of them evenly spread when a limit is given."""
    special = tokenizer.get_special_tokens_mask(list(input_ids), already_has_special_tokens=True)
    positions = torch.tensor([i for i, s in enumerate(special) if not s], dtype=torch.long)
    if limit is not None and positions.numel() > limit:
        pick = torch.linspace(0, positions.numel() - 1, limit).round().long()
        positions = positions[pick]
    return positions


def assign_bin(length: int, edges: Sequence[int]) -> int:
    """Index of the first edge >= length; longer documents go to the last bin (they are truncated to it)."""
    for i, edge in enumerate(edges):
        if length <= edge:
            return i
    return len(edges) - 1


def parse_model_spec(
    spec: str, context: int | None, default_method: str | None
) -> tuple[str, str | None, int | None]:
    """``PATH[@METHOD[:CONTEXT]]`` -> (path, RoPE method or None, context or None)."""
    path, _, extension = spec.partition("@")
    method, _, length = extension.partition(":")
    method = method or default_method
    if method is not None and method not in ROPE_METHODS:
        raise ValueError(f"unknown RoPE scaling {method!r} in {spec!r}; use one of {', '.join(ROPE_METHODS)}")
    return path, method, int(length) if length else context


def load_mlm(
    spec: str,
    tokenizer: str | None = None,
    rope_scaling: str | None = None,
    context: int | None = None,
    device: str | torch.device | None = None,
) -> Encoder:
    """A masked-LM model, its RoPE extended to ``context`` tokens when asked (NeoBERT only)."""
    path, method, length = parse_model_spec(spec, context, rope_scaling)
    if method is None:
        if length is not None:
            raise ValueError(
                f"{spec}: a context length ({length}) needs a RoPE scaling method to reach it "
                f"(--rope-scaling METHOD or {path}@METHOD:{length}; methods: {', '.join(ROPE_METHODS)})"
            )
        return load_encoder(path, tokenizer, head="mlm", device=device)
    if length is None:
        raise ValueError(
            f"{spec}: RoPE scaling {method!r} needs a context length (--context or @{method}:LENGTH)"
        )
    changes = _extended_fields(path, method, length)
    return load_encoder(path, tokenizer, head="mlm", device=device, **changes)


def _extended_fields(path: str, method: str, length: int) -> dict[str, Any]:
    """The ModelConfig fields that change when NeoBERT ``path`` is extended to ``length`` tokens."""
    if is_preset(path):
        base = ModelConfig.from_name(path)
    else:
        try:
            base = NeoBERTConfig.from_pretrained(path).to_model_config()
        except Exception as err:
            raise ValueError(f"{path}: RoPE scaling applies to NeoBERT models only ({err})") from None
    if method == "none":  # plain RoPE computed for more positions: extrapolation, no scaling
        extended = base.replace(max_length=max(length, base.max_length))
    else:
        extended = base.with_context(length, method)
    return {k: v for k, v in extended.to_dict().items() if v != getattr(base, k)}


def read_documents(path: str | os.PathLike) -> list[str]:
    """Documents from a ``.jsonl`` file (a ``text`` field per line) or a text file (one document per line)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        lines = []
        for number, row in json_objects(path):
            if not isinstance(row.get("text"), str):
                raise ValueError(
                    f"{path}, line {number}: no string 'text' field; available: {', '.join(sorted(row))}"
                )
            lines.append(row["text"])
    elif path.is_file():
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        raise FileNotFoundError(f"input file {path} does not exist")
    if not lines:
        raise ValueError(f"input file {path} holds no document")
    return lines


def tokenize_documents(tokenizer: Any, documents: Sequence[str], max_tokens: int) -> list[list[int]]:
    """Token ids with special tokens, truncated to ``max_tokens`` (the last bin edge)."""
    return [tokenizer(doc, truncation=True, max_length=max_tokens)["input_ids"] for doc in documents]


def evaluate_model(
    encoder: Encoder,
    label: str,
    documents: Sequence[list[int]],
    edges: Sequence[int],
    copies: int = 32,
    max_positions: int | None = None,
    show_progress: bool = True,
) -> list[BinResult]:
    """Pseudo-perplexity of one model per length bin."""
    bins = [BinResult(label, low, high, 0, 0, 0.0) for low, high in zip([0, *edges[:-1]], edges)]
    mask_id = encoder.tokenizer.mask_token_id
    if mask_id is None:
        raise ValueError(f"{label}: the tokenizer has no mask token")
    too_long: set[int] = set()
    encoder.model.eval()
    for ids in progress_bar(documents, desc=f"pppl {label}", unit="doc", disable=not show_progress):
        index = assign_bin(len(ids), edges)
        if len(ids) > encoder.max_length:
            too_long.add(index)  # beyond the model's positions: the bin is reported as NaN, not guessed
            continue
        b = bins[index]
        positions = scored_positions(encoder.tokenizer, ids, max_positions)
        input_ids = torch.tensor(ids, device=encoder.device)
        nll = token_nll(encoder.model, input_ids, positions.to(encoder.device), mask_id, copies)
        b.documents += 1
        b.tokens += nll.numel()
        b.nll += float(nll.double().sum())
    for index in too_long:
        bins[index].documents, bins[index].tokens, bins[index].nll = 0, 0, 0.0
    return bins


def run(
    models: Sequence[str],
    input: str | os.PathLike,
    output: str | os.PathLike | None = None,
    bins: Sequence[int] = DEFAULT_BINS,
    rope_scaling: str | None = None,
    context: int | None = None,
    tokenizer: str | None = None,
    copies: int = 32,
    max_positions: int | None = None,
    max_docs_per_bin: int | None = None,
    device: str | None = None,
    show_progress: bool = True,
) -> PPPLReport:
    """Pseudo-perplexity per length bin for every model; CSV and a Figure-2 plot under ``output``.

    Args:
        models: model directory, NeoBERT preset or hub id; PATH@yarn[:LENGTH] extends one model's RoPE
        input: documents: .jsonl with a text field, or one per line
        output: results directory
        bins: upper bin edges in tokens
        rope_scaling: extend every NeoBERT model's RoPE: none | linear | ntk | yarn
        context: length the RoPE scaling extends to (default: none)
        tokenizer: tokenizer directory (default: the model's own)
        copies: masked copies of a document per forward
        max_positions: score at most this many tokens per document (evenly spread)
        max_docs_per_bin: use at most this many documents per bin
        device: cpu, cuda, cuda:1 ... (default: cuda when available)
    """
    start = time.perf_counter()
    edges = sorted(set(int(b) for b in bins))
    if not edges or edges[0] < 3:
        raise ValueError(f"bins must be token lengths of at least 3, got {list(bins)}")
    documents = read_documents(input)
    report = PPPLReport()
    for spec in models:
        encoder = load_mlm(spec, tokenizer, rope_scaling, context, device)
        ids = tokenize_documents(encoder.tokenizer, documents, edges[-1])
        ids = _cap_per_bin(ids, edges, max_docs_per_bin)
        report.bins += evaluate_model(
            encoder, _label(spec, rope_scaling, context), ids, edges, copies, max_positions, show_progress
        )
    report.seconds = time.perf_counter() - start
    if output is not None:
        output = Path(output)
        report.files = [write_csv(report.bins, output / "pppl.csv"), plot(report.bins, output / "pppl.png")]
    return report


def _label(spec: str, rope_scaling: str | None, context: int | None) -> str:
    path, method, length = parse_model_spec(spec, context, rope_scaling)
    name = Path(path.rstrip("/")).name or path
    return f"{name} ({method} {length})" if method else name


def _cap_per_bin(ids: list[list[int]], edges: Sequence[int], cap: int | None) -> list[list[int]]:
    """At most ``cap`` documents per bin, the first ones in file order."""
    if cap is None:
        return ids
    kept, counts = [], [0] * len(edges)
    for doc in ids:
        b = assign_bin(len(doc), edges)
        if counts[b] < cap:
            kept.append(doc)
            counts[b] += 1
    return kept


def write_csv(bins: Sequence[BinResult], path: Path) -> Path:
    with atomic_file(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", "bin_low", "bin_high", "documents", "tokens", "pppl"])
        for b in bins:
            writer.writerow(
                [b.model, b.low, b.high, b.documents, b.tokens, "" if math.isnan(b.pppl) else f"{b.pppl:.6g}"]
            )
    return path


def plot(bins: Sequence[BinResult], path: Path) -> Path:
    """Figure 2's layout: pseudo-perplexity (log scale) against the length bin, one line per model."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for model in dict.fromkeys(b.model for b in bins):
        points = [(b.high, b.pppl) for b in bins if b.model == model and not math.isnan(b.pppl)]
        if points:
            axes.plot(*zip(*points), marker="o", label=model)
    edges = sorted({b.high for b in bins})
    axes.set_xscale("log", base=2)
    axes.set_xticks(edges, [str(e) for e in edges])
    axes.set_yscale("log")
    axes.set_xlabel("sequence length (tokens, upper bin edge)")
    axes.set_ylabel("pseudo-perplexity")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    with atomic_file(path, "wb") as handle:
        figure.savefig(handle, format=path.suffix.lstrip(".") or "png", dpi=120)
    plt.close(figure)
    return path


def markdown(bins: Sequence[BinResult]) -> str:
    edges = sorted({b.high for b in bins})
    models = list(dict.fromkeys(b.model for b in bins))
    rows = [
        [m, *({b.high: b.pppl for b in bins if b.model == m}.get(e, math.nan) for e in edges)] for m in models
    ]
    return markdown_table(["model", *(f"<= {e}" for e in edges)], rows)


def card_results(
    report: PPPLReport,
    models: Sequence[str],
    input: str | os.PathLike,
    rope_scaling: str | None = None,
    context: int | None = None,
) -> dict[str, list[Result]]:
    """Each model directory's pseudo-perplexity per length bin (as in pppl.csv) as model-card entries."""
    name = Path(input).name
    out: dict[str, list[Result]] = {}
    for spec in models:
        label = _label(spec, rope_scaling, context)
        path, method, length = parse_model_spec(spec, context, rope_scaling)
        how = f", {method} {length}" if method else ""
        out.setdefault(path, []).extend(
            Result(
                "fill-mask",
                f"Pseudo-perplexity, {b.low}-{b.high} tokens{how}",
                name,
                name,
                "pseudo-perplexity",
                b.pppl,
                None,
                "neobert eval pppl",
                config=f"{b.low}-{b.high} tokens{how}",
            )
            for b in report.bins
            if b.model == label and b.tokens
        )
    return out
