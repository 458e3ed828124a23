"""An optimizer whose update only records ops (SGD) records a step like its last one again without working it out:
the same handles, gradients and state, the same metadata of each, the same group options. What it records must be
what working the step out records, op for op, whatever changes between steps (a learning-rate schedule, a
gradient set to None or replaced, another dtype, a parameter that stops requiring grad, zero_grad in place)."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve
import gradserve.torch as gtorch
from gradserve.torch.optim import SGD


def _program(torch, replays: list | None = None) -> list:
    w = torch.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    b = torch.tensor([0.1, 0.2], requires_grad=True)
    c = torch.tensor([1.5], requires_grad=True)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    opt = torch.optim.SGD([{"params": [w, b]}, {"params": [c], "lr": 0.005, "dampening": 0.5}], lr=0.01,
                          momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=6, gamma=0.5)
    seen = []
    for step in range(16):
        opt.zero_grad(set_to_none=step != 10)
        loss = ((x @ w + b) * c).pow(2).mean()
        loss.backward()
        if step == 4:
            c.grad = None  # skipped by this step
        if step == 8:
            b.grad = torch.tensor([0.5, -0.5])  # replaced
        if step == 12:
            b.requires_grad_(False)
        last = getattr(opt, "_last_step", None)
        opt.step()
        if replays is not None:  # (a replayed step keeps the last one: a worked-out step keeps a new one or None)
            replays.append(last is not None and opt._last_step is last)
        sched.step()
        seen.append(loss.item())
    return seen + [w.tolist(), b.tolist(), c.tolist()]


def _run(server, monkeypatch, replay: bool, replays: list | None = None) -> tuple[list, list]:
    monkeypatch.setattr(SGD, "_pure_update", replay)
    sent = []
    with gradserve.session(client=gradserve.Client(server.url)) as ctx:
        real = ctx.client.run_ops

        def spy(session_id, ops, **kwargs):
            sent.append(ops)
            return real(session_id, ops, **kwargs)
        monkeypatch.setattr(ctx.client, "run_ops", spy)
        result = _program(gtorch, replays)
    return result, sent


def test_a_replayed_step_records_what_working_it_out_records(server, monkeypatch):
    """(No spy wraps the client's functions here: a Python frame of the test's own in the chain of a recorded op
    would be its user line, kept with the op until it is sent, and with it every frame below, the handles in them.)"""
    replays: list = []
    got, sent = _run(server, monkeypatch, True, replays)
    assert sum(replays) >= 5, replays  # (the steps between the changes were replayed)
    want, sent_worked_out = _run(server, monkeypatch, False)
    assert got == want
    assert sent == sent_worked_out


def test_the_replayed_steps_train_as_torch_does(server, monkeypatch):
    torch = pytest.importorskip("torch")
    got, _ = _run(server, monkeypatch, True)
    expected = _program(torch)
    assert got[:16] == pytest.approx(expected[:16], rel=1e-4)  # (float32 matmuls: summation order)
    for a, e in zip(got[16:], expected[16:]):
        assert np.allclose(a, e, rtol=1e-4, atol=0)
