"""Crash-safe training checkpoints.

A checkpoint is a directory ``OUTPUT/checkpoints/step-XXXXXXXX`` written by accelerate's ``save_state``
(model, optimizer, scheduler, every process's RNG states, registered custom objects such as the data
position) plus ``trainer_state.json``. It is first written under a temporary name and renamed into place
only once complete, so a crash or SIGKILL at any moment leaves either the previous checkpoints untouched or
the new one whole; a leftover temporary directory is ignored and cleaned at the next save. The last
``keep_last`` checkpoints are kept.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from ..common.io import TMP_PREFIX, clean_temporaries, fsync_dir, replace_dir, write_json

CHECKPOINT_RE = re.compile(r"^step-(\d{8})$")
STATE_FILE = "trainer_state.json"


def checkpoint_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = CHECKPOINT_RE.match(path.name)
        if match and path.is_dir() and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(root: str | Path) -> Path | None:
    checkpoints = list_checkpoints(root)
    return checkpoints[-1][1] if checkpoints else None


def save_checkpoint(
    accelerator: Any, root: str | Path, step: int, state: dict[str, Any], keep_last: int = 3
) -> Path:
    """Write a checkpoint atomically (every process calls this; rank 0 does the renames)."""
    root = Path(root)
    final = checkpoint_dir(root, step)
    tmp = root / f"{TMP_PREFIX}{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        clean_temporaries(root)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    if accelerator.is_main_process:
        write_json(tmp / STATE_FILE, state, durable=True)
        fsync_dir(tmp)
        replace_dir(tmp, final)  # a re-save of the same step (resumed run) replaces it whole
        fsync_dir(root)
        for _, old in list_checkpoints(root)[:-keep_last] if keep_last > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Any, path: str | Path) -> dict[str, Any]:
    """Restore everything ``save_checkpoint`` wrote; returns the trainer state."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE})")
    accelerator.load_state(str(path))
    return json.loads(state_file.read_text(encoding="utf-8"))
