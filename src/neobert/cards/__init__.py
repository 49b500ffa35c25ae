"""Model cards: the README.md (YAML front matter + Markdown) written into every model directory we produce.

A card tells whoever receives a directory what it is, how to load it, what it was trained on, with which
settings, on which machine, and how well it did. It is built with ``huggingface_hub``'s card types
(:class:`~huggingface_hub.ModelCard`, :class:`~huggingface_hub.ModelCardData`,
:class:`~huggingface_hub.EvalResult`), so ``ModelCard.load(dir / "README.md")`` parses it back and the Hub
shows its ``model-index`` as evaluation results.

Every fact comes from the caller (the task that just ran: :class:`CardInfo`) or from the directory itself
(architecture, tokenizer, weights); nothing is estimated. The results table of the body is rendered from
the front matter's ``model-index``, so :func:`update_card` (``neobert eval ... --update-card``) replaces the
entries of a task and redraws the table, and the two never disagree.

Each task builds its own :class:`CardInfo` (``training/card.py`` for pretraining, the fine-tuning modules,
the sentence-transformers and ONNX exports); this package renders and writes it
(``facts.py``: what a card states; ``usage.py``: how to load it; ``render.py``: the README.md).

``hub.py`` sends a directory with its card to the Hugging Face Hub (``neobert push``, and in the background
during pretraining); it imports nothing of neobert and is not imported here.
"""

from .facts import CARD, CardError, CardInfo, DataSource, Result, hub_model_id, wall_time
from .render import lowercases, read_card, render, update_card, write_card

__all__ = [
    "CARD",
    "CardError",
    "CardInfo",
    "DataSource",
    "Result",
    "hub_model_id",
    "lowercases",
    "read_card",
    "render",
    "update_card",
    "wall_time",
    "write_card",
]
