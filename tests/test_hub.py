"""``neobert push`` and the background pusher, through the real ``huggingface_hub`` client against a local
stand-in of the Hub's endpoints (tests/helpers.py:FakeHub on 127.0.0.1). The real Hub is never contacted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import FakeHub
from neobert.cards.hub import BackgroundPusher, HubError, push
from neobert.cli.main import main

TOKEN = "hf_test_secret_token"
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def model_dir(tmp_path):
    """A directory as neobert writes them: config, weights (bytes), tokenizer file, card."""
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "neobert"}\n')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (root / "sub" / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (root / "README.md").write_text("---\nlibrary_name: transformers\n---\n\n# model\n")
    return root


def run_push(directory: Path, *args: str, endpoint: str, token: str | None = TOKEN, offline: str = "0"):
    """``neobert push`` in a fresh process, as a user runs it: the client reads HF_ENDPOINT and HF_TOKEN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE", "TRANSFORMERS_"))}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HUB_OFFLINE=offline,
        HF_HOME=str(directory.parent / "hf-home"),
        PYTHONPATH=SRC,
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    command = [sys.executable, "-m", "neobert.cli.main", "push", str(directory), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def hub_env(monkeypatch, model_dir):
    """This process's client pointed as run_push points a fresh one: the endpoint and token are read at each
    call (neobert.cards.hub.endpoint, huggingface_hub.get_token); offline mode is read once at import, so
    its constant is set where a test needs it."""
    for name in [n for n in os.environ if n.startswith(("HF_", "HUGGING_FACE"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HOME", str(model_dir.parent / "hf-home"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite runs offline; FakeHub is on 127.0.0.1
    return monkeypatch


def push_here(capsys, directory: Path, *args: str) -> tuple[int, str, str]:
    """``neobert push`` through the command line's own main in this process: (exit status, stdout, stderr)."""
    status = main(["push", str(directory), *args])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.slow  # 11 s
def test_push_creates_the_repo_a_branch_and_uploads_every_file(model_dir, hub_env, capsys):
    with FakeHub(TOKEN) as hub:
        done = run_push(
            model_dir, "--repo-id", "me/tiny", "--revision", "step-3", "--private", endpoint=hub.url
        )
        assert done.returncode == 0, done.stderr
        hub_env.setenv("HF_ENDPOINT", hub.url)
        status, out, err = push_here(capsys, model_dir, "--repo-id", "me/tiny", "--commit-message", "final")
        assert status == 0, err
    repo = hub.repos["me/tiny"]
    assert repo["private"] is True
    expected = {str(p.relative_to(model_dir)): p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    assert repo["branches"]["step-3"] == expected  # every file, byte for byte, on the revision's branch
    assert repo["branches"]["main"] == expected
    assert [(rev, message) for rev, message, _ in repo["commits"]] == [
        ("step-3", "Upload model with neobert"),
        ("main", "final"),
    ]
    assert "me/tiny@step-3" in done.stdout and "revision='step-3'" in done.stdout
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in hub.requests)  # the token was sent ...
    for output in (done.stdout, done.stderr, out, err):
        assert TOKEN not in output  # ... and never printed


def test_a_refused_token_an_unreachable_endpoint_and_offline_mode_each_say_so(model_dir, hub_env, capsys):
    from huggingface_hub import constants

    push = ("--repo-id", "me/tiny")
    with FakeHub(TOKEN) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        hub_env.setenv("HF_TOKEN", "hf_wrong_token_value")
        refused = push_here(capsys, model_dir, *push)
        hub_env.setenv("HF_TOKEN", TOKEN)
        hub_env.setattr(constants, "HF_HUB_OFFLINE", True)
        offline = push_here(capsys, model_dir, *push)
        hub_env.setattr(constants, "HF_HUB_OFFLINE", False)
        url = hub.url
    unreachable = push_here(capsys, model_dir, *push)  # the server has stopped
    for (status, out, err), cause in (
        (refused, "not authorised (HTTP 401)"),
        (offline, "offline mode is on"),
        (unreachable, f"cannot reach {url}"),
    ):
        assert status == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: push to me/tiny") and cause in lines[0], err
        assert "hf_wrong_token_value" not in err + out and TOKEN not in err
    assert hub.repos == {}


def test_push_refuses_what_is_not_a_model_directory_with_its_card(tmp_path, model_dir):
    with pytest.raises(HubError, match="not a directory"):
        push(tmp_path / "missing", "me/tiny")
    (model_dir / "README.md").unlink()
    with pytest.raises(HubError, match=r"no README\.md model card"):
        push(model_dir, "me/tiny")
    (model_dir / "README.md").write_text("# card\n")
    with pytest.raises(HubError, match="OWNER/NAME"):
        push(model_dir, "tiny")


def test_background_pusher_never_blocks_reports_and_retries_a_failure(tmp_path):
    gate, calls, reports = threading.Event(), [], []

    def slow_then_flaky(directory, repo_id, revision=None, **kwargs):
        gate.wait(10)  # an upload that takes as long as the test wants
        calls.append(revision)
        if calls.count("step-1") == 1 and revision == "step-1":
            raise HubError("push to me/x failed: the Hub answered HTTP 500")
        return type("Done", (), {"revision": revision or "main"})()

    pusher = BackgroundPusher("me/x", report=reports.append, pusher=slow_then_flaky)
    started = time.perf_counter()
    pusher.submit(tmp_path, "step-1")
    pusher.submit(tmp_path, "step-2")
    assert time.perf_counter() - started < 0.5  # submitting does not wait for the upload
    gate.set()
    result = pusher.close()
    assert calls == ["step-1", "step-2", "step-1"]  # the failed push was tried again after the next one
    assert [p.revision for p in result.pushed] == ["step-2", "step-1"] and result.failed == {}
    assert any("push of step-1 failed (attempt 1; retried later)" in r for r in reports)


def test_a_push_that_keeps_failing_is_reported_at_close(tmp_path):
    def down(*args, **kwargs):
        raise HubError("push to me/x on http://127.0.0.1:9 failed: cannot reach it")

    reports = []
    pusher = BackgroundPusher("me/x", report=reports.append, pusher=down)
    pusher.submit(tmp_path, "step-5")
    result = pusher.close()
    assert result.pushed == [] and "cannot reach" in result.failed["step-5"]
    assert len(reports) == 2  # the first attempt and the last one, at close
