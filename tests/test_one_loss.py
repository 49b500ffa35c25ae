"""One loss per head (neobert.model.losses): the head's forward(labels=...), the fine-tuning task's
training loss and its validation loss are the same function, checked against numpy; and the one
save/restore of a module's mode (neobert.model.execution.eval_mode)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from neobert.finetuning.classification_task import ClassificationTask, predict
from neobert.finetuning.data import EncodedDataset, collate
from neobert.inference.encoders import load_model
from neobert.model.execution import eval_mode
from neobert.model.losses import sequence_loss, sequence_problem, token_loss

TEXTS = ["a good film", "a bad one", "it was fine", "nothing to say", "the best of the year"]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_losses_against_numpy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, generator=g)
    ids = torch.tensor([0, 2, 1, 2])
    ce = -_log_softmax(logits.numpy())[np.arange(4), ids.numpy()]
    assert float(sequence_loss(logits, ids, "single_label_classification", "sum")) == pytest.approx(
        ce.sum(), 1e-5
    )
    targets = torch.tensor([[1.0, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]])
    p = 1 / (1 + np.exp(-logits.numpy()))
    bce = -(targets.numpy() * np.log(p) + (1 - targets.numpy()) * np.log(1 - p)).mean()
    assert float(sequence_loss(logits, targets, "multi_label_classification")) == pytest.approx(bce, 1e-5)
    values = torch.tensor([0.5, -1.0, 2.0, 0.0])
    mse = ((logits[:, 0].numpy() - values.numpy()) ** 2).mean()
    assert float(sequence_loss(logits[:, :1], values, "regression")) == pytest.approx(mse, 1e-5)
    tokens = torch.randn(2, 3, 4, generator=g)
    labels = torch.tensor([[1, -100, 3], [-100, 0, -100]])
    kept = [(0, 0, 1), (0, 2, 3), (1, 1, 0)]
    expected = np.mean([-_log_softmax(tokens[b, t].numpy())[c] for b, t, c in kept])
    assert float(token_loss(tokens, labels)) == pytest.approx(expected, 1e-5)
    with pytest.raises(ValueError, match="unknown problem_type 'ranking'"):
        sequence_problem("ranking", 3, ids)


@pytest.mark.parametrize("regression", [False, True])
def test_training_validation_and_head_loss_agree(tokenizer, regression):
    """On the same rows in eval mode: the task's training loss (summed, / rows), the validation loss of
    predict() and the head's own loss are one number."""
    torch.manual_seed(0)
    labels = [0.5, -1.0, 2.0, 0.0, 1.5] if regression else [0, 2, 1, 2, 0]
    model = load_model(
        "tiny",
        "sequence-classification",
        vocab_size=len(tokenizer),
        num_labels=1 if regression else 3,
        problem_type="regression" if regression else "single_label_classification",
    ).eval()
    data = EncodedDataset(tokenizer, TEXTS, None, labels, 32, show_progress=False)
    pad = tokenizer.pad_token_id
    _, validation = predict(model, data, regression, batch_size=2, pad_token_id=pad)
    task = ClassificationTask.__new__(ClassificationTask)  # only what loss() reads
    task.trainer, task.spec = (
        SimpleNamespace(device=torch.device("cpu")),
        SimpleNamespace(regression=regression),
    )
    batch = collate([data[i] for i in range(len(data))], pad)
    with torch.no_grad():
        training = float(task.loss(model, dict(batch)).loss_sum) / len(data)
        head = float(model(**batch).loss)
    assert training == pytest.approx(validation, rel=1e-5) and head == pytest.approx(validation, rel=1e-5)


def test_eval_mode_restores_the_mode_even_on_error():
    module = torch.nn.Dropout(0.5).train()
    with pytest.raises(RuntimeError), eval_mode(module):
        assert not module.training
        raise RuntimeError("boom")
    assert module.training


def test_eval_mode_leaves_a_model_already_in_eval_untouched(monkeypatch):
    """A served model is in eval mode throughout: no train()/eval() walk per call; a submodule left training
    is still switched off and the root's mode restored."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).eval()
    monkeypatch.setattr(model, "train", lambda mode=True: pytest.fail("switched a model already in eval"))
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    monkeypatch.undo()
    model[1].train()  # the root in eval, one submodule training
    with eval_mode(model):
        assert not model[1].training
    assert not model.training
