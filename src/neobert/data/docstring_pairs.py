"""Query/document pairs from real text every machine has: the standard library's docstrings.

A docstring written to PEP 257 opens with a summary paragraph and goes on with a longer description. The
summary is a query (``"Return the number of items in the queue."``), the rest of that docstring its one
relevant document. Functions, classes and methods with a summary of 20 to 300 characters and at least
``min_document_chars`` after it give a pair; pairs whose query or document repeats another's are dropped
(overridden methods share docstrings).

:func:`write_docstring_retrieval` splits the pairs *by top-level module* (a stable hash of its name decides),
so no held-out query or document shares a module with the training data: the training modules' pairs go to
``train.jsonl`` (``finetune contrastive|sparse`` files) and the held-out modules' to a BEIR-layout retrieval
task ``heldout/retrieval/docstrings`` (``eval embeddings --tasks-dir OUTPUT/heldout``); ``split.json``
names both module lists, so ``neobert data corpus --modules`` can pretrain on the training modules only.

With ``module_documents`` a second held-out task, ``long/retrieval/modules``, asks the same queries of *long*
documents: one per held-out source file, its whole documentation (the module docstring, then every documented
object's qualified name and docstring, a queried object's summary left out), each query's relevant document
the file it comes from (often thousands of tokens: past a small encoder's window).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..common.io import write_json, write_text
from .corpus import _clean, _entry, _parse, stdlib_files, stdlib_root

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class DocstringPair:
    module: str  # top-level module, e.g. "email"
    name: str  # qualified name of the documented object
    query: str  # the summary paragraph
    document: str  # the rest of the docstring
    source: str = ""  # the dotted module of its file, e.g. "email.message"


@dataclass
class DocstringRetrieval:
    output: Path
    train_pairs: int
    heldout_pairs: int
    train_modules: list[str]
    heldout_modules: list[str]

    @property
    def summary(self) -> str:
        return (
            f"wrote {self.train_pairs:,} training pairs from {len(self.train_modules)} modules and a held-out "
            f"retrieval task of {self.heldout_pairs:,} queries and documents from {len(self.heldout_modules)} "
            f"other modules to {self.output}"
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def split_docstring(doc: str, min_document_chars: int = 100) -> tuple[str, str] | None:
    """(summary, rest) of a cleaned docstring, or None when either is too short or the summary too long."""
    summary, _, rest = doc.strip().partition("\n\n")
    summary, rest = _one_line(summary), rest.strip()
    if not 20 <= len(summary) <= 300 or len(rest) < min_document_chars:
        return None
    return summary, rest


def _parsed_modules(modules: Sequence[str] | None) -> Iterator[tuple[str, ast.Module]]:
    """(dotted module name, parsed source) of every stdlib source file of ``modules`` (all when None) that
    parses, ``pydoc_data`` left out (its topics are prose, not docstrings)."""
    root = stdlib_root()
    for path in stdlib_files(modules):
        tree = _parse(path)
        parts = path.relative_to(root).with_suffix("").parts
        if tree is not None and parts[0] != "pydoc_data":
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), tree


def iter_docstring_pairs(
    modules: Sequence[str] | None = None, min_document_chars: int = 100
) -> Iterator[DocstringPair]:
    """Every pair of the standard library (or of ``modules``), in a fixed order, duplicates removed."""
    seen = set()
    for module, tree in _parsed_modules(modules):
        for name, node in _documented(tree, module):
            split = split_docstring(ast.get_docstring(node, clean=True) or "", min_document_chars)
            if split is None or split[0] in seen or split[1] in seen:
                continue
            seen.update(split)
            yield DocstringPair(module.split(".")[0], name, *split, source=module)


def _documented(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for child in getattr(node, "body", []):
        if isinstance(child, _DEFS):
            yield f"{prefix}.{child.name}", child
            if isinstance(child, ast.ClassDef):
                yield from _documented(child, f"{prefix}.{child.name}")


def is_heldout(module: str, heldout_share: float, seed: int = 0) -> bool:
    """Whether top-level ``module`` is held out: a stable hash of (seed, name), the same on every machine."""
    digest = hashlib.sha256(f"{seed}:{module}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < heldout_share


def write_docstring_retrieval(
    output: str | Path,
    heldout_share: float = 0.2,
    seed: int = 0,
    min_document_chars: int = 100,
    modules: Sequence[str] | None = None,
    module_documents: bool = False,
) -> DocstringRetrieval:
    """Write training pairs and a held-out retrieval task, split by top-level module (see the module doc).

    Args:
        output: directory to write (train.jsonl, heldout/retrieval/docstrings/, split.json)
        heldout_share: share of the top-level modules held out
        seed: changes which modules are held out
        min_document_chars: the shortest document (the docstring after its summary) kept
        modules: only these top-level stdlib modules (default: all)
        module_documents: also write long/retrieval/modules: the held-out queries against whole module
            documentation (one document per held-out source file; see the module doc)
    """
    if not 0 < heldout_share < 1:
        raise ValueError(f"heldout_share must be between 0 and 1, got {heldout_share}")
    output = Path(output)
    train, heldout = [], []
    for pair in iter_docstring_pairs(modules, min_document_chars):
        (heldout if is_heldout(pair.module, heldout_share, seed) else train).append(pair)
    if not train or not heldout:
        raise ValueError("the split left one side empty; change heldout_share or seed")
    lines = (json.dumps({"query": p.query, "positive": p.document}, ensure_ascii=False) for p in train)
    write_text(output / "train.jsonl", "\n".join(lines) + "\n")
    task = output / "heldout" / "retrieval" / "docstrings"
    ids = [f"{k}:{p.name}" for k, p in enumerate(heldout)]  # names may repeat
    write_text(
        task / "queries.jsonl",
        "".join(
            json.dumps({"_id": f"q:{i}", "text": p.query}, ensure_ascii=False) + "\n"
            for i, p in zip(ids, heldout)
        ),
    )
    write_text(
        task / "corpus.jsonl",
        "".join(
            json.dumps({"_id": f"d:{i}", "text": p.document}, ensure_ascii=False) + "\n"
            for i, p in zip(ids, heldout)
        ),
    )
    write_text(
        task / "qrels.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"q:{i}\td:{i}\t1\n" for i in ids)
    )
    if module_documents:
        write_module_retrieval(output / "long" / "retrieval" / "modules", heldout, ids)
    modules = {"train": sorted({p.module for p in train}), "heldout": sorted({p.module for p in heldout})}
    write_json(output / "split.json", {**modules, "heldout_share": heldout_share, "seed": seed})
    return DocstringRetrieval(output, len(train), len(heldout), modules["train"], modules["heldout"])


def iter_module_documents(modules: Sequence[str], queries: set[str]) -> Iterator[tuple[str, str]]:
    """(dotted module, its documentation) of every stdlib source file of the top-level ``modules``: the module
    docstring, then each documented object's qualified name and docstring; an object whose summary is in
    ``queries`` gives only the rest of its docstring (the query is not copied into its document)."""
    for module, tree in _parsed_modules(modules):
        entries = [_entry(module, tree)]
        for name, node in _documented(tree, module):
            split = split_docstring(ast.get_docstring(node, clean=True) or "", 0)
            queried = split is not None and split[0] in queries
            entries.append(f"{name}\n{_clean(split[1])}" if queried else _entry(name, node))
        text = "\n".join(e for e in entries if e)
        if text:
            yield module, text


def write_module_retrieval(task: Path, pairs: Sequence[DocstringPair], ids: Sequence[str]) -> None:
    """A BEIR-layout task: the ``pairs``' queries (ids ``q:<id>``) against their modules' whole documentation
    (ids ``m:<module>``, every source file of the pairs' top-level modules), one relevant document each."""
    top = sorted({p.module for p in pairs})
    documents = dict(iter_module_documents(top, {p.query for p in pairs}))
    missing = sorted({p.source for p in pairs} - set(documents))
    if missing:
        raise ValueError(f"no documentation found for the modules of some pairs: {', '.join(missing[:5])}")
    write_text(
        task / "queries.jsonl",
        "".join(
            json.dumps({"_id": f"q:{i}", "text": p.query}, ensure_ascii=False) + "\n"
            for i, p in zip(ids, pairs)
        ),
    )
    write_text(
        task / "corpus.jsonl",
        "".join(
            json.dumps({"_id": f"m:{m}", "text": text}, ensure_ascii=False) + "\n"
            for m, text in documents.items()
        ),
    )
    write_text(
        task / "qrels.tsv",
        "query-id\tcorpus-id\tscore\n" + "".join(f"q:{i}\tm:{p.source}\t1\n" for i, p in zip(ids, pairs)),
    )
