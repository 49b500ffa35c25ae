"""``neobert serve``'s SPLADE vectors and Matryoshka widths, over real HTTP on 127.0.0.1: ``POST /embed_sparse``
(text-embeddings-inference's shape) of a SPLADE ``SparseEncoder`` directory against ``SparseEncoder(dir).encode``,
``top_k``, ``return_tokens``, the refusals (413, 422, 401, 404), ``--sparse`` on a plain masked-LM directory
against :func:`neobert.inference.sparse.encode_sparse`; ``dimensions`` inside and outside a model's ``matryoshka_dims``
(a Warning header) and ``--strict-dimensions`` (422)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from helpers import KEY, call, serve

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]

TEXTS = [
    "the sound of a cat",
    "a blue wall",
    "something else entirely, a rather longer sentence " * 3,
    "x",
    "a text longer than the tiny model's 128 tokens " * 30,
]


def pairs(row: list[dict]) -> dict[int, float]:
    return {entry["index"]: entry["value"] for entry in row}


def assert_rows_equal(rows: list[list[dict]], dense: np.ndarray) -> None:
    """Per text: the same non-zero indices as ``dense``'s row, values within 1e-5, highest value first."""
    assert len(rows) == len(dense)
    for row, reference in zip(rows, dense):
        got = pairs(row)
        assert sorted(got) == np.flatnonzero(reference).tolist()
        np.testing.assert_allclose(
            [got[i] for i in sorted(got)], reference[sorted(got)], atol=1e-5, rtol=1e-5
        )
        values = [entry["value"] for entry in row]
        assert values == sorted(values, reverse=True)


@pytest.fixture(scope="module")
def splade_dir(tmp_path_factory):
    """A tiny NeoBERT MLM saved as a sentence-transformers SparseEncoder (Transformer + SpladePooling)."""
    from neobert.finetuning.sparse import save_sparse_encoder
    from neobert.inference.encoders import load_encoder

    root = tmp_path_factory.mktemp("splade")
    source = save_tiny_neobert(root / "src")
    return source, save_sparse_encoder(load_encoder(source, head="mlm"), root / "sparse")


@pytest.fixture(scope="module")
def splade_server(splade_dir):
    """The SPLADE directory served as a user would: the model in its own process, an API key."""
    with serve(splade_dir[1], api_key=KEY, model_process=True, threads=1) as srv:
        yield srv


def test_embed_sparse_equals_sparse_encoder_encode(splade_server, splade_dir):
    from sentence_transformers import SparseEncoder

    import neobert  # noqa: F401  (registers NeoBERT with transformers)

    reference = SparseEncoder(str(splade_dir[1]), device="cpu").encode(TEXTS, convert_to_tensor=True)
    reference = reference.to_dense().numpy()
    status, rows, _ = call(splade_server.url, "POST", "/embed_sparse", {"inputs": TEXTS})
    assert status == 200, rows
    assert_rows_equal(rows, reference)
    assert all(set(entry) == {"index", "value"} for row in rows for entry in row)
    # one text (not a list) -> one row in a list, as TEI answers
    status, one, _ = call(splade_server.url, "POST", "/embed_sparse", {"inputs": TEXTS[0]})
    assert status == 200 and len(one) == 1 and pairs(one[0]) == pytest.approx(pairs(rows[0]), abs=1e-6)
    # /info: what it serves, and that dense vectors are not offered for it (and why)
    _, info, _ = call(splade_server.url, "GET", "/info")
    assert info["serves"] == ["fill-mask", "embed_sparse", "tokenize", "decode"]
    assert "SPLADE" in info["not_served"]["embed"] and "embed_sparse" not in info["not_served"]
    status, body, _ = call(splade_server.url, "POST", "/embed", {"inputs": "a"})
    assert status == 404 and "embed_sparse" in body["error"]["message"]


def test_top_k_and_return_tokens(splade_server, tokenizer):
    _, full, _ = call(splade_server.url, "POST", "/embed_sparse", {"inputs": TEXTS})
    status, top, _ = call(splade_server.url, "POST", "/embed_sparse", {"inputs": TEXTS, "top_k": 5})
    assert status == 200
    for whole, pruned in zip(full, top):
        expected = sorted(whole, key=lambda e: (-e["value"], e["index"]))[:5]
        assert [e["index"] for e in pruned] == [e["index"] for e in expected]
        np.testing.assert_allclose([e["value"] for e in pruned], [e["value"] for e in expected], atol=1e-6)
    status, named, _ = call(
        splade_server.url, "POST", "/embed_sparse", {"inputs": TEXTS[:2], "return_tokens": True, "top_k": 20}
    )
    assert status == 200
    for row in named:
        assert [e["token"] for e in row] == tokenizer.convert_ids_to_tokens([e["index"] for e in row])


def test_a_splade_model_measures_its_threads_on_its_sparse_vectors(splade_dir):
    from neobert.serving import ServeConfig
    from neobert.serving.threads import ServingProbe
    from neobert.serving.torch_backend import TorchBackend

    model = TorchBackend.load(ServeConfig(model=str(splade_dir[1]), precision="fp32"))  # threads 0: measured
    assert ServingProbe(model).call.task == "embed_sparse" and model.threads.threads >= 1
    with pytest.raises(ValueError, match="masked-LM head"):
        TorchBackend.load(ServeConfig(model=str(splade_dir[1]), precision="fp32", head="base", threads=1))


