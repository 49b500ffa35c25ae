"""The recipes of NeoBERT's successors on the pretraining engine: a warmup-stable-decay run and decays branched
from its checkpoints, masking-rate schedules, Muon, phases and their exact resume (tiny model, CPU, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import Crash, assert_same_weights, crash_at, logged_losses, tiny_pretrain_config
from neobert.training.masking import mask_rate_at
from neobert.training.mlm_task import pretrain

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    from neobert.data import PrepareConfig, prepare, train_tokenizer

    root = tmp_path_factory.mktemp("recipes")
    corpus = root / "corpus.txt"
    words = ["parse", "the", "json", "file", "and", "write", "paths", "to", "the", "log", "of", "each", "module"]
    corpus.write_text("\n\n".join(" ".join(words[i % 7 :] + words[: i % 7] * (1 + i % 3)) for i in range(200)))
    tokenizer = train_tokenizer([corpus], "wordpiece", 400, root / "tokenizer").output_dir
    prepare(PrepareConfig(inputs=[str(corpus)], tokenizer=str(tokenizer), output=str(root / "data"),
                          validation_fraction=0.2, progress=False))  # fmt: skip
    return root / "data"


def _weights(output: Path) -> Path:
    return output / "final" / "model.safetensors"


def _logged(output: Path, key: str) -> dict[int, float]:
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[key] for r in records if key in r}


def test_a_decay_branched_from_a_stable_checkpoint_equals_a_run_planned_with_that_decay(prepared, tmp_path):
    wsd = {"schedule.kind": "wsd", "schedule.warmup_steps": 2, "schedule.final_ratio": 0.0}
    stable = tiny_pretrain_config(prepared, tmp_path / "stable", max_steps=8, **wsd, **{"schedule.decay_steps": 0})
    pretrain(stable, progress_bar=False)
    planned = tiny_pretrain_config(prepared, tmp_path / "planned", max_steps=7, **wsd, **{"schedule.decay_steps": 3})
    pretrain(planned, progress_bar=False)
    branch = stable.override(output=str(tmp_path / "branch"), max_steps=1,  # max_steps: set from the branch
                             decay_from=str(tmp_path / "stable" / "checkpoints" / "step-00000004"),
                             **{"schedule.decay_steps": 3})  # fmt: skip
    result = pretrain(branch, progress_bar=False)
    assert result.steps == 7
    assert_same_weights(_weights(tmp_path / "planned"), _weights(tmp_path / "branch"), tol=0)
    lrs = _logged(tmp_path / "branch", "train/lr")
    assert sorted(lrs) == [5, 6, 7] and lrs[7] == 0.0  # the lr of the step to come: 0 after the last
    assert lrs == {s: v for s, v in _logged(tmp_path / "planned", "train/lr").items() if s > 4}
    card = (tmp_path / "branch" / "final" / "README.md").read_text()
    assert "decay branched from the stable run's checkpoint" in card and "step-00000004" in card
    with pytest.raises(ValueError, match="own output"):
        pretrain(branch.override(output=str(tmp_path / "stable")), progress_bar=False)


def test_mask_rate_schedule_is_used_and_logged(prepared, tmp_path):
    config = tiny_pretrain_config(prepared, tmp_path / "run", max_steps=6,
                                  **{"data.mask_rate": 0.4, "data.mask_rate_end": 0.1})  # fmt: skip
    pretrain(config, progress_bar=False)
    rates = _logged(tmp_path / "run", "train/mask_rate")
    assert sorted(rates) == list(range(1, 7))
    for step, rate in rates.items():
        assert rate == pytest.approx(0.4 + (0.1 - 0.4) * (step - 1) / 5)
    # the masks follow the rate: masked tokens per step fall as the rate does (counted from the log)
    assert mask_rate_at(0, 6, 0.4, 0.1) == 0.4 and mask_rate_at(5, 6, 0.4, 0.1) == pytest.approx(0.1)
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "0.4 -> 0.1 (linear)" in card


def test_muon_pretraining_resumes_exactly_and_names_itself_in_the_card(prepared, tmp_path):
    muon = {"optim.name": "muon", "optim.lr": 2e-2}
    pretrain(tiny_pretrain_config(prepared, tmp_path / "reference", max_steps=6, **muon), progress_bar=False)
    config = tiny_pretrain_config(prepared, tmp_path / "crashed", max_steps=6, **muon)
    with pytest.raises(Crash):
        pretrain(config, on_step_end=crash_at(3), progress_bar=False)
    pretrain(config, resume=True, progress_bar=False)
    assert logged_losses(tmp_path / "crashed") == logged_losses(tmp_path / "reference")
    assert_same_weights(_weights(tmp_path / "reference"), _weights(tmp_path / "crashed"), tol=0)
    adamw = tiny_pretrain_config(prepared, tmp_path / "adamw", max_steps=2, **{"optim.lr": 2e-2})
    pretrain(adamw, progress_bar=False)
    assert logged_losses(tmp_path / "adamw")[2] != logged_losses(tmp_path / "reference")[2]
    card = (tmp_path / "reference" / "final" / "README.md").read_text()
    assert "Muon for the hidden 2-D weights (momentum 0.95" in card
