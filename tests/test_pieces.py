"""Readers that start in the middle of a file, and inputs cut into pieces: a piece read by seeking to its
first record yields exactly the records a read from the start yields there, for every format; the cuts of
``stream_pieces`` are the local engine's (every ``shard_size`` documents of the input stream)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neobert.data import DataError, ReadStats, iter_documents
from neobert.data.pieces import file_pieces, plan_file, read_piece, stream_pieces
from neobert.data.readers import expand_inputs, read_records

TEXTS = [f"text number {i} " + "word " * (i % 7) for i in range(23)]


def write_formats(tmp_path) -> dict[str, str]:
    """The same 23 texts as paragraphs (.txt), lines (.txt), JSON lines, CSV (some cells span lines) and
    parquet (row groups of 5)."""
    paths = {}
    paths["paragraph"] = tmp_path / "para.txt"
    paths["paragraph"].write_text("\n\n".join(t.replace("number", "number\n") for t in TEXTS) + "\n", "utf-8")
    paths["line"] = tmp_path / "lines.txt"
    paths["line"].write_text("".join(t + "\n" for t in TEXTS), "utf-8")
    paths["jsonl"] = tmp_path / "rows.jsonl"
    paths["jsonl"].write_text(
        "".join(json.dumps({"text": t, "id": f"k{i}"}) + "\n\n" for i, t in enumerate(TEXTS))
    )
    paths["csv"] = tmp_path / "rows.csv"
    cells = ['"' + t.replace("number", "number\nmore") + '"' for t in TEXTS]
    paths["csv"].write_text("id,text\n" + "".join(f"k{i},{c}\n" for i, c in enumerate(cells)), "utf-8")
    paths["parquet"] = tmp_path / "rows.parquet"
    table = pa.table({"text": TEXTS, "id": [f"k{i}" for i in range(len(TEXTS))]})
    pq.write_table(table, paths["parquet"], row_group_size=5)
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.parametrize("kind", ["paragraph", "line", "jsonl", "csv", "parquet"])
def test_a_read_from_any_records_position_equals_the_read_from_the_start(tmp_path, kind):
    spec = write_formats(tmp_path)[kind]
    mode = kind if kind in ("paragraph", "line") else "auto"
    records = list(read_records(spec, txt_mode=mode))
    assert len(records) == len(TEXTS)
    for k, record in enumerate(records):
        resumed = list(read_records(spec, txt_mode=mode, start=record.start))
        assert resumed == records[k:]
    if kind == "csv":  # rows start on the line their record starts on
        assert [r.row for r in records[:3]] == [2, 4, 6]


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_an_id_column_is_read_beside_the_text(tmp_path, kind):
    spec = write_formats(tmp_path)[kind]
    records = list(read_records(spec, id_column="id"))
    assert [r.key for r in records] == [f"k{i}" for i in range(len(TEXTS))]
    with pytest.raises(DataError, match="no column 'nope'"):
        list(read_records(spec, id_column="nope"))


def test_a_text_file_has_no_id_column(tmp_path):
    spec = write_formats(tmp_path)["line"]
    with pytest.raises(DataError, match="an id column needs a table"):
        list(read_records(spec, id_column="id"))


@pytest.mark.parametrize("step", [1, 4, 5, 100])
def test_pieces_of_a_file_cover_its_records_once_in_order(tmp_path, step):
    spec = write_formats(tmp_path)["jsonl"]
    plan = plan_file(spec, step)
    assert (plan.records, len(plan.checkpoints)) == (len(TEXTS), -(-len(TEXTS) // step))
    for size in (1, 3, step, 50):
        pieces = file_pieces([plan], size)
        texts = [r.text for p in pieces for _, r in read_piece(p)]
        assert texts == TEXTS
        assert [p.records for p in pieces] == [min(size, len(TEXTS) - s) for s in range(0, len(TEXTS), size)]


def test_stream_pieces_cut_every_size_documents_across_files(tmp_path):
    paths = write_formats(tmp_path)
    specs = [paths["paragraph"], paths["csv"], paths["parquet"]]
    documents = list(iter_documents(specs))
    plans = [plan_file(s, 4) for s in specs]
    for size in (1, 7, 23, 24, 100):
        pieces = stream_pieces(plans, size)
        got = [[r.text for _, r in read_piece(p)] for p in pieces]
        expected = [documents[i : i + size] for i in range(0, len(documents), size)]
        assert got == expected


def test_empty_texts_are_refused_naming_the_row_or_skipped_and_counted(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("one\n\nthree\n   \nfive\n", "utf-8")
    with pytest.raises(DataError, match=r"t\.txt:2: empty text"):
        plan_file(str(path), 10, txt_mode="line", empty="refuse")
    plan = plan_file(str(path), 10, txt_mode="line", empty="refuse", on_error="skip")
    assert (plan.records, plan.stats.skipped_records) == (3, 2)
    rows = [r.row for _, r in read_piece(file_pieces([plan], 10)[0], on_error="skip", empty="refuse")]
    assert rows == [1, 3, 5]  # row i stays line i


def test_bad_files_name_the_file_and_the_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not valid UTF-8"):
        plan_file(str(bad), 10)
    stats_plan = plan_file(str(bad), 10, on_error="skip")
    assert (stats_plan.records, stats_plan.stats.skipped_records) == (1, 1)
    cut = tmp_path / "cut.parquet"
    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "whole.parquet")
    cut.write_bytes((tmp_path / "whole.parquet").read_bytes()[:-20])  # its footer gone
    with pytest.raises(DataError, match=r"cut\.parquet: cannot read as parquet"):
        plan_file(str(cut), 10)
    missing = tmp_path / "rows.jsonl"
    missing.write_text('{"body": "x"}\n', "utf-8")
    with pytest.raises(DataError, match=r"rows\.jsonl:1: no column 'text'; available: body"):
        plan_file(str(missing), 10)


def test_globs_and_file_urls_expand_like_paths(tmp_path):
    paths = write_formats(tmp_path)
    assert expand_inputs([str(tmp_path / "*.jsonl")]) == [paths["jsonl"]]
    urls = expand_inputs([f"file://{tmp_path}"])
    assert [u.removeprefix("file://") for u in urls] == sorted(paths.values())
    url = f"file://{paths['parquet']}"
    assert [r.text for r in read_records(url)] == TEXTS
    plan = plan_file(f"file://{paths['jsonl']}", 5)
    assert [r.text for p in file_pieces([plan], 6) for _, r in read_piece(p)] == TEXTS
    with pytest.raises(DataError, match="matches no"):
        expand_inputs([str(tmp_path / "*.nothing")])


def test_the_plan_counts_what_the_readers_count(tmp_path):
    paths = write_formats(tmp_path)
    stats = ReadStats()
    list(iter_documents(list(paths.values()), stats=stats))
    plans = [plan_file(p, 3) for p in paths.values()]
    assert sum(p.records for p in plans) == stats.documents == 5 * len(TEXTS)
