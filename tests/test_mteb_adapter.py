"""The MTEB adapter against the ``mteb`` package's own offline mock tasks (nothing downloaded)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from embedding_fixtures import NEEDS_TOKENIZER, save_tiny_neobert
from neobert.evaluation import mteb_adapter
from neobert.evaluation.instructions import TEMPLATE, TaskInstruction, task_instruction

mteb = pytest.importorskip("mteb", reason="the mteb package is not installed: pip install 'neobert[mteb]'")
mock_tasks = pytest.importorskip("mteb.mocks.mock_tasks", reason="this mteb version ships no mock tasks")

pytestmark = NEEDS_TOKENIZER


def _table4_mocks():
    """One mock task per column of Table 4 (and an instruction-retrieval one)."""
    from mteb.mocks.mock_tasks.clustering import MockClusteringTask

    return [
        mock_tasks.MockClassificationTask(),
        MockClusteringTask(),
        mock_tasks.MockPairClassificationTask(),
        mock_tasks.MockRerankingTask(),
        mock_tasks.MockRetrievalTask(),
        mock_tasks.MockSTSTask(),
        mock_tasks.MockSummarizationTask(),
        mock_tasks.MockInstructionRetrieval(),
    ]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    from neobert.inference.encoders import load_encoder

    model_dir = save_tiny_neobert(tmp_path_factory.mktemp("mteb") / "tiny")
    return mteb_adapter.MTEBEncoder(load_encoder(model_dir))


def test_implements_the_encoder_protocol(adapter):
    from mteb.models.models_protocols import EncoderProtocol

    assert isinstance(adapter, EncoderProtocol)
    meta = adapter.mteb_model_meta
    assert meta.embed_dim == 64 and meta.use_instructions and meta.name.startswith("local/")


def test_passes_the_mock_tasks_and_fills_table4(adapter, tmp_path):
    tasks = _table4_mocks()
    results = mteb.evaluate(adapter, tasks, cache=None, show_progress_bar=False, raise_error=True)
    rows = mteb_adapter.rows_from_results(results, tasks)
    assert sorted(r.task for r in rows) == sorted(t.metadata.name for t in tasks)
    assert all(math.isfinite(r.main_score) for r in rows)
    averages = mteb_adapter.category_averages(rows)
    assert list(averages)[:7] == list(mteb_adapter.TABLE4_COLUMNS)  # Table 4's column order
    retrieval = [r.main_score for r in rows if r.task_type == "Retrieval"]
    assert averages["Retrieval"] == pytest.approx(sum(retrieval) / len(retrieval))
    assert averages["Avg."] == pytest.approx(sum(r.main_score for r in rows) / len(rows))
    report = mteb_adapter.MTEBReport({"tiny": rows})
    files = mteb_adapter.write_report(report, tmp_path)
    table = files[1].read_text(encoding="utf-8")
    assert (
        "| Model | Class. (1) | Clust. (1) | PairClass. (1) | Rerank. (1) | Retr. (1) | STS (1) | Summ. (1) |"
        in table
    )
    assert json.loads(files[0].read_text(encoding="utf-8"))["tiny"]["averages"]["Avg."] == pytest.approx(
        averages["Avg."]
    )


def test_queries_get_instructions_and_the_corpus_does_not(adapter, monkeypatch):
    seen = {}
    original = mteb_adapter.encode

    def recording(model, tokenizer, texts, **kwargs):
        seen[kwargs["desc"]] = list(texts)
        return original(model, tokenizer, texts, **kwargs)

    monkeypatch.setattr(mteb_adapter, "encode", recording)
    task = mock_tasks.MockRetrievalTask()
    mteb.evaluate(adapter, [task], cache=None, show_progress_bar=False)
    instruction = task_instruction(task.metadata.name, "Retrieval").query
    queries, documents = seen["MockRetrievalTask query"], seen["MockRetrievalTask document"]
    assert instruction and all(q.startswith(TEMPLATE.split("{")[0] + instruction) for q in queries)
    assert not any(d.startswith("Instruct:") for d in documents)


def test_instruction_table_and_overrides():
    sci_fact = mteb.get_task("SciFact").metadata  # metadata only; no data is loaded
    pair = task_instruction(sci_fact.name, str(sci_fact.type), sci_fact.prompt)
    assert pair == TaskInstruction(sci_fact.prompt["query"], "")
    sts = mteb.get_task("STSBenchmark").metadata
    assert task_instruction(sts.name, "STS", sts.prompt) == TaskInstruction(
        *["Retrieve semantically similar text"] * 2
    )
    override = {"STSBenchmark": TaskInstruction("Mine", "Mine too")}
    assert task_instruction("STSBenchmark", "STS", None, override).corpus == "Mine too"


def test_encode_equals_encoding_the_instructed_texts(adapter):
    from mteb.types import PromptType

    from neobert.inference.run import encode

    metadata = mock_tasks.MockSTSTask().metadata
    batches = [{"text": ["a cat", "two dogs"]}, {"text": ["rain"]}]
    got = adapter.encode(
        batches, task_metadata=metadata, hf_split="test", hf_subset="default", prompt_type=PromptType.query
    )
    instruction = adapter.instruction(metadata, PromptType.query)
    texts = [TEMPLATE.format(instruction=instruction, text=t) for t in ["a cat", "two dogs", "rain"]]
    np.testing.assert_allclose(
        got, encode(adapter.encoder.model, adapter.encoder.tokenizer, texts, show_progress=False), atol=1e-6
    )
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    sims = adapter.similarity(got, got)
    torch.testing.assert_close(torch.diagonal(sims), torch.ones(3), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_every_text_mock_task_passes(adapter):
    assert mteb.mock_run(adapter).all_passed


@pytest.mark.slow  # 7 s
def test_cli_selects_tasks_and_reports_unknown_ones(tmp_path, capsys):
    from neobert.cli.main import main

    assert [t.metadata.name for t in mteb_adapter.select_tasks(["STS12", "SciFact"])] == ["STS12", "SciFact"]
    sts = mteb_adapter.select_tasks(None, "MTEB(eng, v1)", ["STS"])
    assert len(sts) == 10 and {t.metadata.type for t in sts} == {"STS"}  # Table 4's STS column
    assert main(["eval", "mteb", "--model", "tiny", "--tasks", "NoSuchTask", "--output", str(tmp_path)]) == 1
    assert "unknown MTEB task" in capsys.readouterr().err


def test_a_sparse_encoder_directory_goes_through_mteb_sparse_path(tmp_path, monkeypatch):
    from mteb.models import SparseEncoderWrapper

    from neobert.finetuning.sparse import save_sparse_encoder
    from neobert.inference.encoders import load_encoder

    directory = save_sparse_encoder(
        load_encoder(save_tiny_neobert(tmp_path / "m"), head="mlm"), tmp_path / "sparse"
    )
    task = mock_tasks.MockRetrievalTask()

    def dense_adapter(*args, **kwargs):
        raise AssertionError("a sparse model must not go through the dense adapter")

    monkeypatch.setattr(mteb_adapter, "MTEBEncoder", dense_adapter)
    report = mteb_adapter.run([str(directory)], [task], show_progress=False, device="cpu")
    [row] = report.models[str(directory)]
    direct = mteb.evaluate(
        SparseEncoderWrapper(str(directory), device="cpu"),
        [mock_tasks.MockRetrievalTask()],
        cache=None,
        show_progress_bar=False,
        raise_error=True,
    )
    assert row.main_score == pytest.approx(100 * direct.task_results[0].get_score())
