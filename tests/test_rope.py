"""RoPE in NeoBERT's convention (adjacent pairs), its context-extension scalings, and the length limit."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from helpers import apply_rope
from neobert import ModelConfig, NeoBERTConfig, NeoBERTModel, SequenceTooLongError
from neobert.model import inverse_frequencies, rope_tables

D = 64  # the released head dimension
THETA = 10000.0


def plain_frequencies(head_dim: int = D, theta: float = THETA) -> torch.Tensor:
    """theta ** (-2j / d), written independently of the code under test."""
    return torch.tensor([theta ** (-2 * j / head_dim) for j in range(head_dim // 2)], dtype=torch.float64)


def randomized(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Larger random weights than the 0.02 init, so attention patterns (and positions) matter."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, std)
    return model.eval()


def tiny_model(config: ModelConfig) -> NeoBERTModel:
    return randomized(NeoBERTModel(NeoBERTConfig.from_model_config(config)))


# --- inverse_frequencies ----------------------------------------------------------------------------


def test_plain_frequencies():
    inv_freq, scale = inverse_frequencies(D, THETA)
    assert inv_freq.dtype == torch.float64
    assert inv_freq.shape == (D // 2,)
    torch.testing.assert_close(inv_freq, plain_frequencies(), rtol=1e-12, atol=0)
    assert scale == 1.0


@pytest.mark.parametrize("scaling", ["none", "linear", "ntk", "yarn"])
def test_factor_one_is_plain_rope_exactly(scaling):
    plain, _ = inverse_frequencies(D, THETA)
    inv_freq, scale = inverse_frequencies(D, THETA, scaling, 1.0, original_max_length=1024)
    assert torch.equal(inv_freq, plain)
    assert scale == 1.0


def test_linear_divides_every_frequency():
    inv_freq, scale = inverse_frequencies(D, THETA, "linear", 4.0, 1024)
    torch.testing.assert_close(inv_freq, plain_frequencies() / 4.0, rtol=1e-12, atol=0)
    assert scale == 1.0


def test_ntk_keeps_highest_and_divides_lowest_frequency():
    factor = 4.0
    inv_freq, scale = inverse_frequencies(D, THETA, "ntk", factor, 1024)
    plain = plain_frequencies()
    assert scale == 1.0
    assert inv_freq[0].item() == pytest.approx(plain[0].item(), rel=1e-12)  # j = 0: frequency 1
    assert (plain[-1] / inv_freq[-1]).item() == pytest.approx(factor, rel=1e-9)
    # in between, the interpolation grows monotonically from 1 to the factor
    ratio = plain / inv_freq
    assert torch.all(ratio[1:] > ratio[:-1])
    assert torch.all((ratio >= 1.0 - 1e-12) & (ratio <= factor + 1e-9))


def test_yarn_frequencies_and_scale():
    factor, original = 4.0, 4096
    beta_fast, beta_slow = 32.0, 1.0
    inv_freq, scale = inverse_frequencies(D, THETA, "yarn", factor, original, beta_fast, beta_slow)
    plain = plain_frequencies()
    rotations = original * plain / (2 * math.pi)  # full turns each pair makes over the trained context
    fast = rotations >= beta_fast
    slow = rotations <= beta_slow
    assert fast.any() and slow.any() and (~fast & ~slow).any()
    # fast pairs untouched, slow pairs interpolated by the full factor
    torch.testing.assert_close(inv_freq[fast], plain[fast], rtol=1e-12, atol=0)
    torch.testing.assert_close(inv_freq[slow], plain[slow] / factor, rtol=1e-12, atol=0)
    # the ramp in between blends the two: strictly between them
    mid = ~fast & ~slow
    assert torch.all(inv_freq[mid] < plain[mid])
    assert torch.all(inv_freq[mid] > plain[mid] / factor)
    # linear ramp in the number of rotations
    gamma = (rotations[mid] - beta_slow) / (beta_fast - beta_slow)
    torch.testing.assert_close(inv_freq[mid], gamma * plain[mid] + (1 - gamma) * plain[mid] / factor)
    assert scale == pytest.approx(0.1 * math.log(factor) + 1.0)


def test_yarn_attention_scale_reaches_tables():
    config = ModelConfig.from_name("tiny").with_context(512, "yarn")  # factor 4
    cos, sin = rope_tables(config)
    expected = 0.1 * math.log(4.0) + 1.0
    torch.testing.assert_close(cos**2 + sin**2, torch.full_like(cos, expected**2))


def test_rope_tables_match_formula():
    config = ModelConfig.from_name("tiny")
    cos, sin = rope_tables(config)
    assert cos.shape == sin.shape == (config.max_length, config.head_dim // 2)
    assert cos.dtype == torch.float32
    angles = torch.arange(config.max_length, dtype=torch.float64)[:, None] * plain_frequencies(
        config.head_dim
    )
    torch.testing.assert_close(cos, angles.cos().float())
    torch.testing.assert_close(sin, angles.sin().float())


# --- apply_rope -------------------------------------------------------------------------------------


def naive_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate (x[2j], x[2j+1]) as the complex number x[2j] + i x[2j+1] by pos * inv_freq[j]."""
    b, length, h, d = x.shape
    z = torch.view_as_complex(x.double().reshape(b, length, h, d // 2, 2).contiguous())
    angles = positions.double()[:, None] * inv_freq[None, :]  # (L, D/2)
    rotated = z * torch.polar(torch.ones_like(angles), angles)[None, :, None, :]
    return torch.view_as_real(rotated).reshape(b, length, h, d)


def test_apply_rope_is_complex_rotation_of_adjacent_pairs():
    torch.manual_seed(0)
    config = ModelConfig.from_name("tiny")
    x = torch.randn(2, 10, 4, config.head_dim, dtype=torch.float64)
    cos, sin = rope_tables(config)
    out = apply_rope(x, cos[:10, None, :].double(), sin[:10, None, :].double())
    expected = naive_rope(x, torch.arange(10), plain_frequencies(config.head_dim))
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_apply_rope_is_not_rotate_half():
    torch.manual_seed(0)
    d = 8
    x = torch.randn(1, 3, 1, d)
    inv_freq = plain_frequencies(d)
    angles = torch.arange(3, dtype=torch.float64)[:, None] * inv_freq
    out = apply_rope(x, angles.cos().float()[:, None], angles.sin().float()[:, None])
    # "rotate half" pairs (j, j + d/2): different for any position > 0
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    c, s = angles.cos().float()[None, :, None], angles.sin().float()[None, :, None]
    rotate_half = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    assert not torch.allclose(out[:, 1:], rotate_half[:, 1:], atol=1e-3)
    torch.testing.assert_close(out[:, 0], x[:, 0])  # position 0 is the identity


def test_apply_rope_packed_layout_and_norm():
    torch.manual_seed(0)
    config = ModelConfig.from_name("tiny")
    cos, sin = rope_tables(config)
    positions = torch.tensor([0, 1, 2, 0, 1, 5, 7])
    x = torch.randn(7, 4, config.head_dim)  # (T, H, D)
    out = apply_rope(x, cos[positions].unsqueeze(-2), sin[positions].unsqueeze(-2))
    expected = naive_rope(x[None], positions, plain_frequencies(config.head_dim))[0]
    torch.testing.assert_close(out, expected.float(), rtol=1e-5, atol=1e-5)
    # a rotation keeps the norm of every pair
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


def test_rope_scores_depend_on_relative_position_only():
    torch.manual_seed(0)
    config = ModelConfig.from_name("tiny")
    cos, sin = rope_tables(config)
    q, k = torch.randn(config.head_dim), torch.randn(config.head_dim)

    def score(i: int, j: int) -> torch.Tensor:
        qi = apply_rope(q[None, None], cos[i : i + 1, None], sin[i : i + 1, None])
        kj = apply_rope(k[None, None], cos[j : j + 1, None], sin[j : j + 1, None])
        return (qi * kj).sum()

    torch.testing.assert_close(score(3, 7), score(50, 54), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(score(10, 2), score(100, 92), rtol=1e-4, atol=1e-4)


# --- context extension in a model -------------------------------------------------------------------


def test_yarn_extended_angles():
    # trained length 1024 so that, with head_dim 16, the two fastest pairs exceed beta_fast rotations
    config = ModelConfig.from_name("tiny", max_length=1024)
    long = config.with_context(4 * config.max_length, "yarn")
    cos0, sin0 = rope_tables(config)
    cos1, sin1 = rope_tables(long)
    assert cos1.shape[0] == 4 * cos0.shape[0]
    scale = 0.1 * math.log(4.0) + 1.0
    angle0 = torch.atan2(sin0, cos0)
    angle1 = torch.atan2(sin1[: config.max_length] / scale, cos1[: config.max_length] / scale)
    # high-frequency pairs (j = 0, 1): the same angles at every trained position
    torch.testing.assert_close(angle1[:, :2], angle0[:, :2], rtol=0, atol=1e-4)
    # position 0 is the identity in both; short positions move little, in every pair
    torch.testing.assert_close(angle1[0], angle0[0], rtol=0, atol=0)
    assert (angle1[:2] - angle0[:2]).abs().max() < 0.1
    # long positions: the slow pairs are interpolated, so their angles differ
    wrapped = torch.remainder(angle1[512:, 2:] - angle0[512:, 2:] + math.pi, 2 * math.pi) - math.pi
    assert wrapped.abs().max() > 1.0


def test_yarn_extended_model_outputs():
    config = ModelConfig.from_name("tiny", max_length=1024)
    base = randomized(NeoBERTModel(NeoBERTConfig.from_model_config(config)), std=0.1)
    long = NeoBERTModel(NeoBERTConfig.from_model_config(config.with_context(4096, "yarn"))).eval()
    long.load_state_dict(base.state_dict())
    # YaRN multiplies cos and sin by its temperature, i.e. q and k: fold that into a copy of the base model,
    # so the only remaining difference is the interpolated (slow) frequencies
    scale = 0.1 * math.log(4.0) + 1.0
    tempered = copy.deepcopy(base)
    with torch.no_grad():
        for block in tempered.transformer_encoder:
            qkv = block.qkv.weight.view(config.num_attention_heads, 3, config.head_dim, config.hidden_size)
            qkv[:, :2] *= scale  # q and k rows of every head

    def rel_diff(model_a, model_b, ids):
        with torch.no_grad():
            a, b = model_a(ids).last_hidden_state, model_b(ids).last_hidden_state
        return ((a - b).norm() / a.norm()).item()

    torch.manual_seed(0)
    short = torch.randint(1, config.vocab_size, (2, 4))
    far = torch.randint(1, config.vocab_size, (1, 1024))
    short_rel = rel_diff(tempered, long, short)
    assert short_rel < 0.05  # short positions: slow pairs have barely turned, nearly the same outputs
    assert rel_diff(base, long, short) > 2 * short_rel  # without the temperature, clearly different
    assert rel_diff(tempered, long, far) > 0.2  # long positions: the interpolation changes the outputs


def test_factor_one_extension_is_the_same_model():
    config = ModelConfig.from_name("tiny")
    base = tiny_model(config)
    same = NeoBERTModel(NeoBERTConfig.from_model_config(config.with_context(config.max_length, "yarn")))
    same.load_state_dict(base.state_dict())
    same.eval()
    ids = torch.randint(1, config.vocab_size, (2, config.max_length))
    with torch.no_grad():
        torch.testing.assert_close(same(ids).last_hidden_state, base(ids).last_hidden_state, rtol=0, atol=0)


def test_too_long_input_raises_and_extension_accepts_it():
    config = ModelConfig.from_name("tiny")
    base = tiny_model(config)
    ids = torch.randint(1, config.vocab_size, (1, config.max_length + 1))
    with pytest.raises(SequenceTooLongError, match="max_length"):
        base(ids)
    with pytest.raises(SequenceTooLongError):  # also with a mask, and unpadded
        base(ids, attention_mask=torch.ones_like(ids))
    # packed input: the longest sequence counts, not the total
    packed = torch.randint(1, config.vocab_size, (config.max_length + 10,))
    ok_cu = torch.tensor([0, 100, config.max_length + 10], dtype=torch.int32)
    assert base(packed, cu_seqlens=ok_cu).last_hidden_state.shape == (config.max_length + 10, 64)
    with pytest.raises(SequenceTooLongError):
        base(packed, cu_seqlens=torch.tensor([0, config.max_length + 10], dtype=torch.int32))

    for method in ("yarn", "ntk", "linear"):
        long = NeoBERTModel(
            NeoBERTConfig.from_model_config(config.with_context(2 * config.max_length, method))
        )
        long.load_state_dict(base.state_dict())
        out = long.eval()(ids).last_hidden_state
        assert out.shape == (1, config.max_length + 1, config.hidden_size)
        assert torch.isfinite(out).all()


def test_learned_positions_cannot_run_longer():
    config = ModelConfig.from_name("tiny", position_embedding="learned")
    model = NeoBERTModel(NeoBERTConfig.from_model_config(config))
    with pytest.raises(SequenceTooLongError, match="truncate"):
        model(torch.ones(1, config.max_length + 1, dtype=torch.long))


def test_sequence_too_long_is_a_value_error():
    assert issubclass(SequenceTooLongError, ValueError)
