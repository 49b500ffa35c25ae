"""Inference precisions side by side: fp32, bf16 (the fast path), and int8 through torch's own and torchao's
quantization, each measured for tokens/s and for how far its embeddings move from fp32.

The issue's rule for int8: keep a path only if mean-pooled embeddings stay within cosine 0.99 of fp32, and
report its speed beside bf16. Every variant runs in one process on the same rows of real text (documents
of the standard-library corpus, tokenized and packed into full rows), timed round-robin after a warm-up.
Static int8 is calibrated on other rows than the ones it is scored on. Variants whose library is missing
(torchao) or that fail on this machine are reported with the reason, not dropped silently.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..common.progress import progress_bar
from ..common.tables import markdown_table
from ..data.corpus import iter_stdlib_documents
from ..inference.encoders import is_neobert, load_model, resolve_tokenizer
from ..model import set_runtime
from ..model.pooling import mean_pool
from ..runtime.fastpath import fast_inference
from .measure import machine_info
from .report import publish

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, mask) -> (B, L, C) hidden states

VARIANTS = {
    "fp32": "float32 weights and activations: the reference",
    "bf16": "bf16 weights (NeoBERT: neobert.runtime.fastpath.fast_inference, unpadded attention)",
    "bf16-compile": "bf16 as above + torch.compile",
    "int8-dynamic": "torch.ao quantize_dynamic: int8 Linear weights, activations quantized per call (fp32 rest)",
    "int8-weight-only": "torchao Int8WeightOnlyConfig on the bf16 model: int8 weights, bf16 compute",
    "int8-torchao-compile": "torchao Int8DynamicActivationInt8WeightConfig on the bf16 model + torch.compile",
    "int8-static-pt2e": "torch.export + torchao's X86InductorQuantizer (static, calibrated) + torch.compile "
    "with freezing, under bf16 autocast (oneDNN int8 kernels, AMX where present)",
}
DEFAULT_VARIANTS = ("fp32", "bf16", "int8-dynamic", "int8-weight-only", "int8-static-pt2e")
COSINE_FLOOR = 0.99


@dataclass
class PrecisionBenchConfig:
    """Inference precisions side by side in one process on rows of real text: tokens/s, the ratio to bf16,
    and the cosine of mean-pooled embeddings to fp32 (an int8 path is worth keeping only above 0.99 and
    faster than bf16). The torchao variants need `pip install 'neobert[quantization]'`."""

    model: str = "neobert"  # a NeoBERT preset (random weights) or any encoder directory (e.g. real weights)
    tokenizer: str | None = None  # tokenizer directory (default: the model's own)
    variants: tuple[str, ...] = DEFAULT_VARIANTS  # from VARIANTS
    length: int = 512  # tokens per row
    batch: int = 4  # rows per forward
    repeats: int = 3  # timed rounds (the median is reported)
    output: str | None = None  # directory for results.json and results.md
    progress: bool = True  # a progress bar
    extra: dict[str, Any] = field(default_factory=dict)  # load_model keyword arguments

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        if self.length < 8 or self.batch < 1 or self.repeats < 1:
            raise ValueError("length must be >= 8, batch and repeats >= 1")


def text_rows(tokenizer: Any, rows: int, length: int, skip: int = 0) -> torch.Tensor:
    """``rows`` x ``length`` token ids of real text: stdlib-corpus documents packed end to end, each row
    starting with [CLS] and ending with [SEP]; ``skip`` rows are passed over first (a disjoint set)."""

    body = length - 2
    needed = (rows + skip) * body
    ids: list[int] = []
    for doc in iter_stdlib_documents():
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if len(ids) >= needed:
            break
    if len(ids) < needed:
        raise ValueError(f"the stdlib corpus holds only {len(ids):,} tokens; {needed:,} needed")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    out = [[cls, *ids[r * body : (r + 1) * body], sep] for r in range(skip, skip + rows)]
    return torch.tensor(out)


def _hidden(model: torch.nn.Module) -> Forward:
    return lambda ids, mask: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _bf16(model: torch.nn.Module) -> torch.nn.Module:
    model = copy.deepcopy(model)
    if is_neobert(model):
        return fast_inference(model)
    return model.to(torch.bfloat16)


def _set_unpad(model: torch.nn.Module, unpad: bool) -> None:
    if is_neobert(model):
        set_runtime(model, unpad=unpad)


class _LastHidden(torch.nn.Module):
    """(ids, mask) -> last hidden state: a plain signature for torch.export."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def build(variant: str, fp32: torch.nn.Module, calibration: tuple[torch.Tensor, torch.Tensor]) -> Forward:
    """The forward of ``variant`` made from the float32 model (left untouched)."""
    if variant == "fp32":
        return _hidden(fp32)
    if variant == "bf16":
        return _hidden(_bf16(fp32))
    if variant == "bf16-compile":
        return _hidden(torch.compile(_bf16(fp32)))
    if variant == "int8-dynamic":
        from torch.ao.quantization import quantize_dynamic

        return _hidden(quantize_dynamic(copy.deepcopy(fp32), {torch.nn.Linear}, dtype=torch.qint8))
    if variant in ("int8-weight-only", "int8-torchao-compile"):
        from torchao.quantization import (
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            quantize_,
        )

        model = _bf16(fp32)
        if variant == "int8-weight-only":
            quantize_(model, Int8WeightOnlyConfig())
            return _hidden(model)
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        return _hidden(torch.compile(model))
    if variant == "int8-static-pt2e":
        return _static_pt2e(fp32, calibration)
    raise ValueError(f"unknown variant {variant!r}")


