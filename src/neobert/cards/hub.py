"""Publishing a model directory on the Hugging Face Hub (``neobert push``, ``neobert pretrain --push-to``).

:func:`push` creates the repository if it is missing, a branch for a revision (``step-1000``: loadable with
``from_pretrained(repo, revision="step-1000")``, pythia-style) and uploads the folder, all through
``huggingface_hub``'s client. The token is the client's own: ``HF_TOKEN`` or the user's login (``hf auth
login``); it is never printed or logged, and any message that would contain it has it masked. An offline
machine, an unreachable endpoint or a refused token ends in one :class:`HubError` naming the cause.

:class:`BackgroundPusher` runs pushes on a thread so training never waits for the network: a failed push
is reported and retried at the next submission (and once more when the pusher closes); it never raises
into the training loop.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

TOKEN_HINT = "log in with `hf auth login` or set HF_TOKEN to a token with write access"


class HubError(RuntimeError):
    """A push failed; the message names the cause (offline, unreachable, unauthorised, refused)."""


@dataclass
class PushResult:
    repo_id: str
    revision: str  # the branch written ("main" when none was asked for)
    url: str  # the repository's page on the endpoint
    commit: str  # the commit id the endpoint returned
    files: list[str]
    seconds: float

    @property
    def summary(self) -> str:
        where = f"{self.repo_id}@{self.revision}"
        return (
            f"pushed {len(self.files)} files to {where} (commit {self.commit[:12]}) in {self.seconds:.1f}s\n"
            f"{self.url}\nload with: from_pretrained({self.repo_id!r}, revision={self.revision!r})"
        )


def endpoint() -> str:
    """The Hub the client talks to: ``HF_ENDPOINT`` when set (read now, not at import), else the public Hub."""
    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def _mask(text: str) -> str:
    token = get_token()
    return text.replace(token, "***") if token else text


def _transport_error(err: BaseException) -> bool:
    """A connection that failed or timed out (the client's HTTP library's TransportError, or the OS's)."""
    names = {cls.__name__ for cls in type(err).__mro__}
    return "TransportError" in names or isinstance(err, ConnectionError | TimeoutError)


def explain(err: BaseException, repo_id: str, where: str) -> HubError:
    """One clear error for a failed Hub call, the token masked."""
    if isinstance(err, OfflineModeIsEnabled) or constants.is_offline_mode():
        why = "offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set): unset it to push"
    elif isinstance(err, HfHubHTTPError) and err.response is not None and err.response.status_code == 401:
        why = f"not authorised (HTTP 401): no valid token; {TOKEN_HINT}"
    elif isinstance(err, HfHubHTTPError) and err.response is not None and err.response.status_code == 403:
        why = f"refused (HTTP 403): the token may not write to {repo_id}; {TOKEN_HINT}"
    elif isinstance(err, RepositoryNotFoundError):
        why = f"repository {repo_id} not found or not yours (HTTP 404); {TOKEN_HINT}"
    elif _transport_error(err):
        why = f"cannot reach {where} ({type(err).__name__}): offline, or the endpoint is down"
    elif isinstance(err, HfHubHTTPError):
        status = err.response.status_code if err.response is not None else "?"
        why = f"the Hub answered HTTP {status}: {str(err).splitlines()[0]}"
    else:
        why = f"{type(err).__name__}: {err}"
    return HubError(_mask(f"push to {repo_id} on {where} failed: {why}"))


def push(
    directory: str | os.PathLike,
    repo_id: str,
    revision: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
) -> PushResult:
    """Upload ``directory`` to ``repo_id`` (created if missing) on branch ``revision`` (created from main if
    missing; None: main).

    Args:
        directory: the model directory to upload
        repo_id: the Hub repository, OWNER/NAME
        revision: a branch to write, e.g. step-1000 (created if missing); default: main
        private: create the repository private (an existing one keeps its visibility)
        commit_message: the commit's message (default: "Upload DIRNAME with neobert")
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise HubError(f"{directory} is not a directory: push takes a model directory")
    if not (directory / "README.md").is_file():
        raise HubError(
            f"{directory} has no README.md model card; neobert writes one with every model it saves"
        )
    if not repo_id or repo_id.count("/") != 1:
        raise HubError(f"--repo-id must be OWNER/NAME, got {repo_id!r}")
    start, where = time.perf_counter(), endpoint()
    api = HfApi(endpoint=where)  # the token: HF_TOKEN or the login, resolved by the client
    files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        info = api.upload_folder(
            folder_path=str(directory),
            repo_id=repo_id,
            revision=revision,
            commit_message=commit_message or f"Upload {directory.name} with neobert",
            repo_type="model",
        )
    except HubError:
        raise
    except Exception as err:
        raise explain(err, repo_id, where) from None  # the chained traceback could show request headers
    return PushResult(repo_id, revision or "main", str(url), info.oid, files, time.perf_counter() - start)


@dataclass
class _Job:
    directory: Path
    revision: str | None
    attempts: int = 0


@dataclass
class PushReport:
    pushed: list[PushResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # revision -> the last error


class BackgroundPusher:
    """Pushes model directories to one repository on a thread, in order; training goes on meanwhile.

    :meth:`submit` returns at once. A push that fails is reported (``report`` callback, default stderr)
    and kept; it is tried again after the next push, and once more by :meth:`close`, which waits for the
    queue and returns what was pushed and what failed.
    """

    def __init__(self, repo_id: str, private: bool = False, report: Any = None, pusher: Any = push):
        self.repo_id, self.private, self.push = repo_id, private, pusher
        self.report = report or (lambda text: print(text, file=sys.stderr, flush=True))
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.retry: list[_Job] = []
        self.result = PushReport()
        self.thread = threading.Thread(target=self._work, name="neobert-push", daemon=True)
        self.thread.start()

    def submit(self, directory: str | os.PathLike, revision: str | None) -> None:
        self.jobs.put(_Job(Path(directory), revision))

    def _attempt(self, job: _Job) -> bool:
        job.attempts += 1
        name = job.revision or "main"
        try:
            done = self.push(
                job.directory,
                self.repo_id,
                revision=job.revision,
                private=self.private,
                commit_message=f"{name}: {job.directory.name} (neobert pretrain)",
            )
        except Exception as err:  # reported, kept for a retry: never into the training loop
            message = _mask(str(err))
            self.result.failed[name] = message
            self.report(f"push of {name} failed (attempt {job.attempts}; retried later): {message}")
            return False
        self.result.failed.pop(name, None)
        self.result.pushed.append(done)
        self.report(f"pushed {job.directory} to {self.repo_id}@{name}")
        return True

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            if not self._attempt(job):
                self.retry.append(job)
            else:  # the endpoint answers again: try what failed before
                self.retry = [old for old in self.retry if not self._attempt(old)]
        self.retry = [old for old in self.retry if not self._attempt(old)]  # the last chance, at close

    def close(self, timeout: float | None = None) -> PushReport:
        """Wait (up to ``timeout`` seconds) for every submitted push; what was pushed and what failed."""
        self.jobs.put(None)
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.result.failed.setdefault("(pending)", f"still uploading after {timeout} s; left to finish")
        return self.result
