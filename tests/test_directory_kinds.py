"""Directory kinds carry their behaviour (issue 38): a kind is recognised, loaded, served, carded and embedded
through its own class, and the directories users bring are recognised by what they hold.

- A ColBERT directory written by PyLate 1.6's own ``save`` (``tests/fixtures/pylate_colbert``, made by
  ``tests/fixtures/make_pylate_colbert.py`` in PyLate's environment), whose settings name no ``model_type``,
  is a late-interaction model here: loaded, scored by MaxSim and served with PyLate's own token vectors.
- A toy kind registered by the test alone is loaded by its own loader, served over HTTP, carded with its own
  snippet and embedded by ``neobert embed``, with nothing changed elsewhere.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from embedding_fixtures import save_tiny_neobert
from helpers import call, check_card, run_card_snippet, serve
from neobert.cards import CardInfo, write_card
from neobert.cli.main import main
from neobert.evaluation.embedding_files import embedding_of
from neobert.inference.encoders import EmbeddingSpec, load_encoder
from neobert.inference.kinds import (
    DIRECTORY_KINDS,
    describe_directory,
    kind_of,
    load_for_inference,
    register_directory_kind,
)
from neobert.inference.kinds.transformers import TransformersKind
from neobert.inference.late_interaction import load_late_interaction, token_vectors
from neobert.inference.run import encode

PYLATE_DIR = Path(__file__).parent / "fixtures" / "pylate_colbert"


@pytest.fixture
def pylate_dir(tmp_path) -> Path:
    return Path(shutil.copytree(PYLATE_DIR, tmp_path / "pylate_colbert"))


def test_a_pylate_saved_colbert_without_model_type_is_late_interaction(pylate_dir):
    settings = json.loads((pylate_dir / "config_sentence_transformers.json").read_text())
    assert "model_type" not in settings  # what PyLate 1.6 wrote, starting from such a base model
    found = describe_directory(pylate_dir)
    assert found.kind.name == "late-interaction" and found.card_head == "late-interaction"
    assert embedding_of(str(pylate_dir)) == "multi-vector"  # eval embeddings scores it by MaxSim
    # one of its settings gone: a dense sentence-transformers directory again, as its files then say
    del settings["query_length"]
    (pylate_dir / "config_sentence_transformers.json").write_text(json.dumps(settings))
    assert describe_directory(pylate_dir).kind.name == "sentence-transformers"


def test_its_token_vectors_equal_the_ones_pylate_computed(pylate_dir):
    texts = json.loads((pylate_dir / "pylate_texts.json").read_text())
    expected = np.load(pylate_dir / "pylate_vectors.npz")
    model, tokenizer, spec = load_late_interaction(pylate_dir)
    assert (spec.dim, spec.query_length, spec.document_length) == (16, 12, 40)
    for side, query in (("query", True), ("document", False)):
        vectors = token_vectors(model, tokenizer, texts["queries" if query else "documents"], spec, query)
        for i, got in enumerate(vectors):
            want = expected[f"{side}_{i}"]
            assert got.shape == want.shape
            np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=0)


def test_it_is_served_as_token_vectors_and_maxsim(pylate_dir):
    loaded = load_for_inference(pylate_dir, precision="fp32")
    assert loaded.capabilities.tasks[:2] == ("token_vectors", "rerank")
    assert loaded.capabilities.aliases["rerank"] == "maxsim"
    texts = json.loads((pylate_dir / "pylate_texts.json").read_text())
    expected = np.load(pylate_dir / "pylate_vectors.npz")
    with serve(pylate_dir) as server:
        body = {"input": texts["documents"][:1], "return_multivector": True, "task": "retrieval.passage"}
        status, answer, _ = call(server.url, "POST", "/v1/embeddings", body, key=None)
    assert status == 200
    np.testing.assert_allclose(np.array(answer["data"][0]["embeddings"]), expected["document_0"], atol=1e-5)


# --- a toy kind, registered here and nowhere else -------------------------------------------------------

TOY_FILE = "toy_kind.json"


class ToyKind(TransformersKind):
    """A directory with a ``toy_kind.json`` naming its pooling: dense vectors pooled that way, unnormalised."""

    name = "toy"
    loaded_with = "a toy loader"

    def matches(self, path: Path) -> bool:
        return (path / TOY_FILE).is_file()

    def declared_embedding(self, source) -> EmbeddingSpec:
        pooling = json.loads((Path(source) / TOY_FILE).read_text())["pooling"]
        return EmbeddingSpec(pooling=pooling, normalize=False, declared_by=self.name)

    def usage(self, directory: Path, head: str, texts: tuple[str, ...]) -> tuple[str, str]:
        code = f'import json\nprint(json.load(open("{TOY_FILE}"))["pooling"])'
        return code, json.loads((directory / TOY_FILE).read_text())["pooling"]

    def other_ways(self, head: str) -> str:
        return "Only the toy loader loads it.\n"


@pytest.fixture
def toy_dir(tmp_path):
    kind = register_directory_kind(ToyKind())
    directory = save_tiny_neobert(tmp_path / "toy")
    (directory / TOY_FILE).write_text(json.dumps({"pooling": "cls"}))
    yield directory
    del DIRECTORY_KINDS[kind.name]


def cls_vectors(directory: Path, texts: list[str]) -> np.ndarray:
    """The first token's last hidden state, unnormalised: computed here from the model itself."""
    encoder = load_encoder(directory)
    batch = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return encoder.model(**batch).last_hidden_state[:, 0].numpy()


def test_a_toy_kind_is_loaded_served_carded_and_embedded(toy_dir, tmp_path):
    texts = ["a toy kind", "loaded by its own loader", "and nothing else"]
    assert kind_of(toy_dir).name == "toy" and list(DIRECTORY_KINDS)[-2:] == ["toy", "transformers"]
    expected = cls_vectors(toy_dir, texts)
    loaded = load_for_inference(toy_dir, precision="fp32")
    assert loaded.capabilities.embedding.pooling == "cls"
    np.testing.assert_allclose(
        encode(loaded.model, loaded.tokenizer, texts, pooling="cls", normalize=False, show_progress=False),
        expected,
        atol=1e-5,
    )
    with serve(toy_dir) as server:
        status, info, _ = call(server.url, "GET", "/info", key=None)
        assert info["pooling"] == "cls" and info["embedding_settings_from"] == "toy"
        status, answer, _ = call(
            server.url, "POST", "/embed", {"texts": texts}, key=None
        )  # ours: as declared
    assert status == 200
    served = np.array(answer["embeddings"])
    np.testing.assert_allclose(served, expected, atol=1e-4)
    write_card(toy_dir, CardInfo(head="base", description="A toy kind.", command="test"))
    card = check_card(toy_dir, "feature-extraction")
    assert "With a toy loader:" in card.text and "Only the toy loader loads it." in card.text
    printed, documented = run_card_snippet(toy_dir)
    assert printed == documented == "cls"
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    out = tmp_path / "vectors.npy"
    assert (
        main(["embed", "--model", str(toy_dir), "--input", str(tmp_path / "texts.txt"), "--output", str(out)])
        == 0
    )
    np.testing.assert_allclose(np.load(out), expected, atol=1e-4)
