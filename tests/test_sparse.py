"""SPLADE: the pooling against a naive loop, encode_sparse against sentence-transformers' SparseEncoder on the
same directory, pruning and the row shape, the FLOPS regulariser and its warm-up against sentence-transformers',
and a real `finetune sparse` run (NeoBERT through the library, a BERT through the CLI)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from helpers import check_card, run_card_snippet, write_pairs
from neobert.inference.kinds import kind_of
from neobert.inference.sparse import check_splade_layout, encode_sparse, prune_top_k, sparse_rows, splade_pool

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]
TEXTS = [
    "the sound of a cat",
    "a blue wall",
    "something else entirely, a rather longer sentence " * 3,
    "x",
    "a text longer than the tiny model's 128 tokens " * 30,
]


def naive_splade(logits: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Per text and vocabulary entry: max over real tokens of log(1 + max(0, logit)), in Python floats."""
    out = []
    for b in range(logits.shape[0]):
        real = [t for t in range(logits.shape[1]) if mask[b, t]]
        out.append(
            [max(math.log1p(max(0.0, float(logits[b, t, v]))) for t in real) for v in range(logits.shape[2])]
        )
    return out


def test_splade_pool_matches_a_naive_loop_and_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7) * 3
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    logits[1, 2:] = 100.0  # padding positions with huge logits must not count
    pooled = splade_pool(logits, mask)
    torch.testing.assert_close(pooled, torch.tensor(naive_splade(logits, mask)), atol=1e-6, rtol=1e-6)
    assert (pooled >= 0).all()


def test_splade_pool_has_the_gradient_of_its_formula():
    """Pooling before log1p(ReLU()) (one pass over the logits) trains as the formula does, applied token by
    token: the same gradient, padding and all-negative rows included (their gradient is zero)."""
    torch.manual_seed(1)
    logits = (torch.randn(4, 6, 9) * 3).requires_grad_()
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0] * 6])
    with torch.no_grad():
        logits[2, 0] = -torch.rand(9) - 0.1  # every real logit negative: a zero row, no gradient
    weights = torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1)
    reference = weights.amax(dim=1)
    probe = torch.randn(4, 9)
    (expected,) = torch.autograd.grad((reference * probe).sum(), logits)
    pooled = splade_pool(logits, mask)
    (got,) = torch.autograd.grad((pooled * probe).sum(), logits)
    torch.testing.assert_close(pooled, reference, atol=0, rtol=0)
    torch.testing.assert_close(got, expected, atol=1e-7, rtol=1e-6)
    assert (pooled[2:] == 0).all() and (got[2:] == 0).all() and got[0].abs().sum() > 0


def _sparse_dir(tmp_path, kind="neobert"):
    from neobert.finetuning.sparse import save_sparse_encoder
    from neobert.inference.encoders import load_encoder

    source = save_tiny_neobert(tmp_path / "src") if kind == "neobert" else save_tiny_bert(tmp_path / "src")
    return save_sparse_encoder(load_encoder(source, head="mlm"), tmp_path / "sparse")


