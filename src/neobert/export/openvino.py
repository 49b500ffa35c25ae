"""OpenVINO as a runtime of a ``neobert export onnx`` directory, and its static int8 (NNCF).

Why the export's graph and not a conversion from PyTorch: the export is the one place a model becomes a graph
(NeoBERT's padded attention path, RoPE in real arithmetic, the heads whose graph is written, the rest refused
by name: :func:`neobert.export.onnx.inspect_source`), and it is checked against PyTorch when written.
OpenVINO reads ONNX itself (``Core.read_model``), so one export serves ONNX Runtime and OpenVINO alike, with
no torch at serving time, and a second converter (``openvino.convert_model`` tracing the PyTorch module) would
be a second set of export rules to keep right. Contract::

    encoder = OpenVinoEncoder("model-onnx")                     # fp32 (OpenVINO's f32 inference precision)
    encoder = OpenVinoEncoder("model-onnx", precision="bf16")   # the CPU's bf16 hint, where the CPU has it
    encoder = OpenVinoEncoder("model-onnx", variant="int8-static")  # written by quantize_static
    encoder.encode(texts); encoder.classifier_logits(texts); encoder.parity   # as OnnxEncoder, plus parity

Parity against PyTorch fp32 is checked at load, on the export's own check batch and PyTorch's answer to it
(``parity_reference.npz``, written by the export): fp32 within :data:`.runtime.FP32_TOLERANCE` max abs (as
the export checks ONNX Runtime), bf16 and int8 with a minimum cosine of the pooled vectors (or logits) of
:data:`.runtime.COSINE_FLOOR`. A load that misses it raises :class:`ParityError` with the numbers.

:func:`quantize_static` is NNCF's post-training quantization of the graph (int8 weights and activations,
ranges from the user's calibration texts), accepted only if it keeps the vectors on texts it was not
calibrated on (:class:`Int8Check`), else refused with the numbers. openvino and nncf are the ``openvino``
extra, imported where used.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..common.io import write_json
from ..data.corpus import stdlib_root
from ..data.docstring_pairs import is_heldout, iter_docstring_pairs
from ..data.text_files import read_texts
from ..evaluation.embeddings import ndcg_at_k, rank_documents
from .runtime import CONFIG_FILE, COSINE_FLOOR, FP32_TOLERANCE, REFERENCE_FILE, OnnxEncoder

PRECISIONS = ("fp32", "bf16")  # OpenVINO's inference precision hint: f32, or the CPU's bf16
_HINTS = {"fp32": "f32", "bf16": "bf16"}
STATIC_INT8 = "int8-static"  # the variant quantize_static writes (onnx_config.json "files")
STATIC_INT8_FILE = "openvino_int8.xml"  # with openvino_int8.bin beside it
NDCG_TOLERANCE = 0.01  # int8's nDCG@10 on the held-out docstring pairs: at least (1 - this) x float's
HELDOUT_SHARE = 5  # every 5th calibration text is held out (never calibrated on) for the cosine check


@dataclass
class StaticInt8Config:
    """The settings of ``neobert export openvino-int8`` (:func:`run_static_int8`)."""

    model: str  # a base encoder's `neobert export onnx` directory: openvino_int8.xml is written into it
    calibration: str  # calibration texts: a table's `text` column or one text per line (every 5th held out)
    pairs: int = 200  # held-out docstring pairs whose nDCG@10 int8 must keep
    cosine_floor: float = COSINE_FLOOR  # the least minimum cosine to fp32 accepted on the held-out texts
    ndcg_tolerance: float = NDCG_TOLERANCE  # int8's nDCG@10 at least (1 - this) x fp32's


def run_static_int8(config: StaticInt8Config) -> Int8Check:
    texts, _ = read_texts(config.calibration)
    return quantize_static(
        config.model,
        texts,
        pairs=config.pairs,
        cosine_floor=config.cosine_floor,
        ndcg_tolerance=config.ndcg_tolerance,
    )


class ParityError(RuntimeError):
    """OpenVINO's answer on the export's check batch is not PyTorch fp32's (the numbers are in the message)."""


