"""The plain transformers directory (``config.json`` and weights), and every source that is no directory: a
preset (random weights) or a Hub id. The catch-all kind, asked last."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from ..adapters import loading_fields
from ..capabilities import describe, detect_head, source_embedding
from ..directories import DirectoryKind
from ..encoders import EmbeddingSpec, Encoder, apply_precision, load_encoder, max_positions, resolve_tokenizer
from ..registration import HEADS
from ..registration import head as registered_head

ST_EXPORT = (
    "```python\nimport neobert\nfrom neobert.integrations.sentence_transformers import save_sentence_transformer\n"
    "from sentence_transformers import SentenceTransformer\n\n"
    'save_sentence_transformer(".", None, "st-model")  # mean pooling over this encoder\n'
    'model = SentenceTransformer("st-model")\n```\n'
)
ONNX_EXPORT = (
    "```bash\nneobert export onnx --model . --output onnx-model  # checked against PyTorch at export\n```\n\n"
    '```python\nfrom neobert.inference.onnx_encoder import OnnxEncoder\nencoder = OnnxEncoder("onnx-model")\n```\n'
)


def load_pretrained(
    source: str | os.PathLike,
    tokenizer: str | os.PathLike | None,
    head: str,
    precision: str | None,
    embedding: EmbeddingSpec | str,
    declared_length: int | None = None,
    sparse: bool = False,
    fields: dict[str, Any] | None = None,
) -> Encoder:
    """A transformers model for inference with ``head``: its tokenizer held to ``declared_length`` (the input
    length the directory declares, as ``SentenceTransformer`` holds it), the vocabulary check, ``precision``,
    and its capabilities (``embedding``: how it embeds, or why it does not; ``sparse``: it serves SPLADE;
    ``fields``: config fields its head is loaded with, e.g. a LoRA adapter's labels, whose head weights then
    come from the adapter)."""
    tok = resolve_tokenizer(source, tokenizer)
    if declared_length:
        tok.model_max_length = min(int(tok.model_max_length), declared_length)
    encoder = load_encoder(
        source, tok, head=head, **loading_fields(fields or {})
    )  # a preset: vocabulary sized
    if precision is not None:
        apply_precision(encoder.model, precision)
    limit = max_positions(encoder.model.base_model, tok)
    encoder.max_length = limit
    encoder.capabilities = describe(encoder.model.config, head, embedding, limit, sparse=sparse)
    return encoder


def example_tokens(directory: Path, texts: tuple[str, ...]) -> int | None:
    """Tokens of the longest of ``texts`` under the directory's tokenizer (a snippet pads to it)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception:  # no tokenizer files: the snippet's shape is given symbolically
        return None
    return max(len(ids) for ids in tokenizer(list(texts))["input_ids"])


def mask_text(directory: Path) -> str:
    """A sentence with the directory's mask token in it, for a fill-mask snippet."""
    special = directory / "special_tokens_map.json"
    mask = "[MASK]"
    if special.is_file():
        value = json.loads(special.read_text(encoding="utf-8")).get("mask_token", mask)
        mask = value.get("content", mask) if isinstance(value, dict) else value
    return f"Paris is the {mask} of France."


class TransformersKind(DirectoryKind):
    name = "transformers"
    library = "transformers"

    def matches(self, path: Path) -> bool:
        return (path / "config.json").is_file()

    def load(
        self, source, tokenizer=None, head="auto", precision="auto", sparse=False, fields=None
    ) -> Encoder:
        head = detect_head(source) if head == "auto" else registered_head(head).name
        if head == "token-classification" and not Path(source).is_dir():
            raise ValueError(
                f"a token classifier is served from a fine-tuned model directory, not {source!r}"
            )
        if sparse and head != "mlm":
            raise ValueError(
                f"{source} is served for SPLADE vectors (--sparse), which need a masked-LM head's logits; "
                f"it was loaded with the {head} head"
            )
        embedding = self.declared_embedding(source)
        declared = embedding.max_length if isinstance(embedding, EmbeddingSpec) else None
        return load_pretrained(source, tokenizer, head, precision, embedding, declared, sparse, fields)

    def declared_embedding(self, source: str | os.PathLike) -> EmbeddingSpec | str:
        return source_embedding(source)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        entry = HEADS.get(head, HEADS["base"])
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        texts = (mask_text(directory),) if entry.width == "vocab" else texts
        length = example_tokens(directory, texts) or "L"
        labels = len(config.get("id2label") or {}) or None
        width = {"hidden": config.get("hidden_size"), "vocab": config.get("vocab_size"), "labels": labels}
        shape = (
            (len(texts), length, width[entry.width]) if entry.per_token else (len(texts), width[entry.width])
        )
        code = (
            "import neobert  # registers NeoBERT with transformers' Auto classes (pip install neobert); no remote code\n"
            "import torch\n"
            f"from transformers import {entry.auto_class_name}, AutoTokenizer\n\n"
            'path = "."  # this directory, or its Hub repo id (and revision=... for a checkpoint)\n'
            "tokenizer = AutoTokenizer.from_pretrained(path)\n"
            f"model = {entry.auto_class_name}.from_pretrained(path).eval()\n"
            f'batch = tokenizer({list(texts)!r}, padding=True, return_tensors="pt")\n'
            "with torch.no_grad():\n"
            f"    output = model(**batch).{entry.output}\n"
            "print(tuple(output.shape))"
        )
        return code, "(" + ", ".join(str(n) for n in shape) + ")"

    def other_ways(self, head: str) -> str:
        entry = HEADS.get(head, HEADS["base"])
        if not entry.labelled:
            return "sentence-transformers (embeddings):\n\n" + ST_EXPORT + "\nONNX Runtime:\n\n" + ONNX_EXPORT
        if not entry.exports:
            return (
                f"ONNX Runtime: `neobert export onnx` exports the encoder of this directory, not its "
                f"{entry.name} head.\n"
            )
        return "ONNX Runtime (the classifier's logits):\n\n" + ONNX_EXPORT
