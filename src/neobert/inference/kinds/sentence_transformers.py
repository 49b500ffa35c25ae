"""A sentence-transformers directory (``modules.json``: a transformer, pooling, optionally normalisation):
dense embeddings as ``SentenceTransformer(dir).encode`` computes them."""

from __future__ import annotations

from pathlib import Path

from ..directories import MODULES_FILE, directory_config
from .transformers import ONNX_EXPORT, TransformersKind


class SentenceTransformersKind(TransformersKind):
    name = "sentence-transformers"
    library = "sentence-transformers"
    loaded_with = "sentence-transformers"
    card_head = "sentence-embedding"
    pipeline_tag = "sentence-similarity"

    def matches(self, path: Path) -> bool:
        return (path / MODULES_FILE).is_file()

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        code = (
            "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
            "from sentence_transformers import SentenceTransformer\n\n"
            'model = SentenceTransformer(".")  # this directory, or its Hub repo id\n'
            f"vectors = model.encode({list(texts)!r})\n"
            "print(tuple(vectors.shape))"
        )
        return code, f"({len(texts)}, {directory_config(directory).get('hidden_size')})"

    def other_ways(self, head: str) -> str:
        return (
            'The root of this directory is also a transformers model (`AutoModel.from_pretrained(".")` after '
            "`import neobert`; pool `last_hidden_state` over the attention mask as `modules.json`'s Pooling says to "
            "get the same vectors).\n\nONNX Runtime:\n\n" + ONNX_EXPORT
        )
