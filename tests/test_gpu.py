"""CUDA kernels against the reference paths. Skipped without a GPU; run them with `pytest tests/test_gpu.py`
on a machine that has one (they take seconds).

Each varlen kernel (torch's varlen_attn, flash-attn when installed, FlexAttention) on unpadded or packed
inputs must compute what the padded SDPA path computes, forward and backward, and compiled blocks must
compute what eager blocks compute. bf16 comparisons use relative error norms: the paths round differently.
"""

from __future__ import annotations

import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTForMaskedLM, NeoBERTModel
from neobert.model import attention, compile_blocks, set_runtime

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DEVICE = "cuda"
LENGTHS = (37, 128, 5, 300, 64)


def available_backends() -> list[str]:
    names = ["flex"]
    if attention._torch_varlen() is not None:
        names.append("varlen")
    if attention.flash_attn_available():
        names.append("flash_attn")
    return names


def make_model(**overrides) -> NeoBERTModel:
    config = ModelConfig.from_name(
        "tiny", vocab_size=512, hidden_size=128, num_attention_heads=2, max_length=512, **overrides
    )
    torch.manual_seed(0)
    model = NeoBERTModel(NeoBERTConfig.from_model_config(config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, 0.05)
    return model.to(DEVICE)


def batch(lengths=LENGTHS, vocab: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    width = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), width), generator=g)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return (ids * mask).to(DEVICE), mask.to(DEVICE)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def forward_backward(model: NeoBERTModel, ids, mask) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    with torch.autocast("cuda", torch.bfloat16):
        out = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    (out[real].float().square().mean()).backward()
    return out[real].detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def test_auto_takes_a_varlen_kernel_and_unpads_in_bf16():
    model = make_model()
    ids, mask = batch()
    seen = []
    real = attention.attend

    def spy(q, k, v, ctx):
        seen.append((ctx.packed, ctx.backend))
        return real(q, k, v, ctx)

    attention_module = pytest.MonkeyPatch()
    attention_module.setattr("neobert.model.layers.attend", spy)
    try:
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
            model(ids, attention_mask=mask)
        with torch.no_grad():
            model(ids, attention_mask=mask)  # fp32: the padded SDPA path
    finally:
        attention_module.undo()
    layers = model.model_config.num_hidden_layers
    expected = "flash_attn" if attention.flash_attn_available() else "varlen"
    assert seen[:layers] == [(True, expected)] * layers
    assert seen[layers:] == [(False, "sdpa")] * layers


@pytest.mark.parametrize("backend", available_backends())
def test_varlen_kernel_matches_padded_sdpa_forward_and_backward(backend):
    padded = set_runtime(make_model(), attn_backend="sdpa", unpad=False)
    varlen = set_runtime(make_model(), attn_backend=backend, unpad=True)
    ids, mask = batch()
    out_p, grads_p = forward_backward(padded, ids, mask)
    out_v, grads_v = forward_backward(varlen, ids, mask)
    assert rel_err(out_v, out_p) < 2e-2
    for name, g in grads_p.items():
        assert rel_err(grads_v[name], g) < 5e-2, name


@pytest.mark.parametrize("backend", available_backends())
def test_packed_documents_match_separate_forwards(backend):
    model = set_runtime(make_model(), attn_backend=backend)
    docs = [torch.randint(1, 512, (n,), device=DEVICE) for n in (50, 7, 200)]
    cu = torch.tensor([0, 50, 57, 257], device=DEVICE, dtype=torch.int32)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        packed = model(torch.cat(docs)[None], cu_seqlens=cu, max_seqlen=200).last_hidden_state[0]
        for doc, start in zip(docs, (0, 50, 57)):
            alone = model(doc[None]).last_hidden_state[0]
            assert rel_err(packed[start : start + len(doc)], alone) < 2e-2


def test_all_ones_mask_unpadded_equals_no_mask():
    model = make_model()
    ids, _ = batch((256, 256))
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        plain = model(ids).last_hidden_state
        masked = model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    assert rel_err(masked, plain) < 1e-2


def test_cuda_fp32_matches_cpu():
    model = make_model()
    ids, mask = batch()
    with torch.no_grad():
        gpu = model(ids, attention_mask=mask).last_hidden_state
        cpu = model.cpu()(ids.cpu(), attention_mask=mask.cpu()).last_hidden_state
    torch.testing.assert_close(gpu.cpu()[mask.cpu().bool()], cpu[mask.cpu().bool()], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["varlen", "flex"])
def test_compiled_blocks_match_eager_without_graph_breaks(backend):
    if backend not in available_backends():
        pytest.skip(f"{backend} not available")
    eager = set_runtime(make_model(), attn_backend=backend)
    compiled = set_runtime(make_model(), attn_backend=backend)
    compile_blocks(compiled, fullgraph=True)  # a graph break would raise
    ids, mask = batch()
    out_e, grads_e = forward_backward(eager, ids, mask)
    out_c, grads_c = forward_backward(compiled, ids, mask)
    assert rel_err(out_c, out_e) < 2e-2
    for name, g in grads_e.items():
        assert rel_err(grads_c[name], g) < 5e-2, name
    ids2, mask2 = batch((17, 400, 3))  # new lengths: dynamic shapes, still the same function
    out_e, _ = forward_backward(eager, ids2, mask2)
    out_c, _ = forward_backward(compiled, ids2, mask2)
    assert rel_err(out_c, out_e) < 2e-2


def test_masked_lm_training_step_with_compiled_blocks_lowers_the_loss():
    torch.manual_seed(0)
    model = NeoBERTForMaskedLM(NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny"))).to(DEVICE)
    compile_blocks(model, fullgraph=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    ids = torch.randint(5, 128, (4, 64), device=DEVICE)
    cu = torch.tensor([0, 64, 128, 192, 256], device=DEVICE, dtype=torch.int32)
    labels = ids.clone()
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", torch.bfloat16):
            out = model(ids.flatten()[None], labels=labels.flatten()[None], cu_seqlens=cu, max_seqlen=64)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.loss))
    assert losses[-1] < 0.5 * losses[0]


# --- the first-use checks on the GPU (tests/test_hardware.py forces their failing sides on any machine) ---


@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_kernel_passes_its_first_use_check(backend, dtype):
    check = attention.check_attention(backend, DEVICE, dtype, True)
    assert check.ok, check.describe()


def test_auto_resolves_to_a_checked_kernel_without_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        chosen = attention.resolve_backend("auto", torch.device(DEVICE), torch.bfloat16)
    assert chosen in ("varlen", "flash_attn")


def test_fused_adamw_and_compiled_blocks_pass_their_checks():
    from neobert.model.execution import check_compiled_blocks
    from neobert.training.optim import check_fused_adamw, use_fused_adamw

    assert check_fused_adamw(DEVICE).ok and use_fused_adamw(torch.device(DEVICE))
    for dtype in (torch.float32, torch.bfloat16):
        check = check_compiled_blocks(DEVICE, dtype)
        assert check.ok, check.describe()


def test_auto_precision_measures_bf16_faster_for_the_base_model(monkeypatch):
    from neobert.runtime import hardware

    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV)  # the suite's pin
    hardware.choose_precision.cache_clear()
    for training in (False, True):
        choice = hardware.choose_precision(768, 3072, DEVICE, training)
        assert choice.precision == "bf16", choice
