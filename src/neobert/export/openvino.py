"""The static int8 of an export for OpenVINO (``neobert export openvino-int8``): NNCF's post-training
quantization of the graph (int8 weights and activations, ranges from the user's calibration texts), accepted only
if it keeps the vectors on texts it was not calibrated on (:class:`Int8Check`), else refused with the numbers.
The graph is run by :class:`neobert.inference.openvino_encoder.OpenVinoEncoder` (variant ``int8-static``).
nncf is the ``openvino`` extra, imported where used.
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
from ..inference.onnx_encoder import CONFIG_FILE, COSINE_FLOOR, REFERENCE_FILE
from ..inference.openvino_encoder import (
    STATIC_INT8,
    STATIC_INT8_FILE,
    OpenVinoEncoder,
    min_cosine,
    openvino_core,
)

NDCG_TOLERANCE = 0.01  # int8's nDCG@10 on the held-out docstring pairs: at least (1 - this) x float's
RESTORE_STEPS = 8  # accuracy control: at most this many rounds of layers put back in float (each re-ranks)
TUNING_TEXTS, TUNING_PAIRS = 128, 64  # accuracy control's texts: calibration texts, and other modules' pairs
RANKING_BATCHES = 8  # accuracy control ranks the layers on this many batches of them (each layer: one run)
HELDOUT_SHARE = 5  # every 5th calibration text is held out (never calibrated on) for the cosine check
# NNCF runs each calibration batch with hundreds of intermediate tensors as outputs: a batch holds at most this
# many tokens (rows x longest), which keeps its peak memory bounded (the 250M shape at 16 x 512 tokens: 16 GB
# for two batches; at 4 x 512: 8.5 GB; docs/serving.md)
CALIBRATION_TOKENS = 2048


@dataclass
class StaticInt8Config:
    """The settings of ``neobert export openvino-int8`` (:func:`run_static_int8`)."""

    model: str  # a base encoder's `neobert export onnx` directory: openvino_int8.xml is written into it
    calibration: str  # calibration texts: a table's `text` column or one text per line (every 5th held out)
    pairs: int = 200  # held-out docstring pairs whose nDCG@10 int8 must keep
    cosine_floor: float = COSINE_FLOOR  # the least minimum cosine to fp32 accepted on the held-out texts
    ndcg_tolerance: float = NDCG_TOLERANCE  # int8's nDCG@10 at least (1 - this) x fp32's
    # where plain int8 misses the floor, NNCF's accuracy control: the layers that cost the most cosine on
    # the calibration texts go back to float until it is kept, then the held-out check decides again
    accuracy_control: bool = True


def run_static_int8(config: StaticInt8Config) -> Int8Check:
    texts, _ = read_texts(config.calibration)
    return quantize_static(
        config.model,
        texts,
        pairs=config.pairs,
        cosine_floor=config.cosine_floor,
        ndcg_tolerance=config.ndcg_tolerance,
        accuracy_control=config.accuracy_control,
    )


class Int8Refused(ValueError):
    """A static int8 graph that does not keep the vectors (the numbers are in the message)."""


@dataclass
class Int8Check:
    """What a static int8 graph kept, against the fp32 graph, on texts it was not calibrated on."""

    calibration_texts: int
    heldout_texts: int  # every HELDOUT_SHARE-th user text, the held-out docstring queries and documents, the export's check batch
    cosine_min: float  # over the held-out texts; accepted from COSINE_FLOOR
    cosine_floor: float
    pairs: int  # held-out docstring pairs (each query's one relevant document among all of them)
    ndcg_float: float
    ndcg_int8: float
    ndcg_tolerance: float
    accuracy_control: bool = False  # NNCF's accuracy control made this graph (some layers kept in float)
    plain_cosine_min: float | None = None  # with accuracy control: what plain int8 kept, refused
    quantized_ops: int = 0  # the graph's FakeQuantize operations (none left: nothing is int8, refused)

    @property
    def accepted(self) -> bool:
        kept = self.cosine_min >= self.cosine_floor and self.ndcg_int8 >= self.ndcg_float * (
            1 - self.ndcg_tolerance
        )
        return kept and self.quantized_ops > 0

    @property
    def summary(self) -> str:
        how = "static, NNCF" + (
            f", accuracy control after plain int8's minimum cosine {self.plain_cosine_min:.4f}"
            if self.accuracy_control
            else ""
        )
        return (
            f"int8 ({how}; {self.quantized_ops} quantized operations) against fp32 on {self.heldout_texts} held-out texts: minimum cosine "
            f"{self.cosine_min:.4f} (floor {self.cosine_floor}); nDCG@10 on {self.pairs} held-out docstring "
            f"pairs {self.ndcg_int8:.4f} against {self.ndcg_float:.4f} (within {self.ndcg_tolerance:.0%} needed)"
        )


@functools.cache
def heldout_pairs(count: int, heldout: bool = True) -> tuple[Any, ...]:
    """The first ``count`` docstring pairs of the held-out modules (:mod:`neobert.data.docstring_pairs`'s
    split: the modules a contrastive fine-tune here never trains on), or with ``heldout=False`` of the other
    modules (accuracy control tunes on those: the check's kind of texts, not its texts); only those modules
    are parsed."""
    names = sorted({p.stem if p.suffix == ".py" else p.name for p in stdlib_root().iterdir()})
    modules = [name for name in names if name.isidentifier() and is_heldout(name, 0.2) == heldout]
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
    accuracy_control: bool = True,
) -> Int8Check:
    """Write ``openvino_int8.xml`` (+ ``.bin``) into the base export ``directory``: NNCF's static post-training
    quantization (transformer preset: int8 weights and activations, SmoothQuant) with ranges from
    ``calibration`` less every :data:`HELDOUT_SHARE`-th text. Accepted only if, against the fp32 graph, the
    minimum cosine over the held-out texts is at least ``cosine_floor`` and nDCG@10 on ``pairs`` held-out
    docstring pairs is within ``ndcg_tolerance`` of float's; else :class:`Int8Refused` with the numbers and
    nothing written. Where plain int8 is refused and ``accuracy_control``, :func:`_accuracy_controlled` tries
    again. On acceptance onnx_config.json lists the file (variant ``int8-static``) and the numbers.
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
    checked = functools.partial(
        _check_int8, fp32, partial, heldout, len(fitted), pairs, cosine_floor, ndcg_tolerance, threads
    )
    try:
        check = checked()
        if not check.accepted and accuracy_control:
            check = _accuracy_controlled(fp32, fitted, batch_size, partial, cosine_floor, check, checked)
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


def _accuracy_controlled(
    fp32: OpenVinoEncoder,
    fitted: list[str],
    batch_size: int,
    xml: Path,
    cosine_floor: float,
    plain: Int8Check,
    checked: Any,
) -> Int8Check:
    """NNCF's accuracy control where plain int8 (``plain``) missed the floor: quantized again, the layers that
    cost the most minimum cosine on tuning texts (:data:`TUNING_TEXTS` calibration texts and
    :data:`TUNING_PAIRS` pairs of the modules the check does not use) put back in float until within a quarter
    of the floor's margin there (0.9975 for 0.99: the held-out texts move more), then ``checked()`` again."""
    tuning = [t for p in heldout_pairs(TUNING_PAIRS, heldout=False) for t in (p.query, p.document)]
    drop = (1 - cosine_floor) / 4
    _quantize(fp32, fitted, batch_size, xml, max_drop=drop, tuning=fitted[:TUNING_TEXTS] + tuning)
    check = checked()
    check.accuracy_control, check.plain_cosine_min = True, plain.cosine_min
    return check


def _quantize(
    fp32: OpenVinoEncoder,
    texts: list[str],
    batch_size: int,
    xml: Path,
    max_drop: float | None = None,
    tuning: list[str] | None = None,
) -> None:
    """NNCF's static int8 of ``fp32``'s graph, activation ranges from ``texts``, saved as ``xml`` (+ .bin);
    with ``max_drop``, under accuracy control: layers go back to float until the minimum cosine of the
    pooled vectors to ``fp32``'s on ``tuning`` is within ``max_drop`` of 1."""
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    def batches(rows: list[str]) -> list[dict[str, np.ndarray]]:
        out = []
        for group in token_bounded(rows, fp32.tokenize(rows)[1].sum(axis=1).tolist(), batch_size):
            ids, mask = fp32.tokenize(group)
            out.append({"input_ids": ids, "attention_mask": mask})
        return out

    items = batches(texts)
    graph = openvino_core().read_model(fp32.directory / fp32.config["files"]["fp32"])
    settings = {"model_type": nncf.ModelType.TRANSFORMER, "subset_size": len(items)}
    if max_drop is None:
        quantized = nncf.quantize(graph, nncf.Dataset(items), **settings)
    else:
        checked = [
            {**item, "reference": fp32.run(item["input_ids"], item["attention_mask"])[-1]}
            for item in batches(sorted(tuning or texts, key=len))  # batches of like lengths, as encode pads
        ]
        inputs = lambda item: {"input_ids": item["input_ids"], "attention_mask": item["attention_mask"]}  # noqa: E731
        quantized = nncf.quantize_with_accuracy_control(
            graph,
            nncf.Dataset(items),
            nncf.Dataset(checked, inputs),
            _cosine_metric,
            max_drop=max_drop,
            drop_type=nncf.DropType.ABSOLUTE,
            advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
                max_num_iterations=RESTORE_STEPS, ranking_subset_size=RANKING_BATCHES
            ),
            **settings,
        )
    ov.save_model(quantized, xml, compress_to_fp16=False)


