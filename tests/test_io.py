"""The one atomic writer: a failed write leaves the previous content whole and no debris beside it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from neobert.common.io import (
    TMP_PREFIX,
    atomic_dir,
    atomic_file,
    clean_temporaries,
    write_dir,
    write_json,
    write_text,
)


def test_write_text_and_json_round_trip_with_usual_permissions(tmp_path):
    path = write_text(tmp_path / "sub" / "a.txt", "héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    write_json(tmp_path / "b.json", {"x": [1, 2]}, durable=True)
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": [1, 2]}
    umask = os.umask(0)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == 0o666 & ~umask  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "sub"]


def test_a_failed_file_write_keeps_the_old_file(tmp_path):
    path = write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError), atomic_file(path) as handle:
        handle.write("new, half written")
        raise RuntimeError("crash")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    with pytest.raises(ValueError, match="JSON compliant"):
        write_json(tmp_path / "a.txt", {"nan": float("nan")}, allow_nan=False)
    assert path.read_text() == "old"


def test_binary_file(tmp_path):
    with atomic_file(tmp_path / "v.npy", "wb") as handle:
        np.save(handle, np.arange(3))
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), np.arange(3))
    with pytest.raises(ValueError, match="mode"), atomic_file(tmp_path / "x", "a"):
        pass


def test_write_dir_replaces_only_on_success(tmp_path):
    final = tmp_path / "final"
    write_dir(lambda d: (d / "a.txt").write_text("first"), final)

    def broken(d):
        (d / "a.txt").write_text("second")
        raise RuntimeError("crash while exporting")

    with pytest.raises(RuntimeError):
        write_dir(broken, final)
    assert (final / "a.txt").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["final"]
    with atomic_dir(final) as tmp:  # a successful rewrite replaces the directory whole
        (tmp / "b.txt").write_text("b")
    assert sorted(p.name for p in final.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["final"]


def test_clean_temporaries_removes_only_debris(tmp_path):
    (tmp_path / f"{TMP_PREFIX}a.txt.123").write_text("x")
    (tmp_path / f"{TMP_PREFIX}dir.456").mkdir()
    (tmp_path / "kept.txt").write_text("y")
    clean_temporaries(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
