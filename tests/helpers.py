"""Helpers shared by several test modules (fixtures live in conftest.py; tiny encoders in embedding_fixtures.py).

A test module imports from here, never from another test module.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from neobert.model.rope import rotate_pairs
from neobert.training.config import PretrainConfig


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of the last dimension by the angles whose cosine and sine are given (cos, sin
    broadcastable to (..., D/2)): the model's :func:`rotate_pairs` spelled with separate tables."""
    return rotate_pairs(x, torch.stack((cos, sin), dim=-1))


POSITIVE = {"great": 5.0, "excellent": 4.5, "wonderful": 4.0, "good": 3.5}


NEGATIVE = {"awful": 0.0, "terrible": 0.5, "horrible": 1.0, "bad": 1.5}


SUBJECTS = ["the movie", "this film", "the plot", "the acting", "the show"]


def sentiment_rows(n: int, seed: int) -> list[dict]:
    """'<subject> was <word>': the word decides the class (and the regression target)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        positive = rng.random() < 0.5
        word = rng.choice(list(POSITIVE if positive else NEGATIVE))
        rows.append(
            {
                "text": f"{rng.choice(SUBJECTS)} was {word}",
                "label": "pos" if positive else "neg",
                "score": {**POSITIVE, **NEGATIVE}[word],
            }
        )
    return rows


ANIMALS = [
    "cat",
    "dog",
    "horse",
    "sheep",
    "goat",
    "mouse",
    "eagle",
    "shark",
    "whale",
    "tiger",
    "lion",
    "zebra",
]


COLORS = [
    "red",
    "blue",
    "green",
    "yellow",
    "purple",
    "orange",
    "black",
    "white",
    "pink",
    "brown",
    "grey",
    "gold",
]


def write_pairs(tmp_path):
    animals, colors = tmp_path / "animals.jsonl", tmp_path / "colors.jsonl"
    with animals.open("w", encoding="utf-8") as f:
        for i, a in enumerate(ANIMALS):
            negative = ANIMALS[(i + 1) % len(ANIMALS)]
            f.write(
                json.dumps(
                    {
                        "query": f"the sound of a {a}",
                        "positive": f"a {a} makes a noise",
                        "negatives": [f"a {negative} sleeps"],
                    }
                )
                + "\n"
            )
    with colors.open("w", encoding="utf-8") as f:
        for c in COLORS:
            f.write(json.dumps({"query": f"paint it {c}", "positive": f"a {c} wall"}) + "\n")
    return animals, colors


def tiny_pretrain_config(data: Path, output: Path, **changes) -> PretrainConfig:
    base = {
        "preset": "tiny",
        "model": {"vocab_size": 400, "max_length": 64},
        "data": {"paths": [str(data)], "seq_len": 32},
        "optim": {"lr": 3e-3},
        "schedule": {"warmup_steps": 2},
        "tokens_per_step": 256,
        "micro_batch_size": 4,
        "max_steps": 6,
        "precision": "fp32",
        "device": "cpu",  # the multi-process comparisons run CPU processes over gloo; so does the reference
        "log_every": 1,
        "eval_every": 3,
        "eval_batches": 2,
        "save_every": 2,
        "output": str(output),
    }
    config = PretrainConfig.from_dict(base)
    return config.override(**changes) if changes else config


# a corpus of one sentence's rotations: tiny, yet every pretraining test's tokenizer and data come from it
WORDS = ["parse", "the", "json", "file", "and", "write", "paths", "to", "the", "log", "of", "each", "module"]


def rotations(count: int = 200, repeat: bool = False) -> str:
    """``count`` documents, each the sentence rotated (with ``repeat``, its head repeated up to three times)."""
    return "\n\n".join(
        " ".join(WORDS[i % 7 :] + WORDS[: i % 7] * ((1 + i % 3) if repeat else 1)) for i in range(count)
    )


def prepared_corpus(corpus: Path, root: Path) -> Path:
    """``corpus`` through a 400-entry WordPiece vocabulary trained on it (root/tokenizer) into root/data,
    a fifth held out for validation."""
    from neobert.data import train_tokenizer
    from neobert.jobs.prepare import PrepareConfig, prepare

    tokenizer = train_tokenizer([corpus], "wordpiece", 400, root / "tokenizer").output_dir
    config = PrepareConfig(
        inputs=[str(corpus)],
        tokenizer=str(tokenizer),
        output=str(root / "data"),
        validation_fraction=0.2,
        progress=False,
    )
    prepare(config)
    return root / "data"


def logged_losses(output: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train/loss"] for r in records if "train/loss" in r}


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


class Crash(RuntimeError):
    pass


def crash_at(step: int):
    def hook(done: int, metrics: dict) -> None:
        if done == step:
            raise Crash(f"crashed after step {done}")

    return hook


def assert_same_weights(a: Path, b: Path, tol: float = 1e-6) -> None:
    ref, got = load_file(a), load_file(b)
    assert sorted(ref) == sorted(got)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=tol, atol=tol)


def assert_resumes_exactly(run, config, steps: int, weights=("model.safetensors",)):
    """A training ``run`` of ``config(name, **changes)`` crashed after step 3 and resumed ends where the
    uncrashed run ends: the same ``steps``, losses and ``weights`` files; its resume state is gone. Returns
    (uncrashed, resumed)."""
    import pytest

    reference = run(config("reference"))
    with pytest.raises(Crash):
        run(config("crashed"), on_step_end=crash_at(3))
    resumed = run(config("crashed", resume=True))
    assert resumed.steps == steps and resumed.losses == pytest.approx(reference.losses, rel=1e-5, abs=1e-6)
    for name in weights:
        assert_same_weights(reference.output / name, resumed.output / name, 1e-5)
    assert not (resumed.output / "checkpoints").exists()
    return reference, resumed


def run_script(tmp_path: Path, source: str, args: list[str], launcher: list[str] | None = None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")
    }
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")  # CPU processes (gloo)
    return subprocess.run(
        [sys.executable, *(launcher or []), str(script), *args], env=env, capture_output=True, timeout=600
    )


def torchrun() -> list[str]:
    return ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port()]


# --- the HTTP service ---------------------------------------------------------------------------------

KEY = "test-key-7f3a"  # the API key of the tests' servers that require one


def call(url: str, method: str, path: str, body=None, key: str | None = KEY, headers=None):
    """(status, parsed JSON or text, headers) of one request."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=sent)
        response = conn.getresponse()
        text = response.read().decode()
        got = {name.lower(): value for name, value in response.getheaders()}
        is_json = got.get("content-type", "").startswith("application/json")
        return response.status, json.loads(text) if is_json else text, got
    finally:
        conn.close()


