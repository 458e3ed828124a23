"""A training loop through gradserve.torch replays on the server from its second request: the first makes the
tensors and runs the first forward and backward (the list runs in segments: its forward and backward, recorded
at their first sighting, on their own), the second (the first update, zero_grad, the next forward and backward)
replays that forward and backward (its update, never seen, recorded), the third replays both segments, the fourth
records the whole list's plan (segments fused) and every later one replays that one plan, with SGD's momentum
and with Adam, AdamW (amsgrad), RMSprop and Adagrad, the loss read before or after ``step()``, ``zero_grad()`` at
the loop's top or after ``step()``: each request's route is read from its ``X-Gradserve-Route`` header (asked for with
``X-Gradserve-Debug: route``) and counted in /metrics. Its losses and parameters are, bit for bit, those of the
same loop on a server without plans, and torch's to float32 rounding (with torch installed). A server with
``GRADSERVE_PLAN_SEGMENTS=false`` plans the loop's list whole: it replays from the third request."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from bench.client import RouteSpy
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


def cold(url: str, optimizer: str, epochs: int, item_before_step: bool = False, zero_after: bool = False):
    with gradserve.session(client=gradserve.Client(url)):
        return train(gtorch, optimizer, epochs, item_before_step, zero_after)


def close_to_torch(optimizer: str, epochs: int, losses: list, params: list, item_before_step: bool = False,
                   zero_after: bool = False) -> None:
    torch = pytest.importorskip("torch")
    want_losses, want = train(torch, optimizer, epochs, item_before_step, zero_after)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for got, exp in zip(params, want):
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-6)


def _server(path, **env):
    srv = Uvicorn.for_app({"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0",
                           **env}, path / "uvicorn.log")
    srv.start()
    return srv


@pytest.fixture
def fresh(tmp_path):
    """A server of its own (a fresh plan cache): which request of a loop replays does not depend on other tests."""
    srv = _server(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def whole(tmp_path):
    """A fresh server that plans a session list whole only (no segments)."""
    srv = _server(tmp_path, GRADSERVE_PLAN_SEGMENTS="false")
    yield srv
    srv.stop()


def routes_of(url: str, run) -> tuple[list, object]:
    """The routes of the op list requests ``run()`` sends in a session of its own on ``url``, and its result."""
    spy = RouteSpy()
    with gradserve.session(client=gradserve.Client(url, transport=spy)):
        result = run()
    return spy.routes, result


def route_count(url: str, route: str, reason: str) -> float:
    """``gradserve_route_total{route, reason}`` in /metrics."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("gradserve_route_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if labels.get("route") == route and labels.get("reason") == reason:
                total += float(line.rsplit(" ", 1)[1])
    return total


