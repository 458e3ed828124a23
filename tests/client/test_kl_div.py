"""nn.KLDivLoss / F.kl_div through the client on a live server, in the shape of a knowledge-distillation step:
values and gradients as torch's from the same seed, torch's warning for reduction='mean', torch's errors at the
line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn as nn
import gradserve.torch.nn.functional as F


def _step(mod, reduction: str, log_target: bool):
    mod.manual_seed(0)
    student = mod.nn.Linear(5, 4)
    x = mod.randn(6, 5)
    teacher = mod.randn(6, 4)
    temperature = 2.0
    target = mod.nn.functional.log_softmax(teacher / temperature, dim=1) if log_target else \
        mod.nn.functional.softmax(teacher / temperature, dim=1)
    loss_fn = mod.nn.KLDivLoss(reduction=reduction, log_target=log_target)
    log_p = mod.nn.functional.log_softmax(student(x) / temperature, dim=1)
    loss = loss_fn(log_p, target) * temperature ** 2
    (loss.sum() if reduction == "none" else loss).backward()
    return (np.array(loss.tolist()), np.array(student.weight.grad.tolist()), repr(loss_fn),
            type(loss.grad_fn).__name__ if hasattr(loss.grad_fn, "next_functions") else loss.grad_fn.name())


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_a_distillation_step_matches_torch(ctx, reduction, log_target):
    real = pytest.importorskip("torch")
    got, ref = _step(torch, reduction, log_target), _step(real, reduction, log_target)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)  # (float32 exp/log: a few ulp, deviations.md)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-5, atol=1e-6)
    assert got[2] == ref[2] == "KLDivLoss()"


def test_kl_div_without_torch_installed(ctx):
    """The formula itself (sum of p * (log p - log q)) and torch's messages, read off torch 2.13."""
    p = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    log_q = torch.tensor([[0.5, 0.5], [0.9, 0.1]]).log().requires_grad_()
    loss = nn.KLDivLoss(reduction="batchmean")(log_q, p)
    expected = ((0.25 * np.log(0.25 / 0.5) + 0.75 * np.log(0.75 / 0.5)) + (0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(
        0.5 / 0.1))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    np.testing.assert_allclose(np.array(log_q.grad.tolist()), -np.array(p.tolist()) / 2, rtol=1e-6)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        F.kl_div(log_q, p).item()
    assert [str(w.message) for w in seen if w.category is UserWarning] == [
        "reduction: 'mean' divides the total loss by both the batch size and the support size.'batchmean' divides "
        "only by the batch size, and aligns with the KL div math definition.'mean' will be changed to behave the "
        "same as 'batchmean' in the next major release."]
    with pytest.raises(ValueError, match="^foo is not a valid value for reduction\n"):
        F.kl_div(log_q, p, reduction="foo").item()
    with pytest.raises(RuntimeError, match="^kl_div: Integral inputs not supported\\.\n"):
        F.kl_div(log_q, torch.tensor([[1, 0], [0, 1]]), reduction="sum").item()
