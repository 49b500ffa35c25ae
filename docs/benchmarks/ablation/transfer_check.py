"""Does a pretrained rung beat random initialization downstream? The runs behind docs/ablations.md's
"Does pretraining transfer at this scale?" table.

Usage (DIR: a ladder directory; its prepared data and task files are made if missing):
  python docs/benchmarks/ablation/transfer_check.py pretrain DIR RUNG STEPS OUT [key=value ...]
      pretrain figure1-laptop's RUNG for STEPS steps into OUT (keys: dotted PretrainConfig fields, JSON values)
  python docs/benchmarks/ablation/transfer_check.py finetune DIR MODEL TASK POOLING LR EPOCHS [ROWS] [SEED]
      `finetune classify` MODEL (a model directory) on TASK with the ladder's other settings, POOLING cls|mean
      (written into a copy of the model's config), ROWS training rows (default the ladder's), and print a
      JSON line. TASK: a ladder task, or rt-word-order (a review snippet as written vs. the same snippet with
      a window of 4 words shuffled: a word-order probe that a bag of words cannot solve).
Run several at once with OMP_NUM_THREADS=1, one per core.
"""

import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from neobert.ablation import load_ladder, pretrain_config, resolve
from neobert.ablation.runner import prepared_data
from neobert.ablation.sources import rotten_tomatoes, split_by_group, write_splits, write_task
from neobert.finetuning import run_classify
from neobert.training.mlm_task import pretrain


def _pretrain(root: Path, rung: str, steps: int, out: Path, pairs: list[str]) -> None:
    ladder = load_ladder("figure1-laptop")
    plan = {p.name: p for p in resolve(ladder)}[rung]
    data = prepared_data(ladder, plan.corpus, plan.tokenizer, root)
    changes = {k: json.loads(v) for k, v in (pair.split("=", 1) for pair in pairs)}
    config = pretrain_config(ladder, plan, 0, out, data).override(max_steps=steps, **changes)
    started = time.perf_counter()
    result = pretrain(config, resume=True, progress_bar=False)
    print(
        json.dumps(
            {
                "rung": rung,
                "steps": steps,
                **changes,
                "val_loss": result.val_loss,
                "seconds": round(time.perf_counter() - started),
            }
        )
    )


def _word_order_task(folder: Path) -> tuple[Path, Path]:
    rng, rows = random.Random(0), []
    for row in rotten_tomatoes():
        words = row["text"].split()
        if len(words) < 8:
            continue
        if rng.random() < 0.5:
            rows.append((" ".join(words), "original", row["movie_name"]))
            continue
        start = rng.randrange(1, len(words) - 4)
        window = words[start : start + 4]
        shuffled = rng.sample(window, len(window))
        if shuffled != window:
            rows.append(
                (" ".join(words[:start] + shuffled + words[start + 4 :]), "shuffled", row["movie_name"])
            )
    return write_splits(split_by_group(rows, 0), folder)  # atomic: side-by-side runs may write it at once


def _finetune(root: Path, model: str, task: str, pooling: str, lr: float, epochs: int, rows, seed) -> None:
    ladder = load_ladder("figure1-laptop")
    folder = root / "tasks" / task
    train, validation = _word_order_task(folder) if task == "rt-word-order" else write_task(task, folder)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "model"
        shutil.copytree(model, copy)
        config = json.loads((copy / "config.json").read_text())
        config["classifier_pooling"] = pooling
        (copy / "config.json").write_text(json.dumps(config))
        settings = {**ladder.downstream.settings, "learning_rate": lr, "epochs": epochs}
        started = time.perf_counter()
        result = run_classify(
            dict(
                model=str(copy),
                train=str(train),
                validation=str(validation),
                output=str(Path(tmp) / "out"),
                seed=seed,
                device="cpu",
                precision="fp32",
                tensorboard=False,
                show_progress=False,
                max_train_samples=rows or ladder.downstream.train_samples,
                max_eval_samples=ladder.downstream.eval_samples,
                **settings,
            )
        )
    print(
        json.dumps(
            {
                "model": model,
                "task": task,
                "pooling": pooling,
                "lr": lr,
                "epochs": epochs,
                "rows": rows or ladder.downstream.train_samples,
                "seed": seed,
                "accuracy": round(100 * result.metrics["accuracy"], 1),
                "seconds": round(time.perf_counter() - started),
            }
        )
    )


if __name__ == "__main__":
    command, root = sys.argv[1], Path(sys.argv[2])
    if command == "pretrain":
        _pretrain(root, sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]), sys.argv[6:])
    else:
        rows = int(sys.argv[8]) if len(sys.argv) > 8 else None
        seed = int(sys.argv[9]) if len(sys.argv) > 9 else 0
        _finetune(
            root, sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), int(sys.argv[7]), rows, seed
        )
