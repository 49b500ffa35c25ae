"""Loading checkpoints that do not fit: every mismatch must fail loudly, naming what is wrong.

transformers on its own only warns about missing or unexpected tensors and silently initialises the
missing ones at random, which for an encoder means garbage embeddings that still "work". Our loader is
strict about the encoder and the MLM decoder, and lenient only about task heads: a fresh classification
head for fine-tuning, and an unused MLM decoder when loading the bare encoder.

Directories are written by hand in the released layout (tensor names and config keys of the released
checkpoint), at a tiny size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import neobert
from released_layout import released_config, released_tensors, write_checkpoint

VOCAB, HIDDEN, LAYERS, HEADS, INTERMEDIATE = 32, 16, 2, 2, 48
FFN = 32  # int(2 * 48 / 3) = 32, already a multiple of 8

CONFIG = released_config(VOCAB, HIDDEN, LAYERS, HEADS, INTERMEDIATE, max_length=32)


@pytest.fixture
def tensors() -> dict[str, torch.Tensor]:
    return released_tensors(CONFIG)


@pytest.fixture
def mlm_dir(tmp_path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    return write_checkpoint(tmp_path / "mlm", tensors, CONFIG)


def assert_encoder_loaded(encoder: neobert.NeoBERTModel, tensors: dict[str, torch.Tensor]) -> None:
    """Every encoder tensor of the model holds exactly the checkpoint's values."""
    state = encoder.state_dict()
    expected = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    assert state.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(state[name], value), name


# Ways of loading an MLM checkpoint; each must apply the same strict checks.
MLM_LOADERS = [
    pytest.param(neobert.NeoBERTForMaskedLM.from_pretrained, id="NeoBERTForMaskedLM"),
    pytest.param(transformers.AutoModelForMaskedLM.from_pretrained, id="AutoModelForMaskedLM"),
]
ENCODER_LOADERS = [
    *MLM_LOADERS,
    pytest.param(transformers.AutoModel.from_pretrained, id="AutoModel"),
    pytest.param(transformers.AutoModelForSequenceClassification.from_pretrained, id="AutoModelForSeqCls"),
]


def test_released_layout_loads_cleanly(mlm_dir, tensors):
    # the baseline every bad-input test below is a variation of
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_encoder_loaded(model.model, tensors)
    assert torch.equal(model.decoder.weight, tensors["decoder.weight"])
    assert torch.equal(model.decoder.bias, tensors["decoder.bias"])


@pytest.mark.parametrize("load", ENCODER_LOADERS)
def test_missing_encoder_tensor_raises(tmp_path, tensors, load):
    del tensors["model.transformer_encoder.1.wo.weight"], tensors["model.layer_norm.weight"]
    path = write_checkpoint(tmp_path / "ckpt", tensors, CONFIG)
    with pytest.raises(neobert.CheckpointError, match="missing") as err:
        load(path)
    # the bare encoder reports names without the `model.` prefix, the heads with it
    assert "transformer_encoder.1.wo.weight" in str(err.value)
    assert "layer_norm.weight" in str(err.value)


@pytest.mark.parametrize("load", ENCODER_LOADERS)
def test_unknown_extra_tensor_raises(tmp_path, tensors, load):
    # e.g. a checkpoint of a variant with attention biases, or with a learned position table
    tensors["model.transformer_encoder.0.qkv.bias"] = torch.zeros(3 * HIDDEN)
    tensors["model.positional_embedding.weight"] = torch.zeros(32, HIDDEN)
    path = write_checkpoint(tmp_path / "ckpt", tensors, CONFIG)
    with pytest.raises(neobert.CheckpointError, match="unexpected") as err:
        load(path)
    assert "transformer_encoder.0.qkv.bias" in str(err.value)
    assert "positional_embedding.weight" in str(err.value)


@pytest.mark.parametrize("ignore_mismatched_sizes", [False, True])
@pytest.mark.parametrize("load", ENCODER_LOADERS)
def test_wrongly_shaped_encoder_tensor_raises(tmp_path, tensors, load, ignore_mismatched_sizes):
    # A different SwiGLU width (e.g. intermediate_size not rounded the released way). Even
    # ignore_mismatched_sizes, which is meant for resizing task heads, must not re-initialise the encoder.
    tensors["model.transformer_encoder.0.ffn.w12.weight"] = torch.zeros(2 * FFN + 8, HIDDEN)
    path = write_checkpoint(tmp_path / "ckpt", tensors, CONFIG)
    with pytest.raises(neobert.CheckpointError, match="wrongly shaped") as err:
        load(path, ignore_mismatched_sizes=ignore_mismatched_sizes)
    message = str(err.value)
    assert "transformer_encoder.0.ffn.w12.weight" in message
    assert "(72, 16)" in message and "(64, 16)" in message  # checkpoint vs model shapes


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(transformers.AutoConfig.from_pretrained, id="AutoConfig"),
        pytest.param(neobert.NeoBERTConfig.from_pretrained, id="NeoBERTConfig"),
        *MLM_LOADERS,
        pytest.param(neobert.NeoBERTModel.from_pretrained, id="NeoBERTModel"),
    ],
)
def test_unknown_config_key_raises(tmp_path, tensors, load):
    # The original code's key drift (`dropout` vs `dropout_prob`) went unnoticed; an unknown key must fail.
    path = write_checkpoint(tmp_path / "ckpt", tensors, CONFIG | {"dropout_prob": 0.1})
    with pytest.raises(neobert.ConfigError, match="dropout_prob"):
        load(path)