class Int8Refused(ValueError):
    """A static int8 graph that does not keep the vectors (the numbers are in the message)."""


def _require() -> None:
    import importlib.util

    missing = [m for m in ("openvino",) if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"the OpenVINO backend needs {', '.join(missing)}: pip install 'neobert[openvino]'")


@functools.cache
def _core() -> Any:
    _require()
    import openvino as ov

    return ov.Core()


def bf16_hint_available() -> bool:
    """Whether OpenVINO's CPU plugin runs bf16 here (AVX-512 BF16 or AMX): its optimization capabilities."""
    return "BF16" in _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


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

    def _open(self, graph: Path, threads: int | None, providers: Sequence[str] | None) -> None:
        config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": _HINTS[self.precision],
            "PERFORMANCE_HINT": "LATENCY",  # one call at a time uses every thread given
        }
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        core = _core()
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


@dataclass
class Int8Check:
    """What a static int8 graph kept, against the fp32 graph, on texts it was not calibrated on."""

    calibration_texts: int
    heldout_texts: int  # every HELDOUT_SHARE-th user text plus the held-out docstring queries and documents
    cosine_min: float  # over the held-out texts; accepted from COSINE_FLOOR
    cosine_floor: float
    pairs: int  # held-out docstring pairs (each query's one relevant document among all of them)
    ndcg_float: float
    ndcg_int8: float
    ndcg_tolerance: float

    @property
    def accepted(self) -> bool:
        return self.cosine_min >= self.cosine_floor and self.ndcg_int8 >= self.ndcg_float * (
            1 - self.ndcg_tolerance
        )

    @property
    def summary(self) -> str:
        return (
            f"int8 (static, NNCF) against fp32 on {self.heldout_texts} held-out texts: minimum cosine "
            f"{self.cosine_min:.4f} (floor {self.cosine_floor}); nDCG@10 on {self.pairs} held-out docstring "
            f"pairs {self.ndcg_int8:.4f} against {self.ndcg_float:.4f} (within {self.ndcg_tolerance:.0%} needed)"
        )


@functools.cache
def heldout_pairs(count: int) -> tuple[Any, ...]:
    """The first ``count`` docstring pairs of the held-out modules (:mod:`neobert.data.docstring_pairs`'s
    split: the modules a contrastive fine-tune here never trains on); only those modules are parsed."""
    names = sorted({p.stem if p.suffix == ".py" else p.name for p in stdlib_root().iterdir()})
    modules = [name for name in names if name.isidentifier() and is_heldout(name, 0.2)]
    pairs = []
    for pair in iter_docstring_pairs(modules):
        pairs.append(pair)
        if len(pairs) == count:
            break
    return tuple(pairs)


