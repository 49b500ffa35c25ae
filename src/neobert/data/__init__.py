"""Pretraining data: readers for many formats, the offline stdlib corpus, tokenizer training, token shards.

Heavy libraries (transformers, tokenizers, pyarrow, datasets) are imported inside the functions that need
them, so importing this package is cheap.
"""

from .corpus import CorpusStats, iter_stdlib_documents, write_stdlib_corpus
from .dataset import TokenDataset
from .prepare import PrepareConfig, PrepareResult, is_validation, load_tokenizer, prepare
from .readers import DataError, ReadStats, expand_inputs, iter_documents
from .tokenizer import TokenizerResult, tokenizer_from_vocab, train_tokenizer

__all__ = [
    "CorpusStats",
    "DataError",
    "PrepareConfig",
    "PrepareResult",
    "ReadStats",
    "TokenDataset",
    "TokenizerResult",
    "expand_inputs",
    "is_validation",
    "iter_documents",
    "iter_stdlib_documents",
    "load_tokenizer",
    "prepare",
    "tokenizer_from_vocab",
    "train_tokenizer",
    "write_stdlib_corpus",
]
