"""The one atomic writer: files and directories appear whole or not at all.

Everything the package writes for a reader (models, tokenizers, checkpoints, shards, result tables,
embeddings) goes through :func:`atomic_file` or :func:`atomic_dir`: the content is built under a temporary
name beside the target and renamed into place only once complete, so a reader, or a crash at any moment,
sees either the previous content whole or the new one whole. Temporaries start with ``.tmp-``; a leftover
one (after a SIGKILL) is ignored by readers and removed by :func:`clean_temporaries`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "w", durable: bool = False, **open_kw: Any
) -> Iterator[Any]:
    """Open a temporary file beside ``path`` for writing; on success it replaces ``path``.

    ``mode`` is ``"w"`` (text, UTF-8 unless ``encoding`` is given) or ``"wb"``. ``durable`` also fsyncs the
    file and its directory (checkpoints), so the rename survives a power loss. On an exception the
    temporary is removed and ``path`` is untouched.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "w":
        open_kw.setdefault("encoding", "utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}.")
    try:
        with os.fdopen(fd, mode, **open_kw) as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str, durable: bool = False) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` atomically."""
    with atomic_file(path, durable=durable, newline="\n") as handle:
        handle.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, data: Any, durable: bool = False, **dumps_kw: Any) -> Path:
    """Write ``data`` as indented JSON (``dumps_kw`` go to :func:`json.dumps`) atomically."""
    dumps_kw.setdefault("indent", 2)
    return write_text(path, json.dumps(data, **dumps_kw) + "\n", durable=durable)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, durable: bool = False) -> Iterator[Path]:
    """A fresh temporary directory beside ``path`` to fill; on success it replaces ``path`` whole.

    An existing ``path`` is first renamed aside and removed only after the new one is in place, so at every
    moment ``path`` is either the old directory or the new one. On an exception the temporary is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}."))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp creates 0700; give the usual permissions
        if durable:
            fsync_dir(tmp)
        replace_dir(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_dir(build: Callable[[Path], Any], path: str | os.PathLike, durable: bool = False) -> Path:
    """Fill a directory with ``build(tmp_dir)`` and move it to ``path`` only if that succeeds."""
    with atomic_dir(path, durable=durable) as tmp:
        build(tmp)
    return Path(path)


def replace_dir(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move directory ``source`` to ``target``, replacing an existing ``target`` (renamed aside first)."""
    source, target = Path(source), Path(target)
    old = None
    if target.exists():
        old = target.with_name(f"{TMP_PREFIX}old-{target.name}.{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(source, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def move_into(built: str | os.PathLike, output: str | os.PathLike) -> None:
    """Move every entry of directory ``built`` into ``output``, each replacing its old version whole (files
    already in ``output`` that ``built`` lacks stay)."""
    for entry in Path(built).iterdir():
        if entry.is_dir():
            replace_dir(entry, Path(output) / entry.name)
        else:
            os.replace(entry, Path(output) / entry.name)


def clean_temporaries(directory: str | os.PathLike) -> None:
    """Remove what an interrupted :func:`atomic_file` / :func:`atomic_dir` left in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.name.startswith(TMP_PREFIX):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


# -- one writer per output directory -------------------------------------------------------------------------

LOCK = "_lock.json"  # "_": parquet readers skip it, as they skip a job's _manifest.json


class OutputLocked(ValueError):
    """Another job is writing the output directory (the message names it)."""


def _process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, Linux), so that a reused pid is not taken for its
    predecessor; None where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _gone(holder: dict, host: str) -> bool:
    """Whether the job ``holder`` names has ended: known only for a job of this host."""
    if not isinstance(holder, dict) or not holder.get("pid"):
        return True  # an empty or unreadable lock: its writer died before writing it
    if holder.get("host") != host:
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    started = _process_start(int(holder["pid"]))
    return started is not None and holder.get("process_start") not in (None, started)


def _parse(raw: bytes) -> dict:
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _describe(holder: dict, path: Path) -> str:
    if not isinstance(holder, dict):
        return f"see {path}"
    return f"host {holder.get('host')}, pid {holder.get('pid')}, started {holder.get('since')}"


def _try_lock(path: Path, me: dict) -> tuple[int | None, dict | None]:
    """(a descriptor holding the lock, None), or (None, the holder) when another job holds it."""
    import fcntl

    try:  # not an output: the lock's own file, written in place
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the holder removed the directory it had created as it finished: make it again
        return None, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live job on this host (or a shared NFS lock)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise FileNotFoundError  # the holder removed the file as it finished: try the new one
        holder = _parse(os.pread(fd, 1 << 16, 0))
        if not _gone(holder, me["host"]):
            os.close(fd)  # a job on another host (whose lock this filesystem does not share), still named
            return None, holder
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        return fd, None
    except BlockingIOError:
        os.close(fd)
        with contextlib.suppress(OSError):
            return None, _parse(path.read_bytes())
        return None, {}
    except FileNotFoundError:
        os.close(fd)
        return None, None


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike, wait: bool = False, poll: float = 1.0) -> Iterator[dict]:
    """Hold ``directory`` (created if missing) for one job: a second job refuses naming the first (host, pid,
    start time), or with ``wait`` waits for it. A lock left by a job that died (a SIGKILL) is taken over:
    the kernel released its flock, and its pid is gone on this host. The lock file is removed at the end,
    and the directory too if this call created it and nothing else was written."""
    import socket
    import time

    directory, created = Path(directory), False
    path = directory / LOCK
    me = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": _process_start(os.getpid()),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    while True:
        if not directory.is_dir():  # missing, or removed by a job that created it and wrote nothing
            directory.mkdir(parents=True, exist_ok=True)
            created = True
        fd, holder = _try_lock(path, me)
        if fd is not None:
            break
        if holder is not None and not wait:
            raise OutputLocked(
                f"{directory} is being written by another job ({_describe(holder, path)}); wait for it with "
                f"--wait, or use another output directory (if that job is gone, remove {path})"
            )
        time.sleep(poll if holder is not None else 0)
    try:
        yield me
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)  # releases the flock
        if created and not any(directory.iterdir()):
            directory.rmdir()
