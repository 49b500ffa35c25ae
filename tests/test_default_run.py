"""The embedded default's pieces: the shipped (pinned) tokenizer and the config it trains with."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from transformers import AutoTokenizer

from neobert.data import DataError, train_tokenizer
from neobert.data.tokenizer import SPECIAL_TOKENS, tokenizer_from_vocab
from neobert.recipes.default_run import VOCAB_FILE, default_config, shipped_tokenizer


def shipped_vocab() -> list[str]:
    text = resources.files("neobert.configs").joinpath(VOCAB_FILE).read_text(encoding="utf-8")
    return text.splitlines()


def test_shipped_tokenizer_is_the_vocab_file_in_order_and_the_same_every_time(tmp_path):
    a = shipped_tokenizer(tmp_path / "a")
    b = shipped_tokenizer(tmp_path / "b")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(a)
    vocab = shipped_vocab()
    assert len(tokenizer) == len(vocab)
    assert tokenizer.convert_tokens_to_ids(vocab) == list(range(len(vocab)))
    assert [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.mask_token_id] == [0, 1, 4]
    ids = tokenizer("Return a new list containing the items of the iterable.")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert tokenizer.unk_token_id not in ids  # the stdlib's own words are in its vocabulary
    assert tokenizer.decode(ids[1:-1]) == "return a new list containing the items of the iterable."


def test_tokenizer_from_vocab_rebuilds_a_trained_wordpiece(tmp_path):
    """A trained tokenizer's vocabulary, rebuilt through the vocab-file path, tokenizes identically."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "\n\n".join(f"the parser reads file {i} and returns its encoded lines, Café." for i in range(50)),
        encoding="utf-8",
    )
    trained = train_tokenizer([corpus], "wordpiece", 120, tmp_path / "trained").output_dir
    vocab = json.loads((trained / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    (tmp_path / "vocab.txt").write_text(
        "".join(t + "\n" for t in sorted(vocab, key=vocab.get)), encoding="utf-8"
    )
    rebuilt = tokenizer_from_vocab(tmp_path / "vocab.txt", tmp_path / "rebuilt")
    text = "The PARSER returns encoded lines of file 7, café; unknown ZQX words."
    first, second = AutoTokenizer.from_pretrained(trained), AutoTokenizer.from_pretrained(rebuilt)
    assert first(text)["input_ids"] == second(text)["input_ids"]


def test_tokenizer_from_vocab_refuses_a_vocab_without_the_special_tokens(tmp_path):
    (tmp_path / "vocab.txt").write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab\.txt: expected unique tokens"):
        tokenizer_from_vocab(tmp_path / "vocab.txt", tmp_path / "out")
    assert shipped_vocab()[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)


def test_default_config_fits_its_tokenizer_and_the_time_budget():
    config = default_config()
    model = config.model_config()
    assert model.vocab_size >= len(shipped_vocab()) and model.max_length >= config.data.seq_len
    assert config.max_minutes is not None and config.max_minutes < 10  # the README promises under 10 minutes
    assert config.schedule.warmup_steps < config.schedule.decay_fraction * config.max_steps
