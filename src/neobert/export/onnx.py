"""``export_onnx``: a model directory (NeoBERT or a BERT-family transformers encoder) as an ONNX directory.

What is written (atomically: the output directory appears whole or not at all)::

    model.onnx          inputs input_ids, attention_mask (int64, (batch, sequence), both axes dynamic up to
                        the model's max length); outputs last_hidden_state (B, L, C) and sentence_embedding
                        (B, C, pooled and normalized as the source declares), or logits (B, num_labels) for a
                        sequence classifier
    model_int8.onnx     with quantize="int8": onnxruntime dynamic quantization (int8 weights of MatMul/Gemm)
    tokenizer.json ...  the model's tokenizer, with truncation at max_length and padding to the longest row
                        set in tokenizer.json, so ``tokenizers.Tokenizer.from_file(...).encode_batch`` is all
                        a user calls
    config.json         the source's transformers config (labels, shapes)
    onnx_config.json    head, inputs, outputs, max_length, pooling {method, normalize, source}, labels, the
                        files, and the parity measured at export against the PyTorch model
    parity_reference.npz  the parity check's padded batch (input_ids, attention_mask) and PyTorch fp32's
                        outputs on it, named as the graph's: OpenVINO (:mod:`.openvino`) checks itself at load

Every model goes through ``torch.onnx.export`` (the torch.export-based exporter); the one NeoBERT-specific
step is choosing the padded SDPA attention path (no unpadding, whose data-dependent gathers do not export).
RoPE needs nothing: under export ``torch.compiler.is_compiling()`` is true, so
:func:`neobert.model.rope.rotate_pairs` takes its real-arithmetic form (ONNX has no complex type).
The onnx, onnxruntime and onnxscript packages are the ``onnx`` extra, imported only here, where used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..cards import CARD, CardInfo, write_card
from ..common.io import atomic_dir, write_json
from ..inference.backends import EXPORT_BESIDE
from ..inference.encoders import EmbeddingSpec, embedding_spec, is_neobert, load_encoder
from ..inference.kinds import kind_of
from ..inference.onnx_encoder import (
    CONFIG_FILE,
    COSINE_FLOOR,
    FORMAT_VERSION,
    FP32_TOLERANCE,
    REFERENCE_FILE,
    OnnxEncoder,
)
from ..inference.registration import HEADS, declared_head
from ..inference.run import label_names
from ..model import set_runtime
from ..model.pooling import ONNX_POOLINGS, get_pooling, pool

# Encoders whose transformers implementation exports and matches PyTorch (tests/test_onnx_export.py).
SUPPORTED_TYPES = ("neobert", "bert", "roberta", "xlm-roberta", "distilbert", "electra")
QUANTIZATIONS = ("int8",)
FILES = {"fp32": "model.onnx", "int8": "model_int8.onnx"}
EXTERNAL_DATA_BYTES = 1_800_000_000  # a protobuf file holds at most 2 GB: larger weights go beside it
# Mixed lengths on purpose: the parity check runs them as one right-padded batch.
CHECK_TEXTS = (
    "Hello.",
    "NeoBERT is a next-generation encoder for English text.",
    "ONNX Runtime runs the exported graph without PyTorch, on a CPU or an accelerator, and the padded rows "
    "of a batch must not change the real ones.",
    "Short one",
)


class UnsupportedModelError(ValueError):
    """The directory holds a model this exporter does not handle."""


@dataclass
class OnnxExportConfig:
    """The settings of ``neobert export onnx`` (:func:`run`)."""

    model: str  # model directory: NeoBERT or a BERT-family encoder (a classifier exports its logits)
    output: str  # directory to write (must not exist, or be empty, unless --force)
    quantize: str | None = None  # also write model_int8.onnx (onnxruntime dynamic quantization)
    pooling: str | None = None  # sentence_embedding pooling, mean or cls (default: as the source declares)
    force: bool = False  # replace a non-empty output directory
    license: str | None = None  # the license the model card names (none unless given), e.g. apache-2.0


def run(config: OnnxExportConfig) -> ExportResult:
    return export_onnx(
        config.model,
        config.output,
        config.quantize,
        force=config.force,
        pooling=config.pooling,
        license=config.license,
    )


@dataclass
class ExportResult:
    output: Path
    head: str  # the head exported: base, or a head whose graph the export writes (registration.Head.exports)
    model_type: str
    max_length: int
    pooling: dict[str, Any]
    files: list[str]
    parity: dict[str, float] = field(default_factory=dict)  # measured at export (see onnx_config.json)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """What was written, the graph's outputs and pooling, and the parity measured, for a person."""
        outputs = "logits" if self.head != "base" else "last_hidden_state, sentence_embedding"
        pooling = self.pooling
        parity = ", ".join(f"{k} {v:.3g}" for k, v in self.parity.items())
        return (
            f"wrote {self.output}: {', '.join(self.files)}\n"
            f"{self.model_type} {self.head}: outputs {outputs}; max_length {self.max_length}; pooling "
            f"{pooling['method']}{', normalized' if pooling['normalize'] else ''} ({pooling['source']})\n"
            f"parity with PyTorch on a padded batch: {parity}"
        )


