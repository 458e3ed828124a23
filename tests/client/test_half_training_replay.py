"""A float16/bfloat16 training loop through gradserve.torch replays on the server as a float32 one does (issue 24
item 4): after its first iterations each iteration is a hit of one session plan, and its losses and parameters
are, bit for bit, those of the same loop on a server without plans."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from tests.client.test_training_replay import plan_counters, planless, train  # noqa: F401

#: Adam with an eps float16 holds (1e-8 rounds to 0 there, and the first step divides by 0 as torch does)
OPTIMIZERS = {"SGD": lambda optim, params: optim.SGD(params, lr=0.05, momentum=0.9),
              "Adam": lambda optim, params: optim.Adam(params, lr=0.01, eps=1e-3)}


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_loop_replays_from_its_steady_iterations_as_it_runs_cold(
        ctx, server, planless, dtype, optimizer):  # noqa: F811 - planless: the fixture imported above
    before = plan_counters(server.url)
    losses, params = train(gtorch, optimizer, 12, dtype, OPTIMIZERS)
    after = plan_counters(server.url)
    assert after["hits"] - before["hits"] >= 7, (before, after)
    with gradserve.session(client=gradserve.Client(planless.url)):
        want_losses, want = train(gtorch, optimizer, 12, dtype, OPTIMIZERS)
    assert losses == want_losses and [p.tobytes() for p in params] == [p.tobytes() for p in want]
    assert all(np.isfinite(losses))
