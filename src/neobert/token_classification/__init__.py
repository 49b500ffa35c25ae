"""Token classification (NER) with a trained tagger: tagging with character offsets (``neobert tag``, the
service's ``/tokens``) and entity-level scores. Fine-tuning a tagger is a fine-tuning task:
:mod:`neobert.finetuning.tagging_task` (``neobert finetune tokens``), its files read by
:mod:`neobert.finetuning.token_data`."""

from .entities import entity_scores, spans
from .tagging import Entity, tag

__all__ = ["Entity", "entity_scores", "spans", "tag"]