def serve(model, **settings) -> Any:
    """A BackgroundServer (a context manager) of ``model`` in a thread of this process, fp32 unless told."""
    from neobert.serving import ServeConfig
    from neobert.serving.server import BackgroundServer
    from neobert.serving.service import Service

    settings.setdefault("model_process", False)
    return BackgroundServer(Service.load(ServeConfig(model=str(model), **{"precision": "fp32", **settings})))


def st_encode(directory, texts, normalize=False) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directory), device="cpu")
    return model.encode(texts, convert_to_numpy=True, normalize_embeddings=normalize)


def tiny_classifier(
    tokenizer: Any, path: Path, labels: dict[int, str] | None = None
) -> tuple[torch.nn.Module, Path]:
    """A tiny NeoBERT sequence classifier with spread scores, saved: one logit (a cross-encoder's layout)
    without ``labels``, else one per label (``{id: name}``)."""
    from neobert.inference import encoders

    torch.manual_seed(0)
    names = {} if labels is None else dict(id2label=labels, label2id={v: k for k, v in labels.items()})
    model = encoders.load_model(
        "tiny", "sequence-classification", vocab_size=30522, num_labels=len(labels or [0]), **names
    )
    with torch.no_grad():
        model.classifier.weight.normal_(0, 3.0)
    return model.eval(), encoders.save_pretrained(model, tokenizer, path)


# real-length texts for int8 checks: int8 moves 1-3 token texts most (docs/model.md)
INT8_PARAGRAPHS = [
    "The tokenizer truncates at the model's maximum length and pads every row to the longest one in the "
    "batch, so a user of ONNX Runtime only feeds the two arrays it returns.",
    "Dynamic quantization stores the weights of the matrix multiplications as 8-bit integers and quantizes "
    "the activations on the fly, trading a little accuracy for speed and a smaller file.",
    "Sentence embeddings are pooled from the last hidden states, either the mean over real tokens or the "
    "first token, and optionally scaled to unit length before comparing them by cosine similarity.",
]


