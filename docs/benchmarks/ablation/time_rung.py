"""Time one rung of figure1-laptop: N pretraining steps, then one `finetune classify` on rt-sentiment.

Usage: OMP_NUM_THREADS=1 python docs/benchmarks/ablation/time_rung.py DIR RUNG STEPS  (e.g. /tmp/t M1 50)
Prints wall and process CPU seconds of each part as JSON. DIR holds the prepared data (made if missing).
"""

import json
import sys
import time
from pathlib import Path

from neobert.ablation import load_ladder, pretrain_config, resolve
from neobert.ablation.runner import prepared_data
from neobert.ablation.sources import write_task
from neobert.finetuning import run_classify
from neobert.training.mlm_task import pretrain

root = Path(sys.argv[1])
rung = sys.argv[2]
steps = int(sys.argv[3])
ladder = load_ladder("figure1-laptop")
plan = {p.name: p for p in resolve(ladder)}[rung]
data = prepared_data(ladder, plan.corpus, plan.tokenizer, root)
out = root / "timing" / rung
config = pretrain_config(ladder, plan, 0, out, data).override(max_steps=steps, eval_every=100000)
w, c = time.perf_counter(), time.process_time()
res = pretrain(config, resume=True, progress_bar=False)
pw, pc = time.perf_counter() - w, time.process_time() - c
train, val = write_task("rt-sentiment", root / "tasks" / "rt-sentiment")
settings = dict(
    model=str(out / "final"),
    train=str(train),
    validation=str(val),
    output=str(out / "ft"),
    seed=0,
    device="cpu",
    precision="fp32",
    tensorboard=False,
    show_progress=False,
    max_train_samples=ladder.downstream.train_samples,
    max_eval_samples=ladder.downstream.eval_samples,
    **ladder.downstream.settings,
)
w, c = time.perf_counter(), time.process_time()
ft = run_classify(settings)
fw, fc = time.perf_counter() - w, time.process_time() - c
print(
    json.dumps(
        {
            "rung": rung,
            "steps": steps,
            "tokens_per_step": config.tokens_per_step,
            "pretrain_wall_s": pw,
            "pretrain_cpu_s": pc,
            "finetune_wall_s": fw,
            "finetune_cpu_s": fc,
            "finetune_accuracy": ft.metrics["accuracy"],
            "val_loss": res.val_loss,
        }
    )
)
