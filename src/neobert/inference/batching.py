"""How texts of given token lengths are cut into forwards: few-padding batches bounded in texts and in
padded tokens. One rule for every runner of a model: the PyTorch path (:mod:`.run`), the exports
(:class:`.onnx_encoder.OnnxEncoder`, OpenVINO's), the service's merged calls and the benchmarks that time
them. Nothing here imports torch: an export's runner stays free of it."""

from __future__ import annotations

from collections.abc import Sequence

# Padded tokens per batch when the caller gives no ``max_tokens`` and the model is on the CPU: the fastest
# setting measured (`neobert bench encode`, docs/benchmarks.md). Elsewhere only ``batch_size`` bounds a batch.
CPU_MAX_TOKENS = 4096


def token_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Cut positions into batches, longest first, each padded to its first (longest) member.

    A batch holds at most ``batch_size`` items and, when ``max_tokens`` is given, at most ``max_tokens``
    padded tokens (rows x longest length); an item longer than ``max_tokens`` gets a batch of its own.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        current = batches[-1] if batches else None
        if (
            current is None
            or len(current) >= batch_size
            or (max_tokens is not None and (len(current) + 1) * lengths[current[0]] > max_tokens)
        ):
            batches.append([i])
        else:
            current.append(i)
    return batches
