"""Late interaction (ColBERT): MaxSim against a naive loop, our token vectors against sentence-transformers'
MultiVectorEncoder and PyLate on the same directory (NeoBERT and a BERT), the loss against a loop over pairs,
a real `finetune late-interaction` run through the CLI (card, MaxSim scores) and crash + resume."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from helpers import check_card, run_card_snippet, write_pairs
from neobert.inference.kinds import kind_of
from neobert.inference.late_interaction import (
    LateInteractionModel,
    LateInteractionSpec,
    add_markers,
    load_late_interaction,
    maxsim,
    maxsim_scores,
    save_late_interaction,
    token_vectors,
)

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
QUERIES = ["what is a cat?", "a much longer query, with punctuation " * 12]
DOCUMENTS = ["A cat, is an animal.", "Dogs; bark! loudly (always).", "a document longer than its limit " * 40]
# PyLate 1.6 pins sentence-transformers 5.3 and transformers <= 5.3; it runs from its own environment
PYLATE_PYTHON = os.environ.get("NEOBERT_PYLATE_PYTHON", "/tmp/pylate-venv/bin/python")


def test_maxsim_matches_a_naive_loop():
    torch.manual_seed(0)
    queries = [torch.randn(4, 8), torch.randn(2, 8)]
    documents = [torch.randn(5, 8), torch.randn(1, 8), torch.randn(7, 8)]
    expected = [
        [
            sum(max(float(q[i] @ d[j]) for j in range(d.shape[0])) for i in range(q.shape[0]))
            for d in documents
        ]
        for q in queries
    ]
    # block=2 over lengths 5, 1, 7: blocks are taken by length ([1, 5], then [7]) and scattered back in order
    torch.testing.assert_close(
        maxsim_scores(queries, documents, block=2), torch.tensor(expected), atol=1e-5, rtol=1e-5
    )
    assert maxsim_scores(queries, []).shape == (2, 0)
    assert float(maxsim(queries[0], documents[2])) == pytest.approx(expected[0][2], abs=1e-5)


def _saved(tmp_path: Path, kind: str, dim: int = 16) -> Path:
    from neobert.inference.encoders import load_encoder

    source = save_tiny_neobert(tmp_path / "src") if kind == "neobert" else save_tiny_bert(tmp_path / "src")
    encoder = load_encoder(source)
    spec = LateInteractionSpec(dim=dim, document_length=64)
    add_markers(encoder, spec)
    torch.manual_seed(0)
    return save_late_interaction(
        LateInteractionModel(encoder.base, dim), encoder.tokenizer, spec, tmp_path / "li"
    )


def _ours(directory: Path) -> list[torch.Tensor]:
    model, tokenizer, spec = load_late_interaction(directory)
    return token_vectors(model, tokenizer, QUERIES, spec, True) + token_vectors(
        model, tokenizer, DOCUMENTS, spec, False, batch_size=2
    )


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_token_vectors_equal_multi_vector_encoder(tmp_path, kind):
    from sentence_transformers import MultiVectorEncoder

    import neobert  # noqa: F401  (registers NeoBERT with transformers)

    directory = _saved(tmp_path, kind)
    assert (
        kind_of(directory).name == "late-interaction" and kind_of(tmp_path / "src").name != "late-interaction"
    )
    reference = MultiVectorEncoder(str(directory), device="cpu")
    expected = reference.encode_query(QUERIES) + reference.encode_document(DOCUMENTS)
    ours = _ours(directory)
    # queries: exactly 32 vectors (mask-token expansion); documents: punctuation dropped, truncated at 64 tokens
    assert [v.shape[0] for v in ours[:2]] == [32, 32] and ours[2].shape[0] == 8 and ours[4].shape[0] == 64
    for mine, theirs in zip(ours, expected):
        assert mine.shape == theirs.shape
        torch.testing.assert_close(mine, theirs.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        maxsim_scores(ours[:2], ours[2:]),
        reference.similarity(expected[:2], expected[2:]).float(),
        atol=1e-4,
        rtol=1e-5,
    )


@pytest.mark.skipif(
    not Path(PYLATE_PYTHON).is_file(), reason="needs PyLate's environment: NEOBERT_PYLATE_PYTHON"
)
def test_token_vectors_equal_pylate(tmp_path):
    """PyLate 1.6 cannot share this environment (it pins sentence-transformers 5.3, transformers <= 5.3), and
    NeoBERT needs a newer transformers, so a BERT directory is encoded by PyLate in its own environment."""
    directory = _saved(tmp_path, "bert")
    script = (
        "import sys, torch\nfrom pylate import models\n"
        "model = models.ColBERT(sys.argv[1], device='cpu')\n"
        f"out = model.encode({QUERIES!r}, is_query=True) + model.encode({DOCUMENTS!r}, is_query=False)\n"
        "torch.save([torch.as_tensor(v) for v in out], sys.argv[2])\n"
    )
    out = tmp_path / "pylate.pt"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    subprocess.run([PYLATE_PYTHON, "-c", script, str(directory), str(out)], check=True, env=env, timeout=300)
    for mine, theirs in zip(_ours(directory), torch.load(out)):
        torch.testing.assert_close(mine, theirs.float(), atol=1e-5, rtol=1e-5)


def test_loss_equals_a_loop_over_pairs():
    """InfoNCE on MaxSim: the batched padded scores equal per-pair maxsim, padding never wins."""
    from neobert.finetuning.late_interaction import padded_maxsim

    torch.manual_seed(1)
    q = torch.nn.functional.normalize(torch.randn(2, 3, 4), dim=-1)
    docs = [torch.randn(5, 4), torch.randn(2, 4), torch.randn(4, 4)]
    padded = torch.full((3, 5, 4), 100.0)  # padding with huge values must not count
    valid = torch.zeros(3, 5, dtype=torch.bool)
    for i, d in enumerate(docs):
        padded[i, : len(d)], valid[i, : len(d)] = d, True
    expected = torch.tensor([[float(maxsim(q[b], d)) for d in docs] for b in range(2)])
    torch.testing.assert_close(padded_maxsim(q, padded, valid), expected, atol=1e-5, rtol=1e-5)


def test_finetune_late_interaction_through_the_cli(tmp_path):
    from sentence_transformers import MultiVectorEncoder

    from neobert.cli.main import main

    animals, colors = write_pairs(tmp_path)
    out = tmp_path / "colbert"
    args = [
        "finetune",
        "late-interaction",
        "--model",
        str(save_tiny_bert(tmp_path / "bert")),
        "--data",
        str(animals),
        "--data",
        str(colors),
        "--output",
        str(out),
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--dim",
        "8",
        "--query-length",
        "12",
        "--max-length",
        "24",
        "--document-length",
        "40",
        "--lr",
        "1e-3",
        "--warmup-steps",
        "1",
        "--log-every",
        "1",
    ]
    assert main(args) == 0
    assert kind_of(out).name == "late-interaction" and not (out / "checkpoints").exists()
    log = json.loads((out / "late_interaction_training.json").read_text())
    assert log["spec"]["dim"] == 8 and log["spec"]["query_length"] == 12 and len(log["losses"]) == 4
    # trained on documents of 24 tokens, read at 40 where it is used (--document-length; default: max_length)
    assert log["spec"]["document_length"] == 40 and load_late_interaction(out)[2].document_length == 40
    model = MultiVectorEncoder(str(out), device="cpu")
    assert model.encode_query(["the sound of a cat"])[0].shape == (12, 8)
    torch.testing.assert_close(_ours(out)[0][:12], model.encode_query(QUERIES[:1])[0], atol=1e-5, rtol=1e-5)
    card = check_card(out, "sentence-similarity", "sentence-transformers")
    assert "ColBERT" in card.data.tags and "MaxSim" in card.text
    with pytest.raises(SystemExit):  # Matryoshka widths are dense-only: no such option
        main([*args, "--matryoshka-dims", "8"])
    return out


@pytest.mark.slow
def test_late_interaction_card_snippet_runs(tmp_path):
    out = test_finetune_late_interaction_through_the_cli(tmp_path)
    printed, documented = run_card_snippet(out)
    assert printed == documented == "(12, 8)"


def test_late_interaction_crash_and_resume_continue_exactly(tmp_path):
    from helpers import assert_resumes_exactly
    from neobert.finetuning.late_interaction import LateInteractionConfig, run

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    animals, colors = write_pairs(tmp_path)

    def config(name, **changes):
        return LateInteractionConfig(
            model=str(model_dir),
            data=[str(animals), str(colors)],
            output=str(tmp_path / name),
            steps=4,
            batch_size=4,
            lr=1e-3,
            warmup_steps=1,
            log_every=1,
            save_every=2,
            dim=8,
            query_length=12,
            max_length=24,
            show_progress=False,
            **changes,
        )

    from neobert.finetuning import contrastive

    labels, settings = [], contrastive._trainer_settings

    def recorded(*args):
        labels.append(args[-1])
        return settings(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contrastive, "_trainer_settings", recorded)
        assert_resumes_exactly(
            run, config, steps=4, weights=("model.safetensors", "1_Dense/model.safetensors")
        )
    assert labels == ["late interaction"] * 3  # the progress bar's label (it said "contrastive")


def test_eval_embeddings_scores_a_late_interaction_model_by_maxsim(tmp_path):
    import math

    import numpy as np
    from sentence_transformers import MultiVectorEncoder

    import neobert  # noqa: F401
    from neobert.evaluation import embedding_files as files
    from test_sparse import _retrieval_task

    directory = _saved(tmp_path, "neobert")
    task = _retrieval_task(tmp_path / "tasks")
    queries = [json.loads(line)["text"] for line in (task / "queries.jsonl").read_text().splitlines()]
    docs = [json.loads(line)["text"] for line in (task / "corpus.jsonl").read_text().splitlines()]
    reference = MultiVectorEncoder(str(directory), device="cpu")
    document_vectors = reference.encode_document(docs)
    scores = reference.similarity(reference.encode_query(queries), document_vectors).numpy()
    ranks = [
        1 + int((scores[i] > scores[i, i]).sum()) for i in range(len(queries))
    ]  # no ties in random weights
    expected_ndcg = np.mean([1 / math.log2(r + 1) if r <= 10 else 0.0 for r in ranks])

    report = files.run([str(directory)], files.select_tasks(tmp_path / "tasks", {}), show_progress=False)
    by_family = {s.family: s for s in report.models[str(directory)]}
    retrieval = by_family["retrieval"]
    assert retrieval.scores["ndcg_at_10"] == pytest.approx(expected_ndcg, abs=1e-6)
    assert retrieval.scores["vectors_document"] == pytest.approx(np.mean([len(v) for v in document_vectors]))
    assert math.isnan(by_family["sts"].main_score) and "late-interaction model" in by_family["sts"].notes[0]
    assert "## Late-interaction retrieval" in files.to_markdown(report)


def test_embed_index_search_recall_against_exhaustive_maxsim(tmp_path):
    """Multi-vector shards through `neobert embed`, a voyager index through `neobert index`, queries through
    `neobert search`: the shards hold MultiVectorEncoder's document vectors, and the index's top 10 agree with
    exhaustive MaxSim (recall@10 >= 0.95)."""
    import pyarrow.parquet as pq

    from job_helpers import texts
    from neobert.cli.main import main
    from neobert.jobs.index import exhaustive_search, load_index, search_vectors

    directory = _saved(tmp_path, "bert")
    documents = texts(300, 7)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(t + "\n" for t in documents))
    queries = [" ".join(t.split()[:4]) for t in documents[:20]]
    (tmp_path / "queries.txt").write_text("".join(q + "\n" for q in queries))
    assert (
        main(
            [
                "embed",
                "--model",
                str(directory),
                "--input",
                str(corpus),
                "--output",
                str(tmp_path / "shards"),
                "--shard-rows",
                "128",
            ]
        )
        == 0
    )
    # a long-document policy does not apply (documents are cut to document_length): refused by its name,
    # as the service refuses it, where it used to be ignored (issue 42)
    chunked = ["embed", "--model", str(directory), "--input", str(corpus), "--long-documents", "chunk"]
    with pytest.raises(
        ValueError, match=r"--long-documents chunk does not apply to a late-interaction model"
    ):
        main(["--debug", *chunked, "--output", str(tmp_path / "chunked")])
    settings = json.loads((tmp_path / "shards" / "_manifest.json").read_text())["settings"]
    assert settings["pooling"] is None and settings["normalize"] is None  # token vectors: no pooling
    with pytest.raises(ValueError, match=r"--pooling and --normalize do not apply to a late-interaction"):
        main(["--debug", *chunked[:5], "--pooling", "cls", "--output", str(tmp_path / "pooled")])
    table = pq.read_table(tmp_path / "shards")
    model, tokenizer, spec = load_late_interaction(directory)
    expected = token_vectors(model, tokenizer, documents[:5], spec, False)
    for row, vectors in zip(table.column("vectors").to_pylist()[:5], expected):
        np_row = torch.tensor(row)
        torch.testing.assert_close(np_row, vectors, atol=1e-6, rtol=1e-6)
    assert main(["index", "--input", str(tmp_path / "shards"), "--output", str(tmp_path / "index")]) == 0
    assert (
        main(
            [
                "search",
                "--index",
                str(tmp_path / "index"),
                "--queries",
                str(tmp_path / "queries.txt"),
                "--output",
                str(tmp_path / "hits.jsonl"),
            ]
        )
        == 0
    )
    hits = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [h["query"] for h in hits] == queries and all(len(h["results"]) == 10 for h in hits)

    index = load_index(tmp_path / "index")
    query_vectors = token_vectors(model, tokenizer, queries, spec, True)
    exact = exhaustive_search(index, query_vectors, 10)
    found = search_vectors(index, query_vectors, 10, 64, 128)  # the CLI defaults
    recall = sum(len({d for d, _ in f} & {d for d, _ in e}) for f, e in zip(found, exact)) / (
        10 * len(queries)
    )
    assert recall >= 0.95
    assert [r["id"] for r in hits[0]["results"]] == [index.ids[d] for d, _ in found[0]]


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="not a late-interaction"):
        load_late_interaction(tmp_path)
    with pytest.raises(ValueError, match="query_length"):
        LateInteractionSpec(query_length=1)
    with pytest.raises(TypeError, match="list of strings"):
        from neobert.inference.late_interaction import tokenize_late

        tokenize_late(None, "one text", LateInteractionSpec(), True)


def test_distillation_adds_the_kl_to_the_teachers_scores_over_each_querys_own_candidates(tmp_path):
    """loss(weight w) - loss(0) = w x sum over queries of KL(softmax(teacher) || softmax(MaxSim of its own
    positive and negatives)), the MaxSim taken from per-pair token vectors."""
    from neobert.finetuning.contrastive_data import read_jsonl_examples
    from neobert.finetuning.distillation import Distillation
    from neobert.finetuning.late_interaction import late_step_loss

    directory = _saved(tmp_path, "bert")
    model, tokenizer, spec = load_late_interaction(directory)
    queries, positives = ["cats purr", "rain falls", "bees buzz"], ["a cat purrs", "the rain", "bees hum"]
    negatives = [
        ["a dog barks", "snow"],
        [],
        ["wasps sting"],
    ]  # query 2 has none; texts follow batch_texts' order
    teacher = [[3.0, 1.0, -1.0], [2.0], [0.5, 1.5]]
    texts = queries + positives + [n for ns in negatives for n in ns]
    torch.manual_seed(0)
    base = late_step_loss(model, tokenizer, texts, 3, spec, 1.0).loss_sum
    with_kl = late_step_loss(model, tokenizer, texts, 3, spec, 1.0, Distillation(teacher, kl=0.5)).loss_sum
    q = token_vectors(model, tokenizer, queries, spec, True)
    expected = 0.0
    for i in range(3):
        own = token_vectors(model, tokenizer, [positives[i], *negatives[i]], spec, False)
        student = torch.log_softmax(torch.stack([maxsim(q[i], d) for d in own]), dim=0)
        target = torch.softmax(torch.tensor(teacher[i]), dim=0)
        expected += float((target * (target.log() - student)).sum())
    assert float(with_kl - base) == pytest.approx(0.5 * expected, rel=1e-4, abs=1e-5)

    data = tmp_path / "scored.jsonl"
    data.write_text(
        json.dumps({"query": "q", "positive": "p", "negatives": ["n"], "scores": [1, 0.5]})
        + "\n"
        + json.dumps({"query": "q", "positive": "p", "negatives": ["n"], "scores": [1]})
        + "\n"
    )
    with pytest.raises(ValueError, match="line 2: 'scores' must be a list of 2 numbers"):
        read_jsonl_examples(data)