class FakeHub:
    """A local stand-in for the few Hub endpoints ``huggingface_hub``'s ``create_repo``, ``create_branch`` and
    ``upload_folder`` call (read from huggingface_hub's hf_api.py and _commit_api.py): ``POST
    /api/repos/create``, ``/api/models/{repo}/branch/{name}``, ``/api/models/{repo}/preupload/{revision}``
    (every file "regular": its content comes base64-encoded inside the commit) and
    ``/api/models/{repo}/commit/{revision}`` (NDJSON), and ``/api/validate-yaml`` (the card's front matter
    must be a YAML mapping). It stores what it receives per repository and branch,
    answers 401 to any other token than ``token``, and fails the first ``fail_commits`` commits with HTTP 400.
    Serves on 127.0.0.1 from a thread; use it as a context manager (it stops itself)."""

    def __init__(self, token: str = "hf_test_secret_token", fail_commits: int = 0):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.token, self.fail_commits = token, fail_commits
        self.repos: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Authorization header)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.requests.append(("POST", self.path, self.headers.get("Authorization", "")))
                status, answer = hub.answer(self.path.split("?")[0], body, self.headers.get("Authorization"))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                hub.requests.append(("GET", self.path, self.headers.get("Authorization", "")))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, body: bytes, auth: str | None) -> tuple[int, dict]:
        import base64
        import hashlib
        from urllib.parse import unquote

        if auth != f"Bearer {self.token}":
            return 401, {"error": "Invalid credentials in Authorization header"}
        if path == "/api/repos/create":
            request = json.loads(body)
            repo_id = f"{request['organization']}/{request['name']}"
            if repo_id in self.repos:
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}
            self.repos[repo_id] = {
                "private": request.get("visibility") == "private",
                "branches": {"main": {}},
                "commits": [],
            }
            return 200, {"url": f"{self.url}/{repo_id}"}
        if path == "/api/validate-yaml":  # upload_folder checks README.md's front matter first
            import yaml

            content = json.loads(body)["content"]
            front = content.split("---\n")[1] if content.startswith("---\n") else ""
            if not isinstance(yaml.safe_load(front) if front else {}, dict):
                return 400, {"errors": [{"message": "front matter is not a mapping"}], "warnings": []}
            return 200, {"errors": [], "warnings": []}
        parts = path.split("/")  # "", api, models, owner, name, action, revision
        if len(parts) != 7 or parts[:3] != ["", "api", "models"]:
            return 404, {"error": f"no such endpoint {path}"}
        repo_id, action, revision = f"{parts[3]}/{parts[4]}", parts[5], unquote(parts[6])
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, {"error": "Repository not found"}
        if action == "branch":
            if revision in repo["branches"]:
                return 409, {"error": "Branch already exists"}
            start = json.loads(body or b"{}").get("startingPoint") or "main"
            repo["branches"][revision] = dict(repo["branches"][start])
            return 200, {}
        if revision not in repo["branches"]:
            return 404, {"error": f"Invalid rev id: {revision}"}
        if action == "preupload":
            files = json.loads(body)["files"]
            return 200, {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                    for f in files
                ]
            }
        if action == "commit":
            if self.fail_commits > 0:
                self.fail_commits -= 1
                return 400, {"error": "planted failure"}
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            for line in lines:
                if line["key"] == "file":
                    repo["branches"][revision][line["value"]["path"]] = base64.b64decode(
                        line["value"]["content"]
                    )
            oid = hashlib.sha1(body).hexdigest()
            repo["commits"].append((revision, lines[0]["value"]["summary"], oid))
            return 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid}
        return 404, {"error": f"no such action {action}"}


def check_card(directory: Path, pipeline: str, library: str = "transformers"):
    """Load ``directory``'s README.md with huggingface_hub's parser and check what every card carries: the
    pipeline tag, the library, the neobert tag, a model-index whose body table shows exactly its values."""
    import re

    from huggingface_hub import ModelCard

    card = ModelCard.load(Path(directory) / "README.md")
    assert card.data.pipeline_tag == pipeline
    assert card.data.library_name == library
    assert "neobert" in card.data.tags and pipeline in card.data.tags
    table = card.text.split("<!-- neobert:results -->")[1].split("<!-- /neobert:results -->")[0]
    rows = [line.split(" | ") for line in table.strip().splitlines()[2:] if line.startswith("| ")]
    shown = sorted((r[3], r[4]) for r in rows)
    expected = sorted((e.metric_type, f"{float(e.metric_value):.4f}") for e in card.data.eval_results or [])
    assert shown == expected
    assert "## Citation" in card.text and re.search(r"@article\{lebreton2025neobert", card.text)
    return card


