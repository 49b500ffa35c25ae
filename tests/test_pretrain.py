"""The pretraining loop end to end, on a tiny model and a small real corpus (stdlib docstrings).

Covers: export loadable by AutoModelForMaskedLM, loss going down, TensorBoard + PNG outputs, gradient
accumulation equivalence, kill (SIGKILL) and resume equality, NaN stop keeping the last good checkpoint,
refusing to overwrite a run, and the `neobert pretrain` CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer

import neobert
from helpers import free_port, logged_losses, prepared_corpus, tiny_pretrain_config
from neobert.common.config import ConfigError
from neobert.data import write_stdlib_corpus
from neobert.training import mlm_task as pretrain_module
from neobert.training.checkpointing import list_checkpoints
from neobert.training.mlm_task import NonFiniteLossError, pretrain


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pretrain-data")
    corpus = root / "corpus.txt"
    write_stdlib_corpus(
        corpus,
        modules=[
            "json",
            "argparse",
            "textwrap",
            "functools",
            "pathlib",
            "collections",
            "logging",
            "email",
            "unittest",
        ],
    )
    return prepared_corpus(corpus, root)


def test_end_to_end_run_exports_a_loadable_model(prepared, tmp_path):
    config = tiny_pretrain_config(prepared, tmp_path / "run", max_steps=20, eval_every=10)
    result = pretrain(config, progress_bar=False)
    assert result.steps == 20 and result.final_model == tmp_path / "run" / "final"
    history = logged_losses(tmp_path / "run")
    assert sorted(history) == list(range(1, 21))
    assert history[20] < history[1] - 0.2  # it learns
    assert result.val_loss is not None and result.unigram_entropy is not None
    model = AutoModelForMaskedLM.from_pretrained(result.final_model)
    assert isinstance(model, neobert.NeoBERTForMaskedLM)
    tokenizer = AutoTokenizer.from_pretrained(result.final_model)
    assert tokenizer.mask_token_id is not None
    # the released layout: vocab.txt in id order, the special-token map, max_length on the tokenizer
    vocab = (result.final_model / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert [tokenizer.convert_tokens_to_ids(t) for t in vocab] == list(range(len(tokenizer)))
    assert (result.final_model / "special_tokens_map.json").is_file()
    assert tokenizer.model_max_length == model.config.max_length
    assert (tmp_path / "run" / "loss_curve.png").stat().st_size > 1000
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert [s for s, _ in list_checkpoints(tmp_path / "run" / "checkpoints")] == [16, 18, 20]  # keep_last 3


def test_gradient_accumulation_equals_one_big_micro_batch(prepared, tmp_path):
    """8 rows per step as 2 x 4 (accumulation) or 1 x 8: same data, same masks, same loss sequence."""
    a = tiny_pretrain_config(prepared, tmp_path / "a", max_steps=4, micro_batch_size=4)
    b = tiny_pretrain_config(prepared, tmp_path / "b", max_steps=4, micro_batch_size=8)
    pretrain(a, progress_bar=False)
    pretrain(b, progress_bar=False)
    la, lb = logged_losses(tmp_path / "a"), logged_losses(tmp_path / "b")
    for step in la:
        assert la[step] == pytest.approx(lb[step], rel=1e-5, abs=1e-5)


KILL_SCRIPT = """
import os, signal, sys
from neobert.training.config import PretrainConfig
from neobert.training.mlm_task import pretrain
config = PretrainConfig.from_file(sys.argv[1])
def kill_after(step, metrics):
    if step == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no atexit: like a pre-empted node
