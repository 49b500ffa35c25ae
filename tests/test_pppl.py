"""Pseudo-perplexity: batched masked copies against a one-mask-per-forward loop, binning, files, YaRN."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from neobert.evaluation import pppl

pytestmark = NEEDS_TOKENIZER
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "went", "away", "to", "find", "food"]


def _doc(n_words, offset=0):
    return " ".join(WORDS[(offset + i) % len(WORDS)] for i in range(n_words))


@torch.no_grad()
def naive_nll(model, ids, mask_id):
    """One forward per token: mask it alone, read -log p(token) from the full logits."""
    total = []
    for i in range(1, len(ids) - 1):  # every token but [CLS] and [SEP]
        masked = torch.tensor(ids).clone()
        masked[i] = mask_id
        logits = model(input_ids=masked[None]).logits[0, i]
        total.append(-torch.log_softmax(logits.double(), -1)[ids[i]].item())
    return total


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """A NeoBERT that accepts 32 tokens."""
    return save_tiny_neobert(tmp_path_factory.mktemp("pppl") / "neo32", max_length=32)


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_batched_copies_equal_one_mask_per_forward(kind, short_model, tmp_path):
    path = short_model if kind == "neobert" else save_tiny_bert(tmp_path / "bert")
    encoder = pppl.load_mlm(str(path))
    ids = encoder.tokenizer(_doc(18))["input_ids"]
    positions = pppl.scored_positions(encoder.tokenizer, ids)
    assert positions.tolist() == list(range(1, len(ids) - 1))  # specials are not scored
    batched = pppl.token_nll(
        encoder.model, torch.tensor(ids), positions, encoder.tokenizer.mask_token_id, copies=7
    )
    expected = naive_nll(encoder.model, ids, encoder.tokenizer.mask_token_id)
    torch.testing.assert_close(
        batched.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-4, atol=1e-4
    )


def test_binning_and_caps():
    edges = [16, 32, 64]
    assert [pppl.assign_bin(n, edges) for n in (3, 16, 17, 32, 33, 64, 500)] == [0, 0, 1, 1, 2, 2, 2]
    docs = [[0] * 10, [0] * 12, [0] * 20, [0] * 14]
    assert [len(d) for d in pppl._cap_per_bin(docs, edges, 2)] == [10, 12, 20]
    assert pppl.parse_model_spec("m@yarn:8192", None, None) == ("m", "yarn", 8192)
    assert pppl.parse_model_spec("m", 4096, "ntk") == ("m", "ntk", 4096)
    with pytest.raises(ValueError, match="unknown RoPE scaling"):
        pppl.parse_model_spec("m@rope2", None, None)


def test_rope_scaling_extends_neobert_only(short_model, tmp_path):
    extended = pppl.load_mlm(str(short_model), rope_scaling="yarn", context=64)
    cfg = extended.model.config
    assert (cfg.max_length, cfg.rope_scaling_type, cfg.rope_scaling_factor, cfg.rope_original_max_length) == (
        64,
        "yarn",
        2.0,
        32,
    )
    assert extended.max_length == 64
    with pytest.raises(ValueError, match="NeoBERT models only"):
        pppl.load_mlm(str(save_tiny_bert(tmp_path / "bert")), rope_scaling="yarn", context=64)


def test_cli_writes_csv_and_plot_and_yarn_goes_beyond_max_length(short_model, tmp_path):
    from neobert.cli.main import main

    docs = tmp_path / "docs.txt"
    docs.write_text(
        "\n".join([_doc(8), _doc(20, 3), _doc(40, 5)]) + "\n", encoding="utf-8"
    )  # 10, 22, 42 tokens
    out = tmp_path / "out"
    model = str(short_model)
    code = main(
        [
            "eval",
            "pppl",
            "--model",
            model,
            "--model",
            f"{model}@yarn:64",
            "--input",
            str(docs),
            "--bins",
            "16,32,64",
            "--output",
            str(out),
            "--copies",
            "16",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    rows = list(csv.DictReader((out / "pppl.csv").open(encoding="utf-8")))
    assert [(r["model"], r["bin_high"], r["documents"]) for r in rows] == [
        ("neo32", "16", "1"),
        ("neo32", "32", "1"),
        ("neo32", "64", "0"),  # 42 tokens: beyond 32, no guess
        ("neo32 (yarn 64)", "16", "1"),
        ("neo32 (yarn 64)", "32", "1"),
        ("neo32 (yarn 64)", "64", "1"),
    ]
    assert rows[2]["pppl"] == ""
    assert (out / "pppl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # independent check of two cells: the plain model on the 10-token document, the extended one on 42 tokens
    plain, extended = pppl.load_mlm(model), pppl.load_mlm(f"{model}@yarn:64")
    for encoder, text, row in ((plain, _doc(8), rows[0]), (extended, _doc(40, 5), rows[5])):
        ids = encoder.tokenizer(text)["input_ids"]
        nll = naive_nll(encoder.model, ids, encoder.tokenizer.mask_token_id)
        assert int(row["tokens"]) == len(nll)
        assert float(row["pppl"]) == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-4)


def test_update_card_adds_each_bin_once(short_model, tmp_path):
    import shutil

    from huggingface_hub import ModelCard

    from neobert.cli.main import main

    model = shutil.copytree(short_model, tmp_path / "neo32")  # no card yet: a minimal one is written
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join([_doc(8), _doc(20, 3), _doc(40, 5)]) + "\n", encoding="utf-8")
    for _ in range(2):  # the second run replaces the first's entries
        assert (
            main(
                [
                    "eval",
                    "pppl",
                    "--model",
                    str(model),
                    "--model",
                    f"{model}@yarn:64",
                    "--input",
                    str(docs),
                    "--bins",
                    "16,32,64",
                    "--output",
                    str(tmp_path / "out"),
                    "--copies",
                    "16",
                    "--device",
                    "cpu",
                    "--update-card",
                ]
            )
            == 0
        )
    rows = [r for r in csv.DictReader((tmp_path / "out" / "pppl.csv").open(encoding="utf-8")) if r["pppl"]]
    card = ModelCard.load(model / "README.md")
    entries = [(e.task_name, e.metric_value) for e in card.data.eval_results]
    assert [name for name, _ in entries] == [
        f"Pseudo-perplexity, {r['bin_low']}-{r['bin_high']} tokens"
        + (", yarn 64" if "yarn" in r["model"] else "")
        for r in rows
    ]
    assert [v for _, v in entries] == pytest.approx([float(r["pppl"]) for r in rows], rel=1e-5)
    assert {e.dataset_name for e in card.data.eval_results} == {"docs.txt"}