def run_card_snippet(directory: Path, timeout: int = 240) -> tuple[str, str]:
    """Run the card's first Python snippet in a fresh process inside ``directory`` (as its ``path = "."``
    says); (what it printed last, what the card says it prints)."""
    import re

    text = (Path(directory) / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)\n```", text, re.DOTALL).group(1)
    documented = re.search(r"```\n\nprints `([^`]*)`", text).group(1)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=directory, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1], documented


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


ANIMAL_SOUNDS = {
    "cat": "meow",
    "dog": "woof",
    "horse": "neigh",
    "sheep": "baa",
    "goat": "bleat",
    "mouse": "squeak",
    "owl": "hoot",
    "snake": "hiss",
    "bee": "buzz",
    "lion": "roar",
    "duck": "quack",
    "cow": "moo",
}


def write_tasks_dir(root):
    """One small task of each family of `neobert eval embeddings` under ``root`` (docs/evaluation.md's shapes)."""
    write_jsonl(
        root / "sts" / "mini-sts.jsonl",
        [
            {"sentence1": "a cat sleeps", "sentence2": "a cat is sleeping", "score": 5},
            {"sentence1": "a dog runs", "sentence2": "the stock market fell", "score": 0},
            {"sentence1": "it rains", "sentence2": "rain is falling", "score": 4},
        ],
    )
    write_jsonl(
        root / "pair_classification" / "dups.jsonl",
        [
            {"sentence1": "how to cook rice", "sentence2": "cooking rice", "label": 1},
            {"sentence1": "how to cook rice", "sentence2": "car repair", "label": 0},
            {"sentence1": "best tea", "sentence2": "good tea", "label": 1},
        ],
    )
    write_jsonl(
        root / "clustering" / "topics.jsonl",
        [{"text": f"{w} text", "label": w[0]} for w in ["apple", "avocado", "bread", "bagel"]],
    )
    write_jsonl(
        root / "classification" / "sentiment" / "train.jsonl",
        [
            {"text": "great movie", "label": "pos"},
            {"text": "awful film", "label": "neg"},
            {"text": "loved it", "label": "pos"},
            {"text": "hated it", "label": "neg"},
        ],
    )
    write_jsonl(
        root / "classification" / "sentiment" / "test.jsonl",
        [
            {"text": "great film", "label": "pos"},
            {"text": "meh", "label": "neutral"},
        ],
    )
    retrieval = root / "retrieval" / "animals"
    write_jsonl(
        retrieval / "queries.jsonl",
        [{"_id": f"q{i}", "text": f"the sound of a {a}"} for i, a in enumerate(ANIMAL_SOUNDS)],
    )
    write_jsonl(
        retrieval / "corpus.jsonl",
        [
            {"_id": f"d{i}", "title": "sound", "text": f"it goes {ANIMAL_SOUNDS[a]} all day"}
            for i, a in enumerate(ANIMAL_SOUNDS)
        ],
    )
    (retrieval / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(len(ANIMAL_SOUNDS))),
        encoding="utf-8",
    )
    return root


NAMES = ["john", "mary", "alice", "peter", "susan", "george", "linda", "robert"]
SURNAMES = ["smith", "jones", "brown", "taylor"]
CITIES = ["paris", "london", "berlin", "madrid", "rome", "vienna"]
FILLER = ["the", "a", "visited", "saw", "today", "and", "then", "quickly", "went", "to", "from", "with"]


def synthetic_ner(n: int, seed: int) -> list[dict]:
    """Sentences of filler words, names (B-PER, sometimes with a surname: I-PER) and cities (B-LOC)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(int(rng.integers(3, 9))):
            kind = rng.random()
            if kind < 0.25:
                tokens.append(str(rng.choice(NAMES)))
                tags.append("B-PER")
                if rng.random() < 0.5:
                    tokens.append(str(rng.choice(SURNAMES)))
                    tags.append("I-PER")
            elif kind < 0.45:
                tokens.append(str(rng.choice(CITIES)))
                tags.append("B-LOC")
            else:
                tokens.append(str(rng.choice(FILLER)))
                tags.append("O")
        rows.append({"tokens": tokens, "tags": tags})
    return rows


def write_conll(path, rows) -> None:
    path.write_text(
        "".join("".join(f"{t} {g}\n" for t, g in zip(r["tokens"], r["tags"])) + "\n" for r in rows)
    )


def gate(service) -> threading.Event:
    """Hold every model call until the returned event is set (so requests pile up deterministically)."""
    release, entered = threading.Event(), threading.Event()
    release.entered = entered
    run = service.batcher._run

    def held(key, texts):
        entered.set()
        release.wait(30)
        return run(key, texts)

    service.batcher._run = held
    return release


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
