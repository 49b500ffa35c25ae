"""`.txt` documents: auto line mode for files without blank lines, and an empty validation split never silent."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from neobert.data import ReadStats, TokenDataset, iter_documents, train_tokenizer
from neobert.data.readers import txt_has_separators
from neobert.jobs.prepare import PrepareConfig, prepare
from neobert.training.data_setup import empty_validation_message

WORDS = ["parse", "the", "json", "file", "and", "return", "a", "list", "of", "paths", "with", "encoding"]


def sentence(i: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(6 + i % 5)) + f" {i}."


def read(path: Path, mode: str = "auto") -> list[str]:
    return list(iter_documents([path], txt_mode=mode, stats=ReadStats()))


def test_a_file_without_blank_lines_is_read_one_document_per_line_and_says_so(tmp_path, caplog):
    lines = [sentence(i) for i in range(5)]
    path = tmp_path / "dump.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="neobert.data.readers"):
        assert read(path) == lines
    said = [r.getMessage() for r in caplog.records if "no blank lines" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "--txt-mode paragraph" in said[0]
    assert read(path, "paragraph") == ["\n".join(lines)]  # forcing the old reading still works


def test_a_file_with_blank_lines_stays_in_paragraph_mode_silently(tmp_path, caplog):
    docs = ["first line\nsecond line", "another\ndocument", "last"]
    path = tmp_path / "paragraphs.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="neobert.data.readers"):
        assert read(path) == docs
    assert not caplog.records
    assert read(path, "line") == ["first line", "second line", "another", "document", "last"]


@pytest.mark.parametrize(
    ("text", "separated"),
    [
        ("a\nb\n", False),
        ("\n\na\nb\n\n\n", False),  # blank lines only at the ends separate nothing
        ("a\n   \nb", True),  # whitespace-only counts as blank
        ("a\r\n\r\nb\r\n", True),
        ("", False),
    ],
)
def test_separator_detection(tmp_path, text, separated):
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode())
    assert txt_has_separators(path) is separated


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok")
    corpus = root / "c.txt"
    corpus.write_text("\n".join(sentence(i) for i in range(200)), encoding="utf-8")
    return train_tokenizer([corpus], "wordpiece", 120, root / "tokenizer").output_dir


def prepared(tmp_path: Path, tokenizer: Path, text: str, name: str, **settings) -> Path:
    path = tmp_path / f"{name}.txt"
    path.write_text(text, encoding="utf-8")
    config = PrepareConfig(inputs=[str(path)], tokenizer=str(tokenizer), output=str(tmp_path / name))
    prepare(PrepareConfig(**{**config.__dict__, "progress": False, **settings}))
    return tmp_path / name


def test_a_line_dump_gets_a_validation_split(tmp_path, tokenizer):
    """The issue's case: 300 documents, one per line. Read as paragraphs it was 1 document and no validation."""
    text = "\n".join(sentence(i) for i in range(300)) + "\n"
    auto = prepared(tmp_path, tokenizer, text, "auto", validation_fraction=0.1)
    train, val = TokenDataset(auto, "train"), TokenDataset(auto, "validation")
    assert len(train) + len(val) == 300 and 10 <= len(val) <= 60
    forced = prepared(tmp_path, tokenizer, text, "forced", validation_fraction=0.1, txt_mode="paragraph")
    assert len(TokenDataset(forced, "train")) + len(TokenDataset(forced, "validation")) == 1
    message = empty_validation_message([TokenDataset(forced, "train")])
    assert "validation split" in message and "empty" in message and "--txt-mode line" in message


def test_empty_validation_messages_say_why_and_what_to_do(tmp_path, tokenizer):
    text = "\n\n".join(sentence(i) for i in range(40))
    none = prepared(tmp_path, tokenizer, text, "none", validation_fraction=0.0)
    message = empty_validation_message([TokenDataset(none, "train")])
    assert message.startswith("note: no validation split") and "validation_fraction 0" in message
    few = prepared(tmp_path, tokenizer, text, "few", validation_fraction=0.001)
    assert len(TokenDataset(few, "validation")) == 0  # 40 documents x 0.1%: none held out
    message = empty_validation_message([TokenDataset(few, "train")])
    assert "none of the 40 training documents" in message and "0.001" in message
    assert "data.validation_fraction" in message and "--validation-fraction" in message


def test_pretrain_cli_reports_why_validation_is_missing(tmp_path, tokenizer, capsys):
    from neobert.cli.main import main

    data = prepared(
        tmp_path, tokenizer, "\n\n".join(sentence(i) for i in range(40)), "d", validation_fraction=0
    )
    settings = ["data.seq_len=32", "tokens_per_step=64", "micro_batch_size=2", "precision=fp32"]
    args = ["pretrain", "--data", str(data), "--preset", "tiny", "--max-steps", "2", "--no-progress"]
    args += ["--output", str(tmp_path / "run"), *(x for s in settings for x in ("--set", s))]
    code = main(args)
    assert code == 0
    out = capsys.readouterr().out
    assert "note: no validation split" in out and "n/a (no validation split)" in out
