"""Strict checks on what a checkpoint load actually matched."""

from __future__ import annotations

from typing import Any

# Task heads that a load may legitimately leave missing (a fresh head for fine-tuning) or find unused
# (e.g. the MLM decoder when loading the bare encoder).
HEAD_PREFIXES = ("decoder.", "dense.", "classifier.")


class CheckpointError(ValueError):
    """A checkpoint does not match the model it is loaded into."""


def _is_head(key: str) -> bool:
    return key.startswith(HEAD_PREFIXES)


def check_loading_info(
    model: Any, info: dict[str, Any], source: str, ignore_mismatched_sizes: bool = False
) -> None:
    """Raise :class:`CheckpointError` listing encoder tensors that are missing, unexpected or wrongly shaped.

    ``info`` is transformers' loading info. A missing classification head is allowed (it is freshly
    initialised for fine-tuning); a missing MLM decoder is not, since the logits would be random.
    """
    missing = sorted(k for k in info.get("missing_keys", ()) if not _is_head(k) or k.startswith("decoder."))
    unexpected = sorted(k for k in info.get("unexpected_keys", ()) if not _is_head(k))
    mismatched = list(info.get("mismatched_keys", ()))
    if ignore_mismatched_sizes:
        mismatched = [m for m in mismatched if not _is_head(m[0])]
    if not (missing or unexpected or mismatched):
        return
    lines = [f"checkpoint {source} does not match {type(model).__name__} with its config:"]
    if missing:
        lines.append(f"  missing tensors ({len(missing)}): {_listing(missing)}")
    if unexpected:
        lines.append(f"  unexpected tensors ({len(unexpected)}): {_listing(unexpected)}")
    if mismatched:
        shapes = [f"{key} checkpoint {tuple(a)} vs model {tuple(b)}" for key, a, b in mismatched]
        lines.append(f"  wrongly shaped tensors ({len(shapes)}): {_listing(shapes)}")
    raise CheckpointError("\n".join(lines))


def _listing(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... and {len(items) - limit} more" if len(items) > limit else "")
