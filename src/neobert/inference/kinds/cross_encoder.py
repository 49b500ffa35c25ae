"""A sentence-transformers ``CrossEncoder`` directory (``config_sentence_transformers.json`` says ``model_type:
CrossEncoder``; the root a transformers sequence classifier with one label): it scores (query, document) pairs,
served as ``rerank``, and gives no embeddings. What ``neobert finetune rerank`` writes."""

from __future__ import annotations

import os
from pathlib import Path

from ..directories import st_settings
from ..encoders import Encoder
from .splade import declared_max_length
from .transformers import ONNX_EXPORT, TransformersKind, load_pretrained

NO_EMBEDDING = "a CrossEncoder directory scores (query, document) pairs (rerank); it gives no embeddings"


class CrossEncoderKind(TransformersKind):
    name = "cross-encoder"
    library = "sentence-transformers"
    loaded_with = "sentence-transformers"
    card_head = "cross-encoder"
    pipeline_tag = "text-ranking"

    def matches(self, path: Path) -> bool:
        """CrossEncoder's settings over a whole model (a LoRA run's adapter directory holds no config.json)."""
        return (path / "config.json").is_file() and st_settings(path).get("model_type") == "CrossEncoder"

    def declared_embedding(self, source: str | os.PathLike) -> str:
        return NO_EMBEDDING

    def load(self, source, tokenizer=None, head="auto", precision="auto", sparse=False) -> Encoder:
        """Its sequence classifier, held to the length its tokenizer declares, as ``CrossEncoder`` holds it."""
        if head not in ("auto", "sequence-classification"):
            raise ValueError(
                f"{source} is a CrossEncoder directory: a sequence classifier, not a {head} model"
            )
        length = declared_max_length(Path(source).expanduser())
        return load_pretrained(source, tokenizer, "sequence-classification", precision, NO_EMBEDDING, length)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        pairs = [(texts[0], text) for text in texts]
        code = (
            "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
            "from sentence_transformers import CrossEncoder\n\n"
            'model = CrossEncoder(".")  # this directory, or its Hub repo id\n'
            f"scores = model.predict({pairs!r})  # one relevance score per (query, document) pair\n"
            "print(tuple(scores.shape))"
        )
        return code, f"({len(pairs)},)"

    def other_ways(self, head: str) -> str:
        return (
            "The root of this directory is also a transformers sequence classifier with one label "
            '(`AutoModelForSequenceClassification.from_pretrained(".")` after `import neobert`): its logit of '
            "a tokenized (query, document) pair, through the activation `config_sentence_transformers.json` "
            "names, is the score. `neobert serve --model .` reranks with it.\n\nONNX Runtime (the logits):\n\n"
            + ONNX_EXPORT
        )
