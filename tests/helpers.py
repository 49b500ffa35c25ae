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


def tiny_cross_encoder(tokenizer: Any, path: Path) -> tuple[torch.nn.Module, Path]:
    """A tiny NeoBERT one-logit sequence classifier (a cross-encoder's layout, scores spread), saved."""
    from neobert import encoders

    torch.manual_seed(0)
    model = encoders.load_model("tiny", "sequence-classification", vocab_size=30522, num_labels=1)
    with torch.no_grad():
        model.classifier.weight.normal_(0, 3.0)
    return model, encoders.save_pretrained(model, tokenizer, path)


# real-length texts for int8 checks: int8 moves 1-3 token texts most (docs/model.md)
INT8_PARAGRAPHS = [
    "The tokenizer truncates at the model's maximum length and pads every row to the longest one in the "
    "batch, so a user of ONNX Runtime only feeds the two arrays it returns.",
    "Dynamic quantization stores the weights of the matrix multiplications as 8-bit integers and quantizes "
    "the activations on the fly, trading a little accuracy for speed and a smaller file.",
    "Sentence embeddings are pooled from the last hidden states, either the mean over real tokens or the "
    "first token, and optionally scaled to unit length before comparing them by cosine similarity.",
]
