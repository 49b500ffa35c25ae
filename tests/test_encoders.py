"""The encoders wing: what a model is, how long its inputs may be, which tokenizer it gets, how it is saved."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertModel,
    CamembertConfig,
    CamembertModel,
    LongformerConfig,
    LongformerModel,
    RobertaConfig,
    RobertaModel,
)

from neobert.inference.encoders import (
    Encoder,
    apply_precision,
    check_precision,
    is_neobert,
    load_encoder,
    load_model,
    max_positions,
    resolve_tokenizer,
    save_pretrained,
)
from neobert.inference.run import encode

SMALL = dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


class _Limit:
    def __init__(self, model_max_length):
        self.model_max_length = model_max_length


@pytest.mark.parametrize(
    ("model", "usable"),
    [
        (BertModel(BertConfig(**SMALL, max_position_embeddings=512)), 512),
        # positions count from padding_idx + 1 = 2: of 514 rows, 512 can be used
        (RobertaModel(RobertaConfig(**SMALL, max_position_embeddings=514, pad_token_id=1)), 512),
        (CamembertModel(CamembertConfig(**SMALL, max_position_embeddings=514, pad_token_id=1)), 512),
        (
            LongformerModel(
                LongformerConfig(**SMALL, max_position_embeddings=4098, pad_token_id=1, attention_window=[4])
            ),
            4096,
        ),
    ],
)
def test_max_positions_leaves_out_reserved_rows(model, usable):
    assert max_positions(model) == usable
    # a position beyond the table fails; the last usable one does not (the limit is exact, not conservative)
    ids = torch.full((1, usable), 5)
    model.eval()(input_ids=ids)
    with pytest.raises((IndexError, RuntimeError)):
        model(input_ids=torch.full((1, usable + 1), 5))
    assert max_positions(model, _Limit(128)) == 128  # a tokenizer limit applies too
    assert max_positions(model, _Limit(int(1e30))) == usable  # "no limit" tokenizers do not


def test_neobert_limit_is_its_max_length_whatever_the_tokenizer():
    model = load_model("tiny")
    assert max_positions(model, _Limit(512)) == model.config.max_length == 128


def test_is_neobert_sees_through_heads_and_wrappers():
    mlm = load_model("tiny", "mlm")
    assert is_neobert(mlm) and is_neobert(mlm.base_model)
    assert is_neobert(torch.compile(mlm))  # not compiled until called
    assert not is_neobert(BertModel(BertConfig(**SMALL)))
    assert Encoder(mlm, None, "tiny", 128).is_neobert


def test_bad_model_paths_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"model directory {tmp_path}/missing does not exist"):
        load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="model directory no/such/dir does not exist"):
        load_model("no/such/dir")  # not a valid hub id: not sent to the hub
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        load_model(tmp_path / "file.txt")
    with pytest.raises(FileNotFoundError, match=r"holds no config\.json"):
        load_model(tmp_path)


def test_precision_is_checked_and_means_the_weights_dtype_for_every_encoder(tokenizer):
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16"):
        check_precision("int4")
    torch.manual_seed(0)
    bert = BertModel(BertConfig(**{**SMALL, "vocab_size": 30522})).eval()
    texts = ["a short text", "and a longer one, so that the batch is padded"]
    expected = encode(bert, tokenizer, texts, show_progress=False)
    assert apply_precision(bert, "bf16").embeddings.word_embeddings.weight.dtype == torch.bfloat16
    got = encode(bert, tokenizer, texts, show_progress=False)
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert got.dtype == np.float32 and cosine.min() > 0.99 and not np.allclose(got, expected, atol=1e-5)
    assert apply_precision(bert, "fp32").embeddings.word_embeddings.weight.dtype == torch.float32
    neobert = apply_precision(load_model("tiny"), "bf16")
    assert next(neobert.parameters()).dtype == torch.bfloat16


def test_tokenizer_choice_follows_the_model(tmp_path, tokenizer):
    # a NeoBERT preset gets the NeoBERT tokenizer: no token types
    assert "token_type_ids" not in resolve_tokenizer("tiny")("a", "b")
    # a BERT directory keeps its tokenizer's token types (sentence pairs need them)
    bert = BertModel(BertConfig(**{**SMALL, "vocab_size": len(tokenizer)}))
    bert.save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    pair = resolve_tokenizer(tmp_path / "bert")("a", "b")
    assert pair["token_type_ids"][-2:] == [1, 1]  # "b" and the last [SEP]


def test_save_is_atomic_and_replaces_a_directory_whole(tmp_path, tokenizer, monkeypatch):
    encoder = load_encoder("tiny")
    target = save_pretrained(encoder.model, encoder.tokenizer, tmp_path / "model", extra_files={"a.txt": "1"})
    assert (target / "vocab.txt").is_file() and (target / "a.txt").read_text() == "1"
    before = sorted(p.name for p in target.iterdir())

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(type(encoder.tokenizer), "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        save_pretrained(encoder.model, encoder.tokenizer, target)
    assert sorted(p.name for p in target.iterdir()) == before  # the old directory, whole
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary left
    reloaded = load_encoder(target)
    assert reloaded.max_length == 128 and len(reloaded.tokenizer) == len(tokenizer)
