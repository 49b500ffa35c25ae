"""OpenVINO as a runtime of a ``neobert export onnx`` directory: :class:`OpenVinoEncoder`.

Why the export's graph and not a conversion from PyTorch: the export is the one place a model becomes a graph
(NeoBERT's padded attention path, RoPE in real arithmetic, the heads whose graph is written, the rest refused
by name: :func:`neobert.export.onnx.inspect_source`), and it is checked against PyTorch when written.
OpenVINO reads ONNX itself (``Core.read_model``), so one export serves ONNX Runtime and OpenVINO alike, with
no torch at serving time, and a second converter (``openvino.convert_model`` tracing the PyTorch module) would
be a second set of export rules to keep right. Contract::

    encoder = OpenVinoEncoder("model-onnx")                     # fp32 (OpenVINO's f32 inference precision)
    encoder = OpenVinoEncoder("model-onnx", precision="bf16")   # the CPU's bf16 hint, where the CPU has it
    encoder = OpenVinoEncoder("model-onnx", variant="int8-static")  # written by `neobert export openvino-int8`
    encoder.encode(texts); encoder.classifier_logits(texts); encoder.parity   # as OnnxEncoder, plus parity

Parity against PyTorch fp32 is checked at load, on the export's own check batch and PyTorch's answer to it
(``parity_reference.npz``, written by the export): fp32 within :data:`.onnx_encoder.FP32_TOLERANCE` max abs
(as the export checks ONNX Runtime), bf16 and int8 with a minimum cosine of the pooled vectors (or logits) of
:data:`.onnx_encoder.COSINE_FLOOR`. A load that misses it raises :class:`ParityError` with the numbers.
openvino is the ``openvino`` extra, imported where used; the static int8 graph is written by
:func:`neobert.export.openvino.quantize_static`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import hardware
from .onnx_encoder import COSINE_FLOOR, FP32_TOLERANCE, REFERENCE_FILE, OnnxEncoder

PRECISIONS = ("fp32", "bf16")  # OpenVINO's inference precision hint: f32, or the CPU's bf16
_HINTS = {"fp32": "f32", "bf16": "bf16"}
STATIC_INT8 = "int8-static"  # the variant quantize_static writes (onnx_config.json "files")
STATIC_INT8_FILE = "openvino_int8.xml"  # with openvino_int8.bin beside it


class ParityError(RuntimeError):
    """OpenVINO's answer on the export's check batch is not PyTorch fp32's (the numbers are in the message)."""


def _require() -> None:
    import importlib.util

    missing = [m for m in ("openvino",) if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"the OpenVINO backend needs {', '.join(missing)}: pip install 'neobert[openvino]'")


@functools.cache
def openvino_core() -> Any:
    _require()
    import openvino as ov

    return ov.Core()


def bf16_hint_available() -> bool:
    """Whether OpenVINO's CPU plugin runs bf16 here (AVX-512 BF16 or AMX): its optimization capabilities,
    unless an instruction-set cap hides those units (the plugin lists them from the CPU, and then fails to
    compile bf16 under the cap)."""
    if hardware.isa_cap() and not (hardware.cpu_flags()["avx512_bf16"] or hardware.cpu_flags()["amx_bf16"]):
        return False
    return "BF16" in openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def openvino_version() -> str | None:
    try:
        import openvino as ov
    except ImportError:
        return None
    return ov.__version__.split("-")[0]


class OpenVinoEncoder(OnnxEncoder):
    """An exported directory compiled by OpenVINO's CPU plugin, checked against PyTorch fp32 at load."""

    def __init__(
        self,
        directory: str | os.PathLike,
        variant: str = "fp32",
        threads: int | None = None,
        precision: str = "fp32",
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"OpenVINO precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
        if precision == "bf16" and not bf16_hint_available():
            raise ValueError(
                "this CPU has no bf16 (OpenVINO's CPU plugin lists no BF16 capability): use precision fp32"
            )
        if variant == STATIC_INT8 and precision != "fp32":
            raise ValueError(f"the {STATIC_INT8} graph runs its int8 layers as quantized: precision is fp32")
        self.precision = precision
        super().__init__(directory, variant, threads)
        self.parity = self.check_parity()

    @property
    def label(self) -> str:
        """What runs, for a person: the variant, or the float precision of the fp32 graph."""
        return self.precision if self.variant == "fp32" else self.variant

    @property
    def on_cpu(self) -> bool:
        return True  # compiled for OpenVINO's CPU plugin

    def _open(self, graph: Path, threads: int | None, providers: Sequence[str] | None) -> None:
        config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": _HINTS[self.precision],
            "PERFORMANCE_HINT": "LATENCY",  # one call at a time uses every thread given
        }
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        core = openvino_core()
        self.compiled = core.compile_model(core.read_model(graph), "CPU", config)

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        # one request per call: requests are not shared between threads (a service's workers)
        result = self.compiled.create_infer_request().infer(
            {"input_ids": input_ids, "attention_mask": attention_mask}
        )
        return [np.asarray(result[output], dtype=np.float32) for output in self.compiled.outputs]

    def output_width(self, output: int) -> int:
        width = self.compiled.outputs[output].get_partial_shape()[-1]
        return width.get_length() if width.is_static else 0

    def check_parity(self) -> dict[str, float]:
        """This compiled graph against PyTorch fp32 on the export's check batch (module doc); raises
        :class:`ParityError` beyond the tolerance, returns the numbers measured."""
        path = self.directory / REFERENCE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{self.directory} holds no {REFERENCE_FILE} (PyTorch's answer the OpenVINO backend checks "
                "itself against): export it again with this version's `neobert export onnx`"
            )
        reference = np.load(path)
        ids, mask = reference["input_ids"], reference["attention_mask"]
        got = self.run(ids, mask)
        expected = [reference[name] for name in self.config["outputs"]]
        if self.label == "fp32":
            real = mask.astype(bool)
            diffs = [np.abs(g - e)[real] if g.ndim == 3 else np.abs(g - e) for g, e in zip(got, expected)]
            worst = float(max(d.max() for d in diffs))
            if worst > FP32_TOLERANCE:
                raise ParityError(
                    f"OpenVINO fp32 on {self.directory} differs from PyTorch fp32 by {worst:.2e} max abs "
                    f"(> {FP32_TOLERANCE}) on the export's check batch"
                )
            return {"fp32_max_abs": worst}
        cosine = min_cosine(got[-1], expected[-1])  # pooled vectors or logits
        floor = self.config["int8_static"]["cosine_floor"] if self.variant == STATIC_INT8 else COSINE_FLOOR
        if cosine < floor:
            raise ParityError(
                f"OpenVINO {self.label} on {self.directory}: minimum cosine {cosine:.4f} to PyTorch fp32 "
                f"(< {floor}) on the export's check batch; serve it at fp32"
            )
        return {f"{self.label}_cosine_min": cosine}


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest cosine between matching rows of ``a`` and ``b``."""
    cosine = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(cosine.min())
