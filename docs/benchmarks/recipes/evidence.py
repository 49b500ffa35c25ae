"""Laptop-scale evidence for the recipes of NeoBERT's successors (issue 34, item 7).

The embedded default run's corpus (stdlib docstrings) and tokenizer, the ``tiny`` preset (2 x 64; the
default's 4 x 128 ran at ~750 tokens/s on the shared 2-core Xeon, too slow for 15 runs), each arm at equal
tokens (the same steps of 1,024 tokens, 128-token rows), three seeds each, validation loss at a fixed 15% masking rate for
every arm so the losses compare:

- ``cosine``: the default's schedule (warmup, cosine to 10% at 90% of the steps), AdamW, 20% masking;
- ``wsd``: warmup-stable-decay, the last 20% of the steps a 1-sqrt decay to 0;
- ``branch``: a decay of 1/3 of the steps branched (``decay_from``) from ``wsd``'s stable checkpoint at 2/3
  of the steps: the same tokens, decayed longer, and the stable run paid for once;
- ``mask30-15``: ``cosine`` with the masking rate moving linearly from 30% to 15%;
- ``muon``: ``cosine`` with Muon for the hidden matrices (AdamW for the rest, same lr: match_rms_adamw).

    PYTHONPATH=src nice python docs/benchmarks/recipes/evidence.py --work runs/recipes-evidence --steps 1000
    PYTHONPATH=src python docs/benchmarks/recipes/evidence.py --work runs/recipes-evidence --report-only

Runs accumulate in WORK/results.json (a run done is skipped); the report (results.json, results.md,
results.png) goes to --output (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from neobert.common.io import write_json, write_text
from neobert.common.tables import markdown_table
from neobert.data import write_stdlib_corpus
from neobert.jobs.prepare import PrepareConfig, prepare
from neobert.recipes.default_run import default_config, shipped_tokenizer
from neobert.training.config import PretrainConfig
from neobert.training.mlm_task import pretrain

HERE = Path(__file__).resolve().parent
ARMS = ("cosine", "wsd", "branch", "mask30-15", "muon")
PANELS = {"schedule": ("cosine", "wsd", "branch"), "masking": ("cosine", "mask30-15"),
          "optimizer": ("cosine", "muon")}  # fmt: skip


def arm_changes(arm: str, steps: int, work: Path, seed: int) -> dict:
    """Settings of ``arm`` on top of the default run's."""
    wsd = {"schedule.kind": "wsd", "schedule.final_ratio": 0.0, "schedule.decay_shape": "1-sqrt"}
    if arm == "wsd":
        return {**wsd, "schedule.decay_steps": steps // 5}
    if arm == "branch":
        stable = 2 * steps // 3
        return {**wsd, "schedule.decay_steps": steps - stable,
                "decay_from": str(work / f"wsd-s{seed}" / "checkpoints" / f"step-{stable:08d}")}  # fmt: skip
    if arm == "mask30-15":
        return {"data.mask_rate": 0.3, "data.mask_rate_end": 0.15}
    if arm == "muon":
        return {"optim.name": "muon"}
    return {}


def run_arm(arm: str, seed: int, steps: int, work: Path, data: Path) -> dict:
    base = {"seed": seed, "max_steps": steps, "schedule.warmup_steps": steps // 10, "eval_every": steps // 8,
            "eval_batches": 8, "save_every": steps // 3, "keep_last": 10, "max_minutes": None,
            "data.eval_mask_rate": 0.15, "data.paths": [str(data)], "output": str(work / f"{arm}-s{seed}"),
            "report_to": [], "precision": "fp32", "tokens_per_step": 1024, "micro_batch_size": 8,
            "optim.lr": 2e-3}  # fmt: skip
    tiny = {**default_config().to_dict(), "preset": "tiny", "model": {"max_length": 128}}
    config = PretrainConfig.from_dict(tiny).override(**{**base, **arm_changes(arm, steps, work, seed)})
    started = time.perf_counter()
    result = pretrain(config, progress_bar=False)
    curve = {r["step"]: r["val/loss"] for r in result.history if "val/loss" in r}
    return {"arm": arm, "seed": seed, "steps": result.steps, "tokens": result.tokens_seen,
            "val_loss": result.val_loss, "curve": curve, "seconds": time.perf_counter() - started}  # fmt: skip


def prepared_data(work: Path) -> Path:
    corpus = work / "corpus.txt"
    if not corpus.is_file():
        write_stdlib_corpus(corpus)
    tokenizer = shipped_tokenizer(work / "tokenizer")
    prepare(PrepareConfig(inputs=[str(corpus)], tokenizer=str(tokenizer), output=str(work / "data"),
                          validation_fraction=default_config().data.validation_fraction, progress=False))  # fmt: skip
    return work / "data"


def report(results: list[dict], output: Path, steps: int) -> None:
    rows = []
    for arm in ARMS:
        losses = [r["val_loss"] for r in results if r["arm"] == arm]
        if losses:
            spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
            rows.append([arm, len(losses), statistics.mean(losses), spread, min(losses), max(losses)])
    table = markdown_table(["arm", "seeds", "val loss (mean)", "std", "min", "max"], rows, digits=4)
    table += "\n" + paired_table(results)
    write_json(output / "results.json", results)
    write_text(output / "results.table.md", table)
    plot(results, output / "results.png")
    print(table)


def paired_table(results: list[dict]) -> str:
    """Each arm minus cosine on the same seed (same initialisation and data order): the seeds' spread cancels."""
    cosine = {r["seed"]: r["val_loss"] for r in results if r["arm"] == "cosine"}
    rows = []
    for arm in ARMS[1:]:
        diffs = [
            r["val_loss"] - cosine[r["seed"]] for r in results if r["arm"] == arm and r["seed"] in cosine
        ]
        if diffs:
            per_seed = ", ".join(f"{d:+.4f}" for d in diffs)
            rows.append([arm, len(diffs), statistics.mean(diffs), per_seed, sum(d < 0 for d in diffs)])
    return markdown_table(["arm - cosine (same seed)", "seeds", "mean difference", "per seed", "seeds below cosine"],
                          rows, digits=4)  # fmt: skip


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4), sharey=True)
    for ax, (title, arms) in zip(axes, PANELS.items()):
        for arm in arms:
            curves = [r["curve"] for r in results if r["arm"] == arm]
            if not curves:
                continue
            steps = sorted({int(s) for c in curves for s in c})
            mean = [statistics.mean(c[str(s)] if str(s) in c else c[s] for c in curves
                                    if str(s) in c or s in c) for s in steps]  # fmt: skip
            ax.plot(steps, mean, marker="o", markersize=3, label=f"{arm} ({len(curves)} seeds)")
        ax.set_title(title)
        ax.set_xlabel("step (1,024 tokens each)")
        ax.legend()
    axes[0].set_ylabel("validation MLM loss (15% masking)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/recipes-evidence"))
    parser.add_argument("--output", type=Path, default=HERE)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.work / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else []
    if not args.report_only:
        data = prepared_data(args.work)
        for seed in args.seeds:
            for arm in args.arms:  # wsd before branch: the branch starts from wsd's checkpoint
                if any(r["arm"] == arm and r["seed"] == seed for r in results):
                    continue
                results.append(run_arm(arm, seed, args.steps, args.work, data))
                write_json(store, results)
                print(
                    f"{arm} seed {seed}: val loss {results[-1]['val_loss']:.4f} ({results[-1]['seconds']:.0f} s)"
                )
    report(results, args.output, args.steps)


if __name__ == "__main__":
    main()
