"""A training loop through gradserve.torch replays on the server: after its first iterations, each iteration's
request (the last step's update, zero_grad, forward, backward, the new gradients) is a hit of one session plan
(/metrics), with SGD's momentum and with Adam, AdamW (amsgrad), RMSprop and Adagrad; its losses and parameters
are, bit for bit, those of the same loop on a server without plans, and torch's to float32 rounding (with torch
installed)."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from tests.deploy.servers import Uvicorn

W1, B1 = np.random.default_rng(1).uniform(-0.5, 0.5, (16, 4)), np.random.default_rng(2).uniform(-0.5, 0.5, 16)
W2, B2 = np.random.default_rng(3).uniform(-0.5, 0.5, (1, 16)), np.random.default_rng(4).uniform(-0.5, 0.5, 1)
X = np.random.default_rng(5).uniform(-1, 1, (32, 4))
Y = X.sum(axis=1, keepdims=True) * 0.5


@pytest.fixture(scope="module")
def planless(tmp_path_factory):
    """A server whose plan cache is off: every request runs cold."""
    env = {"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0",
           "GRADSERVE_PLAN_CACHE_ENTRIES": "0"}
    srv = Uvicorn.for_app(env, tmp_path_factory.mktemp("planless") / "uvicorn.log")
    srv.start()
    yield srv
    srv.stop()


def cold(url: str, optimizer: str, epochs: int) -> tuple[list, list]:
    with gradserve.session(client=gradserve.Client(url)):
        return train(gtorch, optimizer, epochs)


def close_to_torch(optimizer: str, epochs: int, losses: list, params: list) -> None:
    torch = pytest.importorskip("torch")
    want_losses, want = train(torch, optimizer, epochs)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for got, exp in zip(params, want):
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-6)


def plan_counters(url: str) -> dict:
    text = httpx.get(f"{url}/metrics").text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^gradserve_plan_(hits|misses|unplannable|deferred)_total (\S+)$", text, re.M)}


#: the optimizers the loops run, with options that take every branch of their steps the loop can
OPTIMIZERS = {
    "SGD": lambda optim, params: optim.SGD(params, lr=0.05, momentum=0.9),
    "Adam": lambda optim, params: optim.Adam(params, lr=0.01),
    "AdamW-amsgrad": lambda optim, params: optim.AdamW(params, lr=0.01, amsgrad=True),
    "RMSprop": lambda optim, params: optim.RMSprop(params, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda optim, params: optim.Adagrad(params, lr=0.05, lr_decay=0.01),
}


def train(torch, optimizer: str, epochs: int) -> tuple[list, list]:
    """The tutorial's MLP loop: F.linear, relu, mse_loss, ``optim.<optimizer>``, ``loss.item()`` every epoch."""
    F = torch.nn.functional
    params = [torch.tensor(v.astype(np.float32).tolist(), requires_grad=True) for v in (W1, B1, W2, B2)]
    w1, b1, w2, b2 = params
    x, y = torch.tensor(X.astype(np.float32).tolist()), torch.tensor(Y.astype(np.float32).tolist())
    opt = OPTIMIZERS[optimizer](torch.optim, params)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [np.array(p.detach().tolist(), dtype=np.float32) for p in params]


def test_an_sgd_momentum_loop_replays_from_its_steady_iterations_as_it_runs_cold(ctx, server, planless):
    before = plan_counters(server.url)
    losses, params = train(gtorch, "SGD", 12)
    after = plan_counters(server.url)
    # iterations 1 and 2 are lists of their own (the first forward; the buffers' first step), the third is the loop's
    # first sighting (deferred), the fourth records it: the other eight replay
    assert after["hits"] - before["hits"] >= 8, (before, after)
    assert after["misses"] - before["misses"] <= 2, (before, after)
    want_losses, want = cold(planless.url, "SGD", 12)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]
    close_to_torch("SGD", 12, losses, params)


XS = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def tutorial(torch, epochs: int) -> tuple[list, list]:
    """The tutorial's loop: manual SGD under no_grad, gradients zeroed in place (each epoch binds the kept
    .grad tensors to new client names)."""
    w = torch.tensor([0.5], requires_grad=True)
    b = torch.tensor([0.1], requires_grad=True)
    x, y = torch.tensor(XS), torch.tensor([2.0 * v + 1.0 for v in XS])
    losses = []
    for _ in range(epochs):
        loss = ((w * x + b - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
            b -= 0.01 * b.grad
        w.grad.zero_()
        b.grad.zero_()
        losses.append(loss.item())
    return losses, [np.array(p.detach().tolist(), dtype=np.float32) for p in (w, b)]


def test_the_tutorial_loop_replays_as_it_runs_cold(ctx, server, planless):
    before = plan_counters(server.url)
    losses, params = tutorial(gtorch, 12)
    after = plan_counters(server.url)
    assert after["hits"] - before["hits"] >= 8, (before, after)
    with gradserve.session(client=gradserve.Client(planless.url)):
        want_losses, want = tutorial(gtorch, 12)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW-amsgrad", "RMSprop", "Adagrad"])
def test_an_adaptive_optimizer_loop_replays_from_its_fourth_iteration_as_it_runs_cold(ctx, server, planless, optimizer):
    """Adam's bias corrections (and Adagrad's decayed lr) are new floats every step: lifted into plan inputs, they
    do not change the plan. The state is made with the optimizer, so the first step's request is the loop's list:
    iteration 2 is its first sighting, 3 records it, 4 to 12 replay."""
    before = plan_counters(server.url)
    losses, params = train(gtorch, optimizer, 12)
    after = plan_counters(server.url)
    assert after["hits"] - before["hits"] >= 9, (before, after)
    assert after["misses"] - before["misses"] <= 1, (before, after)
    want_losses, want = cold(planless.url, optimizer, 12)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]
    close_to_torch(optimizer, 12, losses, params)
