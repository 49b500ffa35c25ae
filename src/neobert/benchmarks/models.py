"""The encoders the throughput benchmark compares, built from their published shapes with random weights.

Nothing is downloaded: each transformers model is its config class filled with the hyper-parameters of the
well-known checkpoint (speed does not depend on the weights' values). Shapes used:

| name | layers x hidden | heads | FFN | vocab | positions | attention |
|---|---|---|---|---|---|---|
| bert-base | 12 x 768 | 12 | 3072 GELU | 30522 | 512 | global |
| bert-large | 24 x 1024 | 16 | 4096 GELU | 30522 | 512 | global |
| roberta-base | 12 x 768 | 12 | 3072 GELU | 50265 | 514 (512 usable) | global |
| roberta-large | 24 x 1024 | 16 | 4096 GELU | 50265 | 514 (512 usable) | global |
| modernbert-base | 22 x 768 | 12 | 1152 GeGLU | 50368 | 8192 | global every 3rd layer, else 128-token window |
| modernbert-large | 28 x 1024 | 16 | 2624 GeGLU | 50368 | 8192 | global every 3rd layer, else 128-token window |
| neobert | 28 x 768 | 12 | 2048 SwiGLU | 30522 | 4096 | global |

``neobert-<preset>`` is any NeoBERT preset (``neobert-tiny``, ``neobert-120m`` ...); ``neobert-unfused`` is
``neobert`` on the fast path without its fused CPU epilogues (to measure them); ``bert-tiny`` and
``modernbert-tiny`` are test-sized. Bare encoders only: no pooler, no MLM head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    ModernBertConfig,
    ModernBertModel,
    RobertaConfig,
    RobertaModel,
)

from ..common.config import PRESETS, ModelConfig
from ..inference.encoders import Encoder, is_neobert, max_positions
from ..model import NeoBERTConfig, NeoBERTModel
from ..runtime.fastpath import FusedEncoderBlock, fast_inference


def linear_params(model: nn.Module) -> int:
    """Weights of every matrix multiply, one multiply-add per weight per token (embeddings excluded)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def attention_windows(model: nn.Module) -> list[int | None]:
    """Per layer: how many keys a query may see (None = all); ModernBERT's local layers see a window."""
    config = model.config
    local = getattr(config, "local_attention", None)
    types = getattr(config, "layer_types", None)
    if local is not None and types is not None:
        return [None if t == "full_attention" else local for t in types]
    return [None] * config.num_hidden_layers


def flops_per_token(encoder: Encoder, length: int) -> int:
    """Forward FLOPs per token of ``encoder`` on ``length``-token inputs (see :func:`forward_flops_per_token`)."""
    keys = [length if w is None else min(length, w) for w in attention_windows(encoder.model)]
    return forward_flops_per_token(linear_params(encoder.model), encoder.hidden_size, keys)


def forward_flops_per_token(linear_params: int, hidden_size: int, keys_per_layer: Sequence[int]) -> int:
    """Forward FLOPs per token of an encoder, counted analytically.

    ``2 * linear_params``: each weight of a linear layer is one multiply-add per token. Attention adds, per
    layer, ``4 * n * C`` for a query that sees ``n`` keys: q.k over n keys (2nC) and the weighted sum of n
    values (2nC), C = heads x head_dim = hidden. Norms, activations, softmax and RoPE are O(C) per token and
    left out, as are embeddings (a gather) and heads. A sliding window of w keys counts ``n = min(L, w)``,
    the work the architecture needs (the transformers SDPA path computes full scores and masks them).
    """
    return 2 * linear_params + sum(4 * n * hidden_size for n in keys_per_layer)


def _neobert(preset: str) -> Callable[[], nn.Module]:
    return lambda: NeoBERTModel(NeoBERTConfig.from_model_config(ModelConfig.from_name(preset)))


def _sizes(layers: int, hidden: int, heads: int, ffn: int, vocab: int) -> dict[str, int]:
    """The shape of a transformers encoder config, as BERT, RoBERTa and ModernBERT all name it."""
    names = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    return dict(zip(names, (layers, hidden, heads, ffn, vocab)))


def _bert(layers: int, hidden: int, heads: int, ffn: int, vocab: int = 30522, roberta: bool = False):
    def build() -> nn.Module:
        common = _sizes(layers, hidden, heads, ffn, vocab)
        if roberta:
            config = RobertaConfig(**common, max_position_embeddings=514, pad_token_id=1, type_vocab_size=1)
            model = RobertaModel(config, add_pooling_layer=False)
        else:
            model = BertModel(BertConfig(**common, max_position_embeddings=512), add_pooling_layer=False)
        model.config._attn_implementation = "sdpa"
        return model

    return build


def _modernbert(layers: int, hidden: int, heads: int, ffn: int, vocab: int = 50368, positions: int = 8192):
    def build() -> nn.Module:
        # the released special-token ids lie outside a test-sized vocabulary
        special = {}
        if vocab < 50368:
            special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
        config = ModernBertConfig(
            **special,
            **_sizes(layers, hidden, heads, ffn, vocab),
            max_position_embeddings=positions,
            global_attn_every_n_layers=3,
            local_attention=128,
        )
        config._attn_implementation = "sdpa"
        return ModernBertModel(config)

    return build


BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "bert-base": _bert(12, 768, 12, 3072),
    "bert-large": _bert(24, 1024, 16, 4096),
    "roberta-base": _bert(12, 768, 12, 3072, vocab=50265, roberta=True),
    "roberta-large": _bert(24, 1024, 16, 4096, vocab=50265, roberta=True),
    "modernbert-base": _modernbert(22, 768, 12, 1152),
    "modernbert-large": _modernbert(28, 1024, 16, 2624),
    "bert-tiny": _bert(2, 64, 4, 256, vocab=128),
    "modernbert-tiny": _modernbert(3, 64, 4, 96, vocab=128, positions=512),
    "neobert": _neobert("neobert"),
    **{f"neobert-{p}": _neobert(p) for p in PRESETS if p != "neobert"},
    "neobert-unfused": _neobert("neobert"),
}
UNFUSED = ("neobert-unfused",)


def build_encoder(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Encoder:
    """The named encoder in eval mode, weights held in ``dtype`` on ``device`` (random, seeded)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(BUILDERS)}")
    torch.manual_seed(0)
    model = BUILDERS[name]().to(device=device, dtype=dtype).eval()
    if is_neobert(model):
        fast_inference(model, dtype, fuse=name not in UNFUSED)  # what we ship: also the unpadded path
    return Encoder(model, None, name, max_positions(model))


def set_unpad(encoder: Encoder, unpad: bool) -> None:
    """Switch a NeoBERT encoder between the padded and the unpadded (real tokens only) path."""
    if not encoder.is_neobert:
        raise ValueError(f"{encoder.name} has no unpadded path")
    fused = any(isinstance(m, FusedEncoderBlock) for m in encoder.model.modules())
    fast_inference(encoder.model, dtype=None, unpad=unpad, fuse=fused)


def random_inputs(
    encoder: Encoder, batch: int, length: int, device: str = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) random token ids that avoid the pad id, and an all-ones attention mask."""
    g = torch.Generator().manual_seed(seed)
    low = min(1000, encoder.vocab_size // 4)
    ids = torch.randint(low, encoder.vocab_size, (batch, length), generator=g)
    ids[ids == encoder.pad_token_id] = low
    return ids.to(device), torch.ones_like(ids, device=device)
