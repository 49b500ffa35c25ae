"""Long documents: ``truncate`` is today's encode (now counted), ``chunk`` equals a hand-computed reference
over the windows of a 3-window document, ``extend`` equals the RoPE-scaled model's direct forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from neobert.common.config import ModelConfig
from neobert.inference import encoders
from neobert.inference import run as inference
from neobert.inference.long_documents import (
    LongDocuments,
    classifier_logits,
    embed,
    extended_model,
    plan_rows,
    token_logits,
    tokenize_rows,
    window_starts,
)
from neobert.model import NeoBERTConfig, NeoBERTForTokenClassification, NeoBERTModel

pytestmark = pytest.mark.usefixtures("one_thread")

WINDOW = 32  # tokens per row, [CLS] and [SEP] included: 30 content tokens
WORDS = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "red",
    "blue",
    "green",
    "cat",
    "dog",
    "sun",
]


def document(tokens: int) -> str:
    """A text of exactly ``tokens`` content tokens (each word above is one WordPiece)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(tokens))


def spread(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights larger than the init, so that positions and windows visibly change the outputs."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def encoder():
    return spread(encoders.load_model("tiny", "base", vocab_size=30522, max_length=WINDOW))


def test_document_words_are_single_tokens(tokenizer):
    assert len(tokenizer(document(86), add_special_tokens=False)["input_ids"]) == 86


def test_window_starts_and_rows():
    assert window_starts(10, 4, 1) == [0, 3, 6]  # windows 0-3, 3-6, 6-9
    assert window_starts(4, 4, 1) == [0] and window_starts(0, 4, 0) == [0]
    assert window_starts(9, 4, 0) == [0, 4, 8]
    with pytest.raises(ValueError, match="stride"):
        window_starts(9, 4, 4)
    content = [list(range(10, 20)), [7, 8]]
    rows = plan_rows(content, window=6, settings=LongDocuments("chunk", stride=1), prefix=[1], suffix=[2])
    assert rows.ids == [[1, 10, 11, 12, 13, 2], [1, 13, 14, 15, 16, 2], [1, 16, 17, 18, 19, 2], [1, 7, 8, 2]]
    assert (rows.owner, rows.start, rows.size) == ([0, 0, 0, 1], [0, 3, 6, 0], [4, 4, 4, 2])
    rows = plan_rows(content, window=6, settings=LongDocuments("truncate"), prefix=[1], suffix=[2])
    assert rows.ids == [[1, 10, 11, 12, 13, 2], [1, 7, 8, 2]]
    assert (rows.report.over_window, rows.report.truncated, rows.report.tokens) == (1, 1, 10)
    rows = plan_rows(content, window=6, settings=LongDocuments("extend"), prefix=[1], suffix=[2])
    assert rows.ids[0] == [1, *range(10, 20), 2] and rows.scale == [2, 1]  # 12 tokens: 2 windows of 6
    with pytest.raises(ValueError, match="policy"):
        LongDocuments("summarize")


def test_truncate_is_todays_encode_and_is_counted(encoder, tokenizer):
    texts = [document(90), "short text"]
    vectors, report = embed(encoder, tokenizer, texts)
    np.testing.assert_allclose(
        vectors, inference.encode(encoder, tokenizer, texts, show_progress=False), atol=1e-6
    )
    rows, _ = tokenize_rows(encoder, tokenizer, texts, LongDocuments("truncate"))
    assert (
        rows.ids == tokenizer(texts, truncation=True, max_length=WINDOW)["input_ids"]
    )  # the tokenizer's own cut
    assert (report.over_window, report.truncated, report.rows) == (1, 1, 2)


def windows_by_hand(tokenizer, text: str, stride: int) -> list[list[int]]:
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    width, rows, start = WINDOW - 2, [], 0
    while True:
        rows.append([tokenizer.cls_token_id, *content[start : start + width], tokenizer.sep_token_id])
        if start + width >= len(content):
            return rows
        start += width - stride


def test_chunk_embedding_equals_the_reference_over_its_windows(encoder, tokenizer):
    text = document(86)  # 30 + 28 + 28 new tokens with stride 2: exactly 3 windows
    windows = windows_by_hand(tokenizer, text, stride=2)
    assert len(windows) == 3
    with torch.no_grad():
        pooled = [encoder(torch.tensor([w])).last_hidden_state[0].mean(0) for w in windows]  # (C,) each
    weights = torch.tensor([len(w) for w in windows], dtype=torch.float32)
    reference = F.normalize((torch.stack(pooled) * weights[:, None]).sum(0) / weights.sum(), dim=0)
    settings = LongDocuments("chunk", stride=2)
    vectors, report = embed(encoder, tokenizer, [text, "short"], settings)
    np.testing.assert_allclose(vectors[0], reference.numpy(), atol=1e-5)
    assert (report.over_window, report.truncated, report.rows) == (1, 0, 4)
    np.testing.assert_allclose(
        vectors[1], inference.encode(encoder, tokenizer, ["short"], show_progress=False)[0], atol=1e-6
    )
    # cls pooling: the windows' [CLS] vectors averaged equally
    with torch.no_grad():
        cls = torch.stack([encoder(torch.tensor([w])).last_hidden_state[0, 0] for w in windows]).mean(0)
    vectors, _ = embed(encoder, tokenizer, [text], settings, pooling="cls", normalize=False)
    np.testing.assert_allclose(vectors[0], cls.numpy(), atol=1e-5)


def test_chunk_classification_averages_window_logits(tokenizer):
    model = spread(
        encoders.load_model(
            "tiny", "sequence-classification", vocab_size=30522, max_length=WINDOW, num_labels=3
        ),
        seed=1,
    )
    text = document(86)
    windows = windows_by_hand(tokenizer, text, stride=2)
    with torch.no_grad():
        reference = torch.stack([model(torch.tensor([w])).logits[0] for w in windows]).mean(0)
    logits, report = classifier_logits(model, tokenizer, [text], LongDocuments("chunk", stride=2))
    np.testing.assert_allclose(logits[0], reference.numpy(), atol=1e-5)
    assert report.rows == 3


def test_chunk_token_predictions_come_from_the_most_central_window(tokenizer):
    config = NeoBERTConfig.from_model_config(
        ModelConfig.from_name("tiny", vocab_size=30522, max_length=WINDOW), num_labels=4
    )
    model = spread(NeoBERTForTokenClassification(config), seed=2)
    text = document(86)
    stride, width = 10, WINDOW - 2  # wide overlaps, so the choice of window matters
    windows = windows_by_hand(tokenizer, text, stride=stride)
    with torch.no_grad():
        per_window = [model(torch.tensor([w])).logits[0, 1:-1] for w in windows]  # content tokens only
    reference = np.zeros((86, 4), dtype=np.float32)
    for token in range(86):
        best = None
        for k, logits in enumerate(per_window):
            position = token - k * (width - stride)
            if 0 <= position < len(logits):
                centrality = min(position, len(logits) - 1 - position)
                if best is None or centrality > best[0]:
                    best = (centrality, logits[position].numpy())
        reference[token] = best[1]
    (result,), report = token_logits(model, tokenizer, [text], LongDocuments("chunk", stride=stride))
    np.testing.assert_allclose(result.logits, reference, atol=1e-5)
    assert report.rows == len(windows) and len(result.offsets) == 86
    # truncate: tokens past the window have no logits (NaN), the others are the single window's
    (cut,), _ = token_logits(model, tokenizer, [text])
    assert np.isnan(cut.logits[width:]).all()
    np.testing.assert_allclose(cut.logits[:width], per_window[0].numpy(), atol=1e-5)


@pytest.mark.parametrize("method", ["yarn", "ntk"])
def test_extend_equals_the_scaled_models_direct_forward(encoder, tokenizer, method):
    text = document(80)  # 82 tokens with [CLS] / [SEP]: 3 windows of 32 -> RoPE scaled x3
    ids = tokenizer(text)["input_ids"]
    assert 2 * WINDOW < len(ids) <= 3 * WINDOW
    scaled_config = encoder.model_config.with_context(3 * WINDOW, method)
    scaled = NeoBERTModel(NeoBERTConfig.from_model_config(scaled_config)).eval()
    scaled.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        reference = F.normalize(scaled(torch.tensor([ids])).last_hidden_state[0].mean(0), dim=0)
    vectors, report = embed(encoder, tokenizer, [text, "short"], LongDocuments("extend", method=method))
    np.testing.assert_allclose(vectors[0], reference.numpy(), atol=1e-5)
    # a text that fits runs on the original model, untouched by the scaling
    np.testing.assert_allclose(
        vectors[1], inference.encode(encoder, tokenizer, ["short"], show_progress=False)[0], atol=1e-6
    )
    assert (report.over_window, report.truncated, report.rows) == (1, 0, 2)
    # the scaled copy shares the weights instead of copying them
    copy = extended_model(encoder, 3, method)
    assert copy.encoder.weight.data_ptr() == encoder.encoder.weight.data_ptr()
    truncated, _ = embed(encoder, tokenizer, [text])
    assert np.abs(truncated[0] - vectors[0]).max() > 1e-3  # the whole document counted, not its first window


def test_extend_needs_rope(tokenizer):
    learned = encoders.load_model(
        "bert-baseline",
        "base",
        vocab_size=30522,
        max_length=WINDOW,
        num_hidden_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
    )
    with pytest.raises(ValueError, match="needs a NeoBERT model with RoPE"):
        embed(learned, tokenizer, [document(80)], LongDocuments("extend"))


def test_cli_embed_and_classify_follow_the_policy(model_dir, mlm, tokenizer, tmp_path, capsys):
    from neobert.cli.main import main

    long_text = document(300)  # the tiny model's window is 128 tokens
    (tmp_path / "in.txt").write_text(f"{long_text}\nshort line\n")
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "t.npy"),
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    assert "1 line(s) longer than the model window: truncated" in capsys.readouterr().out
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "c.npy"),
                "--precision",
                "fp32",
                "--long-documents",
                "chunk",
                "--stride",
                "8",
            ]
        )
        == 0
    )
    assert "handled by 'chunk'" in capsys.readouterr().out
    expected, _ = embed(mlm, tokenizer, [long_text, "short line"], LongDocuments("chunk", stride=8))
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), expected, atol=1e-5)
    truncated, _ = embed(mlm, tokenizer, [long_text, "short line"])
    np.testing.assert_allclose(np.load(tmp_path / "t.npy"), truncated, atol=1e-5)
