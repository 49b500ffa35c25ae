"""The ladder's report, in the shape of the paper's Figure 1: per rung the downstream score (mean and
spread over pretraining seeds), its change from the rung it builds on, the paper's change, and whether the
sign is reproduced.

A rung's score is the mean over the ladder's tasks of the fine-tuned classifier's validation accuracy
(x100). The spread is the sample standard deviation over seeds. A change is "within noise" when it is no
larger than the larger spread of the two rungs; with one seed there is no spread and the sign is read as it
is, marked "(1 seed)".
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.io import atomic_file, write_text
from ..common.tables import fmt, markdown_table
from .ladder import Ladder, RungPlan

METRIC = "accuracy"


@dataclass
class RungSummary:
    plan: RungPlan
    scores: list[float]  # one per finished seed: mean task accuracy x100
    tasks: dict[str, list[float]]  # task -> accuracy x100 per seed
    val_loss: list[float]  # validation MLM loss per seed (pretrained rungs)
    unigram: list[float] = field(default_factory=list)  # the validation text's unigram entropy per seed

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.scores) if self.scores else None

    @property
    def spread(self) -> float | None:
        return statistics.stdev(self.scores) if len(self.scores) > 1 else None

    @property
    def loss_spread(self) -> float | None:
        return statistics.stdev(self.val_loss) if len(self.val_loss) > 1 else None


def collect(ladder: Ladder, plans: list[RungPlan], root: Path) -> list[RungSummary]:
    """Every rung with the results of its finished seeds (``runs/<rung>/seed-*/result.json``)."""
    summaries = []
    for plan in plans:
        scores, val_loss, unigram, tasks = [], [], [], {t: [] for t in ladder.downstream.tasks}
        for path in sorted((root / "runs" / plan.name).glob("seed-*/result.json")):
            result = json.loads(path.read_text(encoding="utf-8"))
            accuracies = [_accuracy(result["downstream"].get(t)) for t in ladder.downstream.tasks]
            if any(a is None for a in accuracies):
                continue
            for task, value in zip(ladder.downstream.tasks, accuracies):
                tasks[task].append(value)
            scores.append(statistics.fmean(accuracies))
            if result["pretrain"].get("val_loss") is not None:
                val_loss.append(result["pretrain"]["val_loss"])
            if result["pretrain"].get("unigram_entropy") is not None:
                unigram.append(result["pretrain"]["unigram_entropy"])
        summaries.append(RungSummary(plan, scores, tasks, val_loss, unigram))
    return summaries


def _accuracy(metrics: dict[str, Any] | None) -> float | None:
    value = None if metrics is None else metrics.get(METRIC)
    return None if value is None or math.isnan(value) else 100.0 * value


def verdict(ours: float | None, paper: float | None, noise: float | None) -> str:
    """yes / no / within noise, for our change against the paper's."""
    if paper is None:
        return "n/a (paper: no number)"
    if ours is None:
        return "not run"
    if noise is not None and abs(ours) <= noise:
        return "within noise"
    same = (ours > 0) == (paper > 0) if paper != 0 and ours != 0 else False
    return ("yes" if same else "no") + (" (1 seed)" if noise is None else "")


def _change(summary: RungSummary, by_name: dict[str, RungSummary]) -> tuple[float | None, float | None]:
    """Our change from the base rung and the noise it is judged against (None where unknown)."""
    base = by_name.get(summary.plan.base_rung or "")
    if base is None or summary.mean is None or base.mean is None:
        return None, None
    return summary.mean - base.mean, _noise(summary.spread, base.spread)


def _noise(spread: float | None, base_spread: float | None) -> float | None:
    """The larger of two rungs' spreads; unknown (None) unless both have several seeds."""
    return None if spread is None or base_spread is None else max(spread, base_spread)


def comparable_loss(summary: RungSummary, base: RungSummary | None) -> bool:
    """Validation MLM losses compare only on the same validation text (corpus), under the same tokenizer,
    masking and context."""
    if base is None:
        return False
    keys = ("corpus", "tokenizer", "context")
    masking = ("data.mask_rate", "data.mask_scheme")
    return all(getattr(summary.plan, k) == getattr(base.plan, k) for k in keys) and all(
        summary.plan.set.get(k) == base.plan.set.get(k) for k in masking
    )


