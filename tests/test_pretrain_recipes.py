"""The recipes of NeoBERT's successors on the pretraining trainer: a warmup-stable-decay run and decays branched
from its checkpoints, masking-rate schedules, Muon, phases and their exact resume (tiny model, CPU, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import (
    Crash,
    assert_same_weights,
    crash_at,
    logged_losses,
    prepared_corpus,
    rotations,
    tiny_pretrain_config,
)
from neobert.training.masking import mask_rate_at
from neobert.training.mlm_task import pretrain

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recipes")
    corpus = root / "corpus.txt"
    corpus.write_text(rotations(repeat=True))
    return prepared_corpus(corpus, root)


def _weights(output: Path) -> Path:
    return output / "final" / "model.safetensors"


def _logged(output: Path, key: str) -> dict[int, float]:
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[key] for r in records if key in r}


def test_a_decay_branched_from_a_stable_checkpoint_equals_a_run_planned_with_that_decay(
    prepared, tmp_path, capsys
):
    wsd = {"schedule.kind": "wsd", "schedule.warmup_steps": 2, "schedule.final_ratio": 0.0}
    stable = tiny_pretrain_config(
        prepared, tmp_path / "stable", max_steps=8, **wsd, **{"schedule.decay_steps": 0}
    )
    pretrain(stable, progress_bar=False)
    planned = tiny_pretrain_config(
        prepared, tmp_path / "planned", max_steps=7, **wsd, **{"schedule.decay_steps": 3}
    )
    pretrain(planned, progress_bar=False)
    branch = stable.override(
        output=str(tmp_path / "branch"),
        max_steps=1,  # max_steps: set from the branch
        decay_from=str(tmp_path / "stable" / "checkpoints" / "step-00000004"),
        **{"schedule.decay_steps": 3},
    )
    result = pretrain(branch, progress_bar=False)
    assert result.steps == 7
    assert "branched from" in capsys.readouterr().out  # not "resumed from": it is a run of its own
    assert_same_weights(_weights(tmp_path / "planned"), _weights(tmp_path / "branch"), tol=0)
    lrs = _logged(tmp_path / "branch", "train/lr")
    assert sorted(lrs) == [5, 6, 7] and lrs[7] == 0.0  # the lr of the step to come: 0 after the last
    assert lrs == {s: v for s, v in _logged(tmp_path / "planned", "train/lr").items() if s > 4}
    card = (tmp_path / "branch" / "final" / "README.md").read_text()
    assert "decay branched from the stable run's checkpoint" in card and "step-00000004" in card
    with pytest.raises(ValueError, match="own output"):
        pretrain(branch.override(output=str(tmp_path / "stable")), progress_bar=False)


def test_mask_rate_schedule_is_used_and_logged(prepared, tmp_path):
    config = tiny_pretrain_config(
        prepared, tmp_path / "run", max_steps=6, **{"data.mask_rate": 0.4, "data.mask_rate_end": 0.1}
    )
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


# -- phases ---------------------------------------------------------------------------------------------------

TWO_PHASES = [
    {
        "name": "short",
        "steps": 3,
        "seq_len": 32,
        "mask_rate": 0.3,
        "mask_rate_end": 0.2,
        "schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 0},
    },
    {
        "name": "long",
        "steps": 3,
        "seq_len": 64,
        "mask_rate": 0.15,
        "lr": 1e-3,
        "micro_batch_size": 2,
        "model": {"max_length": 64, "rope_theta": 40000.0},
        "schedule": {"kind": "1-sqrt", "warmup_steps": 0, "decay_fraction": 1.0, "final_ratio": 0.0},
    },
]


def _phased(prepared: Path, output: Path, **changes):
    base = tiny_pretrain_config(prepared, output, **{"model": {"vocab_size": 400, "max_length": 32}})
    return base.override(phases=TWO_PHASES, **changes)


@pytest.mark.parametrize("crash", [3, 4])  # at the phase boundary, and inside the second phase
def test_phases_resume_exactly_across_and_inside_a_boundary(prepared, tmp_path, crash):
    pretrain(_phased(prepared, tmp_path / "reference"), progress_bar=False)
    config = _phased(prepared, tmp_path / "crashed")
    with pytest.raises(Crash):
        pretrain(config, on_step_end=crash_at(crash), progress_bar=False)
    result = pretrain(config, resume=True, progress_bar=False)
    assert result.steps == 6
    assert logged_losses(tmp_path / "crashed") == logged_losses(tmp_path / "reference")
    assert_same_weights(_weights(tmp_path / "reference"), _weights(tmp_path / "crashed"), tol=0)


def test_phases_change_rows_masking_lr_and_rope_and_are_recorded(prepared, tmp_path):
    from neobert.training.schedule import lr_at

    result = pretrain(_phased(prepared, tmp_path / "run"), progress_bar=False)
    assert result.steps == 6
    lrs, rates = _logged(tmp_path / "run", "train/lr"), _logged(tmp_path / "run", "train/mask_rate")
    # the lr logged after step s is the one step s + 1 uses: phase 1 (wsd, warmup 1, peak 3e-3) then phase 2
    expected = [3e-3, 3e-3, 1e-3] + [
        lr_at(s, peak=1e-3, warmup_steps=0, total_steps=3, kind="1-sqrt", decay_fraction=1.0, final_ratio=0.0)
        for s in (1, 2, 3)
    ]
    assert [lrs[s] for s in range(1, 7)] == pytest.approx(expected)
    assert [rates[s] for s in range(1, 7)] == pytest.approx([0.3, 0.25, 0.2, 0.15, 0.15, 0.15])
    final = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    assert final["max_length"] == 64 and final["rope_theta"] == 40000.0
    manifest = json.loads((tmp_path / "run" / "phases.json").read_text())
    short, long = manifest["phases"]
    assert (short["first_step"], short["steps_trained"], short["seq_len"]) == (0, 3, 32)
    assert (long["first_step"], long["steps_trained"], long["seq_len"], long["tokens_trained"]) == (
        3,
        3,
        64,
        768,
    )
    assert long["model"] == {"max_length": 64, "rope_theta": 40000.0}
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "phase 1: short" in card and "phase 2: long" in card and "rows of 64" in card


def test_phase_errors_name_the_key(prepared, tmp_path):
    from neobert.common.config import ConfigError

    bad = [{**TWO_PHASES[0], "seq_len": 128}]
    with pytest.raises(ConfigError, match=r"phases\[0\].seq_len 128 exceeds the model's max_length 32"):
        _phased(prepared, tmp_path / "x").override(phases=bad)
    with pytest.raises(ConfigError, match=r"phases\[1\].sources.wiki: no data source"):
        _phased(prepared, tmp_path / "x").override(
            phases=[TWO_PHASES[0], {"steps": 1, "sources": {"wiki": 1.0}}]
        )
    with pytest.raises(ConfigError, match=r"unknown config key\(s\): phases\[0\].mask"):
        _phased(prepared, tmp_path / "x").override(phases=[{"steps": 1, "mask": 0.1}])
    with pytest.raises(ConfigError, match=r"phases\[0\]: give the phase's length as steps or as tokens"):
        _phased(prepared, tmp_path / "x").override(phases=[{"seq_len": 32}])


def test_temperature_sampling_over_sources_matches_numpy(tmp_path):
    """Two prepared sources of different sizes, sampled by size ** 0.5: the stream's block picks follow the
    numpy probabilities, and the manifest records them."""
    from neobert.data import train_tokenizer
    from neobert.jobs.prepare import PrepareConfig, prepare
    from neobert.training.phases import source_weights

    sizes = {}
    for name, docs in (("big", 300), ("small", 30)):
        corpus = tmp_path / f"{name}.txt"
        corpus.write_text(
            "\n\n".join(f"{name} document number {i} about json paths and logs" for i in range(docs))
        )
        if name == "big":
            tokenizer = train_tokenizer([corpus], "wordpiece", 400, tmp_path / "tokenizer").output_dir
        prepared = prepare(
            PrepareConfig(
                inputs=[str(corpus)],
                tokenizer=str(tokenizer),
                output=str(tmp_path / name),
                validation_fraction=0.1,
                progress=False,
            )
        )
        sizes[name] = prepared
    config = tiny_pretrain_config(
        tmp_path / "big",
        tmp_path / "run",
        max_steps=4,
        **{"data.paths": [str(tmp_path / "big"), str(tmp_path / "small")]},
    )
    config = config.override(phases=[{"steps": 4, "temperature": 0.5}])
    pretrain(config, progress_bar=False)
    manifest = json.loads((tmp_path / "run" / "phases.json").read_text())["phases"][0]
    from neobert.data.dataset import TokenDataset

    tokens = {n: int(np.asarray(TokenDataset(tmp_path / n, "train").lengths).sum()) for n in ("big", "small")}
    p = np.array([tokens["big"], tokens["small"]], dtype=float) ** 0.5
    assert manifest["sampling"] == pytest.approx({"big": p[0] / p.sum(), "small": p[1] / p.sum()}, abs=1e-6)
    assert source_weights(tokens, {"big": 3.0, "small": 1.0}, None) == {"big": 0.75, "small": 0.25}
    assert sum(manifest["documents_drawn"].values()) > 0


# -- named recipes --------------------------------------------------------------------------------------------

# the papers' numbers (docs/pretraining.md gives the sources): phase tokens, masking rates, temperatures
PAPERS = {
    "neobert": ([1_000_000 * 2_097_152, 50_000 * 2_097_152], [0.2, 0.2], [None, None]),
    "modernbert": ([1.7e12, 2.5e11, 5e10], [0.3, 0.3, 0.3], [None, None, None]),
    "ettin": ([1.7e12, 2.5e11, 1e11], [0.3, 0.3, 0.3], [None, None, None]),
    "mmbert": ([2.3e12, 6e11, 1e11], [0.3, 0.15, 0.05], [0.7, 0.5, 0.3]),
}


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_named_recipes_carry_the_papers_numbers_and_scale(name):
    from neobert.recipes.named import recipe_config
    from neobert.training.phases import plan

    tokens, masks, temperatures = PAPERS[name]
    config = recipe_config(name)
    assert [p.tokens for p in config.phases] == tokens
    assert [p.config.data.mask_rate for p in plan(config)] == masks
    assert [p.temperature for p in config.phases] == temperatures
    assert config.max_steps == sum(round(t / config.tokens_per_step) for t in tokens)
    small = recipe_config(name, preset="tiny", scale=1e-7, context_scale=0.125)
    phases = plan(small)
    assert [p.steps for p in phases] == [max(1, round(t * 1e-7 / 4096)) for t in tokens]
    assert phases[-1].config.data.seq_len == {"neobert": 512}.get(name, 1024)  # 4,096 or 8,192 x 1/8
    if name != "neobert":
        assert phases[0].config.schedule.kind == "wsd" and phases[-1].config.schedule.final_ratio < 0.05
        assert phases[-1].config.model["rope_theta"] == 160000.0


def test_the_mmbert_recipe_runs_at_laptop_scale_from_the_command_line(prepared, tmp_path):
    from neobert.cli.main import main

    out = tmp_path / "mmbert"
    code = main(
        [
            "pretrain",
            "--recipe",
            "mmbert",
            "--preset",
            "tiny",
            "--scale",
            "3e-9",
            "--context-scale",
            "0.0078125",
            "--data",
            str(prepared),
            "--output",
            str(out),
            "--precision",
            "fp32",
            "--device",
            "cpu",
            "--set",
            "model.vocab_size=400",
            "--set",
            "tokens_per_step=256",
            "--log-every",
            "1",
            "--eval-every",
            "100",
            "--eval-batches",
            "1",
            "--no-progress",
            "--report-to",
            "none",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "phases.json").read_text())
    assert [p["name"] for p in manifest["phases"]] == ["pretraining", "mid-training", "decay"]
    assert [p["seq_len"] for p in manifest["phases"]] == [16, 64, 64]
    assert [p["mask_rate"][0] for p in manifest["phases"]] == [0.3, 0.15, 0.05]
    assert [p["schedule"]["kind"] for p in manifest["phases"]] == ["wsd", "constant", "inverse-sqrt"]
    assert json.loads((out / "final" / "config.json").read_text())["rope_theta"] == 160000.0


# -- merging --------------------------------------------------------------------------------------------------


def _np_ties(base: np.ndarray, runs: list[np.ndarray], density: float, scale: float) -> np.ndarray:
    """TIES written out in numpy, entry by entry, independently of neobert.training.merge."""
    trimmed = []
    for run in runs:
        tau = (run - base).ravel()
        k = max(1, int(np.ceil(density * tau.size)))
        cut = np.sort(np.abs(tau))[::-1][k - 1]
        trimmed.append(np.where(np.abs(tau) >= cut, tau, 0.0))
    trimmed = np.array(trimmed)
    out = np.zeros(trimmed.shape[1])
    for j in range(trimmed.shape[1]):
        elected = np.sign(trimmed[:, j].sum())
        agreeing = [t for t in trimmed[:, j] if t != 0 and np.sign(t) == elected]
        out[j] = np.mean(agreeing) if agreeing else 0.0
    return base + scale * out.reshape(base.shape)


@pytest.fixture(scope="module")
def run_dir(prepared, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merge") / "run"
    pretrain(tiny_pretrain_config(prepared, out, max_steps=6, save_every=2, keep_last=3), progress_bar=False)
    return out


def _arrays(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return {k: v.astype(np.float64) for k, v in load_file(str(path / "model.safetensors")).items()}


def test_merge_mean_of_the_last_k_and_ema_match_numpy(run_dir, tmp_path):
    from neobert.training.merge import MergeConfig, merge

    steps = [run_dir / "checkpoints" / f"step-{s:08d}" for s in (2, 4, 6)]
    result = merge(MergeConfig(inputs=[str(run_dir)], output=str(tmp_path / "mean"), last=2))
    assert result.inputs == steps[1:]
    got, a, b = _arrays(tmp_path / "mean"), _arrays(steps[1]), _arrays(steps[2])
    for key in got:
        np.testing.assert_allclose(got[key], (a[key] + b[key]) / 2, rtol=1e-6, atol=1e-7)
    merge(
        MergeConfig(inputs=[str(p) for p in steps], output=str(tmp_path / "ema"), method="ema", ema_decay=0.7)
    )
    got, first = _arrays(tmp_path / "ema"), _arrays(steps[0])
    for key in got:
        expected = 0.7 * (0.7 * first[key] + 0.3 * a[key]) + 0.3 * b[key]
        np.testing.assert_allclose(got[key], expected, rtol=1e-6, atol=1e-7)
    card = (tmp_path / "mean" / "README.md").read_text()
    assert "the average of 2 checkpoints" in card and "step-00000006" in card
    # the merged directory is a model: it loads and fills a mask
    from neobert.inference.encoders import load_model

    assert load_model(tmp_path / "mean", head="mlm") is not None


def test_merge_ties_matches_numpy_and_names_its_inputs(run_dir, tmp_path):
    from neobert.cli.main import main

    steps = [run_dir / "checkpoints" / f"step-{s:08d}" for s in (2, 4, 6)]
    runs = [steps[1], steps[2], run_dir / "final"]
    code = main(
        [
            "merge",
            "--inputs",
            *map(str, runs),
            "--method",
            "ties",
            "--base",
            str(steps[0]),
            "--density",
            "0.3",
            "--scale",
            "0.9",
            "--output",
            str(tmp_path / "ties"),
        ]
    )
    assert code == 0
    got, base, arrays = _arrays(tmp_path / "ties"), _arrays(steps[0]), [_arrays(p) for p in runs]
    for key in got:
        expected = _np_ties(base[key], [a[key] for a in arrays], 0.3, 0.9)
        np.testing.assert_allclose(got[key], expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(got["model.encoder.weight"], arrays[-1]["model.encoder.weight"])
    card = (tmp_path / "ties" / "README.md").read_text()
    assert "TIES over 3 runs" in card and "density 0.3" in card
    with pytest.raises(ValueError, match="ties needs --base"):
        from neobert.training.merge import MergeConfig, merge

        merge(MergeConfig(inputs=[str(p) for p in runs], output=str(tmp_path / "x"), method="ties"))


def test_the_resume_fingerprint_of_a_run_without_the_new_settings_is_the_old_one(prepared, tmp_path):
    """A checkpoint written before issue 34's settings existed resumes: at their old-behaviour values they
    are not part of what must match; phases are, when there are any."""
    from neobert.training.mlm_task import RESUME_KEYS, resume_fingerprint

    config = tiny_pretrain_config(prepared, tmp_path / "x")
    fingerprint = resume_fingerprint(config)
    assert sorted(fingerprint) == sorted(RESUME_KEYS)
    assert "mask_rate_shape" not in fingerprint["data"] and "decay_shape" not in fingerprint["schedule"]
    assert not any(key.startswith("muon") for key in fingerprint["optim"])
    muon = resume_fingerprint(config.override(**{"optim.name": "muon", "optim.muon_ns_steps": 3}))
    assert muon["optim"]["muon_ns_steps"] == 3
    assert resume_fingerprint(_phased(prepared, tmp_path / "y"))["phases"][1]["name"] == "long"
