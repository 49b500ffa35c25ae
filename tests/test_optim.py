"""Optimizer parameter groups: which parameters get weight decay."""

import pytest
import torch
from torch import nn

import neobert
from neobert.training import build_optimizer, parameter_groups


@pytest.fixture(scope="module")
def mlm():
    cfg = neobert.NeoBERTConfig.from_model_config(neobert.ModelConfig.from_name("tiny"))
    return neobert.NeoBERTForMaskedLM(cfg)


def _names(opt, decay: float) -> set[str]:
    return {n for g in opt.param_groups if g["weight_decay"] == decay for n in g["param_names"]}


def test_norms_biases_embeddings_excluded_by_default(mlm):
    opt = build_optimizer(mlm, lr=6e-4)
    assert isinstance(opt, torch.optim.AdamW)
    decayed, exempt = _names(opt, 0.1), _names(opt, 0.0)
    expected_exempt = {
        "model.encoder.weight",
        "model.layer_norm.weight",
        "decoder.bias",
        *(
            f"model.transformer_encoder.{i}.{n}.weight"
            for i in (0, 1)
            for n in ("attention_norm", "ffn_norm")
        ),
    }
    assert exempt == expected_exempt
    expected_decayed = {
        *(
            f"model.transformer_encoder.{i}.{n}.weight"
            for i in (0, 1)
            for n in ("qkv", "wo", "ffn.w12", "ffn.w3")
        ),
        "decoder.weight",  # the untied output projection is an ordinary matrix
    }
    assert decayed == expected_decayed
    # every trainable parameter is in exactly one group
    all_params = [p for g in opt.param_groups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params}) == len(list(mlm.parameters()))


def test_optimizer_hyperparameters(mlm):
    opt = build_optimizer(mlm, lr=6e-4)
    for g in opt.param_groups:
        assert g["betas"] == (0.9, 0.95) and g["eps"] == 1e-8 and g["lr"] == 6e-4
    adam = build_optimizer(mlm, name="adam", lr=1e-4, betas=(0.9, 0.999), weight_decay=0.0)
    assert type(adam) is torch.optim.Adam
    assert adam.param_groups[0]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="optimizer"):
        build_optimizer(mlm, name="sgd", lr=1.0)


def test_decay_everything_when_configured(mlm):
    opt = build_optimizer(mlm, lr=1e-3, decay_norms_biases_embeddings=True)
    assert len(opt.param_groups) == 1
    assert opt.param_groups[0]["weight_decay"] == 0.1
    assert len(opt.param_groups[0]["params"]) == len(list(mlm.parameters()))


def test_layernorm_bias_learned_positions_tied_and_frozen_parameters():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 10))
    model[3].weight = model[0].weight  # tied output embedding: one parameter, exempt via the embedding
    model[1].bias.requires_grad_(False)
    groups = parameter_groups(model, weight_decay=0.01)
    decay, no_decay = groups
    assert decay["param_names"] == ["1.weight"]
    assert set(no_decay["param_names"]) == {"0.weight", "2.weight", "2.bias", "3.bias"}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0


def test_decay_changes_only_the_decayed_group():
    # With zero gradients AdamW's update is the decay alone: decayed weights shrink, exempt ones do not.
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    opt = build_optimizer(model, lr=0.1, weight_decay=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    after = list(model.parameters())
    torch.testing.assert_close(after[0], before[0] * (1 - 0.1 * 0.5))  # linear weight
    for b, a in zip(before[1:], after[1:]):  # linear bias, norm weight and bias
        torch.testing.assert_close(a, b)


# -- Muon ---------------------------------------------------------------------------------------------------


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(mlm):
    from neobert.training.optim import MuonWithAdamW

    opt = build_optimizer(mlm, name="muon", lr=1e-3)
    assert isinstance(opt, MuonWithAdamW)
    muon_names = set(opt.muon.param_groups[0]["param_names"])
    assert muon_names == {
        f"model.transformer_encoder.{i}.{n}.weight"
        for i in (0, 1)
        for n in ("qkv", "wo", "ffn.w12", "ffn.w3")
    }
    adamw_names = {n for g in opt.adamw.param_groups for n in g["param_names"]}
    assert {"model.encoder.weight", "decoder.weight", "decoder.bias"} <= adamw_names
    assert not muon_names & adamw_names
    assert len(muon_names) + len(adamw_names) == len(list(mlm.parameters()))
    assert len(opt.param_groups) == 1 + len(opt.adamw.param_groups)  # one schedule reaches both


def _muon_reference_step(model, lr, grads):
    """The same update from torch's Muon and AdamW built by hand over explicitly listed parameters."""
    named = dict(model.named_parameters())
    hidden = [n for n in named if ".transformer_encoder." in n and named[n].ndim == 2]
    exempt = [
        n
        for n in named
        if n not in hidden and (n.endswith("bias") or "norm" in n or n == "model.encoder.weight")
    ]
    decayed = [n for n in named if n not in hidden and n not in exempt]
    muon = torch.optim.Muon(
        [named[n] for n in hidden], lr=lr, weight_decay=0.1, adjust_lr_fn="match_rms_adamw"
    )
    adamw = torch.optim.AdamW(
        [
            {"params": [named[n] for n in decayed], "weight_decay": 0.1},
            {"params": [named[n] for n in exempt], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    for step_grads in grads:
        for n, p in named.items():
            p.grad = step_grads[n].clone()
        muon.step()
        adamw.step()


def test_muon_steps_match_torch_muon_and_adamw_and_resume_exactly():
    import copy

    torch.manual_seed(0)
    cfg = neobert.NeoBERTConfig.from_model_config(neobert.ModelConfig.from_name("tiny"))
    start = neobert.NeoBERTForMaskedLM(cfg)
    grads = [{n: torch.randn_like(p) for n, p in start.named_parameters()} for _ in range(4)]
    reference = copy.deepcopy(start)
    _muon_reference_step(reference, 1e-2, grads)

    def run(model, opt, steps):
        for step_grads in steps:
            for n, p in model.named_parameters():
                p.grad = step_grads[n].clone()
            opt.step()

    ours = copy.deepcopy(start)
    run(ours, build_optimizer(ours, name="muon", lr=1e-2), grads)
    resumed = copy.deepcopy(start)
    first = build_optimizer(resumed, name="muon", lr=1e-2)
    run(resumed, first, grads[:2])
    state = copy.deepcopy(first.state_dict())
    second = build_optimizer(resumed, name="muon", lr=1e-2)
    second.load_state_dict(state)
    run(resumed, second, grads[2:])
    for (name, a), b, c in zip(reference.named_parameters(), ours.parameters(), resumed.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(c, a, rtol=0, atol=0, msg=name)
    assert not torch.equal(start.model.encoder.weight, ours.model.encoder.weight)