@pytest.mark.parametrize("kind", ["neobert", "bert"])
def test_encode_sparse_equals_sparse_encoder_on_the_same_directory(tmp_path, kind):
    from sentence_transformers import SparseEncoder

    import neobert  # noqa: F401  (registers NeoBERT with transformers)
    from neobert.inference.encoders import load_encoder

    directory = _sparse_dir(tmp_path, kind)
    assert kind_of(directory).name == "splade" and kind_of(tmp_path / "src").name != "splade"
    check_splade_layout(directory)  # the settings encode_sparse reproduces
    reference = SparseEncoder(str(directory), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    encoder = load_encoder(directory, head="mlm")
    ours = encode_sparse(encoder.model, encoder.tokenizer, TEXTS, batch_size=2)
    assert ours.shape == tuple(reference.shape) == (len(TEXTS), 30522)
    np.testing.assert_allclose(ours.toarray(), reference.numpy(), atol=1e-5, rtol=1e-5)
    # a plain model directory with an MLM head gives the same vectors: the pooling is all SPLADE adds
    plain = load_encoder(tmp_path / "src", head="mlm")
    np.testing.assert_allclose(
        encode_sparse(plain.model, plain.tokenizer, TEXTS).toarray(), ours.toarray(), atol=1e-5
    )


def test_top_k_rows_and_tokens(tmp_path):
    from neobert.inference.encoders import load_encoder

    encoder = load_encoder(save_tiny_neobert(tmp_path / "m"), head="mlm")
    full = encode_sparse(encoder.model, encoder.tokenizer, TEXTS)
    pruned = encode_sparse(encoder.model, encoder.tokenizer, TEXTS, top_k=5)
    for r in range(len(TEXTS)):
        row = full[r].toarray()[0]
        expected = sorted(np.flatnonzero(row), key=lambda i: (-row[i], i))[:5]
        assert sorted(pruned[r].indices.tolist()) == sorted(expected)
        np.testing.assert_array_equal(pruned[r].toarray()[0][expected], row[expected])
    rows = sparse_rows(pruned, encoder.tokenizer)
    assert [len(r) for r in rows] == [5] * len(TEXTS)
    first = rows[0]
    assert [e["index"] for e in first] == sorted(e["index"] for e in first)
    assert all(e["token"] == encoder.tokenizer.convert_ids_to_tokens(e["index"]) for e in first)
    assert all(set(e) == {"index", "value"} for e in sparse_rows(pruned)[0])
    ties = prune_top_k(torch.tensor([[1.0, 2.0, 2.0, 0.5]]), 2)
    assert ties.tolist() == [[0.0, 2.0, 2.0, 0.0]]


def test_bad_input_gets_a_clear_error(tmp_path):
    from neobert.inference.encoders import load_encoder

    source = save_tiny_neobert(tmp_path / "m")
    mlm, base = load_encoder(source, head="mlm"), load_encoder(source)
    with pytest.raises(TypeError, match="needs a masked-LM model"):
        encode_sparse(base.model, base.tokenizer, ["a"])
    with pytest.raises(TypeError, match="list of strings"):
        encode_sparse(mlm.model, mlm.tokenizer, "a text")
    with pytest.raises(ValueError, match="top_k"):
        encode_sparse(mlm.model, mlm.tokenizer, ["a"], top_k=0)
    assert encode_sparse(mlm.model, mlm.tokenizer, []).shape == (0, 30522)
    directory = _sparse_dir(tmp_path / "d")
    config = directory / "1_SpladePooling" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "pooling_strategy": "sum"}))
    with pytest.raises(ValueError, match="SpladePooling"):
        check_splade_layout(directory)


def test_flops_and_its_warmup_equal_sentence_transformers():
    from sentence_transformers.sparse_encoder.callbacks.splade_callbacks import (
        SpladeRegularizerWeightSchedulerCallback,
    )
    from sentence_transformers.sparse_encoder.losses import FlopsLoss

    from neobert.finetuning.sparse import flops, regularizer_weight

    torch.manual_seed(0)
    vectors = torch.relu(torch.randn(6, 50))
    reference = sum(float(vectors[:, j].mean()) ** 2 for j in range(50))
    assert float(flops(vectors)) == pytest.approx(reference, rel=1e-6)
    loss = FlopsLoss.__new__(FlopsLoss)  # its computation needs no model
    loss.threshold = None
    assert float(FlopsLoss.compute_loss_from_embeddings(loss, vectors)) == pytest.approx(
        float(flops(vectors))
    )
    callback = SpladeRegularizerWeightSchedulerCallback.__new__(SpladeRegularizerWeightSchedulerCallback)
    callback.warmup_steps, callback.scheduler_type = int(30 / 3), "quadratic"
    for step in (0, 1, 4, 9, 10, 29):
        expected = callback._calculate_weight_value(step, 5e-5)
        assert regularizer_weight(5e-5, step, 30, 1 / 3) == pytest.approx(expected)


def _average_nonzeros(directory, texts) -> float:
    from neobert.inference.encoders import load_encoder

    encoder = load_encoder(directory, head="mlm")
    return float(encode_sparse(encoder.model, encoder.tokenizer, texts).getnnz(axis=1).mean())


