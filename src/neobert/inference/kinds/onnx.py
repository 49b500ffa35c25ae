"""An ONNX export (``neobert export onnx``: ``model.onnx``, the tokenizer, ``onnx_config.json``): run by ONNX
Runtime (the service's ``onnx`` backend, :class:`neobert.inference.onnx_encoder.OnnxEncoder`), not by PyTorch."""

from __future__ import annotations

import json
from pathlib import Path

from ..directories import ONNX_CONFIG_FILE, DirectoryKind, directory_config
from ..encoders import EmbeddingSpec


class OnnxKind(DirectoryKind):
    name = "onnx"
    library = "onnx"
    loaded_with = "ONNX Runtime"
    backend = "onnx"
    exports_onnx = False  # it is an export already

    def matches(self, path: Path) -> bool:
        return (path / ONNX_CONFIG_FILE).is_file()

    def declared_embedding(self, source) -> EmbeddingSpec | str:
        """What the graph's ``sentence_embedding`` computes: the pooling and normalisation written at export
        (``onnx_config.json``), up to the export's max length; a classifier export has none."""
        settings = json.loads((Path(source) / ONNX_CONFIG_FILE).read_text(encoding="utf-8"))
        if settings.get("head", "base") != "base":
            return f"it is a {settings['head']} export (logits, no sentence embedding)"
        pooling = settings["pooling"]
        return EmbeddingSpec(
            pooling["method"], pooling["normalize"], settings["max_length"], pooling["source"]
        )

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        settings = json.loads((directory / ONNX_CONFIG_FILE).read_text(encoding="utf-8"))
        config = directory_config(directory)
        classifier = settings.get("head", "base") != "base"
        call = "classifier_logits" if classifier else "encode"
        width = (len(config.get("id2label") or {}) or None) if classifier else config.get("hidden_size")
        code = (
            "from neobert.inference.onnx_encoder import OnnxEncoder  # onnxruntime + tokenizers, no torch (pip install 'neobert[onnx]')\n\n"
            'encoder = OnnxEncoder(".")  # this directory\n'
            f"outputs = encoder.{call}({list(texts)!r})\n"
            "print(tuple(outputs.shape))"
        )
        return code, f"({len(texts)}, {width})"

    def other_ways(self, head: str) -> str:
        return (
            "This directory holds `model.onnx` (and `model_int8.onnx` where quantized), the tokenizer and "
            "`onnx_config.json`; any ONNX Runtime program can run it with the inputs `input_ids` and "
            "`attention_mask`. The PyTorch model it was exported from loads with transformers' Auto "
            "classes after `import neobert`.\n"
        )