def _static_pt2e(fp32: torch.nn.Module, calibration: tuple[torch.Tensor, torch.Tensor]) -> Forward:
    import torch._inductor.config as inductor_config
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = copy.deepcopy(fp32)
    _set_unpad(model, False)  # export needs static shapes: the padded path

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return compiled(ids, mask)

    with torch.no_grad():
        exported = torch.export.export(_LastHidden(model).eval(), calibration).module()
        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
        prepared = prepare_pt2e(exported, quantizer)
        prepared(*calibration)
        compiled = torch.compile(convert_pt2e(prepared))
        with inductor_config.patch(freezing=True):  # weights become constants: oneDNN prepacks them
            forward(*calibration)  # compiles now, under that setting
    return forward


def run(config: PrecisionBenchConfig) -> dict:
    torch.manual_seed(0)  # preset weights
    fp32 = load_model(config.model, **config.extra).float().eval()
    tokenizer = resolve_tokenizer(config.model, config.tokenizer)
    ids = text_rows(tokenizer, config.batch, config.length)
    calibration_ids = text_rows(tokenizer, config.batch, config.length, skip=config.batch)
    mask = torch.ones_like(ids)
    calibration = (calibration_ids, torch.ones_like(calibration_ids))

    rows: dict[str, dict] = {}
    forwards: dict[str, Forward] = {}
    with torch.inference_mode():
        reference = mean_pool(_hidden(fp32)(ids, mask).float(), mask)
    for variant in progress_bar(config.variants, desc="build + warm up", disable=not config.progress):
        rows[variant] = {"variant": variant, "what": VARIANTS[variant]}
        try:
            start = time.perf_counter()
            forward = build(variant, fp32, calibration)
            with torch.inference_mode():
                pooled = mean_pool(
                    forward(ids, mask).float(), mask
                )  # warm-up (compiles) and the accuracy check
            rows[variant]["setup_s"] = time.perf_counter() - start
        except Exception as err:  # a missing library or an unsupported op: reported, not fatal
            rows[variant]["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            continue
        cosine = F.cosine_similarity(pooled, reference, dim=-1)
        rows[variant].update(cosine_min=cosine.min().item(), cosine_mean=cosine.mean().item())
        forwards[variant] = forward

    times: dict[str, list[float]] = {v: [] for v in forwards}
    rounds = progress_bar(total=config.repeats * len(forwards), desc="timing", disable=not config.progress)
    with torch.inference_mode(), rounds:
        for _ in range(config.repeats):
            for variant, forward in forwards.items():  # interleaved: drift hits every variant alike
                start = time.perf_counter()
                forward(ids, mask)
                times[variant].append(time.perf_counter() - start)
                rounds.update()
    tokens = ids.numel()
    for variant, seconds in times.items():
        rows[variant]["tokens_per_s"] = tokens / statistics.median(seconds)
    base = rows.get("bf16", {}).get("tokens_per_s")
    for row in rows.values():
        if base and "tokens_per_s" in row:
            row["vs_bf16"] = row["tokens_per_s"] / base
        if "cosine_min" in row:
            row["cosine_ok"] = row["cosine_min"] >= COSINE_FLOOR
    results = {
        "config": asdict(config),
        "machine": machine_info("cpu"),
        "tokens_per_forward": tokens,
        "rows": list(rows.values()),
    }
    return publish(results, markdown, config.output)


def markdown(results: dict) -> str:
    c = results["config"]
    name = c["model"] if not Path(c["model"]).is_absolute() else Path(c["model"]).parent.name
    lines = [
        f"# Inference precisions: {name}, {c['batch']} x {c['length']} tokens of real text",
        "",
        f"torch {results['machine']['torch']}, {results['machine']['threads']} threads, "
        f"{results['machine'].get('cpu', '?')}; median of {c['repeats']} interleaved rounds. Cosine: "
        f"mean-pooled embeddings against fp32 (floor {COSINE_FLOOR}).",
        "",
    ]
    rows = []
    for r in results["rows"]:
        if "error" in r:
            rows.append([r["variant"], f"failed: {r['error']}", None, None, None, "no"])
            continue
        kept = "reference" if r["variant"] == "fp32" else _verdict(r)
        vs_bf16 = f"{r['vs_bf16']:.2f}x" if r.get("vs_bf16") is not None else None
        rows.append(
            [
                r["variant"],
                f"{r['tokens_per_s']:,.0f}",
                vs_bf16,
                f"{r['cosine_min']:.5f}",
                f"{r['cosine_mean']:.5f}",
                kept,
            ]
        )
    header = ["variant", "tokens/s", "vs bf16", "cosine min", "cosine mean", "kept?"]
    lines += markdown_table(header, rows, align="lrrrrl").splitlines()
    lines += ["", "Variants:", ""] + [f"- `{r['variant']}`: {r['what']}" for r in results["rows"]]
    return "\n".join(lines) + "\n"


def _verdict(row: dict) -> str:
    if not row["cosine_ok"]:
        return f"no: cosine below {COSINE_FLOOR}"
    if row["variant"].startswith("bf16"):
        return "yes (default)" if row["variant"] == "bf16" else "yes (--compile)"
    if row.get("vs_bf16", 0) > 1.05:
        return "faster than bf16"
    return "no: not faster than bf16"