def test_sparse_run_lowers_the_loss_sparsifies_and_saves_a_sparse_encoder(tmp_path):
    from sentence_transformers import SparseEncoder

    import neobert  # noqa: F401
    from neobert.finetuning.sparse import SparseConfig, run
    from neobert.inference.encoders import load_encoder

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    animals, colors = write_pairs(tmp_path)
    queries = [json.loads(line)["query"] for line in animals.read_text().splitlines()]
    settings = dict(
        model=str(model_dir),
        data=[str(animals), str(colors)],
        steps=24,
        batch_size=4,
        lr=2e-3,
        warmup_steps=2,
        log_every=4,
        max_length=32,
        show_progress=False,
    )
    plain = run(
        SparseConfig(**settings, output=str(tmp_path / "plain"), query_regularizer=0, document_regularizer=0)
    )
    sparse = run(
        SparseConfig(
            **settings,
            output=str(tmp_path / "sparse"),
            query_regularizer=0.05,
            document_regularizer=0.05,
            regularizer_warmup=0.25,
        )
    )
    assert plain.losses[-1] < 0.5 * plain.losses[0], plain.losses
    before = _average_nonzeros(model_dir, queries)
    # the regulariser is what removes weights: without it the vectors stay about as dense
    assert _average_nonzeros(sparse.output, queries) < 0.5 * min(
        before, _average_nonzeros(plain.output, queries)
    )

    # the directory is a SparseEncoder, and our vectors are its vectors
    assert kind_of(sparse.output).name == "splade"
    reference = (
        SparseEncoder(str(sparse.output), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    )
    encoder = load_encoder(sparse.output, head="mlm")
    np.testing.assert_allclose(
        encode_sparse(encoder.model, encoder.tokenizer, TEXTS).toarray(),
        reference.numpy(),
        atol=1e-5,
        rtol=1e-5,
    )
    metrics = [json.loads(line) for line in (sparse.output / "metrics.jsonl").read_text().splitlines()]
    assert any("train/nonzeros_query" in m for m in metrics)  # the training logs stay beside the model
    log = json.loads((sparse.output / "sparse_training.json").read_text())
    assert log["losses"] == sparse.losses and log["config"]["query_regularizer"] == 0.05
    card = check_card(sparse.output, "feature-extraction", "sentence-transformers")
    assert "sparse-encoder" in card.data.tags and card.data.eval_results is None
    assert f"| last logged training loss (contrastive + FLOPS) | {sparse.losses[-1]:.4f} |" in card.text
    assert "Sparse retrieval (SPLADE) model fine-tuned" in card.text
    printed, documented = run_card_snippet(sparse.output)  # the card's SparseEncoder snippet runs as printed
    assert printed == documented == "(2, 30522)"


def test_sparse_config_errors():
    from neobert.finetuning.config import FinetuneConfigError
    from neobert.finetuning.sparse import SparseConfig

    with pytest.raises(FinetuneConfigError, match="matryoshka"):
        SparseConfig(model="tiny", data=["x"], output="o", matryoshka_dims=[8])
    with pytest.raises(FinetuneConfigError, match="regularizer"):
        SparseConfig(model="tiny", data=["x"], output="o", query_regularizer=-1)
    with pytest.raises(FinetuneConfigError, match="regularizer_warmup"):
        SparseConfig(model="tiny", data=["x"], output="o", regularizer_warmup=0)
    with pytest.raises(FinetuneConfigError):
        SparseConfig.from_dict({"model": "tiny", "data": ["x"], "output": "o", "flops": 1})


def test_any_masked_lm_through_the_cli(tmp_path):
    from neobert.cli.main import main

    bert_dir = save_tiny_bert(tmp_path / "bert")
    animals, colors = write_pairs(tmp_path)
    out = tmp_path / "bert-sparse"
    args = [
        "finetune",
        "sparse",
        "--model",
        str(bert_dir),
        "--data",
        str(animals),
        "--data",
        str(colors),
        "--output",
        str(out),
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--query-regularizer",
        "1e-3",
        "--document-regularizer",
        "1e-3",
    ]
    assert main(args) == 0
    assert kind_of(out).name == "splade"
    assert json.loads((out / "sparse_training.json").read_text())["config"]["document_regularizer"] == 1e-3
    assert (
        main(
            [
                *args[:2],
                "--model",
                str(bert_dir),
                "--data",
                str(tmp_path / "nope.jsonl"),
                "--output",
                str(out),
            ]
        )
        == 1
    )
    with pytest.raises(SystemExit):  # Matryoshka widths are dense-only: no such option
        main([*args, "--matryoshka-dims", "8"])


def _retrieval_task(root):
    """Six queries, each with one relevant document among eight (two distractors), BEIR layout."""
    topics = [
        "cats purr on warm laps",
        "rivers flow to the sea",
        "bread rises in the oven",
        "stars shine at night",
        "trains run on rails",
        "bees make honey in hives",
    ]
    task = root / "retrieval" / "toy"
    task.mkdir(parents=True)
    docs = [*topics, "a note about nothing", "another unrelated line"]
    (task / "queries.jsonl").write_text(
        "".join(
            json.dumps({"_id": f"q{i}", "text": t.split()[0] + " " + t.split()[-1]}) + "\n"
            for i, t in enumerate(topics)
        )
    )
    (task / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs))
    )
    (task / "qrels.tsv").write_text("".join(f"q{i}\td{i}\t1\n" for i in range(len(topics))))
    (root / "sts").mkdir()
    (root / "sts" / "pairs.jsonl").write_text(
        json.dumps({"sentence1": "a", "sentence2": "b", "score": 1.0}) + "\n"
    )
    return task