def quantize_static(
    directory: str | os.PathLike,
    calibration: Sequence[str],
    *,
    pairs: int = 200,
    cosine_floor: float = COSINE_FLOOR,
    ndcg_tolerance: float = NDCG_TOLERANCE,
    batch_size: int = 16,
    threads: int | None = None,
) -> Int8Check:
    """Write ``openvino_int8.xml`` (+ ``.bin``) into the base export ``directory``: NNCF's static post-training
    quantization (transformer preset: int8 weights and activations, SmoothQuant) with ranges from
    ``calibration`` less every :data:`HELDOUT_SHARE`-th text. Accepted only if, against the fp32 graph, the
    minimum cosine over the held-out texts is at least ``cosine_floor`` and nDCG@10 on ``pairs`` held-out
    docstring pairs is within ``ndcg_tolerance`` of float's; else :class:`Int8Refused` with the numbers and
    nothing written. On acceptance onnx_config.json lists the file (variant ``int8-static``) and the numbers.
    """
    texts = [t for t in calibration if isinstance(t, str) and t.strip()]
    if len(texts) < 2 * HELDOUT_SHARE:
        raise ValueError(
            f"calibration needs at least {2 * HELDOUT_SHARE} non-empty texts (every {HELDOUT_SHARE}th is held "
            f"out to check the result); got {len(texts)}"
        )
    fp32 = OpenVinoEncoder(directory, threads=threads)
    if fp32.head != "base":
        raise ValueError(
            f"{directory} is a {fp32.head} export; static int8 is checked on embeddings (a base encoder export)"
        )
    heldout = texts[HELDOUT_SHARE - 1 :: HELDOUT_SHARE]
    fitted = [t for i, t in enumerate(texts) if (i + 1) % HELDOUT_SHARE]
    target = fp32.directory / STATIC_INT8_FILE
    partial = target.with_name(".partial-" + target.name)
    _quantize(fp32, fitted, batch_size, partial)
    try:
        check = _check_int8(fp32, partial, heldout, len(fitted), pairs, cosine_floor, ndcg_tolerance, threads)
    except BaseException:
        _remove(partial)
        raise
    if not check.accepted:
        _remove(partial)
        raise Int8Refused(f"{check.summary}: refused, nothing written")
    partial.with_suffix(".bin").replace(target.with_suffix(".bin"))
    partial.replace(target)
    settings = json.loads((fp32.directory / CONFIG_FILE).read_text(encoding="utf-8"))
    settings["files"][STATIC_INT8] = STATIC_INT8_FILE
    settings["int8_static"] = asdict(check)  # what it kept when accepted; its load checks that floor
    write_json(fp32.directory / CONFIG_FILE, settings)
    return check


def _quantize(fp32: OpenVinoEncoder, texts: list[str], batch_size: int, xml: Path) -> None:
    """NNCF's static int8 of ``fp32``'s graph, activation ranges from ``texts``, saved as ``xml`` (+ .bin)."""
    import nncf
    import openvino as ov

    items = []
    for start in range(0, len(texts), batch_size):
        ids, mask = fp32.tokenize(texts[start : start + batch_size])
        items.append({"input_ids": ids, "attention_mask": mask})
    quantized = nncf.quantize(
        _core().read_model(fp32.directory / fp32.config["files"]["fp32"]),
        nncf.Dataset(items),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(items),
    )
    ov.save_model(quantized, xml, compress_to_fp16=False)


def _remove(xml: Path) -> None:
    xml.unlink(missing_ok=True)
    xml.with_suffix(".bin").unlink(missing_ok=True)


def _check_int8(
    fp32: OpenVinoEncoder,
    xml: Path,
    heldout: list[str],
    fitted: int,
    count: int,
    cosine_floor: float,
    ndcg_tolerance: float,
    threads: int | None,
) -> Int8Check:
    int8 = _Compiled(fp32, xml, threads)
    pairs = heldout_pairs(count)
    queries, documents = [p.query for p in pairs], [p.document for p in pairs]
    texts = heldout + queries + documents
    a, b = fp32.encode(texts), int8.encode(texts)
    ids = [str(i) for i in range(len(documents))]

    def ndcg(vectors: np.ndarray) -> float:
        q, d = vectors[len(heldout) : len(heldout) + len(queries)], vectors[len(heldout) + len(queries) :]
        rankings = rank_documents(q, d, ids, 10)
        return float(np.mean([ndcg_at_k(r, {i: 1.0}, 10) for i, r in zip(ids, rankings)]))

    return Int8Check(
        fitted, len(texts), min_cosine(a, b), cosine_floor, len(pairs), ndcg(a), ndcg(b), ndcg_tolerance
    )


class _Compiled(OpenVinoEncoder):
    """A graph file not yet listed in onnx_config.json (the int8 under test), run as ``encoder`` runs."""

    def __init__(self, encoder: OpenVinoEncoder, graph: Path, threads: int | None) -> None:
        self.directory, self.config, self.tokenizer = encoder.directory, encoder.config, encoder.tokenizer
        self.variant, self.precision = STATIC_INT8, "fp32"
        self._open(graph, threads, None)
