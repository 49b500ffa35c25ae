"""``neobert demo``: the whole inference path on a small random NeoBERT, checked end to end.

Until pretraining exists there are no trained weights, so the demo says so loudly: it shows that the
plumbing is right (released layout, loading without remote code, embeddings, fill-mask,
sentence-transformers) and makes no claim about quality. Each step reports to ``log`` as it finishes (plain
text and Markdown tables, for a person); the result holds what was measured.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from transformers import AutoModelForMaskedLM

from ..common.config import ModelConfig
from ..common.tables import markdown_table
from ..data import load_tokenizer
from ..inference.encoders import save_pretrained
from ..inference.run import encode, fill_mask
from ..jobs.predict import FillMaskResult
from ..model import NeoBERTConfig, NeoBERTForMaskedLM

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
Log = Callable[[str], None]


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


def run_demo(output_dir: str | Path | None = None, log: Log | None = None) -> DemoResult:
    """Build, save, reload, embed, fill masks and cross-check with sentence-transformers; log as it goes."""
    log = log or (lambda text: None)
    start = time.perf_counter()
    with _workdir(output_dir) as root:
        model, tokenizer = _build(log)
        model_dir = root / f"neobert-{PRESET}"
        layout_ok = _save(model, tokenizer, model_dir, log)
        reload_diff = _check_reload(model, tokenizer, model_dir, log)
        similarities = _similarities(model, tokenizer, log)
        predictions = fill_mask(model, tokenizer, MASK_TEXT, top_k=5)
        shown = FillMaskResult(MASK_TEXT, predictions, random_weights=True)
        log(f"4. {shown.summary}\nnote: {shown.notes[0]}")
        st_diff = _check_sentence_transformer(model, tokenizer, model_dir, root / f"{model_dir.name}-st", log)
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
    rows = [[name, "pass" if ok else "FAIL"] for name, ok in checks.items()]
    where = (
        f"files kept in {result.output_dir}"
        if result.output_dir
        else "files were written to a temporary directory (use --output DIR to keep them)"
    )
    log(
        f"checks ({result.seconds:.1f}s):\n\n{markdown_table(['check', 'result'], rows)}\n"
        f"{where}. Reminder: random weights, so no prediction above means anything yet."
    )
    return result


@contextlib.contextmanager
def _workdir(output_dir: str | Path | None) -> Iterator[Path]:
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        yield Path(output_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="neobert-demo-") as tmp:
            yield Path(tmp)


def _build(log: Log):
    config = ModelConfig.from_name(PRESET)
    torch.manual_seed(SEED)
    model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config)).eval()
    tokenizer = load_tokenizer()  # the real bert-base-uncased WordPiece, NeoBERT's tokenizer
    log(
        f"neobert demo. NeoBERT preset {PRESET}: {config.num_hidden_layers} layers x {config.hidden_size}, "
        f"{config.num_attention_heads} heads, RoPE, SwiGLU, RMSNorm, max length {config.max_length}, "
        f"{config.num_parameters(mlm_head=True):,} parameters with the MLM head.\n"
        f"Tokenizer: bert-base-uncased WordPiece ({len(tokenizer):,} tokens).\n"
        "The weights are RANDOM (seed 0): there is no pretrained checkpoint yet. This demo checks the "
        "machinery; similarities and predictions below mean nothing."
    )
    return model, tokenizer


def _save(model, tokenizer, model_dir: Path, log: Log) -> bool:
    save_pretrained(model, tokenizer, model_dir)
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    layout_ok = "model.encoder.weight" in keys and all(k.startswith(("model.", "decoder.")) for k in keys)
    files = ", ".join(sorted(p.name for p in model_dir.iterdir()))
    naming = "model.encoder.weight, model.transformer_encoder.{i}.qkv.weight, ..., decoder.weight"
    log(f"1. saved {model_dir}: {files}\n   {len(keys)} tensors in the released naming ({naming})")
    return layout_ok


def _check_reload(model, tokenizer, model_dir: Path, log: Log) -> float:
    reloaded = AutoModelForMaskedLM.from_pretrained(model_dir, trust_remote_code=False).eval()
    inputs = tokenizer(SENTENCES, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.inference_mode():
        diff = (model(**inputs).logits - reloaded(**inputs).logits).abs().max().item()
    log(
        f"2. reloaded with transformers.AutoModelForMaskedLM.from_pretrained (no remote code): "
        f"{type(reloaded).__name__}, logits on {len(SENTENCES)} sentences "
        f"{'identical' if diff == 0.0 else 'DIFFERENT'} (max |diff| {diff:g})"
    )
    return diff


def _similarities(model, tokenizer, log: Log) -> np.ndarray:
    vectors = encode(model, tokenizer, SENTENCES, pooling="mean", normalize=True, show_progress=False)
    sims = vectors @ vectors.T
    header = ["sentence", *(f"#{i + 1}" for i in range(len(SENTENCES)))]
    rows = [[f"#{i + 1} {sentence}", *(f"{s:.3f}" for s in sims[i])] for i, sentence in enumerate(SENTENCES)]
    log(
        "3. cosine similarity of mean-pooled embeddings (random weights!)\n\n"
        + markdown_table(header, rows)
        + "\nWith random weights these numbers reflect shared tokens and lengths, not meaning; after "
        "pretraining and contrastive fine-tuning #1~#2 and #3~#4 should stand out."
    )
    return sims


def _check_sentence_transformer(model, tokenizer, model_dir: Path, st_dir: Path, log: Log) -> float | None:
    try:
        from ..integrations.sentence_transformers import load_sentence_transformer, save_sentence_transformer
    except ImportError:
        log("5. sentence-transformers skipped: pip install 'neobert[st]'")
        return None
    save_sentence_transformer(model_dir, None, st_dir, pooling="mean")
    st_vectors = load_sentence_transformer(st_dir, device="cpu").encode(SENTENCES, convert_to_numpy=True)
    ours = encode(model, tokenizer, SENTENCES, pooling="mean", normalize=False, show_progress=False)
    diff = float(np.abs(st_vectors - ours).max())
    verdict = "match" if diff <= ST_ATOL else "DIFFER"
    log(
        f"5. sentence-transformers: saved {st_dir}; SentenceTransformer(path).encode vs "
        f"neobert.inference.run.encode: {verdict} (max |diff| {diff:.1e})"
    )
    return diff
