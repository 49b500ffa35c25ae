"""The offline corpus: stdlib docstrings extracted with ast, deterministic, and a lossless .txt round trip."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys

import pytest

from neobert.data import iter_documents, iter_stdlib_documents, write_stdlib_corpus
from neobert.data.corpus import stdlib_files


def test_documents_hold_the_runtime_docstrings():
    docs = list(iter_stdlib_documents(["json"]))
    module_doc = next(d for d in docs if d.startswith("json\n"))  # json/__init__.py: module + functions
    # Independent expectation: the docstring the interpreter itself holds, minus blank lines.
    for line in inspect.cleandoc(json.dumps.__doc__).splitlines():
        if line.strip():
            assert line.rstrip() in module_doc
    assert "\njson.dumps\n" in module_doc
    decoder_doc = next(d for d in docs if d.startswith("json.decoder.JSONDecoder\n"))
    assert "json.decoder.JSONDecoder.decode\n" in decoder_doc  # methods join their class's document


def test_deterministic_and_free_of_blank_lines():
    first = list(iter_stdlib_documents(["json", "csv", "email"]))
    assert first == list(iter_stdlib_documents(["json", "csv", "email"]))
    assert len(first) > 20
    for doc in first:
        assert doc == doc.strip()
        assert all(line.strip() for line in doc.split("\n"))


# Not every Python has these: Debian ships turtledemo apart, and Python 3.12 moved unittest's tests to test/
@pytest.mark.skipif(importlib.util.find_spec("turtledemo") is None, reason="this Python has no turtledemo")
def test_sources_are_parsed_not_imported():
    assert "turtledemo" not in sys.modules
    docs = list(iter_stdlib_documents(["turtledemo"]))
    assert docs  # its modules have docstrings ...
    assert "turtledemo" not in sys.modules  # ... yet none of its code ran


def test_language_reference_topics_are_documents():
    import pydoc_data.topics

    docs = list(iter_stdlib_documents(["pydoc_data"]))
    expected = [t for t in pydoc_data.topics.topics.values() if t.strip()]
    assert len(docs) == len(expected)
    assert docs[0].split("\n")[0] == expected[0].strip().split("\n")[0].rstrip()


@pytest.mark.skipif(
    not stdlib_files(["unittest"], include_tests=True) or importlib.util.find_spec("unittest.test") is None,
    reason="no unittest/test here (Python 3.12 moved it to test/test_unittest)",
)
def test_test_suites_are_optional():
    without = stdlib_files(["unittest"])
    with_tests = stdlib_files(["unittest"], include_tests=True)
    assert not any("/test/" in p.as_posix() for p in without)
    assert len(with_tests) > len(without)


def test_txt_round_trip(tmp_path):
    path = tmp_path / "corpus.txt"
    stats = write_stdlib_corpus(path, modules=["json", "textwrap", "pydoc_data"])
    docs = list(iter_stdlib_documents(["json", "textwrap", "pydoc_data"]))
    assert stats.documents == len(docs)
    assert stats.characters == sum(map(len, docs))
    assert list(iter_documents([path])) == docs  # blank line = document boundary, nothing lost


@pytest.mark.slow  # parses all ~700 stdlib files: a few seconds
def test_whole_corpus_is_a_few_megabytes():
    docs = list(iter_stdlib_documents())
    assert len(docs) > 1000
    assert sum(map(len, docs)) > 1_500_000
