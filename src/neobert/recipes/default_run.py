"""The embedded default run: stdlib docstrings -> WordPiece tokenizer -> shards -> a small NeoBERT -> report.

Everything it needs is on any machine with Python: the corpus is the docstrings of the running
interpreter's standard library. The tokenizer is the WordPiece vocabulary shipped beside ``default.yaml``
(``default_vocab.txt``, trained once on that corpus; see docs/benchmarks/default_recipe/), because the
WordPiece trainer is not deterministic (huggingface/tokenizers#1794) and a fixed vocabulary makes the run
repeatable. Each stage is skipped when its output already exists, so an interrupted run picks up where it
stopped (with ``resume=True`` for the training itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..common.io import write_dir, write_text
from ..common.tables import markdown_table
from ..data import load_tokenizer, tokenizer_from_vocab, write_stdlib_corpus
from ..inference.encoders import load_model
from ..inference.run import fill_mask
from ..jobs.prepare import PrepareConfig, prepare
from ..training.config import PretrainConfig
from ..training.mlm_task import PretrainResult, pretrain

FILL_MASK_EXAMPLES = (
    "Return a new [MASK] containing the items of the iterable.",
    "If the argument is omitted, it defaults to [MASK].",
    "This function is [MASK] and will be removed in a future version.",
    "Raise an [MASK] if the file does not exist.",
    "The optional [MASK] argument specifies the encoding of the file.",
)


@dataclass
class DefaultRunResult:
    pretrain: PretrainResult
    corpus_documents: int
    tokenizer_vocab: int
    examples: list[tuple[str, list[tuple[str, float]]]]
    report: Path

    @property
    def summary(self) -> str:
        """The pretraining result, the fill-mask examples (top 3) and where the report went, for a person."""
        rows = [
            [text, ", ".join(f"{token} ({p:.2f})" for token, p in predictions)]
            for text, predictions in self.examples
        ]
        table = markdown_table(["text", "predictions"], rows)
        return f"{self.pretrain.summary}\nfill-mask (top 3)\n\n{table}\nreport: {self.report}"


# What a flag or --set cannot change in the default run: its data and pinned tokenizer (each setting with the
# words an error names it by: the option and the --set key)
FIXED = {"data.paths": "data.paths", "data.tokenizer": "--tokenizer (data.tokenizer)"}
VOCAB_FILE = "default_vocab.txt"


def shipped_tokenizer(output: str | Path) -> Path:
    """The default run's tokenizer, built from the vocabulary shipped in ``neobert.configs``."""
    output = Path(output)
    if not (output / "tokenizer.json").is_file():
        vocab = resources.files("neobert.configs").joinpath(VOCAB_FILE)
        with resources.as_file(vocab) as path:
            write_dir(lambda tmp: tokenizer_from_vocab(path, tmp), output)
    return output


def default_config() -> PretrainConfig:
    text = resources.files("neobert.configs").joinpath("default.yaml").read_text(encoding="utf-8")
    return PretrainConfig.from_dict(yaml.safe_load(text))


def run_default(
    output: str | Path = "runs/default",
    resume: bool = False,
    max_minutes: float | None = None,
    progress_bar: bool = True,
    overrides: dict[str, Any] | None = None,
) -> DefaultRunResult:
    """The default run in ``output`` (or ``overrides["output"]``); ``overrides`` (dotted keys, as
    :meth:`PretrainConfig.override`) change its training settings (not its data or tokenizer: refused)."""
    overrides = dict(overrides or {})
    fixed = [name for key, name in FIXED.items() if key in overrides]
    if fixed:
        raise ValueError(
            f"{' and '.join(fixed)}: the embedded default run (no --data, --config or --preset) trains "
            "on its own corpus with its pinned tokenizer; give --data (and --preset or --config) to train on "
            "other data"
        )
    out = Path(overrides.pop("output", output))
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    if not corpus.is_file():
        write_stdlib_corpus(corpus)  # atomic
    tokenizer_dir = shipped_tokenizer(out / "tokenizer")
    config = default_config().override(**overrides)
    prepared = prepare(
        PrepareConfig(
            inputs=[str(corpus)],
            tokenizer=str(tokenizer_dir),
            output=str(out / "data"),
            validation_fraction=config.data.validation_fraction,
            progress=progress_bar,
        )
    )
    changes = {"data.paths": [str(out / "data")], "output": str(out)}
    if max_minutes is not None:
        changes["max_minutes"] = max_minutes
    config = config.override(**changes)
    result = pretrain(config, resume=resume, progress_bar=progress_bar)
    examples = _fill_mask_examples(result.final_model)
    report = write_report(out, result, prepared.documents, examples)
    return DefaultRunResult(result, prepared.documents, prepared.vocab_size, examples, report)


def _fill_mask_examples(model_dir: Path | None) -> list[tuple[str, list[tuple[str, float]]]]:
    if model_dir is None:
        return []
    model = load_model(model_dir, head="mlm")
    tokenizer = load_tokenizer(model_dir)
    return [(text, fill_mask(model, tokenizer, text, top_k=3)[0]) for text in FILL_MASK_EXAMPLES]


def write_report(out: Path, result: PretrainResult, documents: int, examples) -> Path:
    lines = [
        "# Embedded default run",
        "",
        f"A small NeoBERT pretrained on {documents:,} Python standard-library docstrings "
        f"({result.tokens_seen:,} tokens seen in {result.steps} steps, {result.seconds / 60:.1f} minutes).",
        "",
        markdown_table(
            ["metric", "value"],
            [
                ["validation MLM loss", result.val_loss],
                ["unigram baseline (entropy of token frequencies)", result.unigram_entropy],
                ["validation masked-token accuracy", result.val_accuracy],
                ["last training loss", result.train_loss],
            ],
            digits=3,
        ),
        "![loss curve](loss_curve.png)",
        "",
        "## Fill-mask (top 3)",
        "",
    ]
    rows = [
        [text, ", ".join(f"{token} ({prob:.2f})" for token, prob in predictions)]
        for text, predictions in examples
    ]
    lines.append(markdown_table(["text", "predictions"], rows).rstrip("\n"))
    return write_text(out / "report.md", "\n".join(lines) + "\n")