def test_embed_sparse_refusals(splade_server):
    url = splade_server.url
    long = "w " * 200  # 202 tokens with [CLS] and [SEP]; the tiny model takes 128
    status, body, _ = call(url, "POST", "/embed_sparse", {"inputs": ["short", long], "truncate": False})
    assert (
        status == 413 and body["error"]["param"] == "inputs[1]" and "202 tokens" in body["error"]["message"]
    )
    assert call(url, "POST", "/embed_sparse", {"inputs": ["short", long]})[0] == 200  # truncate: true
    status, body, _ = call(url, "POST", "/embed_sparse", {"inputs": ["a", ""]})
    assert status == 422, body
    assert call(url, "POST", "/embed_sparse", {"inputs": ["a"], "top_k": 0})[0] == 422
    for key in (None, "wrong"):
        assert call(url, "POST", "/embed_sparse", {"inputs": ["a"]}, key=key)[0] == 401


def test_sparse_flag_serves_a_plain_mlm_as_encode_sparse(splade_dir):
    from neobert.inference.encoders import load_encoder
    from neobert.inference.sparse import encode_sparse

    plain = splade_dir[0]  # the same weights as a plain model directory (no SpladePooling)
    encoder = load_encoder(plain, head="mlm")
    expected = encode_sparse(encoder.model, encoder.tokenizer, TEXTS).toarray()
    with serve(plain, sparse=True) as srv:
        status, rows, _ = call(srv.url, "POST", "/embed_sparse", {"inputs": TEXTS}, key=None)
        _, info, _ = call(srv.url, "GET", "/info", key=None)
    assert status == 200
    assert_rows_equal(rows, expected)
    assert "embed_sparse" in info["serves"] and "embed" in info["serves"]
    with serve(plain) as srv:  # without --sparse: not offered, and the answer says how to get it
        status, body, _ = call(srv.url, "POST", "/embed_sparse", {"inputs": TEXTS}, key=None)
        _, info, _ = call(srv.url, "GET", "/info", key=None)
    assert (
        status == 404 and "--sparse" in body["error"]["message"] and "fill-mask" in body["error"]["message"]
    )
    assert "embed_sparse" not in info["serves"] and "--sparse" in info["not_served"]["embed_sparse"]


def test_a_base_model_does_not_serve_sparse_vectors(tmp_path, tokenizer):
    import torch

    from neobert.inference.encoders import load_model, save_pretrained

    torch.manual_seed(0)
    base = save_pretrained(load_model("tiny", "base", vocab_size=30522), tokenizer, tmp_path / "base")
    with serve(base) as srv:
        status, body, _ = call(srv.url, "POST", "/embed_sparse", {"inputs": ["a"]}, key=None)
    assert status == 404
    message = body["error"]["message"]
    assert (
        "base head" in message and "needs a mlm head" in message and "it serves embed, embed_all" in message
    )
    with pytest.raises(ValueError, match="masked-LM head"):
        serve(base, sparse=True)


def test_onnx_backend_refuses_sparse():
    from neobert.serving import ServeConfig
    from neobert.serving.config import ServeConfigError

    with pytest.raises(ServeConfigError, match="torch backend"):
        ServeConfig(model="x", backend="onnx", sparse=True)


# --- Matryoshka widths ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matryoshka_dir(tmp_path_factory):
    """A tiny NeoBERT (64 wide) as a sentence-transformers directory trained for widths 32 and 16."""
    directory = save_tiny_neobert(tmp_path_factory.mktemp("mrl") / "model")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (directory / "config_sentence_transformers.json").write_text(
        json.dumps({"matryoshka_dims": [64, 32, 16]})
    )
    return directory


def test_dimensions_outside_the_trained_widths_warn(matryoshka_dir, caplog):
    with serve(matryoshka_dir) as srv:
        _, info, _ = call(srv.url, "GET", "/info", key=None)
        assert info["matryoshka_dims"] == [64, 32, 16]
        for dims in (None, 64, 32, 16):  # trained widths and the full width: no warning
            for path, body in (("/v1/embeddings", {"input": ["a b"]}), ("/embed", {"inputs": ["a b"]})):
                status, answer, headers = call(srv.url, "POST", path, {**body, "dimensions": dims}, key=None)
                assert status == 200 and "warning" not in headers, (path, dims)
        with caplog.at_level("WARNING", logger="neobert.serving.routes"):
            for _ in range(2):
                status, answer, headers = call(
                    srv.url, "POST", "/v1/embeddings", {"input": ["a b"], "dimensions": 24}, key=None
                )
                assert status == 200 and len(answer["data"][0]["embedding"]) == 24
                assert headers["warning"].startswith(
                    '299 - "dimensions 24 is not one the model was trained for'
                )
                assert "64, 32, 16" in headers["warning"]
            status, answer, headers = call(
                srv.url, "POST", "/embed", {"inputs": "a b", "dimensions": 8}, key=None
            )
            assert status == 200 and len(answer[0]) == 8 and "dimensions 8" in headers["warning"]
        logged = [r.getMessage() for r in caplog.records if "not trained for" in r.getMessage()]
        assert (
            len(logged) == 2 and "dimensions 24" in logged[0] and "dimensions 8" in logged[1]
        )  # once per width
    with serve(matryoshka_dir, strict_dimensions=True) as srv:
        status, body, _ = call(
            srv.url, "POST", "/v1/embeddings", {"input": ["a b"], "dimensions": 24}, key=None
        )
        assert status == 422 and body["error"]["param"] == "dimensions"
        assert "64, 32, 16" in body["error"]["message"] and "--strict-dimensions" in body["error"]["message"]
        status, _, headers = call(
            srv.url, "POST", "/v1/embeddings", {"input": ["a b"], "dimensions": 32}, key=None
        )
        assert status == 200 and "warning" not in headers
