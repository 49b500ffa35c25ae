"""Cohere's /v2/embed with `embedding_types` (float, int8, uint8, binary, ubinary) over real HTTP on 127.0.0.1,
through the real `cohere` client, against sentence-transformers' `quantize_embeddings` of the server's own float
vectors: int8 / uint8 in the buckets of a `--calibration` file, the same for a text whatever its batch-mates,
and neither offered (nor in the schema) without one."""

from __future__ import annotations

import numpy as np
import pytest

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from helpers import KEY, call, serve

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
TEXTS = ["A man is eating food.", "The new movie is awesome", "Paris is the capital of France.", "cats"]
TYPES = ["float", "int8", "uint8", "binary", "ubinary"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_neobert(tmp_path_factory.mktemp("cohere") / "model")


def _floats(url: str, texts: list[str]) -> np.ndarray:
    status, body, _ = call(url, "POST", "/embed", {"texts": texts})
    assert status == 200, body
    return np.array(body["embeddings"], dtype=np.float32)


def test_cohere_embed_types_equal_sentence_transformers(model_dir, tmp_path):
    cohere = pytest.importorskip("cohere")
    from sentence_transformers.quantization import quantize_embeddings

    calibration = tmp_path / "calibration.npy"
    with serve(model_dir) as plain:  # no --calibration: float, binary, ubinary
        floats = _floats(plain.url, TEXTS)
        sample = _floats(plain.url, ["one sample text", "another, longer sample text here", "x y z"])
        np.save(calibration, sample)
        client = cohere.ClientV2(api_key=KEY, base_url=plain.url, timeout=30)
        got = client.embed(
            texts=TEXTS,
            model="m",
            input_type="search_document",
            embedding_types=["float", "binary", "ubinary"],
        ).embeddings
        np.testing.assert_allclose(np.array(got.float_), floats, atol=1e-6)
        for kind in ("binary", "ubinary"):
            np.testing.assert_array_equal(
                np.array(getattr(got, kind)), quantize_embeddings(floats, precision=kind)
            )
        status, body, _ = call(plain.url, "POST", "/v2/embed", {"texts": TEXTS, "embedding_types": ["int8"]})
        assert status == 422 and "--calibration" in body["error"]["message"]
        _, schema, _ = call(plain.url, "GET", "/openapi.json")
        types = schema["components"]["schemas"]["CohereEmbedRequest"]["properties"]["embedding_types"][
            "items"
        ]
        assert types["enum"] == ["float", "binary", "ubinary"]
        status, body, _ = call(plain.url, "POST", "/v2/embed", {"texts": ["x " * 900], "truncate": "NONE"})
        assert status == 413 and body["error"]["param"] == "texts[0]"
        # in Cohere's words, not another dialect's (truncate: false / true): issue 42
        message = body["error"]["message"]
        assert 'truncate: "NONE"' in message and "truncate: false" not in message, message
    with serve(model_dir, calibration=str(calibration)) as calibrated:
        client = cohere.ClientV2(api_key=KEY, base_url=calibrated.url, timeout=30)
        whole = client.embed(
            texts=TEXTS, model="m", input_type="search_document", embedding_types=TYPES
        ).embeddings
        for kind in TYPES[1:]:
            expected = quantize_embeddings(floats, precision=kind, calibration_embeddings=sample)
            np.testing.assert_array_equal(np.array(getattr(whole, kind)), expected.astype(np.int64))
        status, body, _ = call(
            calibrated.url, "POST", "/v2/embed", {"texts": TEXTS[2:3], "embedding_types": TYPES}
        )
        assert status == 200 and body["response_type"] == "embeddings_by_type" and body["texts"] == TEXTS[2:3]
        for kind in ("int8", "uint8"):  # alone, a text gets the buckets it got among the others
            assert body["embeddings"][kind] == getattr(whole, kind)[2:3]
        assert len(body["embeddings"]["ubinary"][0]) == floats.shape[1] // 8
        assert body["meta"]["billed_units"]["input_tokens"] > 0
        _, schema, _ = call(calibrated.url, "GET", "/openapi.json")
        types = schema["components"]["schemas"]["CohereEmbedRequest"]["properties"]["embedding_types"][
            "items"
        ]
        assert types["enum"] == TYPES


def test_a_calibration_file_that_does_not_fit_is_refused_at_start(model_dir, tmp_path):
    from neobert.serving import ServeConfig
    from neobert.serving.config import ServeConfigError

    with pytest.raises(ServeConfigError, match="does not exist"):
        ServeConfig(model=str(model_dir), calibration=str(tmp_path / "missing.npy"))
    np.save(tmp_path / "wide.npy", np.ones((3, 7), dtype=np.float32))
    with (
        pytest.raises(ValueError, match="7-dimensional"),
        serve(model_dir, calibration=str(tmp_path / "wide.npy")),
    ):
        pass
