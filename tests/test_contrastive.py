"""Contrastive fine-tuning: the loss against a naive loop, sampling, instructions, a real run, DDP gathering."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert, save_tiny_neobert
from helpers import check_card, write_pairs
from neobert.evaluation.instructions import (
    DATASET_INSTRUCTIONS,
    TEMPLATE,
    apply_instruction,
    dataset_instructions,
)
from neobert.finetuning.contrastive import (
    ContrastiveConfig,
    batch_texts,
    contrastive_loss_sum,
    info_nce,
    run,
    step_loss,
)
from neobert.finetuning.contrastive_data import (
    BatchSampler,
    ContrastiveDataset,
    Example,
    load_datasets,
    parse_data_spec,
    read_jsonl_examples,
    sampling_probabilities,
)


@torch.no_grad()
def dataset_loss(encoder, dataset, config) -> float:
    """Mean InfoNCE over consecutive batches of ``dataset`` in file order, dropout off: a fixed measurement."""
    encoder.model.eval()
    total, count = 0.0, 0
    for start in range(0, len(dataset), config.batch_size):
        texts, n_queries, _ = batch_texts(
            dataset.examples[start : start + config.batch_size], dataset, config
        )
        total += float(step_loss(encoder, texts, n_queries, config))
        count += n_queries
    return total / count


def naive_info_nce(q, p, n, temperature):
    """Per query: -log(exp(cos(q_i, p_i)/t) / sum over every positive and negative of exp(cos/t))."""
    candidates = [*p.tolist(), *n.tolist()]

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    total = 0.0
    for i, query in enumerate(q.tolist()):
        scores = [cos(query, c) / temperature for c in candidates]
        total += -(scores[i] - math.log(sum(math.exp(s) for s in scores)))
    return total / len(q)


def test_info_nce_with_hard_negatives_matches_a_naive_loop():
    torch.manual_seed(0)
    q, p, n = torch.randn(3, 8), torch.randn(3, 8), torch.randn(4, 8)
    expected = naive_info_nce(q, p, n, 0.07)
    assert float(contrastive_loss_sum(q, p, n, 0.07)) / 3 == pytest.approx(expected, rel=1e-5)
    # the hard negatives matter: without them the value is the in-batch-only loss
    assert float(contrastive_loss_sum(q, p, n[:0], 0.07)) / 3 == pytest.approx(
        naive_info_nce(q, p, n[:0], 0.07), rel=1e-5
    )
    assert float(info_nce(q, torch.cat([p, n]), torch.arange(3), 0.07)) == pytest.approx(expected, rel=1e-5)


def test_sampling_proportions_follow_size_to_the_alpha():
    np.testing.assert_allclose(sampling_probabilities([100, 400], 0.5), [1 / 3, 2 / 3])
    np.testing.assert_allclose(sampling_probabilities([100, 400], 1.0), [0.2, 0.8])
    np.testing.assert_allclose(sampling_probabilities([100, 400], 0.0), [0.5, 0.5])
    data = [_dataset("a", 100), _dataset("b", 400)]
    sampler = BatchSampler(data, batch_size=2, alpha=0.5, seed=1)
    picks = [sampler.next_batch()[0] for _ in range(3000)]
    assert np.mean(picks) == pytest.approx(2 / 3, abs=0.03)  # share of data set b


def _dataset(name, size, negatives=False):
    examples = [
        Example(f"{name} q{i}", f"{name} p{i}", (f"{name} n{i}",) if negatives else ()) for i in range(size)
    ]
    return ContrastiveDataset(name, examples)


def test_every_batch_comes_from_one_dataset_and_ranks_split_it():
    data = [_dataset("a", 10), _dataset("b", 7)]
    seen, sampler = set(), BatchSampler(data, 3, seed=0)
    for index, examples in (sampler.next_batch() for _ in range(50)):
        assert {ex.query.split()[0] for ex in examples} == {data[index].name}
        seen.add(index)
    assert seen == {0, 1}
    # two processes with the same seed: same data set each step, disjoint examples
    ranks = [BatchSampler(data, 2, seed=5, rank=r, world_size=2) for r in range(2)]
    for _ in range(20):
        (i0, b0), (i1, b1) = (s.next_batch() for s in ranks)
        assert i0 == i1
        assert not {ex.query for ex in b0} & {ex.query for ex in b1}


def test_instruction_file_and_pairs_give_the_training_instructions(tmp_path):
    """`finetune contrastive|sparse --instructions FILE --instruction NAME=TEXT`: the file read as every
    instruction file is (evaluation/instructions.py), the pairs winning."""
    path = tmp_path / "instructions.json"
    path.write_text(json.dumps({"mine": "Find the author", "faq": {"query": "Answer it"}, "gooaq": "old"}))
    got = dataset_instructions(path, ["gooaq=Find the answer", "empty="])
    assert got == {"mine": "Find the author", "faq": "Answer it", "gooaq": "Find the answer", "empty": ""}
    assert dataset_instructions() == {}
    with pytest.raises(ValueError, match="--instruction expects NAME=TEXT, got 'gooaq'"):
        dataset_instructions(None, ["gooaq"])
    with pytest.raises(FileNotFoundError, match=r"instruction file .*missing\.json does not exist"):
        dataset_instructions(tmp_path / "missing.json")
    path.write_text(json.dumps({"faq": {"query": "Answer it", "corpus": "A page"}}))
    with pytest.raises(ValueError, match="data set 'faq': training instructs queries only"):
        dataset_instructions(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"instructions\.json: not valid JSON"):
        dataset_instructions(path)


def test_instructions_are_prefixed_to_queries_only(tmp_path):
    path = tmp_path / "triples.jsonl"
    rows = [{"query": "who wrote it", "positive": "an author", "negatives": ["a painter", "a cook"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (gooaq,) = load_datasets([f"gooaq={path}"])
    assert gooaq.instruction == DATASET_INSTRUCTIONS["gooaq"]
    config = ContrastiveConfig(model="tiny", data=[], output="", hard_negatives=1)
    texts, n_queries, n_negatives = batch_texts(gooaq.examples, gooaq, config)
    expected_query = TEMPLATE.format(instruction=DATASET_INSTRUCTIONS["gooaq"], text="who wrote it")
    assert texts == [expected_query, "an author", "a painter"]
    assert (n_queries, n_negatives) == (1, 1)
    (custom,) = load_datasets([f"mine={path}"], instructions={"mine": "Find the author"})
    assert custom.instruction == "Find the author"
    assert load_datasets([str(path)])[0].instruction == ""  # unknown name: no instruction
    assert apply_instruction("", "text") == "text"


def test_data_specs_and_bad_files(tmp_path):
    assert parse_data_spec("nli=hub:org/data:triplet@dev") == ("nli", "hub:org/data:triplet@dev")
    assert parse_data_spec("all-nli") == ("all-nli", "hub:sentence-transformers/all-nli:triplet")
    assert parse_data_spec("data/my_pairs.jsonl") == ("my_pairs", "data/my_pairs.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "positive": "p"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing text field\(s\) query; available: positive, question"):
        read_jsonl_examples(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        read_jsonl_examples(empty)


def test_hub_columns_are_recognized_by_name(monkeypatch):
    datasets = pytest.importorskip("datasets")  # optional (the train extra); absent on some GPU images

    from neobert.finetuning.contrastive_data import load_hub_examples

    table = {
        "anchor": ["q1", "q2"],
        "positive": ["p1", "p2"],
        "negative_1": ["n1", ""],
        "negative_2": ["m1", "m2"],
    }
    calls = []

    def fake_load_dataset(hub_id, config, split):
        calls.append((hub_id, config, split))
        return datasets.Dataset.from_dict(table)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    examples = load_hub_examples("org/triples:triplet@dev")
    assert calls == [("org/triples", "triplet", "dev")]
    assert examples == [Example("q1", "p1", ("n1", "m1")), Example("q2", "p2", ("m2",))]
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_dict({"text": ["x"]}))
    with pytest.raises(ValueError, match=r"no query column .* available: text"):
        load_hub_examples("org/plain")


@NEEDS_TOKENIZER
def _encode_loaded(encoder, texts):
    from neobert.inference.run import encode

    return encode(encoder.model, encoder.tokenizer, texts, normalize=False, show_progress=False)


def test_two_dataset_run_lowers_the_loss_and_saves_a_sentence_transformer(tmp_path):
    from sentence_transformers import SentenceTransformer

    import neobert  # noqa: F401  (registers NeoBERT for SentenceTransformer)
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_encoder, load_model
    from neobert.inference.run import encode

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    animals, colors = write_pairs(tmp_path)
    config = ContrastiveConfig(
        model=str(model_dir),
        data=[str(animals), f"sts12={colors}"],
        output=str(tmp_path / "out"),
        steps=30,
        batch_size=4,
        lr=1e-3,
        warmup_steps=2,
        log_every=5,
        show_progress=False,
    )
    datasets = load_datasets(config.data)
    before = [dataset_loss(load_encoder(model_dir), d, config) for d in datasets]
    result = run(config)
    after = [dataset_loss(load_encoder(result.output), d, config) for d in datasets]
    assert all(a < 0.5 * b for a, b in zip(after, before)), (before, after)
    assert set(result.dataset_steps) == {"animals", "sts12"} and min(result.dataset_steps.values()) > 0
    assert sum(result.dataset_steps.values()) == 30 and len(result.losses) == 6
    log = json.loads((result.output / "contrastive_training.json").read_text(encoding="utf-8"))
    assert log["datasets"][1]["instruction"] == DATASET_INSTRUCTIONS["sts12"]

    texts = ["the sound of a cat", "a blue wall", "something else entirely, a little longer"]
    st_vectors = SentenceTransformer(str(result.output), device="cpu").encode(texts)
    reference = encode(
        load_model(result.output), load_tokenizer(result.output), texts, normalize=False, show_progress=False
    )
    np.testing.assert_allclose(st_vectors, reference, atol=1e-5, rtol=0)
    ours = _encode_loaded(load_encoder(result.output), texts)
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=0)

    # The card (ours, not sentence-transformers' generic one) names the data and the run's own numbers.
    card = check_card(result.output, "sentence-similarity", "sentence-transformers")
    assert card.data.eval_results is None  # no evaluation ran: none claimed
    text = card.text
    assert f"| last logged training loss (InfoNCE) | {result.losses[-1]:.4f} |" in text
    assert all(f"| steps drawn from {name} | {n:,} |" in text for name, n in result.dataset_steps.items())
    assert "animals: 12 examples" in text and "sts12: 12 examples" in text


@NEEDS_TOKENIZER
def test_any_transformers_encoder_through_the_cli(tmp_path):
    from sentence_transformers import SentenceTransformer

    from neobert.cli.main import main
    from neobert.inference.encoders import load_encoder

    bert_dir = save_tiny_bert(tmp_path / "bert")
    animals, colors = write_pairs(tmp_path)
    out = tmp_path / "bert-embed"
    code = main(
        [
            "finetune",
            "contrastive",
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
            "--log-every",
            "1",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    texts = ["paint it red", "a dog makes a noise"]
    st_vectors = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(st_vectors, _encode_loaded(load_encoder(out), texts), atol=1e-5)
    assert (
        main(
            [
                "finetune",
                "contrastive",
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


def test_old_bf16_setting_loads_as_precision_with_a_warning(tmp_path):
    from neobert.common.config import ConfigError
    from neobert.finetuning.config import FinetuneConfigError

    base = {"model": "tiny", "data": ["pairs.jsonl"], "output": "out"}
    for old, new in ((True, "bf16"), (False, "fp32")):
        with pytest.warns(FutureWarning, match="'bf16' is deprecated, use 'precision'"):
            assert ContrastiveConfig.from_dict({**base, "bf16": old}).precision == new
    settings = tmp_path / "contrastive.yaml"
    settings.write_text("model: tiny\ndata: [pairs.jsonl]\noutput: out\nbf16: true\n", encoding="utf-8")
    with pytest.warns(FutureWarning):
        assert ContrastiveConfig.from_file(settings).precision == "bf16"
    assert ContrastiveConfig.from_dict(base).precision == "auto"
    with pytest.raises(ConfigError, match="give only 'precision'"):
        ContrastiveConfig.from_dict({**base, "bf16": True, "precision": "fp32"})
    with pytest.raises(FinetuneConfigError, match="unknown ContrastiveConfig key"):
        ContrastiveConfig.from_dict({**base, "fp16": True})
    with pytest.raises(FinetuneConfigError, match="precision must be one of auto, fp32, bf16"):
        ContrastiveConfig(**base, precision="fp16")


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_precision_is_the_dtype_of_the_training_forward(tmp_path, precision, dtype):
    """The trainer applies the run's precision: every linear layer of a training forward computes in it,
    while the weights stay fp32 (autocast), and the saved model is fp32."""
    from neobert.inference.encoders import load_model

    model_dir = save_tiny_neobert(tmp_path / "tiny")
    animals, _ = write_pairs(tmp_path)
    seen: set[torch.dtype] = set()

    def record(module, args, output):
        if isinstance(module, torch.nn.Linear) and torch.is_grad_enabled():
            seen.add(output.dtype)
            assert module.weight.dtype == torch.float32

    config = ContrastiveConfig(
        model=str(model_dir),
        data=[str(animals)],
        output=str(tmp_path / "out"),
        steps=1,
        batch_size=2,
        warmup_steps=0,
        device="cpu",
        precision=precision,
        show_progress=False,
    )
    hook = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        result = run(config)
    finally:
        hook.remove()
    assert seen == {dtype}
    assert {p.dtype for p in load_model(result.output).parameters()} == {torch.float32}


def _ddp_worker(rank, world, init_file, rows, result_dir):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    q, p, n = (t.clone().requires_grad_(True) for t in rows[rank])
    loss_sum = contrastive_loss_sum(q, p, n, 0.07)
    (loss_sum / 4).backward()  # as the training core does: this process's sum over the global query count
    torch.save(
        {"loss_sum": loss_sum.detach(), "grads": [q.grad, p.grad, n.grad]},
        os.path.join(result_dir, f"{rank}.pt"),
    )
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_gathers_negatives_and_gives_the_single_process_gradient(tmp_path):
    """Two processes, each summing its own queries' losses against every process's candidates: the sum is
    the one-process loss, and each process gets exactly the one-process gradient of its own rows (which
    the other process's queries also depend on: the gather's backward carries that gradient across)."""
    torch.manual_seed(0)
    q, p = torch.randn(4, 6), torch.randn(4, 6)
    n = torch.randn(4, 6)
    # rank 0: queries 0-1 with one hard negative; rank 1: queries 2-3 with three
    rows = [(q[:2], p[:2], n[:1]), (q[2:], p[2:], n[1:])]
    torch.multiprocessing.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), rows, str(tmp_path)), nprocs=2)
    results = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]

    leaves = [t.clone().requires_grad_(True) for t in (q, p, n)]
    expected = contrastive_loss_sum(*leaves, 0.07) / 4
    expected.backward()
    assert float(expected.detach()) == pytest.approx(naive_info_nce(q, p, n, 0.07), rel=1e-5)
    torch.testing.assert_close((results[0]["loss_sum"] + results[1]["loss_sum"]) / 4, expected.detach())
    for i, leaf in enumerate(leaves):
        got = torch.cat([results[0]["grads"][i], results[1]["grads"][i]])
        torch.testing.assert_close(got, leaf.grad, rtol=1e-5, atol=1e-6)
