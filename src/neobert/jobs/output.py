"""A batch job's output directory and its manifest: opened new or resumed, a piece recorded as it finishes,
marked complete at the end. The one scaffolding of every job (``neobert embed``'s ``_manifest.json``,
``neobert data prepare``'s ``manifest.json``: each job keeps the name its earlier outputs have on disk).

The manifest is replaced atomically (:func:`neobert.common.io.write_json`) after every change, and a piece is
recorded only after its files are in place, so a killed job leaves a manifest that names finished pieces only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..common.io import LOCK, clean_temporaries, write_json
from ..data.readers import DataError


class JobOutput:
    """``directory``'s manifest ``name`` of format ``format``; ``key``: what orders the recorded pieces."""

    def __init__(self, directory: str | Path, name: str, format: str, key: str = "index"):
        self.directory, self.name, self.format, self.key = Path(directory), name, format, key
        self.manifest: dict[str, Any] = {}

    @property
    def path(self) -> Path:
        return self.directory / self.name

    def open(
        self,
        new: Callable[[], dict],
        check: Callable[[dict], None],
        overwrite: bool = False,
        remove: Callable[[], None] | None = None,
    ) -> dict:
        """The manifest of an earlier run (``check`` raises when its settings differ), or ``new()``'s, written
        into a directory that is missing or empty. ``overwrite``: ``remove()`` the earlier output first."""
        if self.path.is_file() and overwrite and remove is not None:
            remove()
        if self.path.is_file():
            manifest = json.loads(self.path.read_text(encoding="utf-8"))
            if manifest.get("format") != self.format:
                raise DataError(
                    f"{self.path} is not a {self.format} manifest; choose another output directory"
                )
            check(manifest)
            clean_temporaries(self.directory)  # what a killed run was writing
            self.manifest = manifest
            return manifest
        if self.directory.exists() and any(p.name != LOCK for p in self.directory.iterdir()):
            raise DataError(
                f"{self.directory} is not empty and holds no {self.name}; refusing to write into it"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manifest = {"format": self.format, **new(), "complete": False, "shards": []}
        self.save()
        return self.manifest

    def finished(self) -> dict[Any, dict]:
        """The pieces recorded so far, by key."""
        return {s[self.key]: s for s in self.manifest["shards"]}

    def piece_finished(self, record: dict) -> None:
        """Record one piece (its files already in place), replacing an earlier record of the same key."""
        kept = [s for s in self.manifest["shards"] if s[self.key] != record[self.key]]
        self.manifest["shards"] = sorted([*kept, record], key=lambda s: s[self.key])
        self.save()

    def complete(self, **fields: Any) -> dict:
        """Mark the job complete, with ``fields`` (totals, reader counts, ...) laid over the manifest."""
        self.manifest.update(complete=True, **fields)
        self.save()
        return self.manifest

    def save(self) -> None:
        write_json(self.path, self.manifest)