def test_eval_embeddings_scores_a_sparse_model_by_dot_product_with_its_sizes(tmp_path):
    from sentence_transformers import SparseEncoder

    import neobert  # noqa: F401
    from neobert.cli.main import main
    from neobert.evaluation import embedding_files as files

    directory = _sparse_dir(tmp_path)
    task = _retrieval_task(tmp_path / "tasks")
    queries = [json.loads(line)["text"] for line in (task / "queries.jsonl").read_text().splitlines()]
    docs = [json.loads(line)["text"] for line in (task / "corpus.jsonl").read_text().splitlines()]
    st = SparseEncoder(str(directory), device="cpu")
    q, d = (st.encode(t, convert_to_tensor=True).to_dense().numpy() for t in (queries, docs))
    scores = q @ d.T
    ranks = [
        1 + int((scores[i] > scores[i, i]).sum()) for i in range(len(queries))
    ]  # no ties in random weights
    expected_ndcg = np.mean([1 / math.log2(r + 1) if r <= 10 else 0.0 for r in ranks])
    expected_mrr = np.mean([1 / r if r <= 10 else 0.0 for r in ranks])

    tasks = files.select_tasks(tmp_path / "tasks", {})
    report = files.run([str(directory)], tasks, show_progress=False)
    by_family = {s.family: s for s in report.models[str(directory)]}
    sts, retrieval = by_family["sts"], by_family["retrieval"]
    assert retrieval.scores["ndcg_at_10"] == pytest.approx(expected_ndcg, abs=1e-6)
    assert retrieval.scores["mrr_at_10"] == pytest.approx(expected_mrr, abs=1e-6)
    assert retrieval.scores["nonzeros_query"] == pytest.approx((q > 0).sum(axis=1).mean())
    assert retrieval.scores["nonzeros_document"] == pytest.approx((d > 0).sum(axis=1).mean())
    assert math.isnan(sts.main_score) and "retrieval only" in sts.notes[0]
    # any masked-LM directory, asked to, is scored the same way
    plain = files.run([str(tmp_path / "src")], tasks, show_progress=False, sparse=True)
    assert {s.family: s for s in plain.models[str(tmp_path / "src")]}["retrieval"].scores == retrieval.scores
    markdown = files.to_markdown(report)
    assert "## Sparse retrieval" in markdown and f"{retrieval.scores['nonzeros_document']:.1f}" in markdown

    out = tmp_path / "results"
    assert (
        main(
            [
                "eval",
                "embeddings",
                "--model",
                str(directory),
                "--retrieval",
                str(task),
                "--output",
                str(out),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    saved = json.loads((out / "embedding_results.json").read_text())[str(directory)]["tasks"][0]["scores"]
    assert saved["ndcg_at_10"] == pytest.approx(expected_ndcg, abs=1e-6)


def test_sparse_crash_and_resume_continue_exactly(tmp_path):
    """The regulariser's warm-up spans the crash: a resumed run must take up its schedule where it stopped."""
    from helpers import assert_resumes_exactly
    from neobert.finetuning.sparse import SparseConfig, run

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    animals, colors = write_pairs(tmp_path)

    def config(name, **changes):
        return SparseConfig(
            model=str(model_dir),
            data=[str(animals), str(colors)],
            output=str(tmp_path / name),
            steps=6,
            batch_size=4,
            lr=1e-3,
            warmup_steps=1,
            log_every=1,
            save_every=2,
            query_regularizer=0.05,
            document_regularizer=0.05,
            regularizer_warmup=1.0,
            max_length=32,
            show_progress=False,
            **changes,
        )

    assert_resumes_exactly(run, config, steps=6)


SPARSE_SCRIPT = """
import json, sys
import torch
import neobert.finetuning.sparse as sparse
train = sparse.train
def train_and_keep_each_rank(*args, **kwargs):  # every process's own trained weights, for the test to compare
    trained = train(*args, **kwargs)
    torch.save(trained.encoder.model.state_dict(), f"{sys.argv[2]}/rank{trained.trainer.rank}.pt")
    return trained
sparse.train = train_and_keep_each_rank
sparse.run(sparse.SparseConfig(**json.loads(open(sys.argv[1]).read())))
"""


def with_teacher_scores(path):
    """A copy of a pairs file whose rows carry a teacher's scores of their positive and negatives."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    out = path.with_name(path.stem + "_scored.jsonl")
    lines = [
        json.dumps({**r, "scores": [3.0 - i % 3] + [1.0 + i % 2] * len(r.get("negatives", []))})
        for i, r in enumerate(rows)
    ]
    out.write_text("".join(line + "\n" for line in lines))
    return out


@pytest.mark.slow  # two torchrun processes (26 s); test_loss.py checks the all-reduce by default
def test_sparse_two_processes_equal_one(tmp_path):
    """issue 26: `finetune sparse` in 2 CPU processes (torchrun, gloo) of 2 queries each trains exactly as 1
    process of the same 4 queries: the contrastive term gathers every process's candidates and the FLOPS term
    is the global batch's (not each process's own, which would give a larger regulariser: the mean of squared
    half-batch means exceeds the squared batch mean). Both ranks end with the same weights, and losses
    (contrastive + FLOPS), logged FLOPS and weights equal the one-process run's."""
    from dataclasses import asdict

    from helpers import assert_same_weights, run_script, torchrun
    from neobert.finetuning.sparse import SparseConfig, run

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    # issue 40: with a teacher's scores distilled (KL and MarginMSE), found among every process's candidates
    animals, colors = (with_teacher_scores(path) for path in write_pairs(tmp_path))

    def config(name, batch_size):  # a strong regulariser from the first step: the FLOPS term shapes the run
        return SparseConfig(
            model=str(model_dir),
            data=[str(animals), str(colors)],
            distillation=0.5,
            margin_mse=0.01,
            output=str(tmp_path / name),
            steps=4,
            batch_size=batch_size,
            lr=1e-3,
            warmup_steps=1,
            log_every=1,
            query_regularizer=0.5,
            document_regularizer=0.5,
            regularizer_warmup=0.25,
            max_length=32,
            show_progress=False,
        )

    one = run(config("one", batch_size=4))
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps(asdict(config("two", batch_size=2))))
    two = run_script(tmp_path, SPARSE_SCRIPT, [str(settings), str(tmp_path)], torchrun())
    assert two.returncode == 0, (two.stdout.decode() + two.stderr.decode())[-4000:]

    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for key in ranks[0]:
        torch.testing.assert_close(ranks[1][key], ranks[0][key], rtol=0, atol=0)  # DDP: identical weights
    logs = [json.loads((tmp_path / d / "sparse_training.json").read_text()) for d in ("one", "two")]
    assert logs[1]["losses"] == pytest.approx(logs[0]["losses"], rel=1e-5, abs=1e-6)
    assert logs[1]["dataset_steps"] == logs[0]["dataset_steps"]
    metrics = [
        [json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
        for d in ("one", "two")
    ]
    for key in ("train/flops_query", "train/flops_document", "train/nonzeros_query"):
        got, expected = ([m[key] for m in rows if key in m] for rows in (metrics[1], metrics[0]))
        assert len(got) == 4 and got == pytest.approx(expected, rel=1e-5, abs=1e-7), key
    assert_same_weights(one.output / "model.safetensors", tmp_path / "two" / "model.safetensors", 1e-5)
