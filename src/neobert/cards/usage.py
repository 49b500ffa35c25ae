"""The card's "How to load it": a snippet that runs against the directory itself, and the other ways."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from ..inference.registration import HEADS
from .facts import CardInfo, directory_config

EXAMPLE_TEXTS = ("NeoBERT is a next-generation encoder.", "A second, longer example sentence for the batch.")


def _example_tokens(directory: Path, texts: tuple[str, ...]) -> int | None:
    """Tokens of the longest of ``texts`` under the directory's tokenizer (the snippet pads to it)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception:  # no tokenizer files: the snippet's shape is given symbolically
        return None
    return max(len(ids) for ids in tokenizer(list(texts))["input_ids"])


def _mask_text(directory: Path) -> str:
    special = directory / "special_tokens_map.json"
    mask = "[MASK]"
    if special.is_file():
        value = json.loads(special.read_text(encoding="utf-8")).get("mask_token", mask)
        mask = value.get("content", mask) if isinstance(value, dict) else value
    return f"Paris is the {mask} of France."


def usage(directory: Path, info: CardInfo) -> tuple[str, str]:
    """The card's first Python snippet (run against the directory itself: ``path = "."``) and the line it
    prints: the output's shape, computed here from the directory's config and tokenizer."""
    config = directory_config(directory)
    if info.library == "sentence-transformers" and info.head == "sparse-embedding":
        return _sparse_usage(config)
    if info.library == "sentence-transformers" and info.head == "late-interaction":
        return _late_interaction_usage(directory)
    if info.library == "sentence-transformers":
        return _sentence_transformers_usage(config)
    if info.library == "onnx":
        return _onnx_usage(config, info)
    return _transformers_usage(directory, config, info)


def _sparse_usage(config: dict) -> tuple[str, str]:
    code = (
        "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
        "from sentence_transformers import SparseEncoder\n\n"
        'model = SparseEncoder(".")  # this directory, or its Hub repo id\n'
        f"vectors = model.encode({list(EXAMPLE_TEXTS)!r})  # sparse: one weight per vocabulary entry\n"
        "print(tuple(vectors.shape))"
    )
    return code, f"({len(EXAMPLE_TEXTS)}, {config.get('vocab_size')})"


