"""Parity of our NeoBERT with an independent float64 reference, on a directory in the released layout.

The reference below is written straight from the conventions of the spec (NEOBERT.md, section 2) and
imports nothing from ``neobert.model``: if the package and this file agree, a real released checkpoint
computes what the original remote code computes. The checkpoint is written by hand with
``safetensors.torch.save_file`` under the released tensor names and a released-style ``config.json``
(``auto_map`` to remote code, the extra ``kwargs`` keys, ...), and loaded through the Auto classes
without ``trust_remote_code``.

The shapes are small but chosen so that mistakes show: several heads (a wrong qkv split mixes them),
head dim 16 and positions up to 32 (RoPE pairing matters), non-unit norm weights and a decoder bias (a
dropped weight or bias changes the output), and ``intermediate_size`` 200, where the SwiGLU width
int(2 * 200 / 3) = 133 must be rounded *up* to 136.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

import neobert  # also registers model type "neobert" with the Auto classes
from released_layout import ffn_width, released_config, released_tensors, write_checkpoint

VOCAB, HIDDEN, LAYERS, HEADS, INTERMEDIATE, MAX_LENGTH = 100, 64, 3, 4, 200, 64
HEAD_DIM = HIDDEN // HEADS
FFN = ffn_width(INTERMEDIATE)  # SwiGLU hidden width: 136
NORM_EPS, THETA, NUM_LABELS = 1e-5, 10000.0, 3

# Real tokens per row of the test batch; rows are right-padded to the longest.
LENGTHS = (33, 20, 5)

# The released config.json (values scaled down to the test shape).
RELEASED_CONFIG = released_config(VOCAB, HIDDEN, LAYERS, HEADS, INTERMEDIATE, MAX_LENGTH, NORM_EPS)


# --------------------------------------------------------------------------------------------------
# Writing a checkpoint directory in the released layout
# --------------------------------------------------------------------------------------------------


def classifier_tensors(seed: int = 1) -> dict[str, torch.Tensor]:
    """The released sequence-classification head: ``dense`` (C -> C) then ``classifier`` (C -> labels)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "dense.weight": torch.randn(HIDDEN, HIDDEN, generator=g) * 0.2,
        "dense.bias": torch.randn(HIDDEN, generator=g) * 0.2,
        "classifier.weight": torch.randn(NUM_LABELS, HIDDEN, generator=g) * 0.2,
        "classifier.bias": torch.randn(NUM_LABELS, generator=g) * 0.2,
    }


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    return released_tensors(RELEASED_CONFIG)


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory: pytest.TempPathFactory, weights: dict[str, torch.Tensor]) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("released") / "mlm", weights, RELEASED_CONFIG)


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch: (input_ids, attention_mask), both (B, L); padding holds pad id 0."""
    g = torch.Generator().manual_seed(2)
    length = max(LENGTHS)
    mask = (torch.arange(length)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    ids = torch.randint(1, VOCAB, (len(LENGTHS), length), generator=g) * mask
    return ids, mask


# --------------------------------------------------------------------------------------------------
# The float64 reference, from the spec's conventions
# --------------------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * weight


def rope_angles(length: int) -> torch.Tensor:
    """(L, D/2): angle of pair j at position p is p * theta^(-2j/D)."""
    inv_freq = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    return torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]


def rope_adjacent(x: torch.Tensor) -> torch.Tensor:
    """The released convention: dims (2j, 2j+1) form one complex number, multiplied by e^(i*angle).

    x: (B, L, H, D).
    """
    angles = rope_angles(x.shape[1])
    rotation = torch.polar(torch.ones_like(angles), angles)[None, :, None, :]  # (1, L, 1, D/2)
    pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())  # (B, L, H, D/2)
    return torch.view_as_real(pairs * rotation).flatten(-2)


def rope_rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The WRONG (LLaMA / GPT-NeoX) pairing (j, j + D/2); only used to show the test is sensitive."""
    angles = rope_angles(x.shape[1])
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def split_qkv_per_head(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released convention: (..., 3C) viewed as (..., H, 3D); q, k, v are consecutive inside each head."""
    per_head = qkv.unflatten(-1, (HEADS, 3 * HEAD_DIM))
    return per_head[..., :HEAD_DIM], per_head[..., HEAD_DIM : 2 * HEAD_DIM], per_head[..., 2 * HEAD_DIM :]


def split_qkv_blocked(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The WRONG split [all q | all k | all v]; only used to show the test is sensitive."""
    return tuple(t.unflatten(-1, (HEADS, HEAD_DIM)) for t in qkv.chunk(3, dim=-1))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Explicit softmax attention; q, k, v (B, L, H, D), mask (B, L) 1 = real key. Returns (B, L, H, D)."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(dim=-1), v)


def reference_forward(
    w: dict[str, torch.Tensor],
    ids: torch.Tensor,
    mask: torch.Tensor,
    rope=rope_adjacent,
    split_qkv=split_qkv_per_head,
    gate_first: bool = True,
) -> dict[str, object]:
    """float64 NeoBERT forward. Returns hidden_states (embedding + each block), last_hidden_state (after
    the final norm) and logits. The keyword arguments swap in wrong conventions for the sensitivity test."""
    w = {name: t.double() for name, t in w.items()}
    x = w["model.encoder.weight"][ids]  # (B, L, C)
    hidden_states = [x]
    for i in range(LAYERS):
        p = f"model.transformer_encoder.{i}."
        h = rms_norm(x, w[p + "attention_norm.weight"])
        q, k, v = split_qkv(h @ w[p + "qkv.weight"].T)  # each (B, L, H, D)
        a = attention(rope(q), rope(k), v, mask)
        x = x + a.flatten(-2) @ w[p + "wo.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"])
        gate, up = (h @ w[p + "ffn.w12.weight"].T).chunk(2, dim=-1)
        if not gate_first:
            gate, up = up, gate
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "ffn.w3.weight"].T
        hidden_states.append(x)
    last = rms_norm(x, w["model.layer_norm.weight"])
    logits = last @ w["decoder.weight"].T + w["decoder.bias"]
    return {"hidden_states": hidden_states, "last_hidden_state": last, "logits": logits}


