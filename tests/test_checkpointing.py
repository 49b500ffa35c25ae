"""Atomic checkpoints: a failed or interrupted write never damages the previous ones."""

from __future__ import annotations

import json

import pytest

from neobert.training.checkpointing import (
    latest_checkpoint,
    list_checkpoints,
    save_checkpoint,
)


class FakeAccelerator:
    """Just enough of accelerate.Accelerator for save_checkpoint: one process writing a state file."""

    is_main_process = True

    def __init__(self, fail_at_step: int | None = None):
        self.fail_at_step = fail_at_step

    def wait_for_everyone(self) -> None:
        pass

    def save_state(self, path: str) -> None:
        from pathlib import Path

        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "model.safetensors").write_bytes(b"weights")
        if self.fail_at_step is not None and Path(path).name.endswith(f"{self.fail_at_step:08d}"):
            raise OSError("disk full")  # half-written: the weights are there, the rest is not


def test_keeps_the_last_k_and_finds_the_latest(tmp_path):
    acc = FakeAccelerator()
    for step in (10, 20, 30, 40):
        save_checkpoint(acc, tmp_path, step, {"step": step}, keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [30, 40]
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step-00000040"
    assert json.loads((latest / "trainer_state.json").read_text())["step"] == 40


def test_failed_write_leaves_previous_checkpoint_intact(tmp_path):
    save_checkpoint(FakeAccelerator(), tmp_path, 10, {"step": 10})
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(FakeAccelerator(fail_at_step=20), tmp_path, 20, {"step": 20})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10]  # the broken one is invisible
    assert latest_checkpoint(tmp_path).name == "step-00000010"
    # the next successful save cleans the leftover temporary directory
    save_checkpoint(FakeAccelerator(), tmp_path, 30, {"step": 30})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000010", "step-00000030"]


def test_directory_without_state_file_is_not_a_checkpoint(tmp_path):
    (tmp_path / "step-00000050").mkdir()  # e.g. copied by hand, incomplete
    save_checkpoint(FakeAccelerator(), tmp_path, 10, {"step": 10})
    assert latest_checkpoint(tmp_path).name == "step-00000010"
