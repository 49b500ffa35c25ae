"""An encoder and its tokenizer: the one place that loads, inspects, prepares and saves them.

``source`` everywhere below is what a user passes as ``--model``: a NeoBERT preset (random weights, the
default NeoBERT tokenizer), a model directory, or a transformers hub id. Every model goes through
transformers' Auto classes (``import neobert`` registered ``model_type: neobert`` with them), so BERT,
RoBERTa, ModernBERT and NeoBERT get identical treatment; the few NeoBERT-specific steps ask
:func:`is_neobert`. Inference, fine-tuning, evaluation, benchmarks and the CLI all load through here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from ..common.config import PRESETS, ModelConfig, check_precision
from ..common.io import atomic_dir
from ..data import tokenizer as tokenizer_files
from ..data.tokenizer import EXAMPLES_HINT as EXAMPLES_HINT  # the tokenizer loader lives in the data layer
from ..data.tokenizer import MODEL_INPUT_NAMES
from ..model import NeoBERTConfig
from ..model.pooling import POOLINGS, from_sentence_transformers, mean_pool
from ..runtime.fastpath import fast_inference
from ..runtime.hardware import resolve_precision
from .directories import MODULES_FILE, modules
from .registration import head as registered_head

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
# RoBERTa-style models number positions from padding_idx + 1, so the first pad_token_id + 1 rows of their
# position table are unusable (514 rows, 512 usable tokens).
OFFSET_POSITION_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer")
_NO_LIMIT = 100_000  # tokenizers without a limit report ~1e30 as model_max_length
_DEFAULT_LIMIT = 512  # a model that states no limit at all: the BERT-era convention
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


# --- what a source or a model is ------------------------------------------------------------------------


def is_preset(source: str | os.PathLike) -> bool:
    """A NeoBERT preset name that is not shadowed by a directory of the same name."""
    return str(source) in PRESETS and not Path(source).is_dir()


def is_neobert(model: torch.nn.Module) -> bool:
    """Whether ``model`` (any head, or a torch.compile / DDP wrapper around one) is a NeoBERT model."""
    for attr in ("_orig_mod", "module"):  # torch.compile, DistributedDataParallel
        model = getattr(model, attr, model)
    return getattr(getattr(model, "config", None), "model_type", None) == "neobert"


def model_dir(source: str | os.PathLike) -> Path | None:
    """The model directory ``source`` names; None for a preset or a hub id; a clear error for a path that
    names no model directory (missing, a file, or without config.json)."""
    path = Path(source).expanduser()
    name = str(source)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{name} is a directory but not a model directory: it holds no config.json"
            )
        return path
    if is_preset(name):
        return None
    if path.exists():
        raise NotADirectoryError(f"{name} is a file; --model takes a model directory, a preset or a hub id")
    if _looks_local(name):
        raise FileNotFoundError(
            f"model directory {name} does not exist (nor is it a preset: {', '.join(PRESETS)})"
        )
    return None


def _looks_local(name: str) -> bool:
    """A path rather than a hub id ("org/name"): it starts like one, or has more than one part."""
    return name.startswith((".", "/", "~")) or not _HUB_ID.match(name)


def _source_is_neobert(source: str | os.PathLike) -> bool:
    path = model_dir(source)
    if path is not None:
        return json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type") == "neobert"
    if is_preset(source):
        return True
    try:
        return AutoConfig.from_pretrained(str(source)).model_type == "neobert"
    except (OSError, ValueError):
        return False


# --- models ---------------------------------------------------------------------------------------------


def load_model(source: str | os.PathLike, head: str = "base", **kw: Any) -> torch.nn.Module:
    """A model in eval mode with ``head`` (a :data:`neobert.inference.registration.HEADS` key: base | mlm |
    sequence-classification | token-classification). The model alone: :func:`load_encoder` is the loader
    every caller uses (its tokenizer with it); this is the step inside it.

    For a preset (random weights), ``kw`` entries that are :class:`ModelConfig` fields override the preset
    and the rest go to the transformers config (e.g. ``num_labels``). For directories and hub ids ``kw``
    goes to ``from_pretrained``; with ``output_loading_info=True``, (model, transformers' loading info) as
    ``from_pretrained`` gives them (a preset's info: every key missing).
    """
    entry = registered_head(head)
    path = model_dir(source)
    if path is None and is_preset(source):
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        overrides = {k: v for k, v in kw.items() if k in fields}
        extra = {k: v for k, v in kw.items() if k not in fields}
        info = extra.pop("output_loading_info", False)
        config = NeoBERTConfig.from_model_config(ModelConfig.from_name(str(source), **overrides), **extra)
        model = entry.neobert_class(config).eval()
        return (model, {"missing_keys": set(model.state_dict())}) if info else model
    try:
        model = entry.auto_class.from_pretrained(path or str(source), **kw)
    except OSError as err:
        if path is not None:
            raise
        raise OSError(
            f"{source} is not a local directory, not a preset, and not loadable as a hub id: {err}"
        ) from err
    if kw.get("output_loading_info"):  # transformers' (model, loading info): what the checkpoint lacked
        return model[0].eval(), model[1]
    return model.eval()


def max_positions(model: torch.nn.Module, tokenizer: Any = None) -> int:
    """The longest input (in tokens, specials included) that the model, and the tokenizer if given, accept.

    NeoBERT: its ``max_length`` (the stock tokenizer's 512 says nothing about a NeoBERT model). Others:
    ``max_position_embeddings``, less the ``pad_token_id + 1`` reserved rows of RoBERTa-style tables, and
    no more than the tokenizer's ``model_max_length``.
    """
    config = model.config
    if is_neobert(model):
        return int(config.max_length)
    limits = []
    if getattr(config, "max_position_embeddings", None):
        reserved = (config.pad_token_id or 0) + 1 if config.model_type in OFFSET_POSITION_MODELS else 0
        limits.append(int(config.max_position_embeddings) - reserved)
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if tokenizer_limit and tokenizer_limit < _NO_LIMIT:
        limits.append(int(tokenizer_limit))
    return min(limits) if limits else _DEFAULT_LIMIT


def check_vocab(model: torch.nn.Module, tokenizer: Any) -> None:
    """Raise if the tokenizer can produce ids the embedding table does not have (an IndexError later)."""
    embeddings = model.get_input_embeddings()
    size = embeddings.num_embeddings if embeddings is not None else model.config.vocab_size
    if len(tokenizer) > size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary (embedding table) only "
            f"{size}: its ids would fall outside the table. Use the model's own tokenizer (a preset such as 'tiny' needs "
            f"vocab_size={len(tokenizer)} to run with this one)"
        )


def apply_precision(model: torch.nn.Module, precision: str = "auto") -> torch.nn.Module:
    """The model's inference precision: bf16 weights for ``bf16``, float32 for ``fp32`` (exact); ``auto`` is
    whichever of the two runs this model's shapes faster on its device (measured once per process:
    :func:`neobert.runtime.hardware.resolve_precision`). NeoBERT models (any head) also go on the fast path
    (unpadded attention, fused epilogues); other encoders are cast, their code unchanged."""
    check_precision(precision, ValueError)
    device = next(model.parameters()).device
    precision = resolve_precision(precision, *matmul_shape(model.config), device)
    dtype = torch.bfloat16 if precision == "bf16" else None
    if is_neobert(model):
        fast_inference(model, dtype)
    else:
        model.to(dtype or torch.float32)
    return model


def matmul_shape(config: Any) -> tuple[int, int]:
    """(hidden, intermediate) widths of a transformers config: the shapes precision ``auto`` times."""
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", 0)  # DistilBERT: dim
    return hidden, getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 4 * hidden)


def resolve_model_precision(source: str | os.PathLike, precision: str, device: str = "cpu") -> str:
    """The precision :func:`apply_precision` would run model ``source`` in on ``device``, from its config alone
    (no weights loaded): a job decides it once for all its workers."""
    if check_precision(precision, ValueError) != "auto":
        return precision
    path = model_dir(source)
    if path is None and is_preset(source):
        config = NeoBERTConfig.from_model_config(ModelConfig.from_name(str(source)))
    else:
        config = AutoConfig.from_pretrained(path or str(source))
    return resolve_precision(precision, *matmul_shape(config), device)


# --- how a directory says its embeddings are made ---------------------------------------------------------

# sentence-transformers' legacy boolean Pooling keys -> its ``pooling_mode`` names (ours come from the registry,
# neobert.model.pooling.from_sentence_transformers)
_ST_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# config_sentence_transformers.json: the widths a Matryoshka-trained model was trained for (finetune contrastive)
MATRYOSHKA_KEY = "matryoshka_dims"


@dataclass(frozen=True)
class EmbeddingSpec:
    """How a model's embeddings are made: its pooling, whether they are unit vectors, the longest input
    (None: the model's own limit), and where that was read (``sentence-transformers`` or ``default``)."""

    pooling: str = "mean"
    normalize: bool = True
    max_length: int | None = None
    declared_by: str = "default"
    matryoshka_dims: tuple[int, ...] = ()  # widths it was trained to be truncated to (widest first); () none
    prompts: tuple[tuple[str, str], ...] = ()  # (name, text put before the input), as sentence-transformers
    default_prompt_name: str | None = None  # the prompt SentenceTransformer.encode applies when none is named


def embedding_spec(source: str | os.PathLike) -> EmbeddingSpec:
    """The pooling and normalisation a sentence-transformers directory declares (``modules.json``: a
    Transformer at the root, then ``Pooling`` (its ``config.json``) and optionally ``Normalize``;
    ``sentence_bert_config.json``'s ``max_seq_length``; ``config_sentence_transformers.json``'s
    ``matryoshka_dims``). Other sources: mean pooling, unit vectors.

    Raises ValueError, naming the module, for what :func:`neobert.inference.run.encode` cannot reproduce (a
    Dense layer, max pooling, a transformer in a subfolder), so no caller serves vectors that differ from
    ``SentenceTransformer(dir).encode``.
    """
    path = Path(source).expanduser()
    modules_file = path / MODULES_FILE
    if not modules_file.is_file():
        return EmbeddingSpec()
    pooling, normalize = "mean", False
    for module in modules(path):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        where = f"{modules_file}: module {kind} ({module.get('path') or 'the root'})"
        if kind == "Transformer":
            if module.get("path"):
                raise ValueError(f"{where}: the transformer must sit at the directory's root")
        elif kind == "Pooling":
            pooling = _st_pooling(path / module.get("path", ""), where)
        elif kind == "Normalize":
            normalize = True
        else:
            raise ValueError(f"{where} is not supported (only Transformer, Pooling, Normalize)")
    settings_file = path / "sentence_bert_config.json"
    settings = json.loads(settings_file.read_text(encoding="utf-8")) if settings_file.is_file() else {}
    max_length = settings.get("max_seq_length")
    st_file = path / "config_sentence_transformers.json"
    st_settings = json.loads(st_file.read_text(encoding="utf-8")) if st_file.is_file() else {}
    dims = tuple(int(d) for d in st_settings.get(MATRYOSHKA_KEY) or ())
    prompts = tuple((str(k), str(v)) for k, v in (st_settings.get("prompts") or {}).items())
    default = st_settings.get("default_prompt_name")
    if default is not None and default not in dict(prompts):
        raise ValueError(f"{st_file}: default_prompt_name {default!r} is not one of its prompts")
    return EmbeddingSpec(
        pooling,
        normalize,
        int(max_length) if max_length else None,
        "sentence-transformers",
        dims,
        prompts,
        default,
    )


def _st_pooling(folder: Path, where: str) -> str:
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [_ST_POOLING_KEYS[k] for k, on in config.items() if k in _ST_POOLING_KEYS and on] or ["mean"]
    name = from_sentence_transformers(modes[0]) if len(modes) == 1 else None
    if name is None:
        supported = ", ".join(p.sentence_transformers for p in POOLINGS.values())
        raise ValueError(f"{where}: pooling {'+'.join(modes)} is not supported (one of {supported})")
    return name


# --- tokenizers -----------------------------------------------------------------------------------------


def resolve_tokenizer(source: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Any:
    """The tokenizer for model ``source``: ``tokenizer`` if given (a directory, or a hub id), else the model
    directory's own, the default NeoBERT tokenizer for a preset, or the hub id's own."""
    neobert = _source_is_neobert(source)
    if tokenizer is not None:
        given = Path(tokenizer).expanduser()
        if given.is_dir():
            return tokenizer_files.load_tokenizer(given, neobert)
        if _looks_local(str(tokenizer)):
            raise FileNotFoundError(f"tokenizer directory {tokenizer} does not exist")
        return tokenizer_files.load_tokenizer(str(tokenizer), neobert)
    path = model_dir(source)
    if path is not None:
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(
                f"{source} holds no tokenizer files ({', '.join(TOKENIZER_FILES)}); pass a tokenizer directory "
                "(--tokenizer DIR)"
            )
        return tokenizer_files.load_tokenizer(path, neobert)
    if is_preset(source):
        return tokenizer_files.load_tokenizer(None)
    return tokenizer_files.load_tokenizer(str(source), neobert)


# --- saving ---------------------------------------------------------------------------------------------


def save_pretrained(
    model: torch.nn.Module,
    tokenizer: Any,
    output_dir: str | os.PathLike,
    state_dict: dict[str, torch.Tensor] | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write model + tokenizer (+ ``extra_files``: name -> text) to ``output_dir`` atomically, whole.

    A NeoBERT model gets the released layout: config.json, model.safetensors, the tokenizer files with
    vocab.txt, and the tokenizer's ``model_max_length`` set to the model's ``max_length``. ``state_dict``
    replaces the model's own tensors (e.g. weights gathered from FSDP shards).
    """
    with atomic_dir(output_dir) as tmp:
        write_model_files(model, tokenizer, tmp, state_dict)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    return Path(output_dir)


def write_model_files(
    model: torch.nn.Module, tokenizer: Any, directory: Path, state_dict: dict[str, torch.Tensor] | None = None
) -> None:
    """The files of :func:`save_pretrained`, written into ``directory`` as they are (not atomic)."""
    model.save_pretrained(directory, state_dict=state_dict)
    if is_neobert(model):
        _drop_auto_map(directory / "config.json")
    write_tokenizer_files(model, tokenizer, directory)


def write_tokenizer_files(model: torch.nn.Module, tokenizer: Any, directory: Path) -> None:
    """The tokenizer files a model directory of ``model`` holds, into ``directory``: a NeoBERT model's with
    its ``max_length``, its input names, ``vocab.txt`` and the special-token map; any other model's as its
    tokenizer saves them."""
    if not is_neobert(model):
        tokenizer.save_pretrained(directory)
        return
    tokenizer.model_max_length = model.config.max_length
    tokenizer.model_input_names = list(MODEL_INPUT_NAMES)
    tokenizer.save_pretrained(directory)
    # transformers 5 writes only tokenizer.json; vocab.txt and the special-token map keep the directory
    # readable by older transformers and by the original NeoBERT code.
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (directory / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    special = {k: str(v) for k, v in tokenizer.special_tokens_map.items()}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


def _drop_auto_map(config_file: Path) -> None:
    """Remove ``auto_map`` (kept from the released config.json): it names remote code this directory does
    not hold, and with ``trust_remote_code=True`` transformers would prefer it to the registered classes."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.pop("auto_map", None) is not None:
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --- an encoder with its tokenizer ----------------------------------------------------------------------


@dataclass
class Encoder:
    """A model (bare encoder or one with a head), its tokenizer (None where none is needed, e.g. a
    throughput benchmark on random ids), its name, and the longest input it accepts: the one bundle every
    loader returns (:func:`load_encoder`, and ``kinds.load_for_inference`` with its capabilities)."""

    model: torch.nn.Module
    tokenizer: Any
    name: str
    max_length: int
    # what it can do (capabilities.Capabilities), where it was loaded for inference (kinds.load_for_inference)
    capabilities: Any = None
    spec: Any = (
        None  # its kind's settings beside the weights (a late-interaction model's LateInteractionSpec)
    )

    @property
    def base(self) -> torch.nn.Module:
        """The bare encoder inside any head (a bare encoder is its own base model)."""
        return getattr(self.model, "base_model", self.model)

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def pad_token_id(self) -> int:
        return int(self.config.pad_token_id or 0)

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def is_neobert(self) -> bool:
        return is_neobert(self.model)


def load_encoder(
    source: str | os.PathLike,
    tokenizer: str | os.PathLike | Any | None = None,
    head: str = "base",
    device: str | torch.device | None = None,
    **model_kwargs: Any,
) -> Encoder:
    """Load ``source`` with ``head`` and its tokenizer (or ``tokenizer``: a directory or a loaded one), in
    eval mode, on ``device``.

    A NeoBERT preset gets a vocabulary as large as the tokenizer's, so the default tokenizer fits the test
    presets (``tiny`` has 128 ids otherwise). ``model_kwargs`` go to :func:`load_model`.
    """
    loaded = hasattr(tokenizer, "convert_tokens_to_ids")
    tok = tokenizer if loaded else resolve_tokenizer(source, tokenizer)
    if is_preset(source):
        model_kwargs.setdefault("vocab_size", max(len(tok), PRESETS[str(source)].get("vocab_size", 30522)))
    model = load_model(source, head=head, **model_kwargs)
    if device is not None:
        model = model.to(device)
    check_vocab(model, tok)
    return Encoder(model, tok, str(source), max_positions(model, tok))


def tokenize(encoder: Encoder, texts: Sequence[str], max_length: int | None = None) -> dict:
    """Right-padded ``input_ids`` and 0/1 ``attention_mask`` on the encoder's device, truncated."""
    batch = encoder.tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=min(max_length or encoder.max_length, encoder.max_length),
        return_tensors="pt",
        return_token_type_ids=False,
    )
    device = encoder.device
    return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}


def embed_batch(encoder: Encoder, inputs: dict) -> torch.Tensor:
    """Masked mean of the last hidden states: (B, C), differentiable (contrastive training uses it)."""
    states = encoder.base(**inputs).last_hidden_state  # (B, L, C)
    return mean_pool(states, inputs["attention_mask"])
