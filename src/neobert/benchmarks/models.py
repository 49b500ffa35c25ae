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
from dataclasses import dataclass

import torch
from torch import nn

from ..config import PRESETS, ModelConfig
from ..fastpath import fast_inference
from ..model import NeoBERTConfig, NeoBERTModel


@dataclass
class Encoder:
    """A built model and what the benchmark needs to know about it."""

    name: str
    model: nn.Module
    hidden_size: int
    max_length: int  # longest input it accepts
    vocab_size: int
    pad_token_id: int
    windows: list[int | None]  # per layer: keys a query may see (None = all)
    is_neobert: bool = False
    fuse: bool = True  # NeoBERT: the fast path's fused CPU epilogues

    @property
    def linear_params(self) -> int:
        """Weights of every matrix multiply, one multiply-add per weight per token (embeddings excluded)."""
        return sum(m.weight.numel() for m in self.model.modules() if isinstance(m, nn.Linear))

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def flops_per_token(self, length: int) -> int:
        keys = [length if w is None else min(length, w) for w in self.windows]
        return forward_flops_per_token(self.linear_params, self.hidden_size, keys)


def forward_flops_per_token(linear_params: int, hidden_size: int, keys_per_layer: Sequence[int]) -> int:
    """Forward FLOPs per token of an encoder, counted analytically.

    ``2 * linear_params``: each weight of a linear layer is one multiply-add per token. Attention adds, per
    layer, ``4 * n * C`` for a query that sees ``n`` keys: q.k over n keys (2nC) and the weighted sum of n
    values (2nC), C = heads x head_dim = hidden. Norms, activations, softmax and RoPE are O(C) per token and
    left out, as are embeddings (a gather) and heads. A sliding window of w keys counts ``n = min(L, w)``,
    the work the architecture needs (the transformers SDPA path computes full scores and masks them).
    """
    return 2 * linear_params + sum(4 * n * hidden_size for n in keys_per_layer)


def _neobert(preset: str, fuse: bool = True) -> Callable[[], Encoder]:
    def build() -> Encoder:
        cfg = ModelConfig.from_name(preset)
        model = NeoBERTModel(NeoBERTConfig.from_model_config(cfg))
        return Encoder(
            "",  # named by build_encoder
            model,
            cfg.hidden_size,
            cfg.max_length,
            cfg.vocab_size,
            cfg.pad_token_id,
            [None] * cfg.num_hidden_layers,
            is_neobert=True,
            fuse=fuse,
        )

    return build


def _bert(layers: int, hidden: int, heads: int, ffn: int, vocab: int = 30522, roberta: bool = False):
    def build() -> Encoder:
        from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

        common = dict(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ffn,
        )
        if roberta:
            config = RobertaConfig(**common, max_position_embeddings=514, pad_token_id=1, type_vocab_size=1)
            model, max_length = RobertaModel(config, add_pooling_layer=False), 512
        else:
            config = BertConfig(**common, max_position_embeddings=512)
            model, max_length = BertModel(config, add_pooling_layer=False), 512
        config._attn_implementation = "sdpa"
        return Encoder("", model, hidden, max_length, vocab, config.pad_token_id, [None] * layers)

    return build


def _modernbert(layers: int, hidden: int, heads: int, ffn: int, vocab: int = 50368, positions: int = 8192):
    def build() -> Encoder:
        from transformers import ModernBertConfig, ModernBertModel

        # the released special-token ids lie outside a test-sized vocabulary
        special = {}
        if vocab < 50368:
            special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
        config = ModernBertConfig(
            **special,
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ffn,
            max_position_embeddings=positions,
            global_attn_every_n_layers=3,
            local_attention=128,
        )
        config._attn_implementation = "sdpa"
        model = ModernBertModel(config)
        windows = [None if t == "full_attention" else config.local_attention for t in config.layer_types]
        return Encoder("", model, hidden, positions, vocab, config.pad_token_id, windows)

    return build


BUILDERS: dict[str, Callable[[], Encoder]] = {
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
    "neobert-unfused": _neobert("neobert", fuse=False),
}


def build_encoder(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Encoder:
    """The named encoder in eval mode, weights held in ``dtype`` on ``device`` (random, seeded)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(BUILDERS)}")
    torch.manual_seed(0)
    encoder = BUILDERS[name]()
    encoder.name = name
    encoder.model = encoder.model.to(device=device, dtype=dtype).eval()
    if encoder.is_neobert:
        fast_inference(encoder.model, dtype, fuse=encoder.fuse)  # what we ship: also the unpadded path
    return encoder


def set_unpad(encoder: Encoder, unpad: bool) -> None:
    """Switch a NeoBERT encoder between the padded and the unpadded (real tokens only) path."""
    if not encoder.is_neobert:
        raise ValueError(f"{encoder.name} has no unpadded path")
    fast_inference(encoder.model, dtype=None, unpad=unpad, fuse=encoder.fuse)


def random_inputs(
    encoder: Encoder, batch: int, length: int, device: str = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) random token ids that avoid the pad id, and an all-ones attention mask."""
    g = torch.Generator().manual_seed(seed)
    low = min(1000, encoder.vocab_size // 4)
    ids = torch.randint(low, encoder.vocab_size, (batch, length), generator=g)
    ids[ids == encoder.pad_token_id] = low
    return ids.to(device), torch.ones_like(ids, device=device)
