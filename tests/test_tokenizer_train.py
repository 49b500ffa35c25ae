"""Tokenizer training: BERT special ids, AutoTokenizer loading, normalisation, and use by `prepare`."""

from __future__ import annotations

import argparse
import json

import pytest
from transformers import AutoTokenizer

from neobert.data import DataError, TokenDataset, train_tokenizer
from neobert.jobs.prepare import PrepareConfig, prepare

TEXT = (
    "NeoBERT is a next-generation encoder. It reads whole documents and learns to fill masked words.\n"
    "Encoders such as BERT and RoBERTa are still used for retrieval and classification.\n\n"
    "The tokenizer splits words into pieces; rare words become several pieces.\n"
    "Café, naïve and résumé carry accents. Numbers like 2048 and 4096 appear too.\n"
)
SPECIAL = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text((TEXT + "\n") * 20, encoding="utf-8")
    return path


def check_specials(tok) -> None:
    named = (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id)
    assert named == (0, 1, 2, 3, 4)
    assert {t: tok.convert_tokens_to_ids(t) for t in SPECIAL} == SPECIAL


def test_wordpiece_has_bert_specials_and_lowercases(corpus, tmp_path):
    result = train_tokenizer(
        [corpus], kind="wordpiece", vocab_size=300, output_dir=tmp_path / "wp", min_frequency=1
    )
    assert result.special_token_ids == SPECIAL and result.documents == 40
    tok = AutoTokenizer.from_pretrained(tmp_path / "wp")
    check_specials(tok)
    ids = tok("NeoBERT reads Documents")["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3 and 1 not in ids  # [CLS] ... [SEP], every piece known
    assert ids == tok("neobert reads documents")["input_ids"]  # uncased, as bert-base-uncased
    assert tok("cafe")["input_ids"] == tok("Café")["input_ids"]  # accents stripped
    assert tok.decode(ids, skip_special_tokens=True) == "neobert reads documents"
    assert json.loads((tmp_path / "wp" / "tokenizer.json").read_text())["model"]["type"] == "WordPiece"


def test_bpe_is_byte_level_and_case_preserving(corpus, tmp_path):
    result = train_tokenizer(
        [corpus], kind="bpe", vocab_size=400, output_dir=tmp_path / "bpe", min_frequency=1
    )
    tok = AutoTokenizer.from_pretrained(tmp_path / "bpe")
    check_specials(tok)
    assert result.vocab_size == len(tok) <= 400
    text = "NeoBERT reads Café 日本語 ✓"  # unseen characters still encode: bytes are the alphabet
    ids = tok(text)["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3 and 1 not in ids
    assert tok.decode(ids, skip_special_tokens=True) == text  # lossless
    assert tok("NeoBERT")["input_ids"] != tok("neobert")["input_ids"]


def test_bad_arguments(corpus, tmp_path):
    with pytest.raises(DataError, match="kind must be one of"):
        train_tokenizer([corpus], kind="unigram", vocab_size=300, output_dir=tmp_path / "x")
    with pytest.raises(DataError, match="too small"):
        train_tokenizer([corpus], kind="bpe", vocab_size=200, output_dir=tmp_path / "x")


def test_trained_tokenizer_feeds_prepare(corpus, tmp_path):
    train_tokenizer([corpus], vocab_size=300, output_dir=tmp_path / "wp", min_frequency=1)
    config = PrepareConfig(
        inputs=[str(corpus)],
        tokenizer=str(tmp_path / "wp"),
        output=str(tmp_path / "shards"),
        validation_fraction=0.0,
        progress=False,
    )
    result = prepare(config)
    tok = AutoTokenizer.from_pretrained(tmp_path / "wp")
    assert result.dtype == "uint16" and result.vocab_size == len(tok)
    ds = TokenDataset(tmp_path / "shards")
    first_doc = TEXT.split("\n\n")[0]
    assert ds[0].tolist() == tok(first_doc)["input_ids"]
    assert ds.special_token_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def test_cli_train(corpus, tmp_path, capsys):
    from neobert.cli import tokenizer as tokenizer_cli

    parser = argparse.ArgumentParser()
    tokenizer_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            *("tokenizer", "train", "--input", str(corpus), "--kind", "bpe", "--vocab-size", "320"),
            *("--min-frequency", "1", "--output", str(tmp_path / "cli"), "--model-max-length", "4096"),
        ]
    )
    assert args.func(args) == 0
    assert "[MASK]" in capsys.readouterr().out
    tok = AutoTokenizer.from_pretrained(tmp_path / "cli")
    check_specials(tok)
    assert tok.model_max_length == 4096