pretrain(config, resume="--resume" in sys.argv, on_step_end=kill_after, progress_bar=False)
"""


@pytest.mark.slow  # the fast in-process variant: tests/test_training_core.py
def test_sigkill_and_resume_continue_exactly(prepared, tmp_path):
    reference = tiny_pretrain_config(prepared, tmp_path / "reference", max_steps=8)
    pretrain(reference, progress_bar=False)

    killed = tiny_pretrain_config(prepared, tmp_path / "killed", max_steps=8)
    config_file = tmp_path / "killed.yaml"
    config_file.write_text(yaml.safe_dump(json.loads(json.dumps(killed.to_dict()))))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(KILL_SCRIPT))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    first = subprocess.run([sys.executable, str(script), str(config_file), "5"], env=env, capture_output=True)
    assert first.returncode == -signal.SIGKILL, first.stderr.decode()[-2000:]
    assert [s for s, _ in list_checkpoints(tmp_path / "killed" / "checkpoints")][-1] == 4
    second = subprocess.run(
        [sys.executable, str(script), str(config_file), "0", "--resume"], env=env, capture_output=True
    )
    assert second.returncode == 0, second.stderr.decode()[-2000:]

    expected, got = logged_losses(tmp_path / "reference"), logged_losses(tmp_path / "killed")
    assert sorted(got) == list(range(1, 9))
    for step in range(1, 9):
        assert got[step] == pytest.approx(expected[step], rel=1e-6, abs=1e-6), step
    ref = load_file(tmp_path / "reference" / "final" / "model.safetensors")
    res = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    for key in ref:
        torch.testing.assert_close(res[key], ref[key], rtol=1e-6, atol=1e-6)


DDP_SCRIPT = """
import json, sys
from neobert.training.config import PretrainConfig
from neobert.training.mlm_task import pretrain
pretrain(PretrainConfig.from_dict(json.loads(open(sys.argv[1]).read())), progress_bar=False)
"""


def run_multiprocess_and_compare(prepared, tmp_path, launcher: list[str]) -> None:
    """Train the same 4 steps in one process and under ``launcher`` (2 processes); losses and final weights
    must agree, and only the main process may log."""
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    pretrain(tiny_pretrain_config(prepared, tmp_path / "one", max_steps=4), progress_bar=False)
    config_file = tmp_path / "multi.json"
    config_file.write_text(
        json.dumps(tiny_pretrain_config(prepared, tmp_path / "multi", max_steps=4).to_dict())
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU processes over gloo, as the 1-process reference
    run = subprocess.run(
        [sys.executable, "-m", *launcher, str(script), str(config_file)],
        env=env,
        capture_output=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stdout.decode() + run.stderr.decode())[-4000:]
    records = [json.loads(line) for line in (tmp_path / "multi" / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in records if "train/loss" in r]) == 4  # only the main process logs
    one, multi = logged_losses(tmp_path / "one"), logged_losses(tmp_path / "multi")
    for step in one:
        assert multi[step] == pytest.approx(one[step], rel=1e-5, abs=1e-5)
    ref = load_file(tmp_path / "one" / "final" / "model.safetensors")
    got = load_file(tmp_path / "multi" / "final" / "model.safetensors")  # gathered from shards under FSDP
    assert sorted(got) == sorted(ref)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_two_processes_equal_one_process(prepared, tmp_path):
    """torchrun with 2 CPU processes (gloo) and the same global batch gives the 1-process losses and weights."""
    launcher = ["torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port()]
    run_multiprocess_and_compare(prepared, tmp_path, launcher)


@pytest.mark.slow
def test_fsdp_shipped_config_on_two_cpu_processes(prepared, tmp_path):
    """The shipped FSDP2 accelerate config (forced onto 2 CPU processes) trains the same run as 1 process."""
    from importlib import resources

    fsdp_yaml = resources.files("neobert.configs").joinpath("accelerate/fsdp.yaml")
    launcher = [
        "accelerate.commands.launch",
        "--config_file",
        str(fsdp_yaml),
        "--cpu",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        free_port(),
    ]
    run_multiprocess_and_compare(prepared, tmp_path, launcher)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(prepared, tmp_path, monkeypatch):
    real = pretrain_module.masked_lm_loss_sum
    calls = {"n": 0}

    def poisoned(logits, labels):
        calls["n"] += 1
        loss = real(logits, labels)
        return loss * float("nan") if calls["n"] > 10 else loss  # steps 1-5 fine (2 micro-batches a step)

    monkeypatch.setattr(pretrain_module, "masked_lm_loss_sum", poisoned)
    config = tiny_pretrain_config(prepared, tmp_path / "nan", max_steps=8, eval_every=100)
    with pytest.raises(NonFiniteLossError, match="non-finite loss"):
        pretrain(config, progress_bar=False)
    steps = [s for s, _ in list_checkpoints(tmp_path / "nan" / "checkpoints")]
    assert steps == [2, 4]
    weights = load_file(tmp_path / "nan" / "checkpoints" / "step-00000004" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_existing_run_is_not_overwritten(prepared, tmp_path):
    config = tiny_pretrain_config(prepared, tmp_path / "run", max_steps=4)
    pretrain(config, progress_bar=False)
    with pytest.raises(FileExistsError, match="--resume"):
        pretrain(config, progress_bar=False)
    # resuming a finished run is a no-op that still exports the model
    assert pretrain(config, resume=True, progress_bar=False).steps == 4


def test_resume_refuses_a_changed_config(prepared, tmp_path):
    pretrain(tiny_pretrain_config(prepared, tmp_path / "run", max_steps=4), progress_bar=False)
    changed = tiny_pretrain_config(prepared, tmp_path / "run", max_steps=6, **{"optim.lr": 1e-4})
    with pytest.raises(ValueError, match="'optim' changed"):
        pretrain(changed, resume=True, progress_bar=False)


def test_resume_from_a_checkpoint_older_than_a_new_setting(prepared, tmp_path):
    """A checkpoint written before data.long_docs existed resumes while the setting is left unset, and is
    refused once the run sets it (rows would change under the resumed position)."""
    run = tmp_path / "run"
    pretrain(tiny_pretrain_config(prepared, run, max_steps=4), progress_bar=False)
    for state_file in (run / "checkpoints").glob("step-*/trainer_state.json"):
        state = json.loads(state_file.read_text())
        del state["config"]["data"]["long_docs"]  # as written by the version before the setting
        state_file.write_text(json.dumps(state))
    assert (
        pretrain(tiny_pretrain_config(prepared, run, max_steps=6), resume=True, progress_bar=False).steps == 6
    )
    split = tiny_pretrain_config(prepared, run, max_steps=8, **{"data.long_docs": "split"})
    with pytest.raises(ValueError, match="'data' changed"):
        pretrain(split, resume=True, progress_bar=False)


def test_bad_long_docs_value_is_refused(prepared, tmp_path):
    with pytest.raises(ConfigError, match=r"data\.long_docs must be split or truncate"):
        tiny_pretrain_config(prepared, tmp_path / "run", **{"data.long_docs": "cut"})


def test_cli_pretrain_on_raw_text(tmp_path, prepared):
    from neobert.cli.main import main

    corpus = tmp_path / "text.txt"
    corpus.write_text(
        "\n\n".join(f"document number {i} talks about parsing json and paths." for i in range(60))
    )
    tokenizer = prepared.parent / "tokenizer"
    code = main(
        [
            "pretrain",
            "--data",
            str(corpus),
            "--tokenizer",
            str(tokenizer),
            "--preset",
            "tiny",
            "--max-steps",
            "3",
            "--output",
            str(tmp_path / "run"),
            "--no-progress",
            "--set",
            "model.vocab_size=400",
            "--set",
            "data.seq_len=32",
            "--set",
            "tokens_per_step=128",
            "--set",
            "micro_batch_size=4",
            "--set",
            "precision=fp32",
            "--set",
            "eval_batches=1",
        ]
    )
    assert code == 0
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
    assert (tmp_path / "run" / "data" / "manifest.json").is_file()  # raw text was prepared first


def test_cli_rejects_unknown_config_key(tmp_path, capsys):
    from neobert.cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: tiny\ndata:\n  seq_length: 128\n")
    assert main(["pretrain", "--config", str(bad), "--data", str(tmp_path)]) == 1
    assert "data.seq_length" in capsys.readouterr().err
