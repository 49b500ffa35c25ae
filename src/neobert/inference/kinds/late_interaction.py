"""A late-interaction (ColBERT) directory, PyLate's layout (which sentence-transformers' ``MultiVectorEncoder``
loads too): token vectors for queries and documents, scored by MaxSim. Directories PyLate's own ``save``
wrote are recognised by what they hold (:func:`neobert.inference.late_interaction.is_colbert_layout`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType

import torch

from ..capabilities import TOKENIZER_TASKS, Capabilities
from ..directories import ST_SETTINGS_FILE, DirectoryKind
from ..encoders import Encoder
from ..late_interaction import DENSE_DIR, is_colbert_layout, load_late_interaction
from ..registration import declared_head

# What it serves: its token vectors (queries and documents), MaxSim rerank and MaxSim's alignment (which
# document token each query token matched), beside its tokenizer's tasks; a pooled vector or raw hidden
# states would not be what MultiVectorEncoder computes.
TASKS = ("token_vectors", "rerank", "maxsim_alignment")
NO_DENSE = (
    "a late-interaction (ColBERT) directory: it serves token vectors (/v1/embeddings with "
    "return_multivector) and MaxSim /rerank; one pooled vector or the encoder's hidden states would "
    "not be what MultiVectorEncoder computes, so they are not offered"
)


class LateInteractionKind(DirectoryKind):
    name = "late-interaction"
    library = "sentence-transformers"
    loaded_with = "sentence-transformers"
    card_head = "late-interaction"
    pipeline_tag = "sentence-similarity"
    exports_onnx = False  # the ONNX export writes pooled vectors or logits, not token vectors
    embedding = "multi-vector"
    # rerank is MaxSim; a text's tokens are counted as a document (its marker included)
    aliases = MappingProxyType({"rerank": "maxsim", "count": "count_late"})

    def matches(self, path: Path) -> bool:
        return is_colbert_layout(path)

    def declared_embedding(self, source: str | os.PathLike) -> str:
        return NO_DENSE

    def load(
        self,
        source: str | os.PathLike,
        tokenizer: str | os.PathLike | None = None,
        head: str = "auto",
        precision: str | None = "auto",
        sparse: bool = False,
        fields: dict | None = None,
    ) -> Encoder:
        """An :class:`Encoder` whose model is the :class:`~neobert.inference.late_interaction.LateInteractionModel`,
        with its spec as ``encoder.spec``; its input limit is the spec's ``document_length``. It runs on the
        padded path, in float32 unless ``precision`` is ``bf16`` (``auto`` keeps float32): the unpadded fast
        path drops the positions the encoder does not attend to, and a query's expansion tokens are such
        positions whose vectors MaxSim counts."""
        if fields:
            raise ValueError(
                f"{source} is a late-interaction (ColBERT) directory: it has no head with {fields}"
            )
        if sparse:
            raise ValueError(
                f"{source} is a late-interaction (ColBERT) directory: it has no masked-LM logits "
                "for SPLADE vectors (--sparse)"
            )
        model, tok, spec = load_late_interaction(source)
        if precision == "bf16":
            model.encoder.to(torch.bfloat16)
        values = model.config.to_dict()
        settings = {
            "dim": spec.dim,
            "query_length": spec.query_length,
            "document_length": spec.document_length,
            "query_prefix": spec.query_prefix,
            "document_prefix": spec.document_prefix,
            "similarity": "MaxSim",
            "skiplist_words": list(spec.skiplist_words),
        }
        capabilities = Capabilities(
            head=declared_head(values),
            model_type=str(values.get("model_type")),
            tasks=TASKS + TOKENIZER_TASKS,
            dimensions=spec.dim,
            max_input_tokens=spec.document_length,
            refused=NO_DENSE,
            token_vectors=settings,
            aliases=dict(self.aliases),
            fixed_window="a late-interaction model cuts its documents to document_length, as ColBERT cuts them",
        )
        return Encoder(model, tok, str(source), spec.document_length, capabilities, spec)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        settings = json.loads((directory / ST_SETTINGS_FILE).read_text(encoding="utf-8"))
        code = (
            "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
            "from sentence_transformers import MultiVectorEncoder\n\n"
            'model = MultiVectorEncoder(".")  # this directory, or its Hub repo id; PyLate: models.ColBERT(".")\n'
            f"queries = model.encode_query({list(texts)!r})  # one unit vector per token\n"
            "print(tuple(queries[0].shape))"
        )
        dim = json.loads((directory / DENSE_DIR / "config.json").read_text(encoding="utf-8"))["out_features"]
        return code, f"({settings['query_length']}, {dim})"

    def other_ways(self, head: str) -> str:
        return (
            "The root of this directory is also a transformers model (`AutoModel`, after `import neobert`); "
            "`1_Dense` holds the token projection. `neobert.inference.late_interaction.load_late_interaction` "
            "and `token_vectors` give the same token vectors as `MultiVectorEncoder` and PyLate.\n"
        )
