"""Run an exported ONNX directory (:func:`neobert.export.onnx.export_onnx`) with onnxruntime + tokenizers.

Nothing here imports torch or the model code: this is what a service (or any Python program) calls to use
the artefact. Contract::

    encoder = OnnxEncoder("model-onnx")             # or OnnxEncoder(dir, variant="int8", threads=4)
    encoder.encode(["a text", "another"])           # (N, C) float32, pooled/normalized as onnx_config.json says
    encoder.classifier_logits(["a text"])           # (N, num_labels) float32 logits; encoder.labels names them

Texts are tokenized by the directory's tokenizer.json (truncation at ``max_length``, padding to the longest
row of a batch), batched ``batch_size`` at a time in order of length (less padding), and returned in input
order. onnxruntime and tokenizers are imported where used: the ``onnx`` extra.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .directories import ONNX_CONFIG_FILE as CONFIG_FILE

REFERENCE_FILE = "parity_reference.npz"  # PyTorch fp32's outputs on the export's parity batch (export.onnx)
FP32_TOLERANCE = 1e-4  # max abs difference to PyTorch on real tokens / pooled vectors / logits
COSINE_FLOOR = 0.99  # the same vectors: min cosine to fp32 (as the bf16 fast path, `bench precision`)
FORMAT_VERSION = 2  # 2: onnx_config.json names the exported head under "head" (1: "task")


def padded_batch(tokenizer: Any, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``texts`` through an export's ``tokenizer`` (padding and truncation set as the export's): right-padded
    (input_ids, attention_mask), int64 (B, L)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    batch = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in batch], dtype=np.int64)
    mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
    return ids, mask


class OnnxEncoder:
    """An exported directory loaded for inference on onnxruntime's CPU provider (or ``providers``)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        variant: str = "fp32",
        threads: int | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        config_file = self.directory / CONFIG_FILE
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{directory} holds no {CONFIG_FILE}: export it with `neobert export onnx`"
            )
        self.config: dict[str, Any] = json.loads(config_file.read_text(encoding="utf-8"))
        if self.config.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{config_file}: format_version {self.config.get('format_version')} is not {FORMAT_VERSION}; "
                "export the model again with this version's `neobert export onnx`"
            )
        files = self.config["files"]
        if variant not in files:
            raise ValueError(f"{directory} has no {variant!r} model; it holds {', '.join(files)}")
        self.variant = variant
        graph = self.directory / files[variant]
        if not graph.is_file():
            raise FileNotFoundError(f"{graph} is missing: {CONFIG_FILE} lists it; export the directory again")
        self.tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self._open(graph, threads, providers)

    def _open(self, graph: Path, threads: int | None, providers: Sequence[str] | None) -> None:
        """Make the session that :meth:`run` calls (ONNX Runtime here; :mod:`.openvino` compiles instead)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(graph),
            options,
            providers=list(providers or ["CPUExecutionProvider"]),
        )

    @property
    def head(self) -> str:
        return self.config["head"]

    @property
    def labels(self) -> list[str] | None:
        return self.config.get("labels")

    @property
    def max_length(self) -> int:
        return int(self.config["max_length"])

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded (input_ids, attention_mask), int64 (B, L), truncated at ``max_length``."""
        return padded_batch(self.tokenizer, texts)

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs (``config["outputs"]``, in that order) for one tokenized batch."""
        return self.session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})

    def output_width(self, output: int) -> int:
        """The last dimension of output ``output`` (0 where the graph leaves it dynamic)."""
        width = self.session.get_outputs()[output].shape[-1]
        return width if isinstance(width, int) else 0

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Sentence embeddings (N, C) float32, pooled and normalized as the source declared."""
        if self.head != "base":
            raise TypeError(f"{self.directory} is a {self.head} export; encode needs a base encoder export")
        return self._batched(texts, batch_size, output=1)

    def classifier_logits(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Logits (N, num_labels) float32; softmax is left to the caller (as inference.classifier_logits)."""
        if self.head == "base":
            raise TypeError(f"{self.directory} is a base export; classifier_logits needs a classifier export")
        return self._batched(texts, batch_size, output=0)

    def _batched(self, texts: Sequence[str], batch_size: int, output: int) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, not one string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(texts) == 0:
            return np.zeros((0, self.output_width(output)), dtype=np.float32)
        ids, mask = self.tokenize(texts)  # padded to the longest text of all
        lengths = mask.sum(axis=1)
        order = np.argsort(lengths, kind="stable")  # similar lengths together: less padding per batch
        parts = []
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(int(lengths[rows].max()), 1)  # right-padded: the batch's own longest row
            parts.append(self.run(ids[rows, :width], mask[rows, :width])[output])
        out = np.empty((len(texts), parts[0].shape[-1]), dtype=np.float32)
        out[order] = np.concatenate(parts)
        return out
