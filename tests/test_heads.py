"""Task heads: MLM, sequence classification, token classification, and their typed outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from neobert import (
    ModelConfig,
    NeoBERTConfig,
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTForTokenClassification,
    NeoBERTModel,
)

VOCAB = 128


def build(cls, **kwargs):
    """A tiny model of class ``cls``; ``kwargs`` go to ModelConfig when they are its fields, else to transformers."""
    fields = ModelConfig.from_name("tiny").to_dict()
    overrides = {k: v for k, v in kwargs.items() if k in fields}
    extra = {k: v for k, v in kwargs.items() if k not in fields}
    torch.manual_seed(0)
    config = NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny", **overrides), **extra)
    model = cls(config)
    with torch.no_grad():  # larger than the init, so heads produce clearly different numbers
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.1)
    return model.eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(1, VOCAB, (3, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    return ids, mask


def mlm_labels(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(2)
    selected = (torch.rand(ids.shape) < 0.3) & mask.bool()
    selected[0, 0] = True  # at least one
    labels = torch.full_like(ids, -100)
    labels[selected] = torch.randint(0, VOCAB, (int(selected.sum()),))
    return labels


# --- masked LM --------------------------------------------------------------------------------------


def test_mlm_logits_are_decoder_of_encoder():
    model = build(NeoBERTForMaskedLM)
    ids, mask = batch()
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
        h = model.model(ids, attention_mask=mask).last_hidden_state
    assert isinstance(out, MaskedLMOutput)
    assert out.logits.shape == (3, 10, VOCAB)
    assert out.loss is None
    torch.testing.assert_close(out.logits, h @ model.decoder.weight.T + model.decoder.bias)


def test_mlm_loss_is_cross_entropy_over_labelled_positions():
    model = build(NeoBERTForMaskedLM)
    ids, mask = batch()
    labels = mlm_labels(ids, mask)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=labels)
    log_probs = out.logits.double().log_softmax(-1)
    picked = [-log_probs[b, t, labels[b, t]] for b, t in (labels != -100).nonzero().tolist()]
    expected = torch.stack(picked).mean()
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-5, atol=1e-6)


def test_mlm_masked_positions():
    model = build(NeoBERTForMaskedLM)
    ids, mask = batch()
    labels = mlm_labels(ids, mask)
    selected = labels != -100
    with torch.no_grad():
        full = model(ids, attention_mask=mask, labels=labels)
        sparse = model(ids, attention_mask=mask, labels=labels, masked_positions=selected)
        unlabelled = model(ids, attention_mask=mask, masked_positions=selected)
    assert sparse.logits.shape == (int(selected.sum()), VOCAB)
    torch.testing.assert_close(sparse.logits, full.logits[selected])  # row-major order
    torch.testing.assert_close(sparse.loss, full.loss)
    assert unlabelled.loss is None  # no labels, no loss: the caller computes its own, once
    torch.testing.assert_close(unlabelled.logits, sparse.logits)


def test_mlm_loss_backward_reaches_decoder_and_encoder():
    model = build(NeoBERTForMaskedLM).train()
    ids, mask = batch()
    labels = mlm_labels(ids, mask)
    model(ids, attention_mask=mask, labels=labels, masked_positions=labels != -100).loss.backward()
    assert model.decoder.weight.grad.abs().sum() > 0
    assert model.decoder.bias.grad.abs().sum() > 0
    assert model.model.transformer_encoder[0].qkv.weight.grad.abs().sum() > 0


def test_mlm_decoder_is_untied():
    model = build(NeoBERTForMaskedLM)
    assert model.decoder.weight.data_ptr() != model.model.encoder.weight.data_ptr()
    assert model.get_output_embeddings() is model.decoder
    assert model.decoder.bias is not None


def test_mlm_packed_input():
    model = build(NeoBERTForMaskedLM)
    ids, mask = batch()
    lengths = mask.sum(-1)
    packed = ids[mask.bool()]  # (T,)
    cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).logits
        out = model(packed, cu_seqlens=cu_seqlens, max_seqlen=int(lengths.max())).logits
    assert out.shape == (int(lengths.sum()), VOCAB)
    torch.testing.assert_close(out, padded[mask.bool()], rtol=1e-5, atol=1e-5)


# --- sequence classification ------------------------------------------------------------------------


def manual_head(model, pooled: torch.Tensor) -> torch.Tensor:
    return model.classifier(torch.tanh(model.dense(pooled)))


def test_sequence_classification_cls_pooling():
    model = build(NeoBERTForSequenceClassification, num_labels=3)
    assert model.config.classifier_pooling == "cls"
    ids, mask = batch()
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
        h = model.model(ids, attention_mask=mask).last_hidden_state
        expected = manual_head(model, h[:, 0])
    assert isinstance(out, SequenceClassifierOutput)
    assert out.logits.shape == (3, 3)
    torch.testing.assert_close(out.logits, expected)


def test_sequence_classification_mean_pooling():
    model = build(NeoBERTForSequenceClassification, num_labels=3, classifier_pooling="mean")
    ids, mask = batch()
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
        h = model.model(ids, attention_mask=mask).last_hidden_state
        pooled = torch.stack([h[i, : int(mask[i].sum())].mean(0) for i in range(len(ids))])
        expected = manual_head(model, pooled)
        # the plain mean over all positions (padding included) is something else
        wrong = manual_head(model, h.mean(1))
    torch.testing.assert_close(out.logits, expected)
    assert (out.logits - wrong).abs().max() > 1e-4


def test_sequence_classification_dropout_only_in_training():
    model = build(NeoBERTForSequenceClassification, num_labels=3, classifier_dropout=0.5)
    ids, mask = batch()
    with torch.no_grad():
        a = model(ids, attention_mask=mask).logits
        b = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        model.train()
        torch.manual_seed(0)
        c = model(ids, attention_mask=mask).logits
    assert (a - c).abs().max() > 1e-4


def test_sequence_regression_uses_mse():
    model = build(NeoBERTForSequenceClassification, num_labels=1)
    ids, mask = batch()
    labels = torch.tensor([0.5, -1.0, 2.0])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (3, 1)
    expected = ((out.logits[:, 0] - labels) ** 2).mean()
    torch.testing.assert_close(out.loss, expected)


def test_sequence_classification_uses_cross_entropy():
    model = build(NeoBERTForSequenceClassification, num_labels=3)
    ids, mask = batch()
    labels = torch.tensor([2, 0, 1])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=labels)
    log_probs = out.logits.log_softmax(-1)
    expected = -log_probs[torch.arange(3), labels].mean()
    torch.testing.assert_close(out.loss, expected)


def test_sequence_multilabel_uses_bce():
    model = build(NeoBERTForSequenceClassification, num_labels=3)
    ids, mask = batch()
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=labels)
    p = out.logits.sigmoid()
    expected = -(labels * p.log() + (1 - labels) * (1 - p).log()).mean()
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)


# --- token classification ---------------------------------------------------------------------------


def test_token_classification_shapes_and_loss():
    model = build(NeoBERTForTokenClassification, num_labels=5)
    ids, mask = batch()
    torch.manual_seed(3)
    labels = torch.randint(0, 5, ids.shape)
    labels[mask == 0] = -100
    labels[0, 0] = -100  # e.g. [CLS]
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=labels)
        h = model.model(ids, attention_mask=mask).last_hidden_state
    assert isinstance(out, TokenClassifierOutput)
    assert out.logits.shape == (3, 10, 5)
    torch.testing.assert_close(out.logits, model.classifier(h))
    keep = labels != -100
    expected = -out.logits[keep].log_softmax(-1)[torch.arange(int(keep.sum())), labels[keep]].mean()
    torch.testing.assert_close(out.loss, expected)


def test_packed_input_reaches_the_token_head_and_is_refused_by_the_pooled_head():
    """Every head passes cu_seqlens to the encoder; the sequence head, which pools whole rows, refuses it."""
    tokens = build(NeoBERTForTokenClassification, num_labels=5)
    ids, mask = batch()
    lengths = mask.sum(-1)
    cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    with torch.no_grad():
        padded = tokens(ids, attention_mask=mask).logits
        packed = tokens(ids[mask.bool()], cu_seqlens=cu_seqlens, max_seqlen=int(lengths.max())).logits
    torch.testing.assert_close(packed, padded[mask.bool()], rtol=1e-5, atol=1e-5)
    sequence = build(NeoBERTForSequenceClassification, num_labels=2)
    with pytest.raises(ValueError, match="reads whole rows"):
        sequence(ids[mask.bool()], cu_seqlens=cu_seqlens, max_seqlen=int(lengths.max()))


# --- typed outputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "output_type", "kwargs", "labels"),
    [
        (NeoBERTForMaskedLM, MaskedLMOutput, {}, "mlm"),
        (NeoBERTForSequenceClassification, SequenceClassifierOutput, {"num_labels": 2}, "seq"),
        (NeoBERTForTokenClassification, TokenClassifierOutput, {"num_labels": 4}, "tok"),
    ],
)
def test_typed_outputs(cls, output_type, kwargs, labels):
    model = build(cls, **kwargs)
    ids, mask = batch()
    label_tensor = {
        "mlm": mlm_labels(ids, mask),
        "seq": torch.tensor([0, 1, 1]),
        "tok": torch.where(mask.bool(), torch.zeros_like(ids), torch.full_like(ids, -100)),
    }[labels]
    with torch.no_grad():
        out = model(ids, attention_mask=mask, labels=label_tensor, output_hidden_states=True)
        as_tuple = model(
            ids, attention_mask=mask, labels=label_tensor, output_hidden_states=True, return_dict=False
        )
    assert isinstance(out, output_type)
    assert out.loss is not None and out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert out.logits is not None
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert all(h.shape == (*ids.shape, model.config.hidden_size) for h in out.hidden_states)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], out.loss)
    torch.testing.assert_close(as_tuple[1], out.logits)


def test_base_model_typed_output():
    model = build(NeoBERTModel)
    ids, mask = batch()
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
    assert isinstance(out, BaseModelOutput)
    assert out.last_hidden_state.shape == (3, 10, 64)
    assert len(out.hidden_states) == 3
    assert out["last_hidden_state"] is out.last_hidden_state


def test_heads_share_the_encoder_weights_layout():
    # every head wraps the same encoder under `model.`, so an encoder state dict loads into each
    encoder = build(NeoBERTModel)
    ids, mask = batch()
    with torch.no_grad():
        reference = encoder(ids, attention_mask=mask).last_hidden_state
    for cls in (NeoBERTForMaskedLM, NeoBERTForSequenceClassification, NeoBERTForTokenClassification):
        model = build(cls)
        model.model.load_state_dict(encoder.state_dict())
        with torch.no_grad():
            out = model(ids, attention_mask=mask, output_hidden_states=True)
        torch.testing.assert_close(encoder.layer_norm(out.hidden_states[-1]), reference)
