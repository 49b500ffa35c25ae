"""Token classification: readers, sub-word labels, entity metrics (hand-computed), tagging offsets, and
``neobert finetune tokens`` / ``neobert tag`` end to end on NeoBERT and a tiny BERT."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from embedding_fixtures import tiny_bert_config
from helpers import (
    Crash,
    assert_same_weights,
    check_card,
    crash_at,
    run_script,
    synthetic_ner,
    torchrun,
    write_conll,
)

pytest.importorskip("seqeval")

from neobert.cli.main import main
from neobert.finetuning.data import DataError
from neobert.finetuning.tagging_task import entity_metrics, evaluate_tokens, run_tokens
from neobert.finetuning.token_data import (
    IGNORE,
    TokenLabelDataset,
    label_names,
    read_sentences,
    word_labels,
)
from neobert.inference.long_documents import TokenLogits
from neobert.token_classification import entity_scores, spans
from neobert.token_classification.tagging import Word, entities_of, words_of

pytestmark = pytest.mark.usefixtures("one_thread")

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def test_read_conll_skips_docstart_and_keeps_the_last_column(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text(CONLL, encoding="utf-8")
    sentences = read_sentences(path)
    assert [s.words for s in sentences] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    assert [s.tags for s in sentences] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    assert [s.line for s in sentences] == [3, 8]
    assert label_names(sentences) == ["O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.conll", "John B-PER\nlonely\n", r"a\.conll, line 2: expected a token and its tag"),
        ("b.conll", "John B-PER\n\nParis LOC\n", r"b\.conll, line 3: tag 'LOC' is not BIO"),
        ("c.conll", "John E-PER\n", r"c\.conll, line 1: tag 'E-PER'"),
        (
            "d.jsonl",
            '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n',
            r"d\.jsonl, line 2: 2 tokens but 1 tags",
        ),
        ("e.jsonl", '{"tokens": ["a"]}\n', r"e\.jsonl, line 1: no 'tags' field"),
        (
            "f.jsonl",
            '{"tokens": ["a"], "tags": [3]}\n',
            r"f\.jsonl, line 1: 'tags' must be a list of strings",
        ),
        ("g.jsonl", "{oops\n", r"g\.jsonl, line 1: not valid JSON"),
        (
            "h.jsonl",
            '{"tokens": ["a", "b"], "ner_tags": ["O", "X-1"]}\n',
            r"h\.jsonl, line 1, token 1: tag 'X-1'",
        ),
        ("i.conll", "\n\n", r"i\.conll holds no sentence"),
    ],
)
def test_reader_errors_name_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_sentences(path)


def test_jsonl_reader_accepts_ner_tags(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"tokens": ["Mary", "runs"], "ner_tags": ["B-PER", "O"]}\n\n', encoding="utf-8")
    (sentence,) = read_sentences(path)
    assert (sentence.words, sentence.tags) == (["Mary", "runs"], ["B-PER", "O"])


def test_labels_go_on_the_first_sub_word(tokenizer):
    assert word_labels([None, 0, 0, 1, 2, 2, 2, None], [3, 5, 1]) == [
        IGNORE,
        3,
        IGNORE,
        5,
        1,
        IGNORE,
        IGNORE,
        IGNORE,
    ]
    from neobert.finetuning.token_data import Sentence

    sentence = Sentence(["Unbelievably", "Kowalczyk", "ran"], ["O", "B-PER", "O"], 1)
    data = TokenLabelDataset(tokenizer, [sentence], {"O": 0, "B-PER": 1, "I-PER": 2}, max_length=64)
    row = data[0]
    pieces = tokenizer.convert_ids_to_tokens(row["input_ids"].tolist())
    labelled = [(piece, int(label)) for piece, label in zip(pieces, row["labels"]) if label != IGNORE]
    # one label per word, on its first piece; "kowalczyk" splits into several pieces
    assert [label for _, label in labelled] == [0, 1, 0]
    assert labelled[1][0] == tokenizer.tokenize("Kowalczyk")[0] and len(tokenizer.tokenize("Kowalczyk")) > 1


def test_entity_scores_match_hand_computed_values():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O", "B-PER", "I-PER"]]
    # gold entities: PER(0-1) LOC(3) | ORG(0) PER(2): 4. predicted: PER(0-1) ORG(3) | ORG(0) PER(2-3): 4.
    # exact matches: PER(0-1), ORG(0): 2 -> P = 2/4, R = 2/4, F1 = 0.5
    scores = entity_scores(gold, pred)
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.5, 0.5, 0.5)
    assert scores["per_type"]["PER"]["support"] == 2 and scores["per_type"]["PER"]["precision"] == 0.5
    # an I- without a B- opens an entity (conlleval / seqeval default)
    assert spans(["O", "I-LOC", "I-LOC", "B-LOC"]) == [("LOC", 1, 2), ("LOC", 3, 3)]
    gold, pred = [["B-PER", "O", "O"]], [["B-PER", "B-LOC", "O"]]  # P = 1/2, R = 1/1, F1 = 2/3
    result = entity_metrics(gold, pred)
    assert result.values["precision"] == 0.5 and result.values["recall"] == 1.0
    assert result.values["f1"] == pytest.approx(2 / 3)
    empty = entity_metrics([["B-PER", "O"]], [["O", "O"]])
    assert math.isnan(empty.values["precision"]) and empty.values["recall"] == 0 and empty.values["f1"] == 0
    assert "no entity predicted" in empty.notes[0]


def test_words_and_entities_carry_character_offsets():
    text = "Ann Lee met Bob"
    # tokens: ann | lee | met | bo ##b  (word ids 0 1 2 3 3); labels O B-PER I-PER
    logits = np.full((5, 3), -5.0, dtype=np.float32)
    for token, label in enumerate([1, 2, 0, 1, 0]):  # "##b" would say O: only first sub-words count
        logits[token, label] = 5.0
    rows = TokenLogits(logits, [(0, 3), (4, 7), (8, 11), (12, 14), (14, 15)], [0, 1, 2, 3, 3])
    words = words_of(rows, {0: "O", 1: "B-PER", 2: "I-PER"})
    assert [(w.start, w.end, w.tag) for w in words] == [
        (0, 3, "B-PER"),
        (4, 7, "I-PER"),
        (8, 11, "O"),
        (12, 15, "B-PER"),
    ]
    entities = entities_of(text, words)
    assert [(e.label, e.start, e.end, e.text) for e in entities] == [
        ("PER", 0, 7, "Ann Lee"),
        ("PER", 12, 15, "Bob"),
    ]
    # a word cut off by truncation has no logits: tagged O
    cut = entities_of("x y", [Word(0, 1, "B-PER", 0.9), Word(2, 3, "O", float("nan"))])
    assert [e.text for e in cut] == ["x"]


def test_finetune_tokens_then_tag_end_to_end(tmp_path, tokenizer):
    from transformers import AutoModelForTokenClassification

    write_conll(tmp_path / "train.conll", synthetic_ner(160, seed=0))
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in synthetic_ner(40, seed=1)))
    code = main(
        [
            "finetune",
            "tokens",
            "--model",
            "tiny",
            "--preset-override",
            "vocab_size=30522",
            "--train",
            str(tmp_path / "train.conll"),
            "--validation",
            str(tmp_path / "dev.jsonl"),
            "--output",
            str(tmp_path / "out"),
            "--epochs",
            "6",
            "--batch-size",
            "16",
            "--lr",
            "2e-3",
            "--warmup-ratio",
            "0",
            "--patience",
            "0",
            "--quiet",
            "--no-tensorboard",
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert report["labels"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert report["metrics"]["f1"] > 0.8, report["history"]
    assert set(report["per_type"]) == {"LOC", "PER"}

    model = AutoModelForTokenClassification.from_pretrained(tmp_path / "out" / "model").eval()
    assert type(model).__name__ == "NeoBERTForTokenClassification"
    # the metrics recomputed from the saved model agree with metrics.json
    sentences = read_sentences(tmp_path / "dev.jsonl")
    data = TokenLabelDataset(tokenizer, sentences, model.config.label2id, 512)
    result, _, _ = evaluate_tokens(model, data, 16, 0)
    assert result.values["f1"] == pytest.approx(report["metrics"]["f1"], abs=1e-6)
    card = check_card(tmp_path / "out" / "model", "token-classification")  # its numbers are metrics.json's
    assert {e.metric_type: e.metric_value for e in card.data.eval_results} == report["metrics"]
    assert "`B-LOC`, `I-LOC`" in card.text and "dev.jsonl" in card.text

    texts = ["john smith visited paris today", "and then mary went to rome with linda"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    assert (
        main(
            [
                "tag",
                "--model",
                str(tmp_path / "out" / "model"),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "tags.jsonl"),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "tags.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == texts
    for row in rows:
        for entity in row["entities"]:
            assert row["text"][entity["start"] : entity["end"]] == entity["text"]
    found = {(e["label"], e["text"]) for row in rows for e in row["entities"]}
    assert {("PER", "john smith"), ("LOC", "paris"), ("PER", "mary"), ("LOC", "rome")} <= found


def test_finetune_tokens_on_a_tiny_bert(tmp_path, tokenizer):
    from transformers import AutoModelForTokenClassification, BertModel

    torch.manual_seed(0)
    BertModel(tiny_bert_config()).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    rows = synthetic_ner(24, seed=2)
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_tokens(
        {
            "model": str(tmp_path / "bert"),
            "train": str(tmp_path / "t.jsonl"),
            "validation": str(tmp_path / "t.jsonl"),
            "output": str(tmp_path / "out"),
            "epochs": 1,
            "batch_size": 8,
            "show_progress": False,
            "tensorboard": False,
        }
    )
    model = AutoModelForTokenClassification.from_pretrained(result.model_dir)
    assert model.config.model_type == "bert" and model.config.id2label[3] == "B-PER"
    assert set(result.metrics) == {"precision", "recall", "f1"}
    predictions = [json.loads(line) for line in result.predictions_file.read_text().splitlines()]
    assert [p["tokens"] for p in predictions] == [r["tokens"] for r in rows]
    assert all(len(p["predicted"]) == len(p["tokens"]) for p in predictions)

    # neobert tag on the BERT model: its entities are the spans of the tags that the evaluation path
    # (words given pre-split) predicts for the same words, at those words' character offsets
    from neobert.finetuning.tagging_task import _tag_names

    texts = [" ".join(r["tokens"]) for r in rows[:8]]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    assert (
        main(
            [
                "tag",
                "--model",
                str(result.model_dir),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "tags.jsonl"),
            ]
        )
        == 0
    )
    tagged = [json.loads(line) for line in (tmp_path / "tags.jsonl").read_text().splitlines()]
    data = TokenLabelDataset(tokenizer, read_sentences(tmp_path / "t.jsonl")[:8], model.config.label2id, 128)
    _, ids, _ = evaluate_tokens(model.eval(), data, 8, 0)
    assert sum(len(row["entities"]) for row in tagged) > 0
    for text, row, tags in zip(texts, tagged, _tag_names(ids, result.labels)):
        starts = np.cumsum([0] + [len(w) + 1 for w in text.split(" ")])
        expected = [
            (kind, int(starts[a]), int(starts[b]) + len(text.split(" ")[b])) for kind, a, b in spans(tags)
        ]
        assert [(e["label"], e["start"], e["end"]) for e in row["entities"]] == expected


def test_finetune_tokens_rejects_unseen_validation_tags(tmp_path):
    write_conll(tmp_path / "a.conll", [{"tokens": ["john"], "tags": ["B-PER"]}])
    write_conll(tmp_path / "b.conll", [{"tokens": ["rome"], "tags": ["B-LOC"]}])
    with pytest.raises(DataError, match=r"b\.conll: tag\(s\) not seen in training: B-LOC"):
        run_tokens(
            {
                "model": "tiny",
                "preset_overrides": {"vocab_size": 30522},
                "train": str(tmp_path / "a.conll"),
                "validation": str(tmp_path / "b.conll"),
                "output": str(tmp_path / "o"),
            }
        )


def tokens_config(root, output, **changes) -> dict:
    return {
        "model": "tiny",
        "preset_overrides": {"vocab_size": 30522, "classifier_dropout": 0.0},
        "train": str(root / "train.jsonl"),
        "validation": str(root / "dev.jsonl"),
        "output": str(output),
        "batch_size": 8,
        "lr": 1e-3,
        "epochs": 2,
        "eval_every": 2,
        "patience": None,
        "show_progress": False,
        "tensorboard": False,
        **changes,
    }  # 3 steps an epoch, 6 in all


@pytest.fixture(scope="module")
def ner_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ner-core")
    for name, n, seed in (("train.jsonl", 24, 3), ("dev.jsonl", 12, 4)):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in synthetic_ner(n, seed)))
    return root


def assert_same_tokens_run(reference, got) -> None:

    ref, res = (json.loads((d / "metrics.json").read_text()) for d in (reference, got))
    assert [h["loss"] for h in res["history"]] == pytest.approx([h["loss"] for h in ref["history"]], abs=1e-6)
    assert res["best_step"] == ref["best_step"] and res["steps"] == ref["steps"] == 6
    assert (got / "predictions.jsonl").read_text() == (reference / "predictions.jsonl").read_text()
    assert_same_weights(reference / "model" / "model.safetensors", got / "model" / "model.safetensors", 1e-5)


def test_finetune_tokens_crash_and_resume_continue_exactly(ner_files, tmp_path, monkeypatch, tokenizer):
    """The training core's resume, for the token task: a run stopped after step 3 (last checkpoint at step 2)
    and resumed ends with the history, predictions and weights of the run that never stopped."""
    from neobert.finetuning import tagging_task

    run_tokens(tokens_config(ner_files, tmp_path / "reference"))
    real_fit = tagging_task.fit
    monkeypatch.setattr(tagging_task, "fit", lambda *a, **k: real_fit(*a, on_step_end=crash_at(3), **k))
    with pytest.raises(Crash):
        run_tokens(tokens_config(ner_files, tmp_path / "crashed"))
    assert (tmp_path / "crashed" / "checkpoints" / "step-00000002").is_dir()
    with pytest.raises(FileExistsError, match="--resume"):
        run_tokens(tokens_config(ner_files, tmp_path / "crashed"))
    monkeypatch.setattr(tagging_task, "fit", real_fit)
    run_tokens(tokens_config(ner_files, tmp_path / "crashed", resume=True))
    assert_same_tokens_run(tmp_path / "reference", tmp_path / "crashed")
    assert not (tmp_path / "crashed" / "checkpoints").exists()


def test_token_loss_is_the_mean_over_labelled_words(ner_files, tokenizer):
    """count() is the number of first sub-words; loss_sum / count equals the model's own mean loss."""
    from types import SimpleNamespace

    from neobert.finetuning.tagging_task import TokenClassificationTask, load_token_classifier

    sentences = read_sentences(ner_files / "train.jsonl")[:5]
    labels = label_names(sentences)
    model = load_token_classifier("tiny", labels, {"vocab_size": 30522}).eval()
    data = TokenLabelDataset(tokenizer, sentences, {n: i for i, n in enumerate(labels)}, 64)
    task = TokenClassificationTask.__new__(TokenClassificationTask)
    task.trainer, task.pad = SimpleNamespace(device=torch.device("cpu")), 0
    batch = task.collate([data[i] for i in range(len(data))])
    assert int(task.count(batch)) == sum(len(s.words) for s in sentences)
    with torch.no_grad():
        terms = task.loss(model, dict(batch))
        expected = model(**batch).loss  # transformers' mean over labels != -100
    torch.testing.assert_close(terms.loss_sum / task.count(batch), expected)


@pytest.mark.slow
def test_finetune_tokens_two_processes_equal_one(ner_files, tmp_path, tokenizer):
    """torchrun, 2 CPU processes: each takes half of every batch; the loss is divided by the global number
    of labelled words, so the run equals one process's."""

    run_tokens(tokens_config(ner_files, tmp_path / "one"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tokens_config(ner_files, tmp_path / "two")))
    script = "import json, sys\nfrom neobert.finetuning.tagging_task import run_tokens\n"
    script += "run_tokens(json.loads(open(sys.argv[1]).read()))\n"
    two = run_script(tmp_path, script, [str(config)], torchrun())
    assert two.returncode == 0, (two.stdout.decode() + two.stderr.decode())[-4000:]
    assert_same_tokens_run(tmp_path / "one", tmp_path / "two")
