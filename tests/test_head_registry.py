"""The head registry is the one place a head is defined (issue 32): a toy head registered once, with
nothing else changed, loads through the Auto class it names, is served (``/info``), gets a model card from
its entry, and is exported (its base encoder, as the entry says). Directory kinds are asked in one place."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
import torch
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping

from helpers import call, check_card, serve
from neobert.cards import CardInfo, write_card
from neobert.data import load_tokenizer
from neobert.inference.encoders import load_encoder, load_model
from neobert.inference.kinds import DIRECTORY_KINDS, describe_directory, pipeline_tag
from neobert.inference.registration import HEADS, Head, declared_head, head_of, register_head
from neobert.model import NeoBERTModel


class NeoBERTForToyScoring(NeoBERTModel):
    """A head nobody shipped: the bare encoder under another class name, enough to follow it everywhere."""


class AutoModelForToyScoring(_BaseAutoModelClass):
    _model_mapping = _LazyAutoMapping(OrderedDict(), OrderedDict())


@pytest.fixture
def toy_head():
    entry = Head(
        "toy-scoring",
        AutoModelForToyScoring,
        NeoBERTForToyScoring,
        "ForToyScoring",
        ("embed", "embed_all"),
        "embed",
        "feature-extraction",
        "toy scorer",
        output="last_hidden_state",
        width="hidden",
    )
    register_head(entry)
    yield entry
    del HEADS[entry.name]


@pytest.fixture
def toy_dir(tmp_path, toy_head):
    tokenizer = load_tokenizer()
    torch.manual_seed(0)
    model = load_model("tiny", head=toy_head.name, vocab_size=len(tokenizer))
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(tmp_path / "toy")
    tokenizer.save_pretrained(tmp_path / "toy")
    return tmp_path / "toy"


def test_a_registered_head_loads_is_decided_and_is_served(toy_dir, toy_head):
    assert json.loads((toy_dir / "config.json").read_text())["architectures"] == ["NeoBERTForToyScoring"]
    assert declared_head(json.loads((toy_dir / "config.json").read_text())) == "toy-scoring"
    encoder = load_encoder(toy_dir, head="toy-scoring")
    assert type(encoder.model) is NeoBERTForToyScoring and head_of(encoder.model) == "toy-scoring"
    texts = ["a toy head", "served as any other"]
    with serve(toy_dir) as server:
        status, info, _ = call(server.url, "GET", "/info", key=None)
        assert status == 200
        assert info["head"] == "toy-scoring" and info["serves"][:2] == ["embed", "embed_all"]
        status, vectors, _ = call(server.url, "POST", "/embed", {"inputs": texts}, key=None)
        assert status == 200
        status, root, _ = call(server.url, "POST", "/", {"inputs": texts}, key=None)  # its root task: embed
    assert status == 200 and np.allclose(root, vectors, atol=1e-6)
    batch = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = encoder.model(**batch).last_hidden_state
    mean = (states * batch["attention_mask"][..., None]).sum(1) / batch["attention_mask"].sum(1, keepdim=True)
    expected = torch.nn.functional.normalize(mean, dim=-1).numpy()  # TEI's /embed normalizes
    assert np.allclose(vectors, expected, atol=1e-4)


def test_a_registered_head_gets_its_card(toy_dir, toy_head):
    found = describe_directory(toy_dir)
    assert (found.kind.name, found.head, found.card_head, found.library) == (
        "transformers",
        "toy-scoring",
        "toy-scoring",
        "transformers",
    )
    write_card(toy_dir, CardInfo(head=found.card_head, description="A toy head.", command="test"))
    card = check_card(toy_dir, "feature-extraction")
    assert "AutoModelForToyScoring.from_pretrained(path)" in card.text and ".last_hidden_state" in card.text
    assert pipeline_tag("toy-scoring") == "feature-extraction"


@pytest.mark.slow  # an ONNX export (9 s)
def test_a_registered_head_is_exported_as_its_entry_says(toy_dir, toy_head, tmp_path):
    pytest.importorskip("onnxruntime")
    from neobert.export.onnx import export_onnx
    from neobert.inference.onnx_encoder import OnnxEncoder

    result = export_onnx(toy_dir, tmp_path / "onnx")
    assert result.head == "base"  # not an exported head: its encoder, said in a note
    assert any("NeoBERTForToyScoring not exported" in note for note in result.notes)
    assert describe_directory(tmp_path / "onnx").kind.name == "onnx"
    vectors = OnnxEncoder(tmp_path / "onnx").encode(["exported"])
    hidden = json.loads((toy_dir / "config.json").read_text())["hidden_size"]
    assert vectors.shape == (1, hidden)


def test_directory_kinds_are_decided_in_one_place(tmp_path, toy_dir):
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    (tmp_path / "st" / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    found = describe_directory(tmp_path / "st")
    assert (found.kind.name, found.head, found.card_head) == (
        "sentence-transformers",
        "mlm",
        "sentence-embedding",
    )
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    modules[1]["type"] = "sentence_transformers.sparse_encoder.models.SpladePooling"
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    assert describe_directory(tmp_path / "st").card_head == "sparse-embedding"
    assert describe_directory(tmp_path / "nothing") is None
    assert list(DIRECTORY_KINDS)[-1] == "transformers"  # the catch-all is asked last