def render(ladder: Ladder, summaries: list[RungSummary]) -> str:
    by_name = {s.plan.name: s for s in summaries}
    tasks = ladder.downstream.tasks
    header = ["rung", "change", "score (mean ± sd)", "seeds", "Δ vs base", "paper Δ", "sign reproduced?"]
    header += [*tasks, "val MLM loss", "unigram", "Δ loss vs base"]
    rows = []
    for s in summaries:
        if s.plan.out_of_reach:
            rows.append([s.plan.name, s.plan.change, f"out of reach: {s.plan.out_of_reach}", 0, "", "", ""])
            rows[-1] += ["" for _ in tasks] + ["", "", ""]
            continue
        delta, noise = _change(s, by_name)
        base = by_name.get(s.plan.base_rung or "")
        loss = fmt(statistics.fmean(s.val_loss) if s.val_loss else None, digits=3)
        if s.val_loss and base is not None and not comparable_loss(s, base):
            loss += " †"
        rows.append(
            [
                s.plan.name + ("" if s.plan.paper_kept else " (dropped)"),
                s.plan.change,
                _mean_sd(s.mean, s.spread),
                len(s.scores),
                "" if delta is None else f"{delta:+.1f} (vs {s.plan.base_rung})",
                "" if s.plan.paper_delta is None else f"{s.plan.paper_delta:+.1f}%",
                verdict(delta, s.plan.paper_delta, noise) if s.plan.base_rung else "",
                *[_mean_sd(statistics.fmean(v) if v else None, None) for v in s.tasks.values()],
                loss,
                fmt(statistics.fmean(s.unigram), digits=3) if s.unigram else "",
                _loss_change(s, base),
            ]
        )
    lines = [
        f"# Ablation ladder: {ladder.name} ({ladder.scale.name} scale)",
        "",
        ladder.description.strip(),
        "",
        f"Score: mean validation accuracy (x100) over {', '.join(tasks)}, fine-tuned with `finetune classify`;",
        "mean ± sample sd over pretraining seeds. Δ: change of the mean from the rung this one builds on.",
        "Paper Δ: the GLUE change the spec states for the rung (blank: not stated). A change no larger than",
        'the larger sd of the two rungs reads "within noise". † validation MLM loss not comparable with the',
        "base rung's (other corpus, tokenizer, masking or context); Δ loss: the change of the mean validation",
        "MLM loss where comparable (negative: the change helped pretraining), judged against the larger sd the",
        "same way. Unigram: the entropy of the validation tokens' frequencies, the loss of a model that ignores",
        "the context; a loss near it means the rung has not yet learned to use the context.",
        "",
        markdown_table(header, rows),
        _headline(summaries),
    ]
    return "\n".join(lines)


def _loss_change(summary: RungSummary, base: RungSummary | None) -> str:
    if not (summary.val_loss and base is not None and base.val_loss and comparable_loss(summary, base)):
        return ""
    delta = statistics.fmean(summary.val_loss) - statistics.fmean(base.val_loss)
    noise = _noise(summary.loss_spread, base.loss_spread)
    reading = (
        "within noise" if noise is not None and abs(delta) <= noise else ("lower" if delta < 0 else "higher")
    )
    return f"{delta:+.3f} ({reading})"


def _headline(summaries: list[RungSummary]) -> str:
    done = [s for s in summaries if s.mean is not None]
    if len(done) < 2:
        return ""
    first, last = done[0], done[-1]
    return (
        f"{last.plan.name} against {first.plan.name}: {last.mean - first.mean:+.1f} points "
        f"({_mean_sd(last.mean, last.spread)} vs {_mean_sd(first.mean, first.spread)}).\n"
    )


def _mean_sd(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return fmt(mean)
    return fmt(mean, digits=1) + ("" if sd is None else f" ± {sd:.1f}")


def plot(summaries: list[RungSummary], path: Path, title: str) -> Path | None:
    """Figure 1's shape: one bar per rung (mean, sd as error bar), dropped rungs grey, Δ above each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in summaries if s.mean is not None]
    if not shown:
        return None
    by_name = {s.plan.name: s for s in summaries}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(shown) + 2), 4.2), dpi=120)
    xs = range(len(shown))
    colors = ["#4c72b0" if s.plan.paper_kept else "#b0b0b0" for s in shown]
    ax.bar(xs, [s.mean for s in shown], yerr=[s.spread or 0.0 for s in shown], color=colors, capsize=3)
    for x, s in zip(xs, shown):
        delta, _ = _change(s, by_name)
        if delta is not None:
            ax.annotate(
                f"{delta:+.1f}", (x, s.mean + (s.spread or 0.0)), ha="center", va="bottom", fontsize=8
            )
    ax.set_xticks(list(xs), [s.plan.name for s in shown], rotation=45, ha="right")
    low = min(s.mean - (s.spread or 0.0) for s in shown)
    ax.set_ylim(max(0.0, low - 5), min(100.0, max(s.mean + (s.spread or 0.0) for s in shown) + 5))
    ax.set_ylabel("downstream accuracy (mean over tasks)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_file(path, "wb") as handle:
        fig.savefig(handle, format="png")
    plt.close(fig)
    return path


def write_report(ladder: Ladder, plans: list[RungPlan], root: Path) -> tuple[Path, Path | None]:
    summaries = collect(ladder, plans, root)
    md = write_text(root / "ladder.md", render(ladder, summaries))
    png = plot(summaries, root / "ladder.png", f"{ladder.name}: downstream score per rung")
    return md, png
