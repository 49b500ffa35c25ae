"""Late interaction (ColBERT): every token kept as a small vector, a query scored against a document by MaxSim.

The one implementation every caller uses (``finetune late-interaction`` trains through it, ``eval embeddings``
scores with it). A text becomes its encoder's last hidden states, projected by a bias-free linear layer to
``dim`` (128) dimensions and L2-normalised, one vector per token:

- queries are ``query_prefix`` + text, padded to exactly ``query_length`` tokens (ColBERT's query expansion:
  the padding positions become the mask token; the encoder does not attend to them, their vectors count);
- documents are ``document_prefix`` + text, truncated to ``document_length`` tokens; tokens in the
  skiplist (punctuation) are dropped.

MaxSim(q, d) = sum over the query's vectors of the largest dot product with any of the document's vectors.

The directory a model is saved in is PyLate's layout (a transformer at the root, whose tokenizer holds the
two marker tokens, then a ``1_Dense`` projection; the settings in ``config_sentence_transformers.json``), which
sentence-transformers' ``MultiVectorEncoder`` loads as its own (it appends its mask and normalisation modules)
and PyLate reads natively. ``MultiVectorEncoder``'s own four-module layout is not used: PyLate turns every
module after the transformer into its projection class and fails on it (tests/test_late_interaction.py
compares both libraries' token vectors with ours).
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ..common.io import replace_dir, write_json
from ..common.progress import progress_bar
from ..model.execution import eval_mode
from .directories import MODULES_FILE, ST_SETTINGS_FILE, module_types, st_settings
from .encoders import Encoder, load_encoder, max_positions, write_model_files

__all__ = [
    "LateInteractionModel",
    "LateInteractionSpec",
    "is_colbert_layout",
    "load_late_interaction",
    "maxsim",
    "maxsim_scores",
    "save_late_interaction",
    "scored_tokens",
    "token_vectors",
]

DENSE_DIR = "1_Dense"


@dataclass
class LateInteractionSpec:
    """What turns texts into token vectors besides the weights (PyLate's settings, by PyLate's names)."""

    dim: int = 128  # dimensions of each token vector (the projection's width)
    query_length: int = 32  # every query is exactly this many tokens (mask-token expansion, truncation)
    document_length: int = 180  # documents are truncated to this many tokens
    query_prefix: str = "[Q] "  # marker token before a query (added to the tokenizer)
    document_prefix: str = "[D] "  # marker token before a document
    skiplist_words: list[str] = field(
        default_factory=lambda: list(string.punctuation)
    )  # dropped from documents
    attend_to_expansion_tokens: bool = False  # whether the encoder attends to the expansion (mask) tokens

    def __post_init__(self) -> None:
        if self.dim < 1 or self.query_length < 2 or self.document_length < 2:
            raise ValueError(f"dim must be >= 1 and query_length, document_length >= 2, got {asdict(self)}")


class LateInteractionModel(torch.nn.Module):
    """A bare encoder and its token projection: (B, L) ids and 0/1 mask -> (B, L, dim) unit vectors."""

    def __init__(self, encoder: torch.nn.Module, dim: int, projection: torch.Tensor | None = None):
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        self.projection = torch.nn.Linear(hidden, dim, bias=False)
        if projection is not None:
            if tuple(projection.shape) != (dim, hidden):
                raise ValueError(
                    f"projection weight {tuple(projection.shape)} does not fit ({dim}, {hidden})"
                )
            self.projection.weight.data.copy_(projection)

    @property
    def config(self) -> Any:
        return self.encoder.config

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        self.encoder.gradient_checkpointing_enable(**kwargs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask
        ).last_hidden_state  # (B, L, H)
        vectors = self.projection(hidden.to(self.projection.weight.dtype))  # (B, L, dim)
        return F.normalize(vectors.float(), dim=-1)


def add_markers(encoder: Encoder, spec: LateInteractionSpec) -> None:
    """Add the query and document markers to the tokenizer (and rows to the embedding table) where missing."""
    vocab = encoder.tokenizer.get_vocab()
    missing = [p for p in (spec.query_prefix, spec.document_prefix) if p and p not in vocab]
    if missing:
        encoder.tokenizer.add_tokens(missing)
        encoder.base.resize_token_embeddings(len(encoder.tokenizer), mean_resizing=False)


def tokenize_late(
    tokenizer: Any,
    texts: Sequence[str],
    spec: LateInteractionSpec,
    is_query: bool,
    device: torch.device | str = "cpu",
) -> dict[str, torch.Tensor]:
    """``input_ids``, the encoder's ``attention_mask`` and the ``scoring_mask`` (which vectors count)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    prefix = spec.query_prefix if is_query else spec.document_prefix
    texts = [prefix + text for text in texts]
    if is_query:
        batch = tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=spec.query_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        expansion = batch["attention_mask"] == 0  # (B, Lq): padding positions become mask tokens
        ids = batch["input_ids"].masked_fill(expansion, tokenizer.mask_token_id)
        attention = batch["attention_mask"].masked_fill(expansion, int(spec.attend_to_expansion_tokens))
        scoring = torch.ones_like(ids, dtype=torch.bool)
    else:
        batch = tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=spec.document_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        ids, attention = batch["input_ids"], batch["attention_mask"]
        skip = torch.tensor(skiplist_ids(tokenizer, spec.skiplist_words), dtype=torch.long)
        scoring = attention.bool() & ~torch.isin(ids, skip)
    return {
        "input_ids": ids.to(device),
        "attention_mask": attention.to(device),
        "scoring_mask": scoring.to(device),
    }


