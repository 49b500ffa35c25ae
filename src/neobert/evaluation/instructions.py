"""Instructions: one per contrastive training data set (the paper's Table 6) and per MTEB task (Tables 7-8).

The spec names the data sets and says each has an instruction prefixed to the query; it does not give the
wording. Ours follows the style of the e5-mistral instruction set (Wang et al., 2024, "Improving Text
Embeddings with Large Language Models"), which is also what the ``mteb`` package stores as each English
task's ``metadata.prompt``. For MTEB we therefore take the instruction from the task's own metadata and
keep here only what the metadata lacks (the STS tasks, SummEval, CQADupStack) plus a fallback per task
type; a JSON file can override any entry.

Where instructions go: retrieval and reranking are asymmetric, so only queries are instructed and the
corpus is encoded as is (as e5-mistral does). Every other task type is symmetric: both sides of a pair,
and every text of a classification or clustering set, carry the same instruction.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# The text the model sees: the instruction, then the input. Training and evaluation must use the same one.
TEMPLATE = "Instruct: {instruction}\nQuery: {text}"

# Table 6: contrastive data sets of the paper's protocol -> instruction prefixed to their queries.
DATASET_INSTRUCTIONS: dict[str, str] = {
    "ag-news": "Given a news title, retrieve the news article it heads",
    "all-nli": "Given a premise, retrieve a hypothesis that is entailed by the premise",
    "amazon-qa": "Given a question about a product, retrieve an answer from a customer",
    "concurrentqa": "Given a multi-hop question, retrieve documents that help answer the question",
    "github-issues": "Given the title of a GitHub issue, retrieve the issue's description",
    "gooaq": "Given a web search question, retrieve the answer to the question",
    "medmcqa": "Given a medical exam question, retrieve the explanation of its answer",
    "npr": "Given a news headline, retrieve the news article",
    "pubmedqa": "Given a biomedical question, retrieve the abstract that answers it",
    "sentence-compression": "Given a sentence, retrieve its shortened form that keeps the meaning",
    "stackexchange": "Given a question title from StackExchange, retrieve a duplicate question",
    "triviaqa": "Given a trivia question, retrieve a passage that answers it",
    "wikihow": "Given a summary of instructions, retrieve the full how-to article",
    "yahoo-answers": "Given a question from Yahoo Answers, retrieve the best answer",
    "stackoverflowdupquestions": "Retrieve duplicate questions from the StackOverflow forum",
    "fever": "Given a claim, retrieve documents that support or refute the claim",
    "msmarco": "Given a web search query, retrieve relevant passages that answer the query",
    "sts12": "Retrieve semantically similar text",
    "stsb": "Retrieve semantically similar text",
}

# MTEB tasks whose metadata carries no instruction (query, corpus).
TASK_INSTRUCTIONS: dict[str, tuple[str, str]] = {
    **{
        name: ("Retrieve semantically similar text", "Retrieve semantically similar text")
        for name in (
            "BIOSSES",
            "SICK-R",
            "STS12",
            "STS13",
            "STS14",
            "STS15",
            "STS16",
            "STS17",
            "STS22",
            "STSBenchmark",
        )
    },
    "SummEval": (
        "Given a news summary, retrieve other semantically similar summaries",
        "Given a news summary, retrieve other semantically similar summaries",
    ),
    "CQADupstackRetrieval": (
        "Given a question, retrieve detailed question descriptions from StackExchange that are "
        "duplicates of the given question",
        "",
    ),
}

# Fallback per task type, used when neither the metadata nor the table above has one.
TYPE_INSTRUCTIONS: dict[str, str] = {
    "Classification": "Classify the given text",
    "MultilabelClassification": "Classify the given text",
    "Clustering": "Identify the topic or theme of the given texts",
    "PairClassification": "Retrieve text that is semantically similar to the given text",
    "Reranking": "Retrieve documents relevant to the given query",
    "Retrieval": "Given a query, retrieve relevant documents",
    "InstructionRetrieval": "Given a query, retrieve relevant documents",
    "InstructionReranking": "Given a query, retrieve relevant documents",
    "STS": "Retrieve semantically similar text",
    "Summarization": "Given a news summary, retrieve other semantically similar summaries",
    "BitextMining": "Retrieve parallel sentences",
    "Regression": "Represent the given text",
}

ASYMMETRIC_TYPES = ("Retrieval", "Reranking", "InstructionRetrieval", "InstructionReranking")


@dataclass(frozen=True)
class TaskInstruction:
    query: str
    corpus: str


def apply_instruction(instruction: str | None, text: str, template: str = TEMPLATE) -> str:
    """``text`` with ``instruction`` in front (through ``template``); unchanged when there is none."""
    if not instruction:
        return text
    return template.format(instruction=instruction, text=text)


def dataset_instruction(name: str, overrides: dict[str, str] | None = None) -> str:
    """The instruction for contrastive data set ``name`` (case and ``_``/``-`` insensitive), or ''."""
    key = name.lower().replace("_", "-")
    table = {**DATASET_INSTRUCTIONS, **{k.lower().replace("_", "-"): v for k, v in (overrides or {}).items()}}
    return table.get(key, "")


def task_instruction(
    name: str,
    task_type: str,
    metadata_prompt: str | dict | None = None,
    overrides: dict[str, TaskInstruction] | None = None,
) -> TaskInstruction:
    """Query and corpus instructions of an MTEB (or local) task: override > this table > the task's own
    metadata > the task type's fallback. Asymmetric task types never instruct the corpus."""
    if overrides and name in overrides:
        return overrides[name]
    if name in TASK_INSTRUCTIONS:
        return TaskInstruction(*TASK_INSTRUCTIONS[name])
    if isinstance(metadata_prompt, dict):
        query = metadata_prompt.get("query") or ""
        corpus = metadata_prompt.get("document") or metadata_prompt.get("passage") or ""
    else:
        query = metadata_prompt or ""
        corpus = query
    if not query:
        query = TYPE_INSTRUCTIONS.get(task_type, "")
        corpus = query
    if task_type in ASYMMETRIC_TYPES:
        corpus = corpus if isinstance(metadata_prompt, dict) else ""
    return TaskInstruction(query, corpus)