@dataclass
class Source:
    """What a model directory declares: its model type, its head, and how its embeddings are made."""

    path: Path
    model_type: str
    head: str  # the head exported: base, or a head whose graph the export writes (registration.Head.exports)
    embedding: EmbeddingSpec  # pooling, normalize, max_length, declared_by (encoders.embedding_spec)


def inspect_source(model_dir: str | os.PathLike) -> Source:
    """Read ``model_dir``'s config.json and what it declares about its embeddings (a sentence-transformers
    ``modules.json``, through :func:`neobert.inference.encoders.embedding_spec`). Raises a clear error for a missing
    directory, an unsupported model type, or a sentence-transformers pipeline with other modules."""
    path = Path(model_dir).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model directory {model_dir} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"{model_dir} is a file; --model takes a model directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} holds no config.json: it is not a transformers model directory")
    kind = kind_of(path)
    if not kind.exports_onnx:
        raise UnsupportedModelError(
            f"{path} is a {kind.name} directory, which the ONNX export does not write (it writes pooled "
            "embeddings or a classifier's logits)"
        )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_TYPES:
        raise UnsupportedModelError(
            f"cannot export model_type {model_type!r} ({config_file}): ONNX export supports the encoders "
            f"{', '.join(SUPPORTED_TYPES)}"
        )
    spec = embedding_spec(path)  # ValueError naming the module for Dense layers, max pooling, ...
    head = HEADS[declared_head(config)]  # a head whose graph is not exported: its base encoder
    return Source(path, model_type, head.name if head.exports else "base", spec)


def check_output(output: Path, model_dir: Path, force: bool) -> None:
    beside = model_dir.resolve() / EXPORT_BESIDE  # the model's own export, which `--backend auto` measures
    if output.resolve() != beside and (
        output.resolve() == model_dir.resolve() or model_dir.resolve() in output.resolve().parents
    ):
        raise ValueError(
            f"output directory {output} is inside the model directory {model_dir}; only {beside} (the "
            "model's own export, which --backend auto measures beside PyTorch) may be"
        )
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"output {output} exists and is a file")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise FileExistsError(
            f"output directory {output} exists and is not empty; pass --force to replace it"
        )


