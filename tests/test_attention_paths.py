"""The encoder computes one function whatever the batch layout: padded, unpadded, packed, checkpointed."""

from __future__ import annotations

import pytest
import torch

import neobert.model.attention as attention
import neobert.model.layers as layers
import neobert.model.modeling as modeling
from neobert import ModelConfig, NeoBERTConfig, NeoBERTModel
from neobert.common.config import PRESETS
from neobert.model import packed_context, padded_context, set_runtime, unpad
from neobert.model.checks import BackendCheck

LENGTHS = (7, 12, 3)  # deliberately uneven
ATOL = 1e-5


def tiny_baseline() -> ModelConfig:
    """The BERT-baseline shape (learned positions, GELU, LayerNorm) at tiny sizes."""
    return ModelConfig.from_name("bert-baseline", **{**PRESETS["tiny"], "intermediate_size": 256})


def make_model(
    config: ModelConfig | None = None, std: float = 0.1, unpad: bool | None = None, **overrides
) -> NeoBERTModel:
    """A tiny encoder with weights larger than the 0.02 init, so attention is far from uniform."""
    config = (config or ModelConfig.from_name("tiny")).replace(**overrides)
    torch.manual_seed(0)
    model = set_runtime(NeoBERTModel(NeoBERTConfig.from_model_config(config)), unpad=unpad)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, std)
    return model.eval()


def same_weights(model: NeoBERTModel, unpad: bool | str | None = "same", **overrides) -> NeoBERTModel:
    other = NeoBERTModel(NeoBERTConfig.from_model_config(model.model_config.replace(**overrides)))
    set_runtime(other, unpad=model.runtime.unpad if unpad == "same" else unpad)
    other.load_state_dict(model.state_dict())
    return other.train(model.training)


def sequences(vocab: int = 128, lengths=LENGTHS) -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randint(1, vocab, (n,)) for n in lengths]


def right_padded(seqs: list[torch.Tensor], garbage: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) ids and 0/1 mask. Padding holds random ids: the mask alone must hide them."""
    length = max(len(s) for s in seqs)
    ids = (
        torch.randint(1, 128, (len(seqs), length))
        if garbage
        else torch.zeros(len(seqs), length, dtype=torch.long)
    )
    mask = torch.zeros(len(seqs), length, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


def left_padded(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), length, dtype=torch.long)
    mask = torch.zeros(len(seqs), length, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, length - len(s) :] = s
        mask[i, length - len(s) :] = 1
    return ids, mask


def alone(model: NeoBERTModel, seq: torch.Tensor) -> torch.Tensor:
    return model(seq[None]).last_hidden_state[0]  # (n, C)


def weighted_sum(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A scalar that depends on every real hidden value (and on no padded one)."""
    torch.manual_seed(2)
    weights = torch.randn(h.shape)
    return (h * weights * mask[..., None]).sum()


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters()}


# --- the mask conversion ----------------------------------------------------------------------------


def test_padded_context_key_mask():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    ctx = padded_context(mask)
    assert ctx.key_mask.shape == (2, 1, 1, 3)
    assert ctx.key_mask.dtype == torch.bool
    assert ctx.key_mask[0, 0, 0].tolist() == [True, True, False]
    assert padded_context(None).key_mask is None


def test_unpad_indices_and_offsets():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    indices, cu_seqlens, max_seqlen = unpad(mask)
    assert indices.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert cu_seqlens.tolist() == [0, 3, 4, 8]
    assert cu_seqlens.dtype == torch.int32
    assert max_seqlen == 4
    ctx = packed_context(cu_seqlens, max_seqlen)
    assert ctx.packed
    assert ctx.grid_mask.shape == (3, 1, 1, 4)
    assert ctx.grid_index.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]


# --- padding --------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["neobert", "bert-baseline"])
def test_padding_invariance(variant):
    model = make_model(tiny_baseline() if variant == "bert-baseline" else None)
    seqs = sequences()
    ids, mask = right_padded(seqs)
    with torch.no_grad():
        batch = model(ids, attention_mask=mask).last_hidden_state
        for i, s in enumerate(seqs):
            torch.testing.assert_close(batch[i, : len(s)], alone(model, s), rtol=0, atol=ATOL)


def test_padding_content_is_ignored():
    model = make_model()
    ids, mask = right_padded(sequences())
    other = ids.clone()
    other[mask == 0] = 0
    with torch.no_grad():
        a = model(ids, attention_mask=mask).last_hidden_state
        b = model(other, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=0, atol=ATOL)


