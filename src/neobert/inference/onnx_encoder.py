"""Run an exported ONNX directory (:func:`neobert.export.onnx.export_onnx`) with onnxruntime + tokenizers.

Nothing here imports torch or the model code: this is what a service (or any Python program) calls to use
the artefact. Contract::

    encoder = OnnxEncoder("model-onnx")             # or OnnxEncoder(dir, variant="int8", threads=4)
    encoder.encode(["a text", "another"])           # (N, C) float32, pooled/normalized as onnx_config.json says
    encoder.classifier_logits(["a text"])           # (N, num_labels) float32 logits; encoder.labels names them

Texts are tokenized by the directory's tokenizer.json (truncation at ``max_length``, padding to the longest
row of a batch), batched longest first at most ``batch_size`` texts and ``max_tokens`` padded tokens a call
(:func:`.batching.token_batches`, the PyTorch path's rule and its default on the CPU: one rows-by-width call of
16 x 502 tokens ran 17% slower a token than two of 8 on ONNX Runtime, the 250M shape on one EPYC thread),
and returned in input order. onnxruntime and tokenizers are imported where used: the ``onnx`` extra.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .batching import CPU_MAX_TOKENS, token_batches
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
    def on_cpu(self) -> bool:
        """Whether the graph runs on the CPU (where a call's padded tokens are bounded by default)."""
        return self.session.get_providers()[0] == "CPUExecutionProvider"

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

    def encode(self, texts: Sequence[str], batch_size: int = 32, max_tokens: int | None = None) -> np.ndarray:
        """Sentence embeddings (N, C) float32, pooled and normalized as the source declared."""
        if self.head != "base":
            raise TypeError(f"{self.directory} is a {self.head} export; encode needs a base encoder export")
        return self._batched(texts, batch_size, max_tokens, output=1)

    def classifier_logits(
        self, texts: Sequence[str], batch_size: int = 32, max_tokens: int | None = None
    ) -> np.ndarray:
        """Logits (N, num_labels) float32; softmax is left to the caller (as inference.classifier_logits)."""
        if self.head == "base":
            raise TypeError(f"{self.directory} is a base export; classifier_logits needs a classifier export")
        return self._batched(texts, batch_size, max_tokens, output=0)

    def _batched(
        self, texts: Sequence[str], batch_size: int, max_tokens: int | None, output: int
    ) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, not one string")
        if len(texts) == 0:
            token_batches([], batch_size, max_tokens)  # the limits are checked, empty or not
            return np.zeros((0, self.output_width(output)), dtype=np.float32)
        if max_tokens is None and self.on_cpu:
            max_tokens = CPU_MAX_TOKENS
        ids, mask = self.tokenize(texts)  # padded to the longest text of all
        lengths = mask.sum(axis=1)
        out: np.ndarray | None = None
        for rows in token_batches(lengths.tolist(), batch_size, max_tokens):  # few padding, bounded tokens
            width = max(int(lengths[rows[0]]), 1)  # right-padded: the batch's own longest (first) row
            part = self.run(ids[rows, :width], mask[rows, :width])[output]
            if out is None:
                out = np.empty((len(texts), part.shape[-1]), dtype=np.float32)
            out[rows] = part
        return out