def reference_classifier(w: dict[str, torch.Tensor], last_hidden_state: torch.Tensor) -> torch.Tensor:
    """The released head (dropout is off in eval): classifier(tanh(dense(h[:, 0])))."""
    w = {name: t.double() for name, t in w.items()}
    x = torch.tanh(last_hidden_state[:, 0] @ w["dense.weight"].T + w["dense.bias"])
    return x @ w["classifier.weight"].T + w["classifier.bias"]


def assert_real_tokens_close(actual: torch.Tensor, expected: torch.Tensor, mask: torch.Tensor) -> None:
    """Compare only real-token positions (what padding positions hold is not specified)."""
    real = mask.bool()
    torch.testing.assert_close(actual[real].double(), expected[real], atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


def test_reference_follows_spec_shapes(weights):
    # guard the fixture itself: the released names, and the SwiGLU width rounded up to a multiple of 8
    assert FFN == 136
    assert len(weights) == 1 + 6 * LAYERS + 1 + 2
    assert weights["model.transformer_encoder.0.ffn.w12.weight"].shape == (2 * FFN, HIDDEN)


@pytest.mark.parametrize("unpad", [False, True], ids=["padded", "unpadded"])
def test_masked_lm_matches_reference(mlm_dir, weights, batch, unpad):
    # unpad=True runs the encoder on real tokens only (cu_seqlens): a different code path, same function
    ids, mask = batch
    model = neobert.set_runtime(transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir), unpad=unpad)
    assert isinstance(model, neobert.NeoBERTForMaskedLM)
    assert not model.training  # from_pretrained returns an eval-mode model
    ref = reference_forward(weights, ids, mask)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)

    assert out.logits.dtype == torch.float32
    assert_real_tokens_close(out.logits, ref["logits"], mask)
    assert len(out.hidden_states) == LAYERS + 1
    for actual, expected in zip(out.hidden_states, ref["hidden_states"]):
        assert_real_tokens_close(actual, expected, mask)