def read_instruction_file(path: str | os.PathLike) -> dict[str, TaskInstruction]:
    """A JSON object: task name -> "instruction" (both sides) or {"query": ..., "corpus": ...}."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"instruction file {path} does not exist")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object mapping task names to instructions")
    out = {}
    for name, value in data.items():
        if isinstance(value, str):
            out[name] = TaskInstruction(value, value)
        elif isinstance(value, dict) and set(value) <= {"query", "corpus"}:
            out[name] = TaskInstruction(value.get("query", ""), value.get("corpus", ""))
        else:
            raise ValueError(f"{path}: task {name!r} needs a string or an object with 'query'/'corpus' keys")
    return out


def dataset_instructions(
    path: str | os.PathLike | None = None, pairs: list[str] | None = None
) -> dict[str, str]:
    """Data set name -> the instruction prefixed to its queries in contrastive (and SPLADE) training: an
    instruction file read by :func:`read_instruction_file`, then ``NAME=TEXT`` pairs, which win.

    Training instructs queries only, so a file entry may not give a corpus instruction of its own (it would be
    silently unused); a string entry is the query's.
    """
    out: dict[str, str] = {}
    if path is not None:
        for name, instruction in read_instruction_file(path).items():
            if instruction.corpus not in ("", instruction.query):
                raise ValueError(f"{path}: data set {name!r}: training instructs queries only; drop 'corpus'")
            out[name] = instruction.query
    for pair in pairs or []:
        name, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"--instruction expects NAME=TEXT, got {pair!r}")
        out[name] = text
    return out
