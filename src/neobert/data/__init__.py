"""Data: readers for many formats, the offline stdlib corpus, tokenizer training and loading, token shards and
reading them (:class:`TokenDataset`). Preparing shards is a job: :mod:`neobert.jobs.prepare`.

The optional readers' libraries (pyarrow, datasets) are imported inside the functions that need them.
"""

from .corpus import CorpusStats, iter_stdlib_documents, write_stdlib_corpus
from .dataset import TokenDataset
from .readers import DataError, ReadStats, expand_inputs, iter_documents
from .tokenizer import (
    TokenizerResult,
    default_tokenizer_dir,
    load_tokenizer,
    tokenizer_backend,
    tokenizer_from_vocab,
    train_tokenizer,
)

__all__ = [
    "CorpusStats",
    "DataError",
    "ReadStats",
    "TokenDataset",
    "TokenizerResult",
    "default_tokenizer_dir",
    "expand_inputs",
    "iter_documents",
    "iter_stdlib_documents",
    "load_tokenizer",
    "tokenizer_backend",
    "tokenizer_from_vocab",
    "train_tokenizer",
    "write_stdlib_corpus",
]