def _require_extras() -> None:
    import importlib.util

    missing = [m for m in ("onnx", "onnxruntime", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"ONNX export needs {', '.join(missing)}: pip install 'neobert[onnx]'")


class EncoderGraph(torch.nn.Module):
    """(input_ids, attention_mask) -> (last_hidden_state (B, L, C), sentence_embedding (B, C))."""

    def __init__(self, model: torch.nn.Module, pooling: str, normalize: bool) -> None:
        super().__init__()
        self.model, self.pooling, self.normalize = model, pooling, normalize

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooled = pool(hidden, attention_mask, self.pooling)  # (B, C)
        return hidden, F.normalize(pooled, p=2, dim=-1) if self.normalize else pooled


class ClassifierGraph(torch.nn.Module):
    """(input_ids, attention_mask) -> logits (B, num_labels)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


def export_onnx(
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    quantize: str | None = None,
    *,
    force: bool = False,
    pooling: str | None = None,
    normalize: bool | None = None,
    license: str | None = None,
) -> ExportResult:
    """Export ``model_dir`` to ``output`` (see the module doc); ``quantize="int8"`` adds model_int8.onnx.

    ``pooling`` (mean | cls) and ``normalize`` override what the directory declares. The graph is checked
    with ``onnx.checker`` and run by onnxruntime on a padded batch of mixed lengths against PyTorch before
    the directory is moved into place: fp32 beyond 1e-4 max abs raises; the measured numbers are returned.
    """
    if quantize not in (None, *QUANTIZATIONS):
        raise ValueError(f"unknown quantization {quantize!r}; use one of {', '.join(QUANTIZATIONS)}")
    if pooling is not None:
        get_pooling(pooling, ONNX_POOLINGS, "for an ONNX export")
    source = inspect_source(model_dir)
    output = Path(output).expanduser()
    check_output(output, Path(model_dir), force)
    _require_extras()
    pooling = pooling or source.embedding.pooling
    if pooling not in ONNX_POOLINGS:  # e.g. a declared last-token pooling (the registry's `onnx` says which)
        raise UnsupportedModelError(
            f"{model_dir} declares {pooling} pooling; ONNX export supports {', '.join(ONNX_POOLINGS)} (see --pooling)"
        )
    normalize = source.embedding.normalize if normalize is None else normalize

    encoder = load_encoder(source.path, head=source.head)
    model = encoder.model.float().eval()
    if is_neobert(model):
        set_runtime(model, attn_backend="sdpa", unpad=False)  # the padded path: no data-dependent gathers
    base = source.head == "base"
    graph = EncoderGraph(model, pooling, normalize) if base else ClassifierGraph(model)
    settings = _settings(source, encoder, pooling, normalize, quantize)
    with atomic_dir(output) as tmp, _quiet():
        files = _write_directory(tmp, graph, encoder, source, settings)
        write_card(tmp, _card(source, settings, license, output.name))
        files.append(CARD)
    return ExportResult(
        output,
        source.head,
        source.model_type,
        settings["max_length"],
        settings["pooling"],
        files,
        settings["parity"],
        _notes(model, base, settings["parity"]),
    )


def _settings(source: Source, encoder, pooling: str, normalize: bool, quantize: str | None) -> dict:
    """What ``onnx_config.json`` states about the graph (parity is added once it is measured)."""
    base = source.head == "base"
    return {
        "format_version": FORMAT_VERSION,
        "head": source.head,
        "model_type": source.model_type,
        "inputs": ["input_ids", "attention_mask"],
        "outputs": ["last_hidden_state", "sentence_embedding"] if base else ["logits"],
        "max_length": min(encoder.max_length, source.embedding.max_length or encoder.max_length),
        "pooling": {"method": pooling, "normalize": normalize, "source": source.embedding.declared_by},
        "labels": None if base else label_names(encoder.model.config),
        "files": {v: FILES[v] for v in ("fp32", quantize) if v},
    }


def _notes(model: torch.nn.Module, base: bool, parity: dict[str, float]) -> list[str]:
    """What the user should know about an export that succeeded: a head left out, an int8 graph far off."""
    notes = []
    if base and declared_head(model.config) != "base":
        notes.append(f"head {model.config.architectures[0]} not exported: the base encoder was")
    cosine = parity.get("int8_cosine_min")
    if cosine is not None and cosine < COSINE_FLOOR:
        notes.append(
            f"int8 cosine to fp32 {cosine:.4f} < {COSINE_FLOOR} on the check texts (1-60 tokens; short "
            "texts move most): measure it on your own texts before choosing model_int8.onnx"
        )
    return notes


def _card(source: Source, settings: dict, license: str | None, name: str) -> CardInfo:
    """The card of the export: what it computes, from which directory, and the parity measured here."""
    base = settings["head"] == "base"
    pooling = settings["pooling"]
    what = (
        (
            f"`sentence_embedding` ({pooling['method']} pooling{', normalized' if pooling['normalize'] else ''}) "
            "and `last_hidden_state`"
        )
        if base
        else "the classifier's `logits`"
    )
    description = (
        f"An ONNX export (`neobert export onnx`) of the {source.model_type} model directory "
        f"`{source.path.name}`: one graph computing {what} from `input_ids` and `attention_mask`, with "
        "dynamic batch and length axes. Evaluation results of the model are on the source directory's "
        "card; this export was checked against it (below)."
    )
    run = [("files", ", ".join(settings["files"].values())), ("max length", f"{settings['max_length']:,}")]
    run += [(f"parity with PyTorch: {key}", f"{value:.3g}") for key, value in settings["parity"].items()]
    return CardInfo(
        head=settings["head"],
        library="onnx",
        description=description,
        command="neobert export onnx",
        run=run,
        license=license,
        name=name,
        limits=[
            "`model_int8.onnx` (where present) is dynamically quantized: compare its vectors with fp32 on "
            "your own texts before choosing it."
        ],
    )


def _write_directory(
    tmp: Path, graph: torch.nn.Module, encoder: Any, source: Source, settings: dict
) -> list[str]:
    """Fill ``tmp``: the graph(s), tokenizer, config.json and onnx_config.json with the parity measured on
    the files as written (``settings["parity"]`` is set here). Returns the file names."""
    _export_graph(graph, tmp / FILES["fp32"], encoder.max_length, _nbytes(encoder.model))
    _write_tokenizer(encoder.tokenizer, tmp, settings["max_length"])
    shutil.copyfile(source.path / "config.json", tmp / "config.json")
    if "int8" in settings["files"]:
        _quantize(tmp / FILES["fp32"], tmp / FILES["int8"])
    write_json(tmp / CONFIG_FILE, settings)  # OnnxEncoder reads it for the parity run
    settings["parity"] = measure_parity(graph, tmp, settings)
    write_json(tmp / CONFIG_FILE, settings)
    written = list(settings["files"].values())
    return written + sorted(p.name for p in tmp.iterdir() if p.name not in written)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' advice that does not apply here (axis renaming, ORT's pre-processing hint)."""
    loggers = [logging.getLogger(), logging.getLogger("torch.onnx")]  # root: onnxruntime.quantization's
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="# The axis name")
            warnings.filterwarnings("ignore", category=FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _nbytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _export_graph(graph: torch.nn.Module, path: Path, max_length: int, nbytes: int) -> None:
    import onnx

    length = min(8, max_length)
    example = (torch.full((2, length), 5, dtype=torch.long), torch.ones(2, length, dtype=torch.long))
    example[1][1, length // 2 :] = 0  # a padded row: the masked path is the one traced
    graph.eval()
    with torch.no_grad():
        graph(*example)  # builds lazily cached tables (RoPE) before tracing
        batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_length)
        outputs = (
            ["logits"] if isinstance(graph, ClassifierGraph) else ["last_hidden_state", "sentence_embedding"]
        )
        program = torch.onnx.export(
            graph,
            example,
            dynamo=True,
            input_names=["input_ids", "attention_mask"],
            output_names=outputs,
            dynamic_shapes={"input_ids": {0: batch, 1: sequence}, "attention_mask": {0: batch, 1: sequence}},
            verbose=False,
        )
    program.save(str(path), external_data=nbytes > EXTERNAL_DATA_BYTES)
    onnx.checker.check_model(str(path), full_check=True)  # by path: works with external data too


def _quantize(source: Path, target: Path) -> None:
    """onnxruntime dynamic quantization: int8 weights (per output channel) for the MatMuls with a constant
    weight, activations quantized per call. The FFN down-projections stay float32: their input (after
    GELU / SwiGLU) has the widest range, and quantizing them costs the most accuracy (all-MiniLM-L6-v2 on
    64 stdlib texts: minimum cosine to fp32 0.986 with them, 0.993 without)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    down = [
        n.name
        for n in graph.node
        if n.op_type == "MatMul"
        and len(shapes.get(n.input[1], ())) == 2
        and shapes[n.input[1]][0] > shapes[n.input[1]][1]
    ]
    quantize_dynamic(
        source,
        target,
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=down,
        use_external_data_format=source.stat().st_size > EXTERNAL_DATA_BYTES,
    )
    onnx.checker.check_model(str(target))


def _write_tokenizer(tokenizer: Any, directory: Path, max_length: int) -> None:
    """The tokenizer files, with tokenizer.json set to truncate at ``max_length`` and pad to the longest row."""
    from tokenizers import Tokenizer

    tokenizer.save_pretrained(directory)
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise UnsupportedModelError(
            "the model's tokenizer has no tokenizer.json (a fast tokenizer is needed)"
        )
    backend = Tokenizer.from_file(str(path))
    backend.enable_truncation(max_length)
    backend.enable_padding(
        pad_id=int(tokenizer.pad_token_id or 0), pad_token=str(tokenizer.pad_token or "[PAD]")
    )
    backend.save(str(path))


def measure_parity(graph: torch.nn.Module, directory: Path, settings: dict) -> dict[str, float]:
    """ORT against PyTorch on :data:`CHECK_TEXTS` as one padded batch, tokenized by the exported tokenizer.

    fp32: max abs difference on real tokens' hidden states, pooled vectors or logits (raises beyond
    :data:`FP32_TOLERANCE`); int8: the minimum cosine of pooled vectors (or logits) to PyTorch fp32.
    """
    fp32 = OnnxEncoder(directory)
    ids, mask = fp32.tokenize(list(CHECK_TEXTS))
    with torch.no_grad():
        expected = graph(torch.from_numpy(ids), torch.from_numpy(mask))
    expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
    # PyTorch's answer kept beside the graph: another runtime (openvino.OpenVinoEncoder) checks itself at load
    np.savez(
        directory / REFERENCE_FILE,
        input_ids=ids,
        attention_mask=mask,
        **dict(zip(settings["outputs"], expected)),
    )
    real = mask.astype(bool)
    parity: dict[str, float] = {}
    for variant in settings["files"]:
        got = (fp32 if variant == "fp32" else OnnxEncoder(directory, variant)).run(ids, mask)
        if variant == "fp32":
            diffs = [np.abs(g - e)[real] if g.ndim == 3 else np.abs(g - e) for g, e in zip(got, expected)]
            parity["fp32_max_abs"] = float(max(d.max() for d in diffs))
            if parity["fp32_max_abs"] > FP32_TOLERANCE:
                raise RuntimeError(
                    f"the exported graph differs from PyTorch by {parity['fp32_max_abs']:.2e} (> {FP32_TOLERANCE})"
                )
        else:
            a, b = got[-1], expected[-1]  # pooled vectors or logits
            cosine = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
            parity[f"{variant}_cosine_min"] = float(cosine.min())
    return parity
