"""Token classification (NER): CoNLL / JSONL readers, sub-word label alignment, entity-level metrics,
fine-tuning (``neobert finetune tokens``) and tagging with character offsets (``neobert tag``)."""

from .entities import entity_scores, spans
from .tagging import Entity, tag

__all__ = ["Entity", "entity_scores", "spans", "tag"]
