"""A float16/bfloat16 training loop through gradserve.torch replays on the server as a float32 one does (issue 24
item 4): its steady iterations are hits of one session plan (/metrics), and its losses and parameters are, bit for
bit, those of the same loop on a server without plans."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from tests.client.test_training_replay import planless  # noqa: F401 - a fixture

#: Adam with an eps float16 holds (1e-8 rounds to 0 there, and the first step divides by 0 as torch does)
OPTIMIZERS = {"SGD": lambda optim, params: optim.SGD(params, lr=0.05, momentum=0.9),
              "Adam": lambda optim, params: optim.Adam(params, lr=0.01, eps=1e-3)}


def plan_hits(url: str) -> float:
    return float(re.search(r"^gradserve_plan_hits_total (\S+)$", httpx.get(f"{url}/metrics").text, re.M).group(1))


def fit(dtype: str, optimizer: str, epochs: int) -> tuple[list, list]:
    """A two-layer regression in ``dtype`` (nn.Linear, tanh, mse_loss), ``loss.item()`` every epoch."""
    nn, dt = gtorch.nn, getattr(gtorch, dtype)
    gtorch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(dt)
    rng = np.random.default_rng(5)
    x = gtorch.tensor(rng.uniform(-1, 1, (16, 4)).astype(np.float32), dtype=dt)
    y = (x.float().sum(dim=1, keepdim=True) * 0.5).to(dt)
    opt = OPTIMIZERS[optimizer](gtorch.optim, model.parameters())
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().float().tolist() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_loop_replays_from_its_steady_iterations_as_it_runs_cold(
        ctx, server, planless, dtype, optimizer):  # noqa: F811 - planless: the fixture imported above
    before = plan_hits(server.url)
    losses, params = fit(dtype, optimizer, 12)
    assert plan_hits(server.url) - before >= 7
    with gradserve.session(client=gradserve.Client(planless.url)):
        want_losses, want = fit(dtype, optimizer, 12)
    assert losses == want_losses and params == want
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