#: the optimizers the loops run, with options that take every branch of their steps the loop can
OPTIMIZERS = {
    "SGD": lambda optim, params: optim.SGD(params, lr=0.05, momentum=0.9),
    "Adam": lambda optim, params: optim.Adam(params, lr=0.01),
    "AdamW-amsgrad": lambda optim, params: optim.AdamW(params, lr=0.01, amsgrad=True),
    "RMSprop": lambda optim, params: optim.RMSprop(params, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda optim, params: optim.Adagrad(params, lr=0.05, lr_decay=0.01),
}


def train(torch, optimizer: str, epochs: int, item_before_step: bool = False,
          zero_after: bool = False) -> tuple[list, list]:
    """The tutorial's MLP loop: F.linear, relu, mse_loss, ``optim.<optimizer>``, ``loss.item()`` every epoch (after
    ``step()``, or before it), ``zero_grad()`` at the loop's top (or after ``step()``)."""
    F = torch.nn.functional
    params = [torch.tensor(v.astype(np.float32).tolist(), requires_grad=True) for v in (W1, B1, W2, B2)]
    w1, b1, w2, b2 = params
    x, y = torch.tensor(X.astype(np.float32).tolist()), torch.tensor(Y.astype(np.float32).tolist())
    opt = OPTIMIZERS[optimizer](torch.optim, params)
    losses = []
    for _ in range(epochs):
        if not zero_after:
            opt.zero_grad()
        loss = F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        loss.backward()
        if item_before_step:
            losses.append(loss.item())
        opt.step()
        if zero_after:
            opt.zero_grad()
        if not item_before_step:
            losses.append(loss.item())
    return losses, [np.array(p.detach().tolist(), dtype=np.float32) for p in params]


EPOCHS = 8


@pytest.mark.parametrize("zero", ["zero-at-top", "zero-after-step"])
@pytest.mark.parametrize("sync", ["item-after-step", "item-before-step"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_a_training_loop_replays_from_its_second_request_as_it_runs_cold(fresh, planless, optimizer, sync, zero):
    before, after = sync == "item-before-step", zero == "zero-after-step"
    replays = route_count(fresh.url, "replayed", "segments")
    fused = route_count(fresh.url, "recorded", "segments_fused")
    routes, (losses, params) = routes_of(fresh.url, lambda: train(gtorch, optimizer, EPOCHS, before, after))
    # one request per iteration (the last one reads the parameters, with the last update): the first makes the
    # tensors and records its forward and backward as a segment, the second and third replay segments, the fourth
    # records the whole list, every later one replays it
    loop = routes[:EPOCHS]
    assert loop == [("recorded", "segments"), ("replayed", "segments"), ("replayed", "segments"),
                    ("recorded", "segments_fused")] + [("replayed", "plan_hit")] * (EPOCHS - 4), routes
    assert route_count(fresh.url, "replayed", "segments") - replays == 2
    assert route_count(fresh.url, "recorded", "segments_fused") - fused == 1
    assert route_count(fresh.url, "recorded", "training_step") == 0
    want_losses, want = cold(planless.url, optimizer, EPOCHS, before, after)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]
    close_to_torch(optimizer, EPOCHS, losses, params, before, after)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_without_segments_a_loop_replays_from_its_third_request(whole, planless, optimizer):
    """``GRADSERVE_PLAN_SEGMENTS=false``: the loop's list plans whole, recorded at its first sighting (the second
    request, a training step), replayed from the third; the same bits."""
    routes, (losses, params) = routes_of(whole.url, lambda: train(gtorch, optimizer, EPOCHS))
    loop = routes[:EPOCHS]
    assert loop[1] == ("recorded", "training_step"), routes
    assert loop[2:] == [("replayed", "plan_hit")] * (EPOCHS - 2), routes
    want_losses, want = cold(planless.url, optimizer, EPOCHS)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]


XS = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def tutorial(torch, epochs: int) -> tuple[list, list]:
    """The tutorial's loop: manual SGD under no_grad, gradients zeroed in place (the client reads the kept .grad
    tensors by their leaves' names, ``w.grad``, as a hand-written list does: nothing bound)."""
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


def test_the_tutorial_loop_replays_from_its_fourth_request_as_it_runs_cold(fresh, planless):
    """The tutorial's first request (tensors, forward, backward: a list that plans whole) runs as it did; its
    second zeroes the gradients in place before its forward (not under no_grad: part of its grad-mode segment),
    so that segment accumulates into gradients where the first request's made them: a structure of its own,
    recorded in the second request. The client names the gradients by their leaves' names (``_t1.grad``: nothing
    bound), so the third request is the second's list over the same session (a hand-written loop's), met a second
    time: it records the whole list, which every later one replays."""
    routes, (losses, params) = routes_of(fresh.url, lambda: tutorial(gtorch, EPOCHS))
    loop = routes[:EPOCHS]
    assert loop[1] == ("recorded", "segments"), routes  # (the first plans whole: its first sighting, cold)
    assert loop[2:] == [("recorded", "training_step")] + [("replayed", "plan_hit")] * (EPOCHS - 3), routes
    with gradserve.session(client=gradserve.Client(planless.url)):
        want_losses, want = tutorial(gtorch, EPOCHS)
    assert losses == want_losses
    assert [p.tobytes() for p in params] == [p.tobytes() for p in want]


@pytest.mark.parametrize("options", [{"momentum": 0.9}, {"momentum": 0.9, "dampening": 0.5},
                                     {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01, "maximize": True}],
                         ids=["momentum", "dampening", "nesterov"])
def test_sgd_s_first_step_keeps_torch_s_buffer_bits(ctx, options):
    """SGD's first step runs the steady ops on a buffer of -0.0s (so that a loop's second request is its steady
    list); torch's first step clones the gradient: the buffer has torch's bits, zeros of either sign, infinities
    and NaN included, and so does every later step's."""
    real = pytest.importorskip("torch")
    grads = [[0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 1e-42, -3.0],
             [-0.0, 0.0, -1.5, 2.0, float("nan"), -1e-42, 0.25, 7.0]]

    def run(mod):
        p = mod.nn.Parameter(mod.tensor([0.5, -0.0, 0.0, 1.0, 2.0, -1.0, 0.0, 3.0]))
        opt = mod.optim.SGD([p], lr=0.1, **options)
        out = []
        for g in grads:
            p.grad = mod.tensor(g)
            opt.step()
            out.append(np.array(opt.state_dict()["state"][0]["momentum_buffer"].tolist(), dtype=np.float32))
        return out

    got, want = run(gtorch), run(real)
    assert got[0].tobytes() == want[0].tobytes()
    # (a later step's multiply-add may differ from torch's fused one in its last bit)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
