"""A SPLADE ``SparseEncoder`` directory (sentence-transformers: a fill-mask transformer, then
``SpladePooling``): sparse vectors over the vocabulary, as ``SparseEncoder.encode`` computes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..capabilities import detect_head
from ..directories import directory_config, module_types
from ..encoders import Encoder
from ..registration import head as registered_head
from ..sparse import check_splade_layout
from .transformers import TransformersKind, load_pretrained

NO_DENSE = (
    "a SPLADE SparseEncoder directory: its vectors are sparse (embed_sparse); dense embeddings "
    "(embed) would not be what SparseEncoder computes, so they are not offered"
)


def declared_max_length(path: Path) -> int | None:
    """sentence-transformers' ``max_seq_length`` of a directory (``sentence_bert_config.json``), if any."""
    settings_file = path / "sentence_bert_config.json"
    if not settings_file.is_file():
        return None
    value = json.loads(settings_file.read_text(encoding="utf-8")).get("max_seq_length")
    return int(value) if value else None


class SpladeKind(TransformersKind):
    name = "splade"
    library = "sentence-transformers"
    loaded_with = "sentence-transformers"
    card_head = "sparse-embedding"
    pipeline_tag = "feature-extraction"
    embedding = "sparse"
    exports_onnx = False  # the ONNX export writes dense graphs

    def matches(self, path: Path) -> bool:
        return "SpladePooling" in module_types(path)

    def declared_embedding(self, source: str | os.PathLike) -> str:
        return NO_DENSE

    def validate(self, path: Path) -> None:
        check_splade_layout(path)

    def load(
        self, source, tokenizer=None, head="auto", precision="auto", sparse=False, fields=None
    ) -> Encoder:
        """Sparse vectors only, held to its own ``max_seq_length`` as SparseEncoder holds it. A directory
        with SPLADE settings not reproduced here raises where SPLADE is asked for (``sparse``), and is loaded
        as the plain masked-LM model it also is otherwise."""
        path = Path(source).expanduser()
        try:
            check_splade_layout(path)
        except ValueError:
            if sparse:
                raise
            return super().load(source, tokenizer, head, precision, fields=fields)
        head = detect_head(source) if head == "auto" else registered_head(head).name
        if head != "mlm":
            raise ValueError(
                f"{source} is served for SPLADE vectors (a SPLADE SparseEncoder directory), which need a "
                f"masked-LM head's logits; it was loaded with the {head} head"
            )
        return load_pretrained(source, tokenizer, head, precision, NO_DENSE, declared_max_length(path), True)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        code = (
            "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
            "from sentence_transformers import SparseEncoder\n\n"
            'model = SparseEncoder(".")  # this directory, or its Hub repo id\n'
            f"vectors = model.encode({list(texts)!r})  # sparse: one weight per vocabulary entry\n"
            "print(tuple(vectors.shape))"
        )
        return code, f"({len(texts)}, {directory_config(directory).get('vocab_size')})"

    def other_ways(self, head: str) -> str:
        return (
            "The root of this directory is also a transformers masked-LM model (`AutoModelForMaskedLM`, after "
            "`import neobert`): the vector is the max over real tokens of log(1 + ReLU(logits)), which "
            "`neobert.inference.sparse.encode_sparse` computes.\n"
        )