def test_mask_matters():
    # without the mask, the padding is attended to and changes the real tokens
    model = make_model()
    ids, mask = right_padded(sequences())
    with torch.no_grad():
        masked = model(ids, attention_mask=mask).last_hidden_state
        unmasked = model(ids).last_hidden_state
    assert (masked[2, :3] - unmasked[2, :3]).abs().max() > 1e-2


def test_all_ones_mask_equals_no_mask():
    model = make_model()
    ids = torch.randint(1, 128, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state,
            model(ids).last_hidden_state,
            rtol=0,
            atol=ATOL,
        )


@pytest.mark.parametrize("variant", ["neobert", "bert-baseline"])
def test_left_padding(variant):
    # RoPE scores depend on relative positions only; learned positions are counted over real tokens
    # (RoBERTa-style, from the pad mask). Either way left padding gives the same real-token states.
    model = make_model(tiny_baseline() if variant == "bert-baseline" else None)
    seqs = sequences()
    ids, mask = left_padded(seqs)
    with torch.no_grad():
        batch = model(ids, attention_mask=mask).last_hidden_state
        for i, s in enumerate(seqs):
            torch.testing.assert_close(batch[i, -len(s) :], alone(model, s), rtol=1e-4, atol=1e-4)


# --- unpadded path --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["neobert", "bert-baseline"])
def test_unpadded_equals_padded_outputs_and_gradients(variant):
    padded = make_model(tiny_baseline() if variant == "bert-baseline" else None).train()
    unpadded = same_weights(padded, unpad=True)
    ids, mask = right_padded(sequences())

    out_p = padded(ids, attention_mask=mask, output_hidden_states=True)
    out_u = unpadded(ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    torch.testing.assert_close(
        out_u.last_hidden_state[real], out_p.last_hidden_state[real], rtol=0, atol=ATOL
    )
    assert torch.all(out_u.last_hidden_state[~real] == 0)  # zeros at padding when unpadded
    assert len(out_u.hidden_states) == len(out_p.hidden_states)
    for hu, hp in zip(out_u.hidden_states, out_p.hidden_states):
        assert hu.shape == hp.shape
        torch.testing.assert_close(hu[real], hp[real], rtol=0, atol=ATOL)

    weighted_sum(out_p.last_hidden_state, mask).backward()
    weighted_sum(out_u.last_hidden_state, mask).backward()
    g_p, g_u = grads(padded), grads(unpadded)
    for name in g_p:
        torch.testing.assert_close(g_u[name], g_p[name], rtol=1e-4, atol=1e-5, msg=name)


def test_flex_unpadded_equals_padded_forward():
    # FlexAttention has no CPU backward; its gradients are checked on CUDA (tests/test_gpu.py)
    padded = make_model()
    flex = set_runtime(same_weights(padded, unpad=True), attn_backend="flex")
    ids, mask = right_padded(sequences())
    real = mask.bool()
    with torch.no_grad():
        a = padded(ids, attention_mask=mask).last_hidden_state
        b = flex(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(b[real], a[real], rtol=0, atol=ATOL)


def test_unpadded_without_mask_is_the_padded_path():
    model = make_model(unpad=True)
    ids = torch.randint(1, 128, (2, 9))
    reference = same_weights(model, unpad=False)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, reference(ids).last_hidden_state)


@pytest.mark.parametrize("variant", ["neobert", "bert-baseline"])
def test_unpadded_with_left_padding(variant):
    padded = make_model(tiny_baseline() if variant == "bert-baseline" else None)
    unpadded = same_weights(padded, unpad=True)
    ids, mask = left_padded(sequences())
    with torch.no_grad():
        a = padded(ids, attention_mask=mask).last_hidden_state
        b = unpadded(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(b[mask.bool()], a[mask.bool()], rtol=1e-4, atol=1e-4)


# --- kernel choice ---------------------------------------------------------------------------------


def test_auto_backend_by_device_dtype_and_installed_kernels(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    # the kernels pass their first-use checks here (tests/test_hardware.py forces the failing side)
    passed = BackendCheck("attention", "cuda", "bfloat16", available=True, checked=True, ok=True)
    monkeypatch.setattr(attention, "check_attention", lambda *args, **kwargs: passed)
    assert attention.resolve_backend("auto", cpu, torch.bfloat16) == "sdpa"
    assert attention.resolve_backend("auto", cuda, torch.float32) == "sdpa"  # varlen kernels are half only
    monkeypatch.setattr(attention, "flash_attn_available", lambda: False)
    monkeypatch.setattr(attention, "_torch_varlen", lambda: object())
    assert attention.resolve_backend("auto", cuda, torch.bfloat16) == "varlen"
    monkeypatch.setattr(attention, "flash_attn_available", lambda: True)
    assert attention.resolve_backend("auto", cuda, torch.float16) == "flash_attn"
    monkeypatch.setattr(attention, "_torch_varlen", lambda: None)
    monkeypatch.setattr(attention, "flash_attn_available", lambda: False)
    assert attention.resolve_backend("auto", cuda, torch.bfloat16) == "sdpa"  # an old torch, no package


@pytest.mark.parametrize(
    ("backend", "fragment"), [("varlen", "needs CUDA"), ("flash_attn", "needs CUDA"), ("xformers", "one of")]
)
def test_explicit_backend_that_cannot_run_is_refused(backend, fragment):
    model = make_model()
    ids, mask = right_padded(sequences())
    with pytest.raises((attention.AttentionBackendError, ValueError), match=fragment):
        set_runtime(model, attn_backend=backend)
        model(ids, attention_mask=mask)


def test_unpad_auto_follows_the_kernel(monkeypatch):
    model = make_model()  # runtime.unpad None: unpad only for varlen kernels
    ids, mask = right_padded(sequences())
    contexts = []
    real = attention.attend
    monkeypatch.setattr(layers, "attend", lambda q, k, v, ctx: contexts.append(ctx) or real(q, k, v, ctx))
    with torch.no_grad():
        model(ids, attention_mask=mask)  # CPU fp32: sdpa, padded
        set_runtime(model, attn_backend="flex")
        model(ids, attention_mask=mask)  # flex: unpadded
    n = model.model_config.num_hidden_layers
    assert [c.packed for c in contexts] == [False] * n + [True] * n
    assert {c.backend for c in contexts[n:]} == {"flex"}


def test_legacy_runtime_keys_in_config_json_are_dropped(tmp_path):
    config = NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny"), unpad=True, attn_backend="sdpa")
    assert not hasattr(config, "unpad") and not hasattr(config, "attn_backend")
    assert "unpad" not in config.to_dict()


# --- packed sequences (per-document attention) ----------------------------------------------------


def packed_inputs(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    lengths = torch.tensor([len(s) for s in seqs])
    cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    return torch.cat(seqs)[None], cu_seqlens, int(lengths.max())  # (1, T): one packed row


@pytest.mark.parametrize(
    ("variant", "backend"), [("neobert", "sdpa"), ("bert-baseline", "sdpa"), ("neobert", "flex")]
)
def test_packed_equals_separate_sequences(variant, backend):
    model = make_model(tiny_baseline() if variant == "bert-baseline" else None)
    set_runtime(model, attn_backend=backend)
    seqs = sequences()
    ids, cu_seqlens, max_seqlen = packed_inputs(seqs)
    with torch.no_grad():
        packed = model(ids, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen).last_hidden_state
        assert packed.shape == (1, sum(LENGTHS), 64)
        # max_seqlen is optional (computed from cu_seqlens)
        torch.testing.assert_close(model(ids, cu_seqlens=cu_seqlens).last_hidden_state, packed)
        # a flat (T,) input works too
        torch.testing.assert_close(model(ids[0], cu_seqlens=cu_seqlens).last_hidden_state, packed[0])
        start = 0
        for s in seqs:
            torch.testing.assert_close(packed[0, start : start + len(s)], alone(model, s), rtol=0, atol=ATOL)
            start += len(s)


def test_packing_without_boundaries_differs():
    # the same row as one long document: tokens now see each other, so the states change
    model = make_model()
    seqs = sequences()
    ids, cu_seqlens, _ = packed_inputs(seqs)
    with torch.no_grad():
        separate = model(ids, cu_seqlens=cu_seqlens).last_hidden_state
        together = model(ids).last_hidden_state
    assert (separate[0, LENGTHS[0] :] - together[0, LENGTHS[0] :]).abs().max() > 1e-2


def test_packed_explicit_positions_equal_default():
    model = make_model()
    seqs = sequences()
    ids, cu_seqlens, max_seqlen = packed_inputs(seqs)
    positions = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    with torch.no_grad():
        a = model(ids, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen).last_hidden_state
        b = model(ids, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, position_ids=positions).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_packed_gradients_equal_separate():
    # float64: in float32 the two summation orders differ by ~1e-6 of the gradient scale, which depends on
    # the CPU's kernels; in float64 they agree to ~1e-13, so the tolerance can be tight everywhere
    model = make_model().double().train()
    seqs = sequences()
    ids, cu_seqlens, max_seqlen = packed_inputs(seqs)
    out = model(ids, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen).last_hidden_state[0]
    torch.manual_seed(3)
    weights = torch.randn(out.shape, dtype=torch.float64)
    (out * weights).sum().backward()
    g_packed = grads(model)
    model.zero_grad()
    start = 0
    for s in seqs:
        (alone(model, s) * weights[start : start + len(s)]).sum().backward()
        start += len(s)
    for name, g in grads(model).items():
        torch.testing.assert_close(g_packed[name], g, rtol=1e-9, atol=1e-10, msg=name)


# --- gradients, hidden states, precision, checkpointing -------------------------------------------


@pytest.mark.parametrize("variant", ["neobert", "bert-baseline"])
def test_gradient_reaches_every_parameter(variant):
    model = make_model(tiny_baseline() if variant == "bert-baseline" else None).train()
    ids, mask = right_padded(sequences())
    weighted_sum(model(ids, attention_mask=mask).last_hidden_state, mask).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_output_hidden_states():
    model = make_model()
    cfg = model.model_config
    ids, mask = right_padded(sequences())
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
        assert len(out.hidden_states) == cfg.num_hidden_layers + 1
        for h in out.hidden_states:
            assert h.shape == (*ids.shape, cfg.hidden_size)
        torch.testing.assert_close(out.hidden_states[0], model.encoder(ids))  # the embedding output
        # the last block's output, before the final norm
        torch.testing.assert_close(model.layer_norm(out.hidden_states[-1]), out.last_hidden_state)
        assert model(ids, attention_mask=mask).hidden_states is None
        as_tuple = model(ids, attention_mask=mask, output_hidden_states=True, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    torch.testing.assert_close(as_tuple[0], out.last_hidden_state)


def test_bf16_autocast_close_to_fp32():
    model = make_model()
    ids, mask = right_padded(sequences())
    with torch.no_grad():
        fp32 = model(ids, attention_mask=mask).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(bf16).all()
    real = mask.bool()
    diff = (bf16.float()[real] - fp32[real]).norm() / fp32[real].norm()
    assert diff < 0.05


def test_bf16_weights_run():
    model = make_model().to(torch.bfloat16)
    ids, mask = right_padded(sequences())
    with torch.no_grad():
        out = model(ids, attention_mask=mask).last_hidden_state
    assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("unpadded", [False, True])
def test_gradient_checkpointing_same_gradients(unpadded, monkeypatch):
    reference = make_model(unpad=unpadded).train()
    checkpointed = same_weights(reference)
    checkpointed.gradient_checkpointing_enable()
    assert checkpointed.is_gradient_checkpointing

    calls = []
    real_checkpoint = modeling.checkpoint

    def counting_checkpoint(*args, **kwargs):
        calls.append(1)
        return real_checkpoint(*args, **kwargs)

    monkeypatch.setattr(modeling, "checkpoint", counting_checkpoint)
    ids, mask = right_padded(sequences())
    out_ref = reference(ids, attention_mask=mask).last_hidden_state
    assert not calls  # the reference is not checkpointed
    out_ckpt = checkpointed(ids, attention_mask=mask).last_hidden_state
    assert len(calls) == reference.model_config.num_hidden_layers  # every block is checkpointed
    torch.testing.assert_close(out_ckpt, out_ref, rtol=0, atol=0)

    weighted_sum(out_ref, mask).backward()
    weighted_sum(out_ckpt, mask).backward()
    g_ref, g_ckpt = grads(reference), grads(checkpointed)
    for name in g_ref:
        torch.testing.assert_close(g_ckpt[name], g_ref[name], rtol=1e-5, atol=1e-6, msg=name)

    # no checkpointing in eval mode
    calls.clear()
    with torch.no_grad():
        checkpointed.eval()(ids, attention_mask=mask)
    assert not calls
