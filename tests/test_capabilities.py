"""What a model can do, decided once (neobert.inference.capabilities, neobert.inference.registration.head_of) and the one
pooling registry (neobert.model.pooling.POOLINGS): each against expectations written out by hand, and the
structural claims (one home each) checked over the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from transformers import BertConfig

from neobert.inference.capabilities import describe, detect_head
from neobert.inference.encoders import EmbeddingSpec, load_model, save_pretrained
from neobert.inference.kinds import load_for_inference
from neobert.inference.registration import HEADS, declared_head, head_of, head_of_names
from neobert.model.pooling import (
    CLASSIFIER_POOLINGS,
    ONNX_POOLINGS,
    POOLING_NAMES,
    POOLINGS,
    from_sentence_transformers,
    pool,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "neobert"


@pytest.mark.parametrize(
    "names, head",
    [
        (["NeoBERTForMaskedLM"], "mlm"),
        (["BertForSequenceClassification"], "sequence-classification"),
        (["RobertaForTokenClassification"], "token-classification"),
        (["BertModel"], "base"),
        (["NeoBERT"], "base"),
        ([], "base"),
        (None, "base"),
        (["BertModel", "BertForMaskedLM"], "mlm"),  # the first that names a head
    ],
)
def test_head_of_names(names, head):
    assert head_of_names(names) == head
    assert declared_head({"architectures": names}) == head


@pytest.mark.parametrize("head", HEADS)
def test_head_of_a_loaded_model_and_its_saved_directory(head, tmp_path, tokenizer):
    model = load_model("tiny", head=head, vocab_size=len(tokenizer), num_labels=3)
    assert head_of(model) == head
    assert head_of(torch.compile(model)) == head  # the wrapper's inner module decides
    path = save_pretrained(model, tokenizer, tmp_path / head)
    assert detect_head(path) == head


def test_a_preset_is_an_mlm():
    assert detect_head("tiny") == "mlm"


def _config(num_labels=2, **kw):
    return BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=num_labels,
        **kw,
    )


def test_what_each_head_offers():
    spec = EmbeddingSpec()
    assert describe(_config(), "base", spec, 128).tasks == ("embed", "embed_all", "tokenize", "decode")
    assert describe(_config(), "mlm", spec, 128).tasks == (
        "embed",
        "embed_all",
        "fill-mask",
        "tokenize",
        "decode",
    )
    assert describe(_config(), "token-classification", spec, 128).tasks == (
        "embed",
        "embed_all",
        "tokens",
        "tokenize",
        "decode",
    )
    assert describe(_config(3), "sequence-classification", spec, 128).tasks == (
        "embed",
        "embed_all",
        "classify",
        "predict",
        "tokenize",
        "decode",
    )
    for labels in (1, 2):  # a cross-encoder reranks
        got = describe(_config(labels), "sequence-classification", spec, 128)
        assert got.tasks == ("embed", "embed_all", "classify", "predict", "rerank", "tokenize", "decode")
    assert set(HEADS) == {"base", "mlm", "sequence-classification", "token-classification"}
    # SPLADE vectors: an MLM used as a sparse model (a SPLADE directory, or --sparse); no other head
    sparse = describe(_config(), "mlm", spec, 128, sparse=True)
    assert (
        sparse.tasks == ("embed", "embed_all", "fill-mask", "embed_sparse", "tokenize", "decode")
        and sparse.sparse
    )
    assert "--sparse" in describe(_config(), "mlm", spec, 128).info()["not_served"]["embed_sparse"]
    assert describe(_config(), "base", spec, 128, sparse=True).tasks == (
        "embed",
        "embed_all",
        "tokenize",
        "decode",
    )
    assert describe(_config(), "mlm", spec, 128, runtime=("embed", "fill-mask"), sparse=True).tasks == (
        "embed",
        "fill-mask",
    )


def test_rerank_needs_the_pairs_token_types_where_the_model_reads_them():
    bert = _config(1, type_vocab_size=2)  # reads the second text's type
    assert "rerank" in describe(bert, "sequence-classification", None, 128).tasks
    assert describe(bert, "sequence-classification", None, 128, pair_token_types=False).tasks == (
        "classify",
        "predict",
        "tokenize",
        "decode",
    )
    one_type = _config(1, type_vocab_size=1)  # NeoBERT-like: no token types
    assert "rerank" in describe(one_type, "sequence-classification", None, 128, pair_token_types=False).tasks


def test_labels_and_info_and_refusals():
    config = _config(3, id2label={0: "neg", 1: "neu", 2: "pos"})
    got = describe(config, "sequence-classification", "a Dense module is not supported", 77)
    assert got.labels == ("neg", "neu", "pos") and got.tasks == ("classify", "predict", "tokenize", "decode")
    assert got.refused == "a Dense module is not supported"
    info = got.info()
    assert info == {
        "head": "sequence-classification",
        "serves": ["classify", "predict", "tokenize", "decode"],
        "model_type": "bert",
        "dimensions": 32,
        "max_input_tokens": 77,
        "pooling": None,
        "normalize": None,
        "embedding_settings_from": None,
        "labels": ["neg", "neu", "pos"],
        "prompts": {},
        "default_prompt_name": None,
        "matryoshka_dims": [],
        "not_served": {"embed": "a Dense module is not supported"},
        "token_vectors": None,
    }
    with pytest.raises(ValueError, match=r"would serve nothing.*Dense"):
        describe(_config(), "base", "a Dense module is not supported", 77)
    assert describe(_config(), "base", EmbeddingSpec("cls", False), 8).info()["pooling"] == "cls"


def test_load_for_inference_decides_head_tokenizer_and_limits(tmp_path, tokenizer):
    classifier = load_model(
        "tiny",
        head="sequence-classification",
        vocab_size=len(tokenizer),
        num_labels=2,
        id2label={0: "no", 1: "yes"},
    )
    path = save_pretrained(classifier, tokenizer, tmp_path / "cls")
    loaded = load_for_inference(path, precision="fp32")
    assert loaded.capabilities.head == "sequence-classification"
    assert loaded.capabilities.labels == ("no", "yes")
    assert loaded.capabilities.tasks == (
        "embed",
        "embed_all",
        "classify",
        "predict",
        "rerank",
        "tokenize",
        "decode",
    )
    assert loaded.capabilities.max_input_tokens == classifier.config.max_length
    assert head_of(loaded.model) == "sequence-classification" and not loaded.model.training
    with pytest.raises(ValueError, match="unknown head 'decoder'"):
        load_for_inference(path, head="decoder")


# --- the pooling registry ---------------------------------------------------------------------------------


def test_every_pooling_computes_what_its_name_says():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)  # (B, L, C)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    expected = {
        "mean": torch.stack([hidden[0, :3].mean(0), hidden[1, :2].mean(0)]),
        "cls": hidden[:, 0],
        "last": torch.stack([hidden[0, 2], hidden[1, 1]]),
    }
    assert set(expected) == set(POOLING_NAMES)  # a new pooling adds its expectation here
    for name, want in expected.items():
        torch.testing.assert_close(pool(hidden, mask, name), want)
    with pytest.raises(ValueError, match="unknown pooling 'max'; use one of mean, cls, last"):
        pool(hidden, mask, "max")


def test_registry_answers_each_consumer():
    assert CLASSIFIER_POOLINGS == ("mean", "cls")  # no classifier head pools the last token
    assert ONNX_POOLINGS == ("mean", "cls")  # the export's graph has no last-token branch
    assert from_sentence_transformers("lasttoken") == "last" and from_sentence_transformers("max") is None
    assert all(from_sentence_transformers(p.sentence_transformers) == n for n, p in POOLINGS.items())
    assert [n for n, p in POOLINGS.items() if p.by_tokens] == ["mean"]  # long documents weight mean only


def test_neobert_embed_offers_every_pooling_the_service_does():
    from neobert.jobs.embed_config import EmbedConfig
    from neobert.serving.routes.ours import EmbedRequest

    field = EmbedConfig.__dataclass_fields__["pooling"]
    assert tuple(field.metadata["choices"]) == POOLING_NAMES
    service = EmbedRequest.model_json_schema()["properties"]["pooling"]["anyOf"][0]["enum"]
    assert tuple(service) == POOLING_NAMES


def _modules() -> list[tuple[Path, ast.AST]]:
    return [(p, ast.parse(p.read_text())) for p in SRC.rglob("*.py")]


def test_pooling_names_are_listed_in_one_module():
    """No tuple or list of pooling names outside the registry (each consumer's subset is derived from it)."""
    names = set(POOLING_NAMES)
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
                values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(values) == len(node.elts) and set(values) <= names:
                    found.append(str(path.relative_to(SRC)))
    assert found == []


def test_head_detection_lives_in_one_module():
    """Class-name suffixes of heads are read in neobert/inference/registration.py only."""
    suffixes = {"ForMaskedLM", "ForSequenceClassification", "ForTokenClassification"}
    found = {
        str(path.relative_to(SRC))
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in suffixes
    }
    assert found == {"inference/registration.py"}