def token_bounded(rows: list[str], lengths: list[int], batch_size: int) -> list[list[str]]:
    """``rows`` in order, in batches of at most ``batch_size`` rows and :data:`CALIBRATION_TOKENS` padded
    tokens (rows x the longest's ``lengths``; a longer row alone)."""
    out: list[list[str]] = []
    longest = 0
    for row, length in zip(rows, lengths):
        longest = max(longest, length)
        if out and len(out[-1]) < batch_size and (len(out[-1]) + 1) * longest <= CALIBRATION_TOKENS:
            out[-1].append(row)
        else:
            out.append([row])
            longest = length
    return out


def _cosine_metric(compiled: Any, items: Any) -> tuple[float, list[float]]:
    """Accuracy control's metric: the minimum cosine of ``compiled``'s pooled vectors to the float graph's
    (each item's ``reference``), and each item's (a batch's) minimum (NNCF ranks the layers on them)."""
    worst: list[float] = []
    for item in items:
        got = compiled({"input_ids": item["input_ids"], "attention_mask": item["attention_mask"]})
        worst.append(min_cosine(got[compiled.outputs[-1]], item["reference"]))
    return min(worst), worst


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

    graph = openvino_core().read_model(xml)
    fake_quantize = sum(op.get_type_name() == "FakeQuantize" for op in graph.get_ops())
    # the export's own check batch too: the one OpenVINO checks the graph on as it loads (an accepted graph loads)
    check = np.load(fp32.directory / REFERENCE_FILE)
    batch = (check["input_ids"], check["attention_mask"])
    at_load = min_cosine(int8.run(*batch)[-1], fp32.run(*batch)[-1])
    return Int8Check(
        fitted,
        len(texts) + len(batch[0]),
        min(min_cosine(a, b), at_load),
        cosine_floor,
        len(pairs),
        ndcg(a),
        ndcg(b),
        ndcg_tolerance,
        quantized_ops=fake_quantize,
    )


class _Compiled(OpenVinoEncoder):
    """A graph file not yet listed in onnx_config.json (the int8 under test), run as ``encoder`` runs."""

    def __init__(self, encoder: OpenVinoEncoder, graph: Path, threads: int | None) -> None:
        self.directory, self.config, self.tokenizer = encoder.directory, encoder.config, encoder.tokenizer
        self.variant, self.precision = STATIC_INT8, "fp32"
        self._open(graph, threads, None)