def test_base_model_matches_reference(mlm_dir, weights, batch):
    ids, mask = batch
    model = transformers.AutoModel.from_pretrained(mlm_dir)
    assert isinstance(model, neobert.NeoBERTModel)
    ref = reference_forward(weights, ids, mask)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)

    # last_hidden_state is after the final norm; hidden_states[-1] is the last block's output before it
    assert_real_tokens_close(out.last_hidden_state, ref["last_hidden_state"], mask)
    assert len(out.hidden_states) == LAYERS + 1
    for actual, expected in zip(out.hidden_states, ref["hidden_states"]):
        assert_real_tokens_close(actual, expected, mask)


def test_no_attention_mask_means_all_tokens_real(mlm_dir, weights, batch):
    ids = batch[0][:, :20].clamp(min=1)  # every position a real token
    mask = torch.ones_like(ids)
    model = transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir)
    with torch.no_grad():
        logits = model(ids).logits
    assert_real_tokens_close(logits, reference_forward(weights, ids, mask)["logits"], mask)


def test_sequence_classification_matches_reference(tmp_path, weights, batch):
    # a fine-tuned classification checkpoint: encoder + dense/classifier, no decoder
    head = classifier_tensors()
    tensors = {k: v for k, v in weights.items() if not k.startswith("decoder.")} | head
    config = RELEASED_CONFIG | {
        "architectures": ["NeoBERTForSequenceClassification"],
        "id2label": {str(i): f"label_{i}" for i in range(NUM_LABELS)},
        "label2id": {f"label_{i}": i for i in range(NUM_LABELS)},
    }
    path = write_checkpoint(tmp_path / "cls", tensors, config)
    ids, mask = batch

    model = transformers.AutoModelForSequenceClassification.from_pretrained(path)
    assert isinstance(model, neobert.NeoBERTForSequenceClassification)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits

    expected = reference_classifier(head, reference_forward(weights, ids, mask)["last_hidden_state"])
    assert logits.shape == (len(LENGTHS), NUM_LABELS)
    torch.testing.assert_close(logits.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param({"rope": rope_rotate_half}, id="rotate-half-rope"),
        pytest.param({"split_qkv": split_qkv_blocked}, id="blocked-qkv-split"),
        pytest.param({"gate_first": False}, id="swiglu-up-gate-swapped"),
    ],
)
def test_parity_is_sensitive_to_classic_mistakes(mlm_dir, weights, batch, wrong):
    # If a wrong convention gave (nearly) the same numbers, the parity tests above would prove nothing.
    ids, mask = batch
    model = transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits.double()
    real = mask.bool()
    right = reference_forward(weights, ids, mask)["logits"][real]
    mistaken = reference_forward(weights, ids, mask, **wrong)["logits"][real]
    torch.testing.assert_close(logits[real], right, atol=1e-5, rtol=0)
    assert (logits[real] - mistaken).abs().max() > 1e-3


def test_save_pretrained_round_trip_is_bit_exact(tmp_path, mlm_dir, weights, batch):
    ids, mask = batch
    model = transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir)
    model.save_pretrained(tmp_path / "saved")

    # The file holds exactly the released tensors, same names, shapes, dtype and bits, and no extras
    # (e.g. no RoPE buffers), so the original remote code could read it.
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert sorted(saved) == sorted(weights)
    for name, tensor in weights.items():
        assert saved[name].dtype == torch.float32, name
        assert torch.equal(saved[name], tensor), name

    # The config keeps every field the released config.json has, with the same values.
    saved_config = json.loads((tmp_path / "saved" / "config.json").read_text(encoding="utf-8"))
    assert saved_config["model_type"] == "neobert"
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_length",
        "norm_eps",
        "pad_token_id",
        "embedding_init_range",
        "decoder_init_range",
        "dim_head",
        "classifier_init_range",
    ):
        assert saved_config[key] == RELEASED_CONFIG[key], key

    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "saved")
    state, reloaded_state = model.state_dict(), reloaded.state_dict()
    assert state.keys() == reloaded_state.keys()
    for name, tensor in state.items():
        assert torch.equal(reloaded_state[name], tensor), name
    with torch.no_grad():
        before = model(ids, attention_mask=mask, output_hidden_states=True)
        after = reloaded(ids, attention_mask=mask, output_hidden_states=True)
    torch.testing.assert_close(after.logits, before.logits, atol=0, rtol=0)
    for a, b in zip(after.hidden_states, before.hidden_states, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
