"""Checkpoint directories in the released NeoBERT layout, written by hand (not by our model code): the
config.json with the released file's extra keys, and random weights under the released tensor names."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file


def ffn_width(intermediate: int) -> int:
    """The released SwiGLU hidden width: two thirds of ``intermediate_size``, rounded up to a multiple of 8."""
    return math.ceil(int(2 * intermediate / 3) / 8) * 8


def released_config(
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    intermediate: int,
    max_length: int,
    norm_eps: float = 1e-5,
) -> dict:
    """The fields and extra keys of the released config.json, at the given shape."""
    return {
        "architectures": ["NeoBERTLMHead"],
        "auto_map": {
            "AutoConfig": "model.NeoBERTConfig",
            "AutoModel": "model.NeoBERT",
            "AutoModelForMaskedLM": "model.NeoBERTLMHead",
            "AutoModelForSequenceClassification": "model.NeoBERTForSequenceClassification",
        },
        "classifier_init_range": 0.02,
        "decoder_init_range": 0.02,
        "dim_head": hidden // heads,
        "embedding_init_range": 0.02,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "kwargs": {
            "classifier_num_labels": -1,
            "pretrained_model_name_or_path": "google-bert/bert-base-uncased",
            "trust_remote_code": True,
        },
        "max_length": max_length,
        "model_type": "neobert",
        "norm_eps": norm_eps,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "pretrained_model_name_or_path": "google-bert/bert-base-uncased",
        "torch_dtype": "float32",
        "transformers_version": "4.48.2",
        "trust_remote_code": True,
        "vocab_size": vocab,
    }


def released_tensors(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random fp32 weights under the released MLM tensor names, for ``config`` (a released config.json)."""
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    ffn = ffn_width(config["intermediate_size"])
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float = 0.1) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    def norm_weight() -> torch.Tensor:
        # far from 1 so that a norm whose weight is ignored (or applied twice) is caught
        return 1.0 + rand(hidden, std=0.3)

    tensors = {"model.encoder.weight": rand(vocab, hidden, std=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.transformer_encoder.{i}."
        tensors[p + "attention_norm.weight"] = norm_weight()
        tensors[p + "qkv.weight"] = rand(3 * hidden, hidden, std=0.2)  # peaked attention: splits matter
        # small output projections keep the residual stream O(1), so fp32 round-off stays well under 1e-5
        tensors[p + "wo.weight"] = rand(hidden, hidden, std=0.05)
        tensors[p + "ffn_norm.weight"] = norm_weight()
        tensors[p + "ffn.w12.weight"] = rand(2 * ffn, hidden)
        tensors[p + "ffn.w3.weight"] = rand(hidden, ffn, std=0.05)
    tensors["model.layer_norm.weight"] = norm_weight()
    tensors["decoder.weight"] = rand(vocab, hidden)
    tensors["decoder.bias"] = rand(vocab, std=0.5)
    return tensors


def write_checkpoint(path: Path, tensors: dict[str, torch.Tensor], config: dict) -> Path:
    """model.safetensors + config.json in ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path
