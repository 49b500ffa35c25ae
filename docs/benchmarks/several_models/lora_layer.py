"""Where a mixed-adapter forward's time goes, one layer at a time (issue 39): NeoBERT 250M's four adapted
layers (qkv, wo, w12, w3) on ``--tokens`` tokens spread evenly over ``--adapters`` adapters of rank
``--rank``, fp32, ``--threads`` threads. Per layer, microseconds per call, the best warm timing of
``--rounds`` interleaved rounds (:func:`neobert.runtime.hardware.warm_best`, each timing ``--calls`` calls):

* ``base``: the layer alone (``F.linear``);
* ``per adapter``: what the service runs (:func:`neobert.inference.kinds.adapter.route_rows`): for each
  adapter, its rows' ``x A^T`` and ``out += s (x A^T) B^T`` in place;
* ``stacked A``: every adapter's A in one matrix, one ``x [A_1; ...; A_n]^T`` for all rows, then each
  adapter's columns times its B (one product fewer per adapter, n times the A arithmetic);
* ``per adapter, 1 thread``: the adapters' small products on one thread (no fork and join per product).

The last row is each way's adapters' cost as a share of the base layers'. Ratios only: the machine may be
shared, and the best of several rounds is what a shared machine least disturbs.

    python docs/benchmarks/several_models/lora_layer.py
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from neobert.common.tables import markdown_table
from neobert.runtime.hardware import machine_summary, warm_best

SHAPES = {"qkv": (768, 2304), "wo": (768, 768), "w12": (768, 6144), "w3": (3072, 768)}  # (in, out), 250M


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokens", type=int, default=128
    )  # a service call: 8 one-text requests of ~16 tokens
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=40)
    a = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    n, r, share = a.adapters, a.rank, a.tokens // a.adapters
    runs = [(j, j * share, (j + 1) * share) for j in range(n)]
    ways = list(WAYS)
    rows, totals = [], dict.fromkeys(ways, 0.0)
    for name, (width_in, width_out) in SHAPES.items():
        best = layer_times(width_in, width_out, runs, a)
        rows.append([name, *(best[w] for w in ways)])
        for way in ways:
            totals[way] += best[way]
    rows.append(["all four", *(totals[w] for w in ways)])
    rows.append(["adapters / base", "", *(f"{totals[w] / totals['base']:.3f}" for w in ways[1:])])
    print(
        f"{a.tokens} tokens over {n} adapters of rank {r}, fp32, {a.threads} threads; {machine_summary()}\n"
    )
    print(markdown_table(["layer (us per call)", *ways], rows, digits=0))


WAYS = ("base", "per adapter", "stacked A", "per adapter, 1 thread")


def layer_times(width_in: int, width_out: int, runs: list, a: argparse.Namespace) -> dict[str, float]:
    """Microseconds per call of each way on one layer shape (the best over the rounds)."""
    r = a.rank
    x, weight = torch.randn(a.tokens, width_in), torch.randn(width_out, width_in) / width_in**0.5
    lora_a = [torch.randn(r, width_in) for _ in runs]
    lora_b = [torch.randn(width_out, r) for _ in runs]
    stacked = torch.cat(lora_a)
    out = F.linear(x, weight)

    def per_adapter() -> None:
        for j, start, stop in runs:
            low = F.linear(x[start:stop], lora_a[j])
            out[start:stop].addmm_(low, lora_b[j].t(), alpha=2.0)

    def stacked_a() -> None:
        lows = x @ stacked.t()
        for j, start, stop in runs:
            out[start:stop].addmm_(lows[start:stop, j * r : (j + 1) * r], lora_b[j].t(), alpha=2.0)

    def one_thread() -> None:
        torch.set_num_threads(1)
        per_adapter()
        torch.set_num_threads(a.threads)

    calls = dict(zip(WAYS, (lambda: F.linear(x, weight), per_adapter, stacked_a, one_thread)))
    best = dict.fromkeys(WAYS, float("inf"))
    with torch.inference_mode():
        for _ in range(a.rounds):
            for way, call in calls.items():
                best[way] = min(best[way], warm_best(_timed(call, a.calls)).seconds / a.calls * 1e6)
    return best


def _timed(call, count: int):
    def timed() -> float:
        start = time.perf_counter()
        for _ in range(count):
            call()
        return time.perf_counter() - start

    return timed


if __name__ == "__main__":
    main()
