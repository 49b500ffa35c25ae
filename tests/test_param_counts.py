"""Exact parameter counts: the spec's numbers, the real modules, and ModelConfig.num_parameters() agree.

Large presets are built on the meta device: shapes only, nothing allocated.
"""

from __future__ import annotations

import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTForMaskedLM, NeoBERTModel

RELEASED_ENCODER = 221_665_536
RELEASED_WITH_MLM = 245_136_954


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def build(cls, model_config: ModelConfig, meta: bool = True):
    config = NeoBERTConfig.from_model_config(model_config)
    if not meta:
        return cls(config)
    with torch.device("meta"):
        model = cls(config)
    assert all(p.is_meta for p in model.parameters())
    return model


def test_released_encoder_count():
    config = ModelConfig.from_name("neobert")
    model = build(NeoBERTModel, config)
    assert count(model) == RELEASED_ENCODER
    assert config.num_parameters() == RELEASED_ENCODER


def test_released_mlm_count():
    config = ModelConfig.from_name("neobert")
    model = build(NeoBERTForMaskedLM, config)
    assert count(model) == RELEASED_WITH_MLM
    assert count(model.model) == RELEASED_ENCODER
    assert config.num_parameters(mlm_head=True) == RELEASED_WITH_MLM
    # untied decoder with bias: vocab x hidden + vocab
    assert RELEASED_WITH_MLM - RELEASED_ENCODER == 30522 * 768 + 30522
    assert model.decoder.weight is not model.model.encoder.weight


def test_released_count_by_hand():
    # embedding + 28 blocks (2 RMSNorm, qkv, wo, SwiGLU w12 and w3 with hidden 2048) + final RMSNorm
    c, f, v = 768, 2048, 30522
    block = 2 * c + 3 * c * c + c * c + 2 * c * f + f * c
    assert v * c + 28 * block + c == RELEASED_ENCODER


def test_released_tensor_shapes():
    model = build(NeoBERTForMaskedLM, ModelConfig.from_name("neobert"))
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert len(shapes) == 172  # the released model.safetensors holds 172 tensors
    assert shapes["model.encoder.weight"] == (30522, 768)
    assert shapes["model.transformer_encoder.0.qkv.weight"] == (2304, 768)
    assert shapes["model.transformer_encoder.27.wo.weight"] == (768, 768)
    assert shapes["model.transformer_encoder.5.ffn.w12.weight"] == (4096, 768)
    assert shapes["model.transformer_encoder.5.ffn.w3.weight"] == (768, 2048)
    assert shapes["model.transformer_encoder.5.attention_norm.weight"] == (768,)
    assert shapes["model.transformer_encoder.5.ffn_norm.weight"] == (768,)
    assert shapes["model.layer_norm.weight"] == (768,)
    assert shapes["decoder.weight"] == (30522, 768)
    assert shapes["decoder.bias"] == (30522,)


@pytest.mark.parametrize("name", ["tiny", "small", "120m", "250m-wide", "bert-baseline", "neobert-1024"])
@pytest.mark.parametrize("mlm", [False, True])
def test_num_parameters_matches_modules(name, mlm):
    config = ModelConfig.from_name(name)
    cls = NeoBERTForMaskedLM if mlm else NeoBERTModel
    model = build(cls, config, meta=name not in ("tiny", "small"))
    assert count(model) == config.num_parameters(mlm_head=mlm)


def test_learned_positions_are_counted():
    rope = ModelConfig.from_name("tiny")
    learned = rope.replace(position_embedding="learned")
    assert learned.num_parameters() - rope.num_parameters() == learned.max_length * learned.hidden_size
    assert count(build(NeoBERTModel, learned, meta=False)) == learned.num_parameters()


def test_model_count_independent_of_context_extension():
    # RoPE scaling changes no parameter: the cos/sin tables are non-persistent buffers
    config = ModelConfig.from_name("tiny")
    longer = config.with_context(4 * config.max_length, "yarn")
    assert longer.num_parameters() == config.num_parameters()
    model = build(NeoBERTModel, longer, meta=False)
    assert count(model) == config.num_parameters()
    assert not any("rotary" in key for key in model.state_dict())


@pytest.mark.parametrize("ffn", ["swiglu", "gelu"])
def test_linear_bias_switch(ffn):
    # BERT's linears have biases; NeoBERT's have none: the switch is off for every NeoBERT preset
    assert not any(ModelConfig.from_name(n).linear_bias for n in ("neobert", "neobert-1024", "120m", "tiny"))
    assert ModelConfig.from_name("bert-baseline").linear_bias
    plain = ModelConfig.from_name("tiny", ffn=ffn)
    biased = plain.replace(linear_bias=True)
    model = build(NeoBERTModel, biased, meta=False)
    keys = {k.split(".", 2)[-1] for k in model.state_dict() if k.startswith("transformer_encoder.0.")}
    first = "ffn.w12" if ffn == "swiglu" else "ffn.w1"
    assert {"qkv.bias", "wo.bias", f"{first}.bias", "ffn.w3.bias"} <= keys
    c, f, layers = biased.hidden_size, biased.ffn_hidden_size, biased.num_hidden_layers
    per_layer = 4 * c + (2 * f if ffn == "swiglu" else f) + c
    assert biased.num_parameters() - plain.num_parameters() == layers * per_layer
    assert count(model) == biased.num_parameters()
