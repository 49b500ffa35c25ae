"""Docstring query/document pairs: the summary/rest split, the split by module, and the files eval reads."""

from __future__ import annotations

import json

import pytest

from neobert.data.docstring_pairs import (
    is_heldout,
    iter_docstring_pairs,
    split_docstring,
    write_docstring_retrieval,
)

MODULES = ["json", "shutil", "textwrap", "fnmatch", "copy", "glob", "calendar", "heapq", "bisect", "pprint"]


def test_the_summary_is_the_query_and_the_rest_the_document():
    doc = (
        "Return the thing you asked for.\n\nThe thing is computed from the arguments,\nlong enough "
        + "x" * 100
    )
    query, document = split_docstring(doc)
    assert query == "Return the thing you asked for." and document.startswith("The thing is computed")
    assert split_docstring("Too short.\n\n" + "x" * 200) is None
    assert split_docstring("A summary that is long enough.\n\nbut a short rest") is None
    pairs = list(iter_docstring_pairs(["json"]))
    assert pairs and all(p.module == "json" and p.query not in p.document for p in pairs)
    assert len({p.query for p in pairs}) == len(pairs) == len({p.document for p in pairs})


def test_held_out_modules_share_nothing_with_training(tmp_path):
    result = write_docstring_retrieval(tmp_path, heldout_share=0.5, modules=MODULES)
    assert result.train_pairs > 0 and result.heldout_pairs > 0
    assert set(result.train_modules).isdisjoint(result.heldout_modules)
    assert set(result.heldout_modules) == {m for m in MODULES if is_heldout(m, 0.5)}
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    task = tmp_path / "heldout" / "retrieval" / "docstrings"
    queries = [json.loads(line) for line in (task / "queries.jsonl").read_text().splitlines()]
    corpus = [json.loads(line) for line in (task / "corpus.jsonl").read_text().splitlines()]
    assert len(train) == result.train_pairs and len(queries) == len(corpus) == result.heldout_pairs
    seen = {t for row in train for t in (row["query"], row["positive"])}
    assert not seen & {r["text"] for r in queries + corpus}
    qrels = (task / "qrels.tsv").read_text().splitlines()[1:]
    assert [line.split("\t")[:2] for line in qrels] == [[q["_id"], d["_id"]] for q, d in zip(queries, corpus)]
    assert json.loads((tmp_path / "split.json").read_text())["heldout"] == result.heldout_modules
    with pytest.raises(ValueError, match="heldout_share"):
        write_docstring_retrieval(tmp_path, heldout_share=1.0)


def test_the_command_writes_what_eval_embeddings_reads(tmp_path):
    from neobert.cli.main import main
    from neobert.evaluation.embedding_files import discover_tasks

    args = [
        "data",
        "docstring-pairs",
        "--output",
        str(tmp_path),
        "--heldout-share",
        "0.5",
        "--modules",
        *MODULES,
    ]
    assert main(args) == 0
    [task] = discover_tasks(tmp_path / "heldout")
    assert (task.family, task.name) == ("retrieval", "docstrings")
