"""``neobert demo``: the whole inference path on a small random NeoBERT, checked end to end.

Until pretraining exists there are no trained weights, so the demo says so loudly: it shows that the
plumbing is right (released layout, loading without remote code, embeddings, fill-mask,
sentence-transformers) and makes no claim about quality.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from safetensors import safe_open
from transformers import AutoModelForMaskedLM

from ..config import ModelConfig
from ..data import load_tokenizer
from ..encoders import save_pretrained
from ..inference import encode, fill_mask
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from ..predict import FillMaskResult
from .common import add_command, make_console, quiet_transformers
from .fill_mask import render as render_fill_mask

PRESET = "small"
SEED = 0
SENTENCES = [
    "A cat is sleeping on the sofa.",
    "A kitten naps on the couch.",
    "Stock markets fell sharply today.",
    "Investors sold shares as prices dropped.",
]
MASK_TEXT = "Paris is the [MASK] of France."
ST_ATOL = 1e-5


@dataclass
class DemoResult:
    output_dir: Path | None  # None when the files went to a temporary directory, now removed
    reload_max_diff: float
    similarities: np.ndarray  # (len(SENTENCES), len(SENTENCES)) cosine similarities
    predictions: list[list[tuple[str, float]]]
    st_max_diff: float | None  # None when sentence-transformers is not installed
    checks: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(self.checks.values())


def run(output_dir: str | Path | None = None, console: Console | None = None) -> DemoResult:
    """Build, save, reload, embed, fill masks and cross-check with sentence-transformers; print as it goes."""
    console = console if console is not None else Console(quiet=True)
    start = time.perf_counter()
    with _workdir(output_dir) as root:
        model, tokenizer = _build(console)
        model_dir = root / f"neobert-{PRESET}"
        layout_ok = _save(model, tokenizer, model_dir, console)
        reload_diff = _check_reload(model, tokenizer, model_dir, console)
        similarities = _similarities(model, tokenizer, console)
        predictions = _fill_mask(model, tokenizer, console)
        st_diff = _check_sentence_transformer(
            model, tokenizer, model_dir, root / f"{model_dir.name}-st", console
        )
    checks = {
        "saved in the released layout": layout_ok,
        "AutoModelForMaskedLM reload (no remote code) gives identical logits": reload_diff == 0.0,
    }
    if st_diff is not None:
        checks[f"SentenceTransformer vectors match encode() (atol {ST_ATOL:g})"] = st_diff <= ST_ATOL
    result = DemoResult(
        Path(output_dir) if output_dir is not None else None,
        reload_diff,
        similarities,
        predictions,
        st_diff,
        checks,
        time.perf_counter() - start,
    )
    _summary(result, console)
    return result


@contextlib.contextmanager
def _workdir(output_dir: str | Path | None) -> Iterator[Path]:
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        yield Path(output_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="neobert-demo-") as tmp:
            yield Path(tmp)


def _build(console: Console):
    config = ModelConfig.from_name(PRESET)
    torch.manual_seed(SEED)
    model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config)).eval()
    tokenizer = load_tokenizer()  # the real bert-base-uncased WordPiece, NeoBERT's tokenizer
    console.print(
        Panel(
            f"NeoBERT preset [bold]{PRESET}[/]: {config.num_hidden_layers} layers x {config.hidden_size}, "
            f"{config.num_attention_heads} heads, RoPE, SwiGLU, RMSNorm, max length {config.max_length}, "
            f"{config.num_parameters(mlm_head=True):,} parameters with the MLM head.\n"
            f"Tokenizer: bert-base-uncased WordPiece ({len(tokenizer):,} tokens).\n"
            "[bold yellow]The weights are RANDOM (seed 0): there is no pretrained checkpoint yet. This demo "
            "checks the machinery; similarities and predictions below mean nothing.[/]",
            title="neobert demo",
        )
    )
    return model, tokenizer


def _save(model, tokenizer, model_dir: Path, console: Console) -> bool:
    save_pretrained(model, tokenizer, model_dir)
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    layout_ok = "model.encoder.weight" in keys and all(k.startswith(("model.", "decoder.")) for k in keys)
    files = ", ".join(sorted(p.name for p in model_dir.iterdir()))
    console.print(f"[bold]1. saved[/] {escape(str(model_dir))}: {files}")
    console.print(
        f"   {len(keys)} tensors in the released naming (model.encoder.weight, "
        "model.transformer_encoder.{i}.qkv.weight, ..., decoder.weight)",
        highlight=False,
    )
    return layout_ok


def _check_reload(model, tokenizer, model_dir: Path, console: Console) -> float:
    reloaded = AutoModelForMaskedLM.from_pretrained(model_dir, trust_remote_code=False).eval()
    inputs = tokenizer(SENTENCES, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.inference_mode():
        diff = (model(**inputs).logits - reloaded(**inputs).logits).abs().max().item()
    verdict = "[green]identical[/]" if diff == 0.0 else "[red]DIFFERENT[/]"
    console.print(
        f"[bold]2. reloaded[/] with transformers.AutoModelForMaskedLM.from_pretrained (no remote code): "
        f"{type(reloaded).__name__}, logits on {len(SENTENCES)} sentences {verdict} (max |diff| {diff:g})"
    )
    return diff


def _similarities(model, tokenizer, console: Console) -> np.ndarray:
    vectors = encode(model, tokenizer, SENTENCES, pooling="mean", normalize=True, show_progress=False)
    sims = vectors @ vectors.T
    table = Table(title="3. cosine similarity of mean-pooled embeddings (random weights!)")
    table.add_column("sentence")
    for i in range(len(SENTENCES)):
        table.add_column(f"#{i + 1}", justify="right")
    for i, sentence in enumerate(SENTENCES):
        table.add_row(f"#{i + 1} {escape(sentence)}", *(f"{s:.3f}" for s in sims[i]))
    console.print(table)
    console.print(
        "   with random weights these numbers reflect shared tokens and lengths, not meaning; after "
        "pretraining and contrastive fine-tuning #1~#2 and #3~#4 should stand out."
    )
    return sims


def _fill_mask(model, tokenizer, console: Console) -> list[list[tuple[str, float]]]:
    predictions = fill_mask(model, tokenizer, MASK_TEXT, top_k=5)
    console.print("[bold]4. fill-mask[/]")
    render_fill_mask(FillMaskResult(MASK_TEXT, predictions, random_weights=True), console)
    return predictions


def _check_sentence_transformer(model, tokenizer, model_dir: Path, st_dir: Path, console: Console):
    try:
        from ..integrations.sentence_transformers import load_sentence_transformer, save_sentence_transformer
    except ImportError:
        console.print("[bold]5. sentence-transformers[/] skipped: pip install 'neobert[st]'")
        return None
    save_sentence_transformer(model_dir, None, st_dir, pooling="mean")
    st_vectors = load_sentence_transformer(st_dir, device="cpu").encode(SENTENCES, convert_to_numpy=True)
    ours = encode(model, tokenizer, SENTENCES, pooling="mean", normalize=False, show_progress=False)
    diff = float(np.abs(st_vectors - ours).max())
    verdict = "[green]match[/]" if diff <= ST_ATOL else "[red]DIFFER[/]"
    console.print(
        f"[bold]5. sentence-transformers[/]: saved {escape(str(st_dir))}; "
        f"SentenceTransformer(path).encode vs neobert.inference.encode: "
        f"{verdict} (max |diff| {diff:.1e})"
    )
    return diff


def _summary(result: DemoResult, console: Console) -> None:
    table = Table(title=f"checks ({result.seconds:.1f}s)")
    table.add_column("check")
    table.add_column("result", justify="center")
    for name, ok in result.checks.items():
        table.add_row(escape(name), "[green]pass[/]" if ok else "[red]FAIL[/]")
    console.print(table)
    where = (
        f"files kept in {escape(str(result.output_dir))}"
        if result.output_dir
        else "files were written to a temporary directory (use --output DIR to keep them)"
    )
    console.print(f"{where}. Reminder: random weights, so no prediction above means anything yet.")


def _main(args: argparse.Namespace) -> int:
    quiet_transformers()
    result = run(args.output, make_console())
    return 0 if result.ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "demo",
        _main,
        help="showcase on a small random NeoBERT: save, reload, embed, fill-mask, sentence-transformers",
        description="Run the inference path end to end on a small NeoBERT with RANDOM weights and the real "
        "bert-base-uncased tokenizer, checking each step.",
    )
    parser.add_argument("--output", metavar="DIR", help="keep the saved model directories here")
