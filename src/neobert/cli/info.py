"""``neobert info``: architecture summary and exact parameter counts of a preset or a model directory."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from safetensors import safe_open

from ..config import PRESETS, ModelConfig
from ..encoders import is_preset, model_dir
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from .common import CLIError, make_console


@dataclass
class WeightsSummary:
    file: str
    tensors: int
    parameters: int
    dtypes: list[str]


@dataclass
class InfoResult:
    source: str  # "preset" or "directory"
    name: str
    config: ModelConfig
    encoder_parameters: int
    mlm_parameters: int
    weights: WeightsSummary | None = None


def count_parameters(config: ModelConfig) -> tuple[int, int]:
    """(encoder, encoder + MLM head) parameters of the real modules, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config))
    encoder = sum(p.numel() for p in model.model.parameters())
    return encoder, sum(p.numel() for p in model.parameters())


def _summarize_weights(directory: Path) -> WeightsSummary | None:
    """Tensor count, stored parameters and dtypes of model.safetensors, read from its header only."""
    path = directory / "model.safetensors"
    if not path.is_file():
        return None
    tensors = parameters = 0
    dtypes: set[str] = set()
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            tensor = f.get_slice(key)
            tensors += 1
            parameters += _numel(tensor.get_shape())
            dtypes.add(tensor.get_dtype())
    return WeightsSummary(path.name, tensors, parameters, sorted(dtypes))


def _numel(shape: list[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def run(name_or_path: str) -> InfoResult:
    """Summarize a preset name or a directory holding config.json (the released one included)."""
    path = model_dir(name_or_path)  # a clear error for a missing directory, a file, no config.json
    if path is None and is_preset(name_or_path):
        config, source, weights = ModelConfig.from_name(name_or_path), "preset", None
    elif path is not None:
        config = NeoBERTConfig.from_pretrained(path).to_model_config()
        source, weights = "directory", _summarize_weights(path)
    else:
        raise CLIError(
            f"{name_or_path} is not a preset ({', '.join(PRESETS)}) nor a local model directory"
        )
    encoder, mlm = count_parameters(config)
    return InfoResult(source, name_or_path, config, encoder, mlm, weights)


def render(result: InfoResult, console: Console) -> None:
    c = result.config
    table = Table(title=f"NeoBERT {result.source}: {escape(result.name)}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = [
        ("layers x hidden", f"{c.num_hidden_layers} x {c.hidden_size}"),
        ("attention heads (head dim)", f"{c.num_attention_heads} ({c.head_dim})"),
        ("FFN", f"{c.ffn}, hidden {c.ffn_hidden_size} (intermediate_size {c.intermediate_size})"),
        ("norm (pre-norm), eps", f"{c.norm}, {c.norm_eps:g}"),
        ("positions", _positions(c)),
        ("vocabulary", f"{c.vocab_size:,} (pad id {c.pad_token_id})"),
        ("max length", f"{c.max_length:,}"),
        ("parameters: encoder", f"{result.encoder_parameters:,}"),
        ("parameters: with MLM head", f"{result.mlm_parameters:,}"),
    ]
    if result.weights is not None:
        w = result.weights
        rows.append((w.file, f"{w.tensors} tensors, {w.parameters:,} values, {', '.join(w.dtypes)}"))
    for field, value in rows:
        table.add_row(field, escape(value))
    console.print(table)


def _positions(c: ModelConfig) -> str:
    if c.position_embedding == "learned":
        return "learned table"
    text = f"RoPE, theta {c.rope_theta:g}"
    if c.rope_scaling_type != "none":
        text += f", {c.rope_scaling_type} x{c.rope_scaling_factor:g} from {c.rope_original_max_length}"
    return text


def _main(args: argparse.Namespace) -> int:
    render(run(args.model), make_console())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info",
        help="architecture and parameter counts of a preset or model directory",
        description="Summarize a NeoBERT architecture; counts come from the real modules built on the "
        "meta device, so even the full model costs no memory.",
    )
    parser.add_argument(
        "model", metavar="PATH_OR_PRESET", help=f"model directory or preset ({', '.join(PRESETS)})"
    )
    parser.set_defaults(func=_main)