def _late_interaction_usage(directory: Path) -> tuple[str, str]:
    settings = json.loads((directory / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    code = (
        "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
        "from sentence_transformers import MultiVectorEncoder\n\n"
        'model = MultiVectorEncoder(".")  # this directory, or its Hub repo id; PyLate: models.ColBERT(".")\n'
        f"queries = model.encode_query({list(EXAMPLE_TEXTS)!r})  # one unit vector per token\n"
        "print(tuple(queries[0].shape))"
    )
    dim = json.loads((directory / "1_Dense" / "config.json").read_text(encoding="utf-8"))["out_features"]
    return code, f"({settings['query_length']}, {dim})"


def _sentence_transformers_usage(config: dict) -> tuple[str, str]:
    code = (
        "import neobert  # registers NeoBERT with transformers (pip install neobert)\n"
        "from sentence_transformers import SentenceTransformer\n\n"
        'model = SentenceTransformer(".")  # this directory, or its Hub repo id\n'
        f"vectors = model.encode({list(EXAMPLE_TEXTS)!r})\n"
        "print(tuple(vectors.shape))"
    )
    return code, f"({len(EXAMPLE_TEXTS)}, {config.get('hidden_size')})"


def _onnx_usage(config: dict, info: CardInfo) -> tuple[str, str]:
    call = "classify" if info.head in HEADS and HEADS[info.head].exports else "encode"
    width = (len(config.get("id2label") or {}) or None) if call == "classify" else config.get("hidden_size")
    code = (
        "from neobert.export.runtime import OnnxEncoder  # onnxruntime + tokenizers, no torch (pip install 'neobert[onnx]')\n\n"
        'encoder = OnnxEncoder(".")  # this directory\n'
        f"outputs = encoder.{call}({list(EXAMPLE_TEXTS)!r})\n"
        "print(tuple(outputs.shape))"
    )
    return code, f"({len(EXAMPLE_TEXTS)}, {width})"


def _transformers_usage(directory: Path, config: dict, info: CardInfo) -> tuple[str, str]:
    head = HEADS.get(info.head, HEADS["base"])
    auto = head.auto_class_name
    texts = (_mask_text(directory),) if head.width == "vocab" else EXAMPLE_TEXTS
    length = _example_tokens(directory, texts) or "L"
    labels = len(config.get("id2label") or {}) or None
    width = {"hidden": config.get("hidden_size"), "vocab": config.get("vocab_size"), "labels": labels}[
        head.width
    ]
    shape = (len(texts), length, width) if head.per_token else (len(texts), width)
    code = (
        "import neobert  # registers NeoBERT with transformers' Auto classes (pip install neobert); no remote code\n"
        "import torch\n"
        f"from transformers import {auto}, AutoTokenizer\n\n"
        'path = "."  # this directory, or its Hub repo id (and revision=... for a checkpoint)\n'
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        f"model = {auto}.from_pretrained(path).eval()\n"
        f'batch = tokenizer({list(texts)!r}, padding=True, return_tensors="pt")\n'
        "with torch.no_grad():\n"
        f"    output = model(**batch).{head.output}\n"
        "print(tuple(output.shape))"
    )
    return code, "(" + ", ".join(str(n) for n in shape) + ")"


def other_ways(info: CardInfo) -> str:
    """How else to load it: the other two of transformers, sentence-transformers and ONNX Runtime."""
    st = (
        "```python\nimport neobert\nfrom neobert.integrations.sentence_transformers import save_sentence_transformer\n"
        "from sentence_transformers import SentenceTransformer\n\n"
        'save_sentence_transformer(".", None, "st-model")  # mean pooling over this encoder\n'
        'model = SentenceTransformer("st-model")\n```\n'
    )
    onnx = (
        "```bash\nneobert export onnx --model . --output onnx-model  # checked against PyTorch at export\n```\n\n"
        '```python\nfrom neobert.export.runtime import OnnxEncoder\nencoder = OnnxEncoder("onnx-model")\n```\n'
    )
    if info.library == "onnx":
        return (
            "This directory holds `model.onnx` (and `model_int8.onnx` where quantized), the tokenizer and "
            "`onnx_config.json`; any ONNX Runtime program can run it with the inputs `input_ids` and "
            "`attention_mask`. The PyTorch model it was exported from loads with transformers' Auto "
            "classes after `import neobert`.\n"
        )
    if info.head == "sparse-embedding":
        return (
            "The root of this directory is also a transformers masked-LM model (`AutoModelForMaskedLM`, after "
            "`import neobert`): the vector is the max over real tokens of log(1 + ReLU(logits)), which "
            "`neobert.inference.sparse.encode_sparse` computes.\n"
        )
    if info.head == "late-interaction":
        return (
            "The root of this directory is also a transformers model (`AutoModel`, after `import neobert`); "
            "`1_Dense` holds the token projection. `neobert.inference.late_interaction.load_late_interaction` and "
            "`token_vectors` give the same token vectors as `MultiVectorEncoder` and PyLate.\n"
        )
    if info.library == "sentence-transformers":
        return (
            'The root of this directory is also a transformers model (`AutoModel.from_pretrained(".")` after '
            "`import neobert`; pool `last_hidden_state` over the attention mask as `modules.json`'s Pooling says to "
            "get the same vectors).\n\nONNX Runtime:\n\n" + onnx
        )
    head = HEADS.get(info.head, HEADS["base"])
    if not head.labelled:
        return "sentence-transformers (embeddings):\n\n" + st + "\nONNX Runtime:\n\n" + onnx
    if not head.exports:
        return f"ONNX Runtime: `neobert export onnx` exports the encoder of this directory, not its {head.name} head.\n"
    return "ONNX Runtime (the classifier's logits):\n\n" + onnx
