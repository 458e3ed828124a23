"""The activations torch writes in place on request (``F.relu(x, inplace=True)``, ``nn.ReLU(inplace=True)``,
``nn.LeakyReLU(0.2, inplace=True)``, ``nn.ReLU6(inplace=True)``...) through gradserve.torch: the result is the input
itself, written in place, with torch's grad_fn (leaky_relu and elu in place save their result: Backward1) and
version, and the module reprs are torch's. torch's facts are written in; with torch installed the values and the
gradients are compared with it too."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn as nn
import gradserve.torch.nn.functional as F

#: (call, torch's grad_fn name of the written tensor)
CALLS = {
    "relu": (lambda f, y: f.relu(y, inplace=True), "ReluBackward0"),
    "leaky_relu": (lambda f, y: f.leaky_relu(y, 0.2, True), "LeakyReluBackward1"),
    "elu": (lambda f, y: f.elu(y, alpha=0.5, inplace=True), "EluBackward1"),
    "hardtanh": (lambda f, y: f.hardtanh(y, -0.5, 0.75, inplace=True), "HardtanhBackward0"),
    "relu6": (lambda f, y: f.relu6(y, inplace=True), "HardtanhBackward0"),
    "silu": (lambda f, y: f.silu(y, inplace=True), "SiluBackward0"),
}
DATA = [[0.3, -0.7, 1.9], [-1.2, 0.05, 7.0]]


def _run(mod, functional, name):
    x = mod.tensor(DATA, requires_grad=True)
    y = x * 2
    z = CALLS[name][0](functional, y)
    same = z is y
    (z * mod.tensor([1.0, 2.0, 3.0])).sum().backward()
    return same, type(z.grad_fn).__name__, y._version, np.array(z.tolist()), np.array(x.grad.tolist())


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_input_is_written_in_place_with_torchs_node_and_version(ctx, name):
    same, grad_fn, version, _, _ = _run(torch, F, name)
    assert (same, grad_fn, version) == (True, CALLS[name][1], 1)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_values_and_gradients_are_torchs(ctx, name):
    real = pytest.importorskip("torch")
    got, want = _run(torch, F, name), _run(real, real.nn.functional, name)
    assert got[:3] == want[:3]
    np.testing.assert_allclose(got[3], want[3], rtol=1e-6)
    np.testing.assert_allclose(got[4], want[4], rtol=1e-6)


def test_a_leaf_that_requires_grad_is_refused_at_the_line(ctx):
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad is being used in an in-place "):
        F.leaky_relu(w, inplace=True)
    assert F.relu(torch.tensor([1, -2]), inplace=True).tolist() == [1, 0]


def test_a_negative_slope_in_place_is_refused_when_the_backward_pass_reaches_it(ctx):
    x = torch.tensor([0.5, -1.0], requires_grad=True)
    z = F.leaky_relu(x * 1, -0.5, inplace=True)
    with pytest.raises(RuntimeError, match="^In-place leakyReLu backward calculation is triggered with a negative "):
        z.sum().backward()


def test_module_reprs_are_torchs(ctx):
    shown = [repr(m) for m in (nn.ReLU(), nn.ReLU(inplace=True), nn.LeakyReLU(), nn.LeakyReLU(0.2, inplace=True),
                               nn.ELU(inplace=True), nn.Hardtanh(inplace=True), nn.SiLU(inplace=True), nn.ReLU6(),
                               nn.ReLU6(inplace=True), nn.LeakyReLU(0.1, True))]
    assert shown == ["ReLU()", "ReLU(inplace=True)", "LeakyReLU(negative_slope=0.01)",
                     "LeakyReLU(negative_slope=0.2, inplace=True)", "ELU(alpha=1.0, inplace=True)",
                     "Hardtanh(min_val=-1.0, max_val=1.0, inplace=True)", "SiLU(inplace=True)", "ReLU6()",
                     "ReLU6(inplace=True)", "LeakyReLU(negative_slope=0.1, inplace=True)"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'slope'"):
        nn.LeakyReLU(slope=0.1)


def test_a_model_with_in_place_activations_trains_as_one_without(ctx):
    losses = []
    for inplace in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2, inplace=inplace), nn.Linear(8, 8),
                              nn.ReLU(inplace=inplace), nn.Linear(8, 1), nn.ReLU6(inplace=inplace))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        run = []
        for _ in range(3):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0] == losses[1]
