"""A float16/bfloat16 training loop through gradserve.torch replays on the server as a float32 one does (issue 24
item 4): after its first iterations each iteration is a hit of one session plan, and its losses and parameters
are, bit for bit, those of the same loop on a server without plans."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from tests.client.test_training_replay import B1, B2, W1, W2, X, Y, plan_counters, planless  # noqa: F401

#: Adam with an eps float16 holds (1e-8 rounds to 0 there, and the first step divides by 0 as torch does)
OPTIMIZERS = {"SGD": lambda optim, params: optim.SGD(params, lr=0.05, momentum=0.9),
              "Adam": lambda optim, params: optim.Adam(params, lr=0.01, eps=1e-3)}


def train(torch, dtype: str, optimizer: str, epochs: int) -> tuple[list, list]:
    """The tutorial's MLP loop in ``dtype``: F.linear, relu, mse_loss, ``optim.<optimizer>``, ``loss.item()``."""
    F, dt = torch.nn.functional, getattr(torch, dtype)
    params = [torch.tensor(v.astype(np.float32).tolist(), dtype=dt, requires_grad=True) for v in (W1, B1, W2, B2)]
    w1, b1, w2, b2 = params
    x, y = (torch.tensor(v.astype(np.float32).tolist(), dtype=dt) for v in (X, Y))
    opt = OPTIMIZERS[optimizer](torch.optim, params)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().float().tolist() for p in params]


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_loop_replays_from_its_steady_iterations_as_it_runs_cold(
        ctx, server, planless, dtype, optimizer):  # noqa: F811 - planless: the fixture imported above
    before = plan_counters(server.url)
    losses, params = train(gtorch, dtype, optimizer, 12)
    after = plan_counters(server.url)
    assert after["hits"] - before["hits"] >= 7, (before, after)
    with gradserve.session(client=gradserve.Client(planless.url)):
        want_losses, want = train(gtorch, dtype, optimizer, 12)
    assert losses == want_losses and params == want
    assert all(np.isfinite(losses))