def skiplist_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """Token ids of the skiplist words that are single vocabulary entries (others would mean [UNK])."""
    vocab = tokenizer.get_vocab()
    return sorted({vocab[w] for w in words if w in vocab})


def token_vectors(
    model: LateInteractionModel,
    tokenizer: Any,
    texts: Sequence[str],
    spec: LateInteractionSpec,
    is_query: bool,
    batch_size: int = 32,
    show_progress: bool = False,
) -> list[torch.Tensor]:
    """Per text, its (n_tokens, dim) float32 unit vectors (scored tokens only), in input order, on the CPU."""
    device = next(model.parameters()).device
    out: list[torch.Tensor] = []
    with (
        eval_mode(model),
        torch.inference_mode(),
        progress_bar(total=len(texts), unit="text", disable=not show_progress) as bar,
    ):
        for start in range(0, len(texts), batch_size):
            inputs = tokenize_late(tokenizer, texts[start : start + batch_size], spec, is_query, device)
            vectors = model(inputs["input_ids"], inputs["attention_mask"])  # (B, L, dim)
            out.extend(v[m].cpu() for v, m in zip(vectors, inputs["scoring_mask"]))
            bar.update(min(batch_size, len(texts) - start))
    return out


def scored_tokens(
    tokenizer: Any, texts: Sequence[str], spec: LateInteractionSpec, is_query: bool
) -> list[list[str]]:
    """Per text, the vocabulary entries of the tokens :func:`token_vectors` gives a vector (the same rows, in
    the same order): a query's marker and expansion (mask) tokens included, a document's skiplist dropped."""
    inputs = tokenize_late(tokenizer, texts, spec, is_query)
    return [
        tokenizer.convert_ids_to_tokens(ids[mask].tolist())
        for ids, mask in zip(inputs["input_ids"], inputs["scoring_mask"])
    ]


def maxsim(query: torch.Tensor, document: torch.Tensor) -> torch.Tensor:
    """MaxSim of one query (Lq, D) and one document (Ld, D): sum over query vectors of the best dot product."""
    return (query.float() @ document.float().T).amax(dim=1).sum()


def maxsim_scores(
    queries: Sequence[torch.Tensor], documents: Sequence[torch.Tensor], block: int = 256
) -> torch.Tensor:
    """(Q, N) MaxSim of every query against every document. Documents are taken in blocks of similar length
    (sorted by token count), each padded to its longest at -inf: a 23k-token module in a block of 200-token
    docstrings would otherwise pad every one of them to 23k."""
    scores = torch.empty(len(queries), len(documents))
    order = sorted(range(len(documents)), key=lambda i: documents[i].shape[0])
    for start in range(0, len(order), block):
        ids = order[start : start + block]
        docs = [documents[i] for i in ids]
        width = max(d.shape[0] for d in docs)
        padded = torch.zeros(len(docs), width, docs[0].shape[1])
        valid = torch.zeros(len(docs), width, dtype=torch.bool)
        for i, d in enumerate(docs):
            padded[i, : d.shape[0]], valid[i, : d.shape[0]] = d.float(), True
        for qi, q in enumerate(queries):
            sims = torch.einsum("qd,nld->nql", q.float(), padded)  # (N, Lq, Ld)
            sims = sims.masked_fill(~valid[:, None, :], float("-inf"))
            scores[qi, ids] = sims.amax(dim=2).sum(dim=1)
    return scores


