"""Regional compilation (neobert.model.compile_blocks) computes what the eager blocks compute, with no graph
break, on the padded, unpadded and packed layouts; state-dict names do not change."""

from __future__ import annotations

import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTForMaskedLM
from neobert.model import compile_blocks, set_runtime


def make_pair() -> tuple[NeoBERTForMaskedLM, NeoBERTForMaskedLM]:
    config = NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny"))
    torch.manual_seed(0)
    eager = NeoBERTForMaskedLM(config)
    compiled = NeoBERTForMaskedLM(config)
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def loss_and_grads(model, **inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    out = model(**inputs)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow  # inductor's CPU code generation takes ~30-60 s on 2 cores
def test_compiled_blocks_equal_eager_forward_and_backward():
    torch._dynamo.reset()
    eager, compiled = make_pair()
    names = list(compiled.state_dict())
    compile_blocks(compiled, fullgraph=True)  # a graph break raises
    assert list(compiled.state_dict()) == names
    assert compiled.model.runtime.compiled
    set_runtime(eager, unpad=True)
    set_runtime(compiled, unpad=True)
    torch.manual_seed(1)
    ids = torch.randint(5, 128, (3, 24))
    mask = (torch.arange(24)[None] < torch.tensor([24, 9, 17])[:, None]).long()
    labels = torch.where(torch.rand(3, 24) < 0.3, ids, -100) * mask + (mask - 1) * 100
    cu = torch.tensor([0, 10, 30, 72], dtype=torch.int32)
    packed = torch.randint(5, 128, (1, 72))
    cases = [
        {"input_ids": ids, "labels": labels},  # padded, no mask
        {"input_ids": ids, "attention_mask": mask, "labels": labels},  # unpadded (grid: autograd on)
        {"input_ids": packed, "cu_seqlens": cu, "max_seqlen": 42, "labels": packed},  # packed documents
    ]
    for inputs in cases:
        loss_e, grads_e = loss_and_grads(eager, **inputs)
        loss_c, grads_c = loss_and_grads(compiled, **inputs)
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-5)
        for name, g in grads_e.items():
            torch.testing.assert_close(grads_c[name], g, rtol=1e-4, atol=1e-5, msg=name)
