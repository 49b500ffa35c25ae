"""The one scaffolding of the batch jobs (issue 32): a job's output directory and manifest
(:class:`neobert.jobs.output.JobOutput`), and the engine named in one module only."""

from __future__ import annotations

import json

import pytest

from neobert.data import DataError
from neobert.jobs.output import JobOutput


def test_a_job_output_records_pieces_resumes_and_completes(tmp_path):
    out = tmp_path / "o"
    job = JobOutput(out, "m.json", "fmt", key="name")
    job.open(lambda: {"digest": "d"}, lambda manifest: None)
    job.piece_finished({"name": "b", "rows": 2})
    job.piece_finished({"name": "a", "rows": 1})
    job.piece_finished({"name": "b", "rows": 3})  # a redone piece replaces its record
    on_disk = json.loads((out / "m.json").read_text())
    assert on_disk == {"format": "fmt", "digest": "d", "complete": False,
                       "shards": [{"name": "a", "rows": 1}, {"name": "b", "rows": 3}]}  # fmt: skip
    again = JobOutput(out, "m.json", "fmt", key="name")
    seen = []
    again.open(lambda: pytest.fail("an earlier output is resumed, not made anew"), seen.append)
    assert seen == [on_disk] and again.finished() == {"a": {"name": "a", "rows": 1}, "b": {"name": "b", "rows": 3}}
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
    JobOutput(out, "m.json", "fmt").open(lambda: {"new": 1}, refuse, overwrite=True,
                                         remove=lambda: [removed.append(1), (out / "m.json").unlink()])  # fmt: skip
    assert removed == [1] and json.loads((out / "m.json").read_text())["new"] == 1
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x")
    with pytest.raises(DataError, match=r"not empty and holds no m\.json"):
        JobOutput(tmp_path / "full", "m.json", "fmt").open(lambda: {}, lambda m: None)