def save_late_interaction(
    model: LateInteractionModel, tokenizer: Any, spec: LateInteractionSpec, output: str | os.PathLike
) -> Path:
    """Write ``model`` into ``output`` (see the module docstring for the layout): staged beside it, then each
    file or folder moved into place whole; files already in ``output`` (training logs) stay."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".neobert-late-", dir=output) as staging:
        _write_layout(model, tokenizer, spec, Path(staging))
        for entry in Path(staging).iterdir():
            if entry.is_dir():
                replace_dir(entry, output / entry.name)
            else:
                os.replace(entry, output / entry.name)
    return output


def _write_layout(
    model: LateInteractionModel, tokenizer: Any, spec: LateInteractionSpec, output: Path
) -> None:
    write_model_files(model.encoder, tokenizer, output)
    (output / DENSE_DIR).mkdir()
    hidden = int(model.encoder.config.hidden_size)
    save_file(
        {"linear.weight": model.projection.weight.detach().float().cpu().contiguous()},
        str(output / DENSE_DIR / "model.safetensors"),
    )
    dense = {
        "in_features": hidden,
        "out_features": spec.dim,
        "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
        "use_residual": False,
    }
    _write(output / DENSE_DIR / "config.json", dense)
    _write(
        output / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": DENSE_DIR, "type": "pylate.models.Dense.Dense"},
        ],
    )
    _write(
        output / "sentence_bert_config.json",
        {"max_seq_length": spec.document_length - 1, "do_lower_case": False},
    )
    settings = {
        "model_type": "ColBERT",
        "prompts": {"query": "", "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "MaxSim",
        "do_query_expansion": True,
        **{k: v for k, v in asdict(spec).items() if k != "dim"},
    }
    _write(output / ST_SETTINGS_FILE, settings)


def _write(path: Path, data: Any) -> None:
    write_json(path, data, indent=2)


# The settings PyLate keeps beside the weights (config_sentence_transformers.json), by PyLate's names
COLBERT_SETTINGS = ("query_prefix", "document_prefix", "query_length", "document_length")
MULTI_VECTOR_TYPES = ("ColBERT", "MultiVectorEncoder")  # PyLate's and sentence-transformers' model types


def is_colbert_layout(path: Path) -> bool:
    """Whether the directory ``path`` is a late-interaction (ColBERT) model: its settings name PyLate's or
    sentence-transformers' multi-vector model type, or (PyLate's own ``save`` keeps no ``model_type`` where
    the model it started from had none) it holds what a ColBERT model is made of: a transformer at the root
    followed by a Dense token projection and no pooling, and the ColBERT settings."""
    if not (path / MODULES_FILE).is_file():
        return False
    settings = st_settings(path)
    if settings.get("model_type") in MULTI_VECTOR_TYPES:
        return True
    types = module_types(path)
    projected = types[:2] == ["Transformer", "Dense"] and "Pooling" not in types
    return projected and all(key in settings for key in COLBERT_SETTINGS)


def load_late_interaction(
    source: str | os.PathLike, device: str | torch.device | None = None, max_length: int | None = None
) -> tuple[LateInteractionModel, Any, LateInteractionSpec]:
    """A saved late-interaction directory as (model, tokenizer, spec), in eval mode; ``max_length`` caps
    ``document_length`` (default: the directory's, at most what the encoder accepts)."""
    path = Path(source).expanduser()
    if not is_colbert_layout(path):
        raise ValueError(f"{path} is not a late-interaction (ColBERT / MultiVectorEncoder) model directory")
    settings = json.loads((path / ST_SETTINGS_FILE).read_text(encoding="utf-8"))
    weight = load_file(str(path / DENSE_DIR / "model.safetensors"))["linear.weight"]
    known = {k: settings[k] for k in asdict(LateInteractionSpec()) if k in settings}
    spec = LateInteractionSpec(dim=int(weight.shape[0]), **{k: v for k, v in known.items() if k != "dim"})
    encoder = load_encoder(path, head="base", device=device)
    spec.document_length = min(
        max_length or spec.document_length, max_positions(encoder.base, encoder.tokenizer)
    )
    model = (
        LateInteractionModel(encoder.base, spec.dim, weight).to(next(encoder.base.parameters()).device).eval()
    )
    return model, encoder.tokenizer, spec
