"""The CPU inference fast path: the same function as the reference path, in bf16 within a stated tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import neobert.model.attention as attention
import neobert.runtime.fastpath as fastpath
from helpers import apply_rope
from neobert import ModelConfig, NeoBERTConfig, NeoBERTModel
from neobert.model import padded_context, rope_tables, set_runtime
from neobert.model.attention import equal_length_runs
from neobert.model.checks import BackendCheck
from neobert.model.layers import EncoderBlock, RMSNorm
from neobert.model.pooling import mean_pool
from neobert.model.rope import rotate_pairs
from neobert.runtime.fastpath import fast_inference

# Tolerance of the bf16 fast path against float32, on mean-pooled embeddings (what embedding users see).
BF16_MIN_COSINE = 0.99


def make_model(unpad: bool | None = None, **overrides) -> NeoBERTModel:
    """Tiny encoder with weights larger than the 0.02 init, so attention is far from uniform."""
    torch.manual_seed(0)
    model = NeoBERTModel(NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny", **overrides)))
    set_runtime(model, unpad=unpad)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, 0.1)
    return model.eval()


def padded_batch(lengths, length=None, vocab=128):
    torch.manual_seed(1)
    length = length or max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), length))
    mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def test_rmsnorm_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 64) * 3
    ours, ref = RMSNorm(64, eps=1e-5), torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours(torch.zeros(2, 64)), torch.zeros(2, 64))  # eps keeps zero rows finite
    bf16 = ours.to(torch.bfloat16)(x.bfloat16())
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.float(), ref(x), rtol=2e-2, atol=2e-2)


def test_rotate_pairs_strided_bf16_and_compiled(monkeypatch):
    config = ModelConfig.from_name("tiny")
    cos, sin = rope_tables(config)
    rotations = torch.stack((cos, sin), dim=-1)[:6, None, None]  # (L, 1, 1, D/2, 2)
    torch.manual_seed(0)
    qkv = torch.randn(2, 6, 4, 3, config.head_dim)  # (B, L, H, 3, D), q and k are a strided slice
    qk = qkv[..., :2, :]
    expected = apply_rope(qk.contiguous(), cos[:6, None, None, :], sin[:6, None, None, :])
    torch.testing.assert_close(rotate_pairs(qk, rotations), expected)
    rounded = qk.bfloat16()
    bf16 = rotate_pairs(rounded, rotations)  # rotated in float32, rounded once
    assert bf16.dtype == torch.bfloat16
    expected = apply_rope(rounded.float(), cos[:6, None, None, :], sin[:6, None, None, :])
    torch.testing.assert_close(bf16, expected.bfloat16(), rtol=0, atol=0)
    # the real form used under torch.compile computes the same
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    real_form = rotate_pairs(rounded, rotations)
    torch.testing.assert_close(real_form.float(), expected, rtol=1e-2, atol=1e-2)


def test_equal_length_runs():
    # lengths 3 3 2 0 2 2 3: the empty sequence holds no token, so the 2s around it are one run
    assert equal_length_runs([0, 3, 6, 8, 8, 10, 12, 15]) == [(0, 2, 3), (6, 3, 2), (12, 1, 3)]
    assert equal_length_runs([0, 4, 8]) == [(0, 2, 4)]
    assert equal_length_runs([0]) == []


@pytest.mark.parametrize("threshold", [0, 10**9])  # run-by-run SDPA, or the padded grid
def test_packed_runs_equal_grid_and_separate(threshold, monkeypatch):
    lengths = [5, 5, 3, 7, 7, 7, 2]
    model = make_model(unpad=True)
    ids, mask = padded_batch(lengths)
    monkeypatch.setattr(attention, "MIN_TOKENS_PER_RUN", threshold)
    with torch.no_grad():  # runs are an inference path: with autograd the grid is used
        ctx = attention.packed_context(*attention.unpad(mask)[1:])
        assert bool(ctx.runs) == (threshold == 0)
        out = model(ids, attention_mask=mask).last_hidden_state
        for i, n in enumerate(lengths):
            alone = model(ids[i : i + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(out[i, :n], alone, rtol=0, atol=1e-5)
    assert not attention.packed_context(*attention.unpad(mask)[1:]).runs  # grad enabled: the grid


def test_runs_path_calls_sdpa_without_mask(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        calls.append((tuple(q.shape), attn_mask))
        return real(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    model = make_model(unpad=True)
    ids, mask = padded_batch([40, 40, 90])  # two runs: 2 x 40 tokens, 1 x 90
    with torch.no_grad():
        model(ids, attention_mask=mask)
    assert len(calls) == 2 * model.model_config.num_hidden_layers
    assert {shape for shape, _ in calls} == {(2, 4, 40, 16), (1, 4, 90, 16)}
    assert all(m is None for _, m in calls)


def test_all_ones_mask_dropped_on_cpu():
    assert padded_context(torch.ones(2, 5, dtype=torch.long)).key_mask is None
    assert padded_context(torch.tensor([[1, 1, 0]])).key_mask is not None


@pytest.mark.parametrize("unpad", [False, True])
def test_bf16_fast_path_close_to_fp32(unpad):
    reference = make_model()
    fast = fast_inference(make_model(), torch.bfloat16, unpad=unpad)
    assert fast.encoder.weight.dtype == torch.bfloat16
    assert fast.runtime.unpad is unpad
    ids, mask = padded_batch([20, 7, 33, 12])
    with torch.inference_mode():
        ref = mean_pool(reference(ids, attention_mask=mask).last_hidden_state, mask)
        out = mean_pool(fast(ids, attention_mask=mask).last_hidden_state, mask).float()
    cosine = F.cosine_similarity(out, ref, dim=-1)
    assert cosine.min() > BF16_MIN_COSINE, cosine


def test_rope_table_stays_float_and_is_built_once(monkeypatch):
    import neobert.model.modeling as modeling

    builds = []
    real = modeling.rope_rotations
    monkeypatch.setattr(modeling, "rope_rotations", lambda *a, **k: builds.append(1) or real(*a, **k))
    model = make_model().to(torch.bfloat16)
    ids, mask = padded_batch([9, 4])
    with torch.no_grad():
        for _ in range(3):
            model(ids, attention_mask=mask)
    assert len(builds) == 1  # once per device, not per forward
    (table,) = model.rotary._tables.values()
    assert table.dtype == torch.float32  # model.to(bf16) did not round it
    torch.testing.assert_close(table[..., 0], rope_tables(model.model_config)[0])


@pytest.mark.parametrize("unpad", [False, True])
def test_long_forward_materializes_no_scores(unpad):
    """No op outside SDPA sees an (L, L) tensor: SDPA's CPU flash kernel works in blocks."""
    length = 300  # a number no other dimension has
    model = fast_inference(make_model(max_length=512), torch.bfloat16, unpad=unpad)
    ids, mask = padded_batch([length, 100], length=length)
    with torch.profiler.profile(record_shapes=True) as prof, torch.inference_mode():
        model(ids, attention_mask=mask)
    names = {e.name for e in prof.events()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
    for event in prof.events():
        for shape in event.input_shapes:
            assert not (len(shape) >= 2 and shape[-1] == shape[-2] == length), (event.name, shape)


def test_fast_inference_rejects_other_models():
    with pytest.raises(TypeError, match="NeoBERT"):
        fast_inference(torch.nn.Linear(2, 2))


def _plain_copy(model: NeoBERTModel) -> NeoBERTModel:
    plain = NeoBERTModel(model.config).eval()
    plain.load_state_dict(model.state_dict())
    return plain


def test_fused_epilogues_compute_the_plain_block(monkeypatch, fused_op):
    model = make_model()
    names = list(model.state_dict())
    fast_inference(model, fuse=False)
    assert all(type(b) is EncoderBlock for b in model.transformer_encoder)
    fast_inference(model)
    assert all(type(b) is fastpath.FusedEncoderBlock for b in model.transformer_encoder)
    assert fastpath.fuse_cpu_epilogues(model, fuse=False) == len(model.transformer_encoder)  # and back
    assert all(type(b) is EncoderBlock for b in model.transformer_encoder)
    fast_inference(model)
    assert list(model.state_dict()) == names  # same tensors under the same names
    plain = _plain_copy(model).to(torch.bfloat16)
    set_runtime(plain, unpad=True)
    calls = []
    op = fused_op

    class Counting:
        def __call__(self, *args):
            calls.append("silu")
            return op(*args)

        def binary(self, *args):
            calls.append(args[-1])
            return op.binary(*args)

    monkeypatch.setattr(fastpath, "_linear_pointwise", Counting)
    ids, mask = padded_batch([7, 5, 7, 2])
    with torch.inference_mode():
        fused = model(ids, mask).last_hidden_state.float()
        reference = plain(ids, mask).last_hidden_state.float()
    layers = len(model.transformer_encoder)
    assert sorted(calls) == sorted(["silu", "mul", "add", "add"] * layers)  # the fused path ran
    # the same function up to bf16 rounding of the intermediates (the plain path rounds them too)
    cosine = F.cosine_similarity(fused[mask.bool()], reference[mask.bool()], dim=-1)
    assert cosine.min() > 0.999
    assert (fused[~mask.bool()] == 0).all()


class NeverCalled:
    """Stands in for oneDNN's fused op where a test must show that it is not used."""

    def __call__(self, *args):
        raise AssertionError("the fused op ran")

    binary = __call__


@pytest.fixture
def epilogue_probe():
    """Clears the cached probe around a test that forces its answer."""
    real = fastpath._linear_pointwise
    real.cache_clear()
    yield
    real.cache_clear()


class UnfusedOp:
    """oneDNN's ``_linear_pointwise`` computed unfused (linear, then the post-op), for CPUs whose oneDNN lacks
    the bf16 post-ops (AVX2 only): the fused block's wiring (which weight rows, which post-op, which operand)
    is then tested there too. The real op's numbers are checked by ``check_cpu_epilogues`` where it runs."""

    def __call__(self, x, weight, bias, attr, scalars, algorithm):
        assert (attr, scalars, algorithm) == ("swish", [], "")
        return F.silu(F.linear(x, weight, bias))

    def binary(self, x, other, weight, bias, attr):
        out = F.linear(x, weight, bias)
        return {"add": out + other, "mul": out * other}[attr]


@pytest.fixture
def fused_op(monkeypatch, epilogue_probe):
    """The real fused op where this CPU runs it, else :class:`UnfusedOp` in its place."""
    op = fastpath._linear_pointwise()
    if op is None:
        op = UnfusedOp()
        monkeypatch.setattr(fastpath, "_linear_pointwise", lambda: op)
    return op


def test_fused_blocks_fall_back_to_the_plain_forward_with_gradients_or_fp32(monkeypatch, epilogue_probe):
    """Runs on every CPU: the op is forced present (and must not be called) where the CPU lacks it."""
    if fastpath._linear_pointwise() is None:
        monkeypatch.setattr(fastpath, "_linear_pointwise", NeverCalled)
    model = make_model()
    fast_inference(model, dtype=None)  # fp32 weights: never fused, so exact
    assert all(type(b) is fastpath.FusedEncoderBlock for b in model.transformer_encoder)
    ids, mask = padded_batch([7, 5, 7, 2])
    real = mask.bool()
    plain = _plain_copy(model)  # the padded path
    with torch.no_grad():
        out, reference = model(ids, mask).last_hidden_state, plain(ids, mask).last_hidden_state
    # the promise: the same function on real tokens; the unpadded path leaves zeros at padding positions
    # (the padded path computes something there that no one should read)
    torch.testing.assert_close(out[real], reference[real])
    assert (out[~real] == 0).all()
    model.to(torch.bfloat16)
    plain.to(torch.bfloat16)
    set_runtime(plain, unpad=True)
    out = model(ids, mask).last_hidden_state  # gradients on: the plain forward, differentiable
    assert out.requires_grad
    torch.testing.assert_close(out, plain(ids, mask).last_hidden_state, rtol=0, atol=0)


def test_without_the_fused_op_blocks_stay_plain_and_compute_the_same(monkeypatch, epilogue_probe):
    """The "unavailable" side, forced on any CPU: no fused blocks, the plain bf16 unpadded function."""
    unavailable = BackendCheck("cpu_epilogues", "cpu", "bfloat16", available=False, error="forced")
    monkeypatch.setattr(fastpath, "check_cpu_epilogues", lambda: unavailable)
    model = fast_inference(make_model())
    assert all(type(b) is EncoderBlock for b in model.transformer_encoder)
    plain = set_runtime(_plain_copy(make_model()).to(torch.bfloat16), unpad=True)
    ids, mask = padded_batch([7, 5, 7, 2])
    with torch.inference_mode():
        torch.testing.assert_close(
            model(ids, mask).last_hidden_state, plain(ids, mask).last_hidden_state, rtol=0, atol=0
        )


def test_a_fused_op_that_disagrees_is_not_used_and_says_so(monkeypatch, epilogue_probe):
    wrong = BackendCheck(
        "cpu_epilogues",
        "cpu",
        "bfloat16",
        available=True,
        checked=True,
        ok=False,
        max_error=0.5,
        tolerance=3e-2,
        error="disagrees with the reference path",
    )
    monkeypatch.setattr(fastpath, "check_cpu_epilogues", lambda: wrong)
    with pytest.warns(RuntimeWarning, match=r"cpu_epilogues .*failed its first-use check.*plain"):
        assert fastpath._linear_pointwise() is None
    assert fastpath.fuse_cpu_epilogues(make_model()) == 0


def test_the_epilogue_check_judges_the_real_op_or_reports_it_missing():
    check = fastpath.check_cpu_epilogues()
    if not check.available:  # an AVX2-only CPU: the op exists but refuses bf16 post-ops
        assert fastpath._linear_pointwise() is None and check.error
        return
    assert check.checked and check.ok, check.describe()
    assert check.max_error < check.tolerance


def test_gelu_blocks_are_not_fused():
    model = make_model(ffn="gelu")
    fast_inference(model)
    assert all(type(b) is not fastpath.FusedEncoderBlock for b in model.transformer_encoder)


def test_fused_blocks_leave_other_linear_modules_to_their_own_forward(fused_op):
    """A replaced projection (a quantized or wrapped linear) must run its own forward, not be bypassed."""

    class Doubled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    def double_wo(model):
        for block in model.transformer_encoder:
            doubled = Doubled(block.wo.in_features, block.wo.out_features, bias=False)
            doubled.weight = block.wo.weight
            block.wo = doubled
        return model

    ids, mask = padded_batch([7, 5, 7, 2])
    model = make_model()
    plain = double_wo(_plain_copy(model).to(torch.bfloat16))
    set_runtime(plain, unpad=True)
    fast_inference(model)
    double_wo(model)
    with torch.inference_mode():
        torch.testing.assert_close(
            model(ids, mask).last_hidden_state, plain(ids, mask).last_hidden_state, rtol=0, atol=0
        )
