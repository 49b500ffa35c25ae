"""Architecture summary and exact parameter counts of a preset or a model directory (``neobert info``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from ..common.config import PRESETS, ModelConfig
from ..common.tables import markdown_table
from ..model import NeoBERTConfig, NeoBERTForMaskedLM
from .encoders import is_preset, model_dir


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

    @property
    def summary(self) -> str:
        """A two-column Markdown table: shape, FFN, norm, positions, vocabulary, parameter counts, weights."""
        c = self.config
        rows = [
            ("layers x hidden", f"{c.num_hidden_layers} x {c.hidden_size}"),
            ("attention heads (head dim)", f"{c.num_attention_heads} ({c.head_dim})"),
            ("FFN", f"{c.ffn}, hidden {c.ffn_hidden_size} (intermediate_size {c.intermediate_size})"),
            ("norm (pre-norm), eps", f"{c.norm}, {c.norm_eps:g}"),
            ("positions", _positions(c)),
            ("vocabulary", f"{c.vocab_size:,} (pad id {c.pad_token_id})"),
            ("max length", f"{c.max_length:,}"),
            ("parameters: encoder", f"{self.encoder_parameters:,}"),
            ("parameters: with MLM head", f"{self.mlm_parameters:,}"),
        ]
        if self.weights is not None:
            w = self.weights
            rows.append((w.file, f"{w.tensors} tensors, {w.parameters:,} values, {', '.join(w.dtypes)}"))
        return f"NeoBERT {self.source}: {self.name}\n\n" + markdown_table(["field", "value"], rows)


def count_parameters(config: ModelConfig) -> tuple[int, int]:
    """(encoder, encoder + MLM head) parameters of the real modules, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config))
    encoder = sum(p.numel() for p in model.model.parameters())
    return encoder, sum(p.numel() for p in model.parameters())


def summarize_weights(directory: Path) -> WeightsSummary | None:
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
            parameters += math.prod(tensor.get_shape())
            dtypes.add(tensor.get_dtype())
    return WeightsSummary(path.name, tensors, parameters, sorted(dtypes))


def model_info(name_or_path: str) -> InfoResult:
    """Summarize a preset name or a directory holding config.json (the released one included)."""
    path = model_dir(name_or_path)  # a clear error for a missing directory, a file, no config.json
    if path is None and is_preset(name_or_path):
        config, source, weights = ModelConfig.from_name(name_or_path), "preset", None
    elif path is not None:
        config = NeoBERTConfig.from_pretrained(path).to_model_config()
        source, weights = "directory", summarize_weights(path)
    else:
        raise ValueError(f"{name_or_path} is not a preset ({', '.join(PRESETS)}) nor a local model directory")
    encoder, mlm = count_parameters(config)
    return InfoResult(source, name_or_path, config, encoder, mlm, weights)


def _positions(c: ModelConfig) -> str:
    if c.position_embedding == "learned":
        return "learned table"
    text = f"RoPE, theta {c.rope_theta:g}"
    if c.rope_scaling_type != "none":
        text += f", {c.rope_scaling_type} x{c.rope_scaling_factor:g} from {c.rope_original_max_length}"
    return text