def test_released_only_config_keys_are_accepted(mlm_dir):
    # `kwargs`, `pretrained_model_name_or_path`, `trust_remote_code` carry no architecture: accepted, dropped
    config = transformers.AutoConfig.from_pretrained(mlm_dir)
    assert isinstance(config, neobert.NeoBERTConfig)
    assert config.hidden_size == HIDDEN and config.intermediate_size == INTERMEDIATE
    assert config.to_model_config().ffn_hidden_size == FFN


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(neobert.NeoBERTModel.from_pretrained, id="NeoBERTModel"),
        pytest.param(neobert.NeoBERTForMaskedLM.from_pretrained, id="NeoBERTForMaskedLM"),
    ],
)
def test_non_neobert_directory_is_refused(tmp_path, load):
    bert = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        intermediate_size=32,
    )
    path = tmp_path / "bert"
    transformers.BertForMaskedLM(bert).save_pretrained(path)
    with pytest.raises(neobert.ConfigError, match=r"'bert'.*not a NeoBERT"):
        load(path)


@pytest.mark.parametrize("num_labels", [2, 5])
def test_missing_classification_head_gets_a_fresh_head(mlm_dir, tensors, num_labels):
    # fine-tuning starts from the MLM checkpoint: the head is new, the decoder is unused
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        mlm_dir, num_labels=num_labels, output_loading_info=True
    )
    assert isinstance(model, neobert.NeoBERTForSequenceClassification)
    assert set(info["missing_keys"]) == {"dense.weight", "dense.bias", "classifier.weight", "classifier.bias"}
    # the decoder may be skipped quietly or reported as unexpected, but nothing else may be left over
    assert set(info["unexpected_keys"]) <= {"decoder.weight", "decoder.bias"}
    assert_encoder_loaded(model.model, tensors)

    # the fresh head is initialised the paper's way (uniform in +-classifier_init_range, zero bias),
    # not left as uninitialised memory
    r = CONFIG["classifier_init_range"]
    for layer in (model.dense, model.classifier):
        assert layer.weight.abs().max() <= r and layer.weight.abs().max() > 0
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    assert model.classifier.weight.shape == (num_labels, HIDDEN)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]])).logits
    assert logits.shape == (1, num_labels) and torch.isfinite(logits).all()


def test_resized_classification_head_needs_ignore_mismatched_sizes(tmp_path, tensors):
    # a 3-label classifier checkpoint re-used for a 5-label task
    g = torch.Generator().manual_seed(1)
    head = {
        "dense.weight": torch.randn(HIDDEN, HIDDEN, generator=g),
        "dense.bias": torch.randn(HIDDEN, generator=g),
        "classifier.weight": torch.randn(3, HIDDEN, generator=g),
        "classifier.bias": torch.randn(3, generator=g),
    }
    encoder = {k: v for k, v in tensors.items() if not k.startswith("decoder.")}
    path = write_checkpoint(tmp_path / "cls", encoder | head, CONFIG | {"num_labels": 3})
    load = transformers.AutoModelForSequenceClassification.from_pretrained

    with pytest.raises(neobert.CheckpointError, match=r"classifier\.weight"):
        load(path, num_labels=5)
    model = load(path, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.weight.shape == (5, HIDDEN)
    assert torch.equal(model.dense.weight, head["dense.weight"])  # what does fit is still loaded
    assert_encoder_loaded(model.model, tensors)


@pytest.mark.parametrize(
    "dropped",
    [("decoder.weight", "decoder.bias"), ("decoder.bias",)],
    ids=["no-decoder", "no-decoder-bias"],
)
@pytest.mark.parametrize("load", MLM_LOADERS)
def test_missing_mlm_decoder_raises(tmp_path, tensors, load, dropped):
    # A random decoder would give random logits that look like a working model.
    for name in dropped:
        del tensors[name]
    path = write_checkpoint(tmp_path / "ckpt", tensors, CONFIG)
    with pytest.raises(neobert.CheckpointError, match="missing") as err:
        load(path)
    for name in dropped:
        assert name in str(err.value)


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(transformers.AutoModel.from_pretrained, id="AutoModel"),
        pytest.param(neobert.NeoBERTModel.from_pretrained, id="NeoBERTModel"),
    ],
)
def test_base_model_ignores_the_mlm_decoder(mlm_dir, tensors, load):
    model, info = load(mlm_dir, output_loading_info=True)
    assert isinstance(model, neobert.NeoBERTModel)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert set(info["unexpected_keys"]) <= {"decoder.weight", "decoder.bias"}
    assert_encoder_loaded(model, tensors)
