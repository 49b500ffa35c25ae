"""Run monitoring: TensorBoard (default), optional Weights & Biases, a JSONL log and a loss-curve PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunLogger:
    """Writes scalars to every configured sink. Only the main process should create one."""

    def __init__(
        self,
        output_dir: str | Path,
        report_to: tuple[str, ...] = ("tensorboard",),
        run_config: dict | None = None,
        tensorboard_dir: str | Path | None = None,  # default: OUTPUT_DIR/tensorboard
    ):
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self._tb = None
        self._wandb = None
        if "tensorboard" in report_to:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(tensorboard_dir or self.output_dir / "tensorboard"))
        if "wandb" in report_to:
            import wandb  # optional: pip install wandb

            self._wandb = wandb.init(dir=str(self.output_dir), config=run_config or {})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.metrics_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_loss_curve(metrics_path: str | Path, output_png: str | Path, baseline: float | None = None) -> Path:
    """Training and validation MLM loss against step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for key, label, style in (
        ("train/loss", "train MLM loss", "-"),
        ("val/loss", "validation MLM loss", "o-"),
    ):
        points = [(r["step"], r[key]) for r in records if key in r]
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, style, label=label, markersize=4)
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle="--", label=f"unigram baseline ({baseline:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("NeoBERT pretraining")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    output_png = Path(output_png)
    fig.savefig(output_png)
    plt.close(fig)
    return output_png
